//! The summary as HTML: exactly the CommonMark subset the extension allows (spec 3,
//! "Formatting": paragraphs, emphasis, strong emphasis, lists). Everything else the parser
//! finds (links, autolinks, images, raw HTML, code, headings, quotes, rules) is shown as the
//! text the summary had there, escaped; bidi, invisible and control characters are shown by
//! name (`<U+202E RIGHT-TO-LEFT OVERRIDE>`) so they can't reorder or hide what the User reads.

use std::ops::Range;

use pulldown_cmark::{Event, Parser, Tag, TagEnd};

use super::escape::escape_into;

/// Render `summary` as HTML for the page.
pub(crate) fn render(summary: &str) -> String {
    let mut out = String::with_capacity(summary.len() * 2);
    // No extensions: tables, strikethrough, footnotes, math… are plain text.
    let mut events = Parser::new(summary).into_offset_iter();
    while let Some((event, range)) = events.next() {
        match event {
            Event::Start(tag) => match allowed_start(&tag) {
                Some(html) => out.push_str(&html),
                None => {
                    // The construct's own text, escaped, and nothing inside it is parsed.
                    skip_to_end(&mut events);
                    shown_as_text(&mut out, &tag, &summary[clamp(range, summary.len())]);
                }
            },
            Event::End(end) => out.push_str(allowed_end(end)),
            Event::Text(text) => escape_into(&mut out, &text),
            Event::SoftBreak => out.push('\n'),
            Event::HardBreak => out.push_str("<br>\n"),
            // Code, HTML, rules, task markers and the rest: what the summary said, as text.
            _ => {
                let text = &summary[clamp(range, summary.len())];
                if is_block(&event) {
                    out.push_str("<p>");
                    escape_into(&mut out, text.trim_end());
                    out.push_str("</p>\n");
                } else {
                    escape_into(&mut out, text);
                }
            }
        }
    }
    out
}

/// The HTML for an allowed opening tag, `None` for any other.
fn allowed_start(tag: &Tag<'_>) -> Option<String> {
    Some(match tag {
        Tag::Paragraph => "<p>".into(),
        Tag::Emphasis => "<em>".into(),
        Tag::Strong => "<strong>".into(),
        Tag::List(None) => "<ul>\n".into(),
        Tag::List(Some(1)) => "<ol>\n".into(),
        Tag::List(Some(start)) => format!("<ol start=\"{start}\">\n"),
        Tag::Item => "<li>".into(),
        _ => return None,
    })
}

/// The closing HTML of an allowed tag (a disallowed one never reaches here: its events are
/// skipped with its start).
fn allowed_end(end: TagEnd) -> &'static str {
    match end {
        TagEnd::Paragraph => "</p>\n",
        TagEnd::Emphasis => "</em>",
        TagEnd::Strong => "</strong>",
        TagEnd::List(false) => "</ul>\n",
        TagEnd::List(true) => "</ol>\n",
        TagEnd::Item => "</li>\n",
        _ => "",
    }
}

/// Skip the events of the construct just opened, up to and including its end.
fn skip_to_end<'a>(events: &mut impl Iterator<Item = (Event<'a>, Range<usize>)>) {
    let mut depth = 1usize;
    for (event, _) in events.by_ref() {
        match event {
            Event::Start(_) => depth += 1,
            Event::End(_) => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            return;
        }
    }
}

/// A disallowed construct's source text: a paragraph of its own for a block, inline text
/// otherwise.
fn shown_as_text(out: &mut String, tag: &Tag<'_>, source: &str) {
    let block = matches!(
        tag,
        Tag::Heading { .. }
            | Tag::BlockQuote(_)
            | Tag::CodeBlock(_)
            | Tag::HtmlBlock
            | Tag::FootnoteDefinition(_)
            | Tag::Table(_)
            | Tag::MetadataBlock(_)
            | Tag::DefinitionList
    );
    if block {
        out.push_str("<p>");
        escape_into(out, source.trim_end());
        out.push_str("</p>\n");
    } else {
        escape_into(out, source);
    }
}

