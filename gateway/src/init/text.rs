//! A description's words as plain text, for a summary: descriptions are HTML (Stripe's
//! `<p>Creates a new customer object.</p>`), Markdown (`[Connect](/docs/connect)`), or both.
//!
//! Markdown is the outer format (CommonMark allows HTML inside it): `pulldown-cmark` (the
//! parser the approval page uses) reads it, its text is escaped and its HTML kept as written,
//! and `html2text` (html5ever's parser: entities, tags and comments as browsers read them)
//! turns the result into text.

use html2text::render::TrivialDecorator;
use pulldown_cmark::{Event, Parser, Tag, TagEnd};

/// Wide enough that `html2text` never wraps a description.
const NO_WRAP: usize = 100_000;

/// The text of `markup`'s first block (paragraph, heading, list item) on one line: no tags,
/// no Markdown, entities decoded, white space collapsed.
pub(crate) fn first_block(markup: &str) -> String {
    let mut html = String::new();
    for event in Parser::new(markup) {
        match event {
            Event::Text(t) | Event::Code(t) => html.push_str(
                &t.replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;"),
            ),
            Event::Html(t) | Event::InlineHtml(t) => html.push_str(&t),
            // Markdown's blocks as HTML paragraphs, which html2text puts on lines of their own.
            Event::Start(tag) if is_block(&tag) => html.push_str("<p>"),
            Event::End(tag) if is_block_end(tag) => html.push_str("</p>"),
            Event::SoftBreak | Event::HardBreak | Event::End(_) => html.push(' '),
            _ => {}
        }
    }
    // The trivial decorator: the text alone (the plain one writes links as `[text]`).
    let text = html2text::config::with_decorator(TrivialDecorator::new())
        .string_from_read(html.as_bytes(), NO_WRAP)
        .unwrap_or(html);
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| !l.is_empty())
        .unwrap_or_default()
}

fn is_block(tag: &Tag<'_>) -> bool {
    matches!(
        tag,
        Tag::Paragraph | Tag::Heading { .. } | Tag::Item | Tag::CodeBlock(_)
    )
}

fn is_block_end(tag: TagEnd) -> bool {
    matches!(
        tag,
        TagEnd::Paragraph | TagEnd::Heading(_) | TagEnd::Item | TagEnd::CodeBlock
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_and_markdown_become_their_text() {
        assert_eq!(
            first_block("<p>Creates a new customer object.</p><p>More.</p>"),
            "Creates a new customer object."
        );
        assert_eq!(
            first_block(
                "<p>With <a href=\"/docs/connect\">Connect</a>, you can &amp;\n <code>charge</code></p>"
            ),
            "With Connect, you can & charge"
        );
        assert_eq!(
            first_block("Creates a [gist](https://docs.github.com/x) for\n**you** <3.\n\nMore."),
            "Creates a gist for you <3."
        );
        assert_eq!(first_block("# Send\n- now"), "Send");
        assert_eq!(first_block("\n\n"), "");
    }
}
