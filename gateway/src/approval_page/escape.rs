//! The page's one escaper, for text and attribute values alike: HTML's five special
//! characters as entities, and every hidden character (bidi, invisible, control) by name
//! (`<U+202E RIGHT-TO-LEFT OVERRIDE>`, escaped) so nothing can reorder or hide what the User
//! reads. Line breaks and tabs stay as they are: the summary's are its Markdown structure (a
//! term's are named before, by `policy::shown`). The templates use it for every value
//! (`gateway/askama.toml` makes it the escaper of `.html` templates).

use std::fmt::{self, Write};

use crate::policy;

/// [`write_escaped`] as askama's escaper.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageHtml;

impl askama::filters::Escaper for PageHtml {
    fn write_escaped_str<W: Write>(&self, dest: W, text: &str) -> fmt::Result {
        write_escaped(dest, text)
    }
}

/// Whether `c` is shown by its name: hidden (`policy::is_hidden`), but not a line break or tab.
fn shown_by_name(c: char) -> bool {
    c != '\n' && c != '\t' && policy::is_hidden(c)
}

/// HTML's entity for `c`, if it is one of its special characters.
fn entity(c: char) -> Option<&'static str> {
    Some(match c {
        '&' => "&amp;",
        '<' => "&lt;",
        '>' => "&gt;",
        '"' => "&quot;",
        '\'' => "&#39;",
        _ => return None,
    })
}

/// Write `text` escaped to `out`.
pub(crate) fn write_escaped<W: Write>(mut out: W, text: &str) -> fmt::Result {
    // Runs of characters that need nothing are written whole.
    let mut plain = 0;
    for (at, c) in text.char_indices() {
        let entity = entity(c);
        if entity.is_none() && !shown_by_name(c) {
            continue;
        }
        out.write_str(&text[plain..at])?;
        plain = at + c.len_utf8();
        match entity {
            Some(entity) => out.write_str(entity)?,
            None => {
                // `<U+202E RIGHT-TO-LEFT OVERRIDE>`: printable ASCII, its brackets escaped.
                let mut name = String::new();
                policy::push_name(&mut name, c);
                for c in name.chars() {
                    match self::entity(c) {
                        Some(entity) => out.write_str(entity)?,
                        None => out.write_char(c)?,
                    }
                }
            }
        }
    }
    out.write_str(&text[plain..])
}

/// [`write_escaped`] onto a string.
pub(crate) fn escape_into(out: &mut String, text: &str) {
    // Writing to a String cannot fail.
    let _ = write_escaped(out, text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escape(text: &str) -> String {
        let mut out = String::new();
        escape_into(&mut out, text);
        out
    }

    #[test]
    fn escaping_covers_attribute_characters() {
        assert_eq!(
            escape("<a href='x'>&\""),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;"
        );
    }

    #[test]
    fn hidden_characters_are_named_but_line_breaks_and_tabs_kept() {
        assert_eq!(
            escape("a\u{200B}b\u{202E}c\n\td\u{0007}é"),
            "a&lt;U+200B ZERO WIDTH SPACE&gt;b&lt;U+202E RIGHT-TO-LEFT OVERRIDE&gt;c\n\td&lt;U+0007&gt;é"
        );
        assert_eq!(escape(""), "");
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
    }
}