fn is_block(event: &Event<'_>) -> bool {
    matches!(event, Event::Rule | Event::DisplayMath(_))
}

/// The parser's ranges are within the text; this keeps a slice from ever panicking.
fn clamp(range: Range<usize>, len: usize) -> Range<usize> {
    range.start.min(len)..range.end.min(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No tag but the allowed ones, and no attribute but an ordered list's start.
    fn assert_only_allowed_tags(html: &str) {
        let allowed = [
            "<p>",
            "</p>",
            "<em>",
            "</em>",
            "<strong>",
            "</strong>",
            "<ul>",
            "</ul>",
            "<ol>",
            "</ol>",
            "<li>",
            "</li>",
            "<br>",
        ];
        let mut rest = html;
        while let Some(at) = rest.find('<') {
            let tail = &rest[at..];
            let ok = allowed.iter().any(|t| tail.starts_with(t))
                || (tail.starts_with("<ol start=\"")
                    && tail["<ol start=\"".len()..]
                        .split_once("\">")
                        .is_some_and(|(n, _)| n.bytes().all(|b| b.is_ascii_digit())));
            assert!(ok, "unexpected markup at {tail:?} in {html:?}");
            rest = &tail[1..];
        }
    }

    #[test]
    fn the_allowed_subset_renders() {
        let html = render("Exchange *item* **A1**.\n\n- one\n- two\n\n3. three\n4. four");
        assert_eq!(
            html,
            "<p>Exchange <em>item</em> <strong>A1</strong>.</p>\n<ul>\n<li>one</li>\n<li>two</li>\n</ul>\n<ol start=\"3\">\n<li>three</li>\n<li>four</li>\n</ol>\n"
        );
        assert_only_allowed_tags(&html);
    }

    #[test]
    fn hostile_summaries_render_as_text() {
        let cases = [
            (
                "[click](https://evil.example)",
                "[click](https://evil.example)",
            ),
            (
                "![x](https://evil.example/p.png)",
                "![x](https://evil.example/p.png)",
            ),
            ("<https://evil.example>", "&lt;https://evil.example&gt;"),
            (
                "<script>alert(1)</script>",
                "&lt;script&gt;alert(1)&lt;/script&gt;",
            ),
            (
                "a <img src=x onerror=alert(1)> b",
                "&lt;img src=x onerror=alert(1)&gt;",
            ),
            (
                "<div onclick=\"x\">hi</div>",
                "&lt;div onclick=&quot;x&quot;&gt;hi&lt;/div&gt;",
            ),
            ("# Heading", "# Heading"),
            ("> quoted", "&gt; quoted"),
            ("`code`", "`code`"),
            ("[ref]\n\n[ref]: https://evil.example", "[ref]"),
            (
                "pay \u{202E}001\u{202C} EUR",
                "pay &lt;U+202E RIGHT-TO-LEFT OVERRIDE&gt;001&lt;U+202C POP DIRECTIONAL FORMATTING&gt; EUR",
            ),
            (
                "**[bold link](javascript:alert(1))**",
                "[bold link](javascript:alert(1))",
            ),
            (
                "- [item](https://evil.example)",
                "[item](https://evil.example)",
            ),
            ("&lt;script&gt;", "&lt;script&gt;"),
        ];
        for (summary, shown) in cases {
            let html = render(summary);
            assert_only_allowed_tags(&html);
            assert!(
                html.contains(shown),
                "{summary:?} should show {shown:?}, got {html:?}"
            );
            assert!(!html.contains("href"), "{html:?}");
        }
    }

    #[test]
    fn every_input_gives_only_allowed_markup() {
        let nasty = [
            "<",
            "*<b>*",
            "1. <x>\n   - [a](b)\n",
            "```\n<script>\n```",
            "    indented <code>",
            "---",
            "a\\\nb",
            "<!-- comment -->",
            "x\u{0000}y\u{0007}",
            "[a]: <javascript:x>\n[a]",
        ];
        for summary in nasty {
            assert_only_allowed_tags(&render(summary));
        }
    }
}
