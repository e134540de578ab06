//! Markdown: checks on summaries (request data must not become Markdown structure), and the
//! headings and links of the repository's own pages.

use std::collections::{BTreeSet, HashMap};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// Remove CommonMark backslash escapes (a backslash before ASCII punctuation).
pub fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek().is_some_and(|next| next.is_ascii_punctuation()) {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `needle` occurs in `text` at a position whose first character is not
/// backslash-escaped (an odd number of backslashes before it).
pub fn has_unescaped(text: &str, needle: &str) -> bool {
    let bytes = text.as_bytes();
    text.match_indices(needle).any(|(at, _)| {
        let backslashes = bytes[..at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        backslashes % 2 == 0
    })
}

/// Bidirectional formatting characters that can reorder what a user reads.
pub const BIDI: &[char] = &[
    '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}',
    '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
];

/// Panic unless `summary` is safe to show: no link or image syntax, no raw HTML, no control
/// or bidi characters.
pub fn assert_safe_summary(summary: &str) {
    for needle in ["](", "<"] {
        assert!(
            !has_unescaped(summary, needle),
            "summary has unescaped {needle:?}, so request data can make a link, image or HTML: \
             {summary:?}"
        );
    }
    if let Some(c) = summary.chars().find(|c| c.is_control()) {
        panic!("summary has control character {c:?}: {summary:?}");
    }
    if let Some(c) = summary.chars().find(|c| BIDI.contains(c)) {
        panic!("summary has bidi character {c:?}: {summary:?}");
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as `-`.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// A Markdown page as GitHub renders it: the anchors of its headings (a repeated heading's
/// with `-1`, `-2`, …) and the destination of every link and image, as written.
pub struct Page {
    pub anchors: BTreeSet<String>,
    pub links: Vec<String>,
}

pub fn page(text: &str) -> Page {
    let mut anchors = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut links = Vec::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                anchors.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                links.push(dest_url.to_string())
            }
            _ => {}
        }
    }
    Page { anchors, links }
}

/// The fenced code block of `lang` (```sh, ```toml) in `doc` that contains `marker`: the docs'
/// examples, which tests run as written.
pub fn code_block(doc: &str, lang: &str, marker: &str) -> String {
    doc.split(&format!("```{lang}\n"))
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .find(|code| code.contains(marker))
        .unwrap_or_else(|| panic!("no {lang} block with {marker:?}"))
        .to_owned()
}
