//! The summary a draft starts from: a plain title from the description, then every term,
//! the optional ones in sections (or listed by `{...}` past a few).

use std::fmt::Write as _;

use super::names::term_name;
use super::{Draft, Term};

/// "Title: label {term}, label {term}." naming every term (the loader wants each in the
/// summary): the required ones first, then the optional ones in sections.
pub(super) fn summary(draft: &Draft) -> String {
    let title = plain(&draft.title);
    let title = if title.is_empty() {
        humanize(&draft.key)
    } else {
        title
    };
    let required: Vec<String> = draft
        .terms
        .iter()
        .filter(|t| !t.optional)
        .map(|t| format!("{} {{{}}}", t.name.replace('_', " "), t.name))
        .collect();
    sectioned(title.trim_end_matches('.'), &required, draft)
}

/// "Title: label {term}{?opt}, label {opt}{/opt}.": an optional term only in its own section,
/// shown when the request has it (the loader refuses one outside). Past [`MAX_SECTIONS`]
/// optional terms, `{...}` on a line of its own lists those the request sets instead, so a
/// User reads one sentence and the values set, not a template with two hundred blanks.
fn sectioned(title: &str, required: &[String], draft: &Draft) -> String {
    let mut text = if required.is_empty() {
        title.to_owned()
    } else {
        format!("{title}: {}", required.join(", "))
    };
    let optional: Vec<&Term> = draft.terms.iter().filter(|t| t.optional).collect();
    if optional.len() > MAX_SECTIONS {
        text.push_str(".\n\n{...}");
        return text;
    }
    let joint = if required.is_empty() { "; " } else { ", " };
    for term in optional {
        let label = term.name.replace('_', " ");
        let name = &term.name;
        let _ = write!(text, "{{?{name}}}{joint}{label} {{{name}}}{{/{name}}}");
    }
    text.push('.');
    text
}

/// A description's text made safe for a summary template: its first sentence as plain text
/// (no HTML, no Markdown: [`crate::init::text`]), braces doubled, and no character that could
/// make Markdown again (the summary rules forbid links, images and HTML).
fn plain(text: &str) -> String {
    let line = crate::init::text::first_block(text);
    // No heading, list or rule from a leading `#`, `-`, `+`, `=` or number; then the first
    // sentence, at most MAX_TITLE characters, cut at a word.
    let line = line.trim_start_matches(|c: char| !c.is_alphabetic());
    let sentence = line.split(". ").next().unwrap_or_default();
    let kept: String = sentence
        .chars()
        .filter(|c| !matches!(c, '[' | ']' | '<' | '>' | '`' | '!' | '*' | '|' | '\\'))
        .collect();
    let mut title = String::new();
    for word in kept.split(' ') {
        if title.chars().count() + word.chars().count() + 1 > MAX_TITLE {
            break;
        }
        if !title.is_empty() {
            title.push(' ');
        }
        title.push_str(word);
    }
    title.replace('{', "{{").replace('}', "}}")
}

/// The most optional terms a summary writes in sections; more are listed by `{...}`.
pub(super) const MAX_SECTIONS: usize = 6;

/// The longest title a summary starts with.
const MAX_TITLE: usize = 100;

/// `emails/send` → "Emails send"; `UpdateCall` → "Update call".
fn humanize(key: &str) -> String {
    let words = term_name(key).replace('_', " ");
    let mut chars = words.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "Perform this action".to_owned(),
    }
}

#[allow(clippy::unwrap_used)]
#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::draft::{Source, Target, render};

    #[test]
    fn a_summary_names_every_term_and_no_markdown_link() {
        let mut draft = Draft::new(
            "UpdateCall",
            "Update a [call](https://x) {now}",
            Target::Operation {
                method: "POST".into(),
                path: "/Calls/{Sid}.json".into(),
            },
        );
        draft.add_term("Sid", Source::Path("Sid".into()), false);
        draft.add_term("Status", Source::Form("Status".into()), true);
        let text = summary(&draft);
        assert_eq!(
            text,
            "Update a call {{now}}: sid {sid}{?status}, status {status}{/status}."
        );
        let (file, outcomes) = render("test", vec![draft]);
        assert_eq!(outcomes[0].commented, None, "{file}");
        assert!(file.contains("status = { form = \"Status\", optional = true }\n"));
        assert!(file.contains("# TODO: rewrite in plain language\nsummary = "));
    }

    #[test]
    fn titles_are_one_plain_sentence_cut_at_a_word() {
        assert_eq!(
            plain("Delete a Call record. Once deleted, it is gone"),
            "Delete a Call record"
        );
        assert_eq!(plain("# 1. Send *now*\nmore"), "Send now");
        let long = "word ".repeat(40);
        assert!(plain(&long).len() <= MAX_TITLE && plain(&long).ends_with("word"));
    }
}
