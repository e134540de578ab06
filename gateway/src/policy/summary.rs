//! Summary templates: `Exchange item **{item_id}** on order {order_id}.`
//!
//! The template is the policy author's Markdown; values come from the request and are escaped
//! so that request data can never make a link, image, HTML or new Markdown structure (spec 3,
//! "Formatting"), and control, bidi and invisible characters are shown by name
//! (`super::visible`) so the text reads as it is.

use serde_json::Value;

use super::placeholders::{Piece, Syntax, tokenize};
use super::terms::{Terms, canonical_json};
use super::visible;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    #[error("unclosed `{{` at byte {0} (write `{{{{` for a literal brace)")]
    Unclosed(usize),
    #[error("unmatched `}}` at byte {0} (write `}}}}` for a literal brace)")]
    Unmatched(usize),
    #[error(
        "`{{{0}}}`: a placeholder names a term with A-Z a-z 0-9 _ (or is `{{?term}}`, `{{/term}}` or `{{...}}`)"
    )]
    BadName(String),
    #[error("`{{?{0}}}` has no `{{/{0}}}` after it")]
    UnclosedSection(String),
    #[error("`{{/{0}}}` closes no `{{?{0}}}` before it")]
    UnmatchedClose(String),
    #[error("`{{?{0}}}` is inside another section: sections don't nest")]
    NestedSection(String),
    #[error("`{{...}}` is written twice, or inside a section: write it once, outside sections")]
    Rest,
}

/// A parsed summary template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryTemplate {
    pieces: Vec<Piece>,
}

impl SummaryTemplate {
    pub fn parse(text: &str) -> Result<SummaryTemplate, SummaryError> {
        let pieces = tokenize(text, true).map_err(|e| match e {
            Syntax::Unclosed(at) => SummaryError::Unclosed(at),
            Syntax::Unmatched(at) => SummaryError::Unmatched(at),
            Syntax::BadName(name) => SummaryError::BadName(name),
        })?;
        let mut section: Option<&str> = None;
        let mut rest = false;
        for piece in &pieces {
            match piece {
                Piece::Open(name) if section.is_some() => {
                    return Err(SummaryError::NestedSection(name.clone()));
                }
                Piece::Open(name) => section = Some(name),
                Piece::Close(name) if section != Some(name.as_str()) => {
                    return Err(SummaryError::UnmatchedClose(name.clone()));
                }
                Piece::Close(_) => section = None,
                Piece::Rest if rest || section.is_some() => return Err(SummaryError::Rest),
                Piece::Rest => rest = true,
                Piece::Text(_) | Piece::Term(_) => {}
            }
        }
        if let Some(name) = section {
            return Err(SummaryError::UnclosedSection(name.to_owned()));
        }
        Ok(SummaryTemplate { pieces })
    }

    /// The term names the template mentions, in order, with repeats.
    pub fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.placeholders_in_sections().map(|(name, _)| name)
    }

    /// Each placeholder with the section it is in (`{?term}…{/term}`), if any.
    pub fn placeholders_in_sections(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        let mut section = None;
        self.pieces.iter().filter_map(move |p| match p {
            Piece::Term(name) => Some((name.as_str(), section)),
            Piece::Open(name) => {
                section = Some(name.as_str());
                None
            }
            Piece::Close(_) => {
                section = None;
                None
            }
            Piece::Text(_) | Piece::Rest => None,
        })
    }

    /// The terms sections are shown for (`{?term}`).
    pub fn sections(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Open(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// Whether the template has `{...}`: every term it does not write out.
    pub fn has_rest(&self) -> bool {
        self.pieces.contains(&Piece::Rest)
    }

    /// Render with escaped values. A section shows only when its term is in `terms` (a request
    /// left an optional term out); `{...}` is a list of every term in `terms` that no
    /// placeholder writes out, one `- name: value` line each. `check` guarantees every
    /// placeholder names a term, and that an optional one is written only in its section.
    pub fn render(&self, terms: &Terms) -> String {
        let mut out = String::new();
        let mut skipping: Option<&str> = None;
        for piece in &self.pieces {
            if let Some(section) = skipping {
                if matches!(piece, Piece::Close(name) if name == section) {
                    skipping = None;
                }
                continue;
            }
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Term(name) => {
                    if let Some(value) = terms.get(name) {
                        out.push_str(&escape_value(&display_value(value)));
                    }
                }
                Piece::Open(name) if !terms.contains_key(name) => skipping = Some(name),
                Piece::Open(_) | Piece::Close(_) => {}
                Piece::Rest => {
                    let lines: Vec<String> = terms
                        .iter()
                        .filter(|(name, _)| !self.placeholders().any(|p| p == name.as_str()))
                        .map(|(name, value)| {
                            format!(
                                "- {}: {}",
                                escape_value(name),
                                escape_value(&display_value(value))
                            )
                        })
                        .collect();
                    out.push_str(&lines.join("\n"));
                }
            }
        }
        out
    }
}

/// Strings as they are; a list as its items and an object as `key: value` pairs (by key),
/// separated by `, `, with `( … )` around a nested list or object; an empty one as `none`;
/// numbers, booleans and `null` as JSON.
fn display_value(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) if items.is_empty() => "none".to_owned(),
        Value::Object(map) if map.is_empty() => "none".to_owned(),
        Value::Array(items) => items
            .iter()
            .map(display_item)
            .collect::<Vec<_>>()
            .join(", "),
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            entries
                .into_iter()
                .map(|(key, value)| format!("{}: {}", display_text(key), display_item(value)))
                .collect::<Vec<_>>()
                .join(", ")
        }
        other => canonical_json(other),
    }
}

/// A list's item or an object's value, told apart from its neighbours.
fn display_item(value: &Value) -> String {
    match value {
        Value::String(text) => display_text(text),
        Value::Array(items) if !items.is_empty() => format!("({})", display_value(value)),
        Value::Object(map) if !map.is_empty() => format!("({})", display_value(value)),
        other => display_value(other),
    }
}

/// Text inside a list or an object, quoted (as JSON) when it is empty or holds a separator,
/// so `a, b` as one value never reads as two.
fn display_text(text: &str) -> String {
    if text.is_empty() || text.contains([',', ':', '(', ')', '"']) {
        Value::from(text).to_string()
    } else {
        text.to_owned()
    }
}

/// Escape a value so CommonMark (and GitHub-flavoured autolinks) read it as plain text.
pub fn escape_value(raw: &str) -> String {
    if needs_no_escape(raw) {
        return raw.to_owned();
    }
    escape_each_char(raw)
}

/// Most values (IDs, SKUs) are letters, digits, inner hyphens and intraword underscores,
/// none of which [`escape_each_char`] escapes or names: they skip its per-character walk.
fn needs_no_escape(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    let alnum = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_alphanumeric);
    bytes.iter().enumerate().all(|(i, b)| match b {
        b'-' => i > 0,
        b'_' => i > 0 && alnum(i - 1) && alnum(i + 1),
        b => b.is_ascii_alphanumeric(),
    })
}

fn escape_each_char(raw: &str) -> String {
    // Hidden characters become their names first (`<U+202E …>`), whose `<` and `>` are then
    // escaped like any other; a line break, named, can't start a new Markdown block.
    let shown = visible::shown(raw);
    let chars: Vec<char> = shown.chars().collect();
    let mut out = String::with_capacity(shown.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1).copied();
        let escape = match c {
            // Links, images, HTML, code, emphasis, strike-through, tables, entities.
            '\\' | '[' | ']' | '<' | '>' | '!' | '`' | '*' | '~' | '|' | '&' => true,
            // Intraword underscores can't open or close emphasis; others can.
            '_' => {
                !(prev.is_some_and(char::is_alphanumeric)
                    && next.is_some_and(char::is_alphanumeric))
            }
            // A value may land at the start of a line: no headings, lists or setext rules.
            '#' | '+' | '-' | '=' if i == 0 => true,
            // `1.` or `1)` at the start would be an ordered list.
            '.' | ')'
                if i > 0
                    && chars[..i].iter().all(char::is_ascii_digit)
                    && next.is_none_or(|n| n == ' ') =>
            {
                true
            }
            // GitHub-flavoured autolinks: `scheme://`, `www.`, `user@host`.
            ':' => next == Some('/'),
            '.' => {
                i >= 3
                    && chars[i - 3..i]
                        .iter()
                        .collect::<String>()
                        .eq_ignore_ascii_case("www")
            }
            '@' => true,
            _ => false,
        };
        if escape {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::terms;
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        #[test]
        fn values_that_skip_the_walk_are_those_it_leaves_alone(raw in "[a-zA-Z0-9_.-]{0,10}") {
            if needs_no_escape(&raw) {
                prop_assert_eq!(escape_each_char(&raw), raw.clone());
            }
            prop_assert_eq!(escape_value(&raw), escape_each_char(&raw));
        }
    }

    #[test]
    fn renders_placeholders_and_literal_braces() {
        let t = SummaryTemplate::parse("Exchange **{item_id}** for {sku} {{not a term}}.").unwrap();
        assert_eq!(t.placeholders().collect::<Vec<_>>(), ["item_id", "sku"]);
        let out = t.render(&terms(&[
            ("item_id", json!("itm_4Qa")),
            ("sku", json!("stormline-m")),
        ]));
        assert_eq!(out, "Exchange **itm_4Qa** for stormline-m {not a term}.");
    }

    #[test]
    fn numbers_lists_and_objects_render_readably() {
        let t = SummaryTemplate::parse("{n}; {o}; {l}; {items}; {e}").unwrap();
        let out = t.render(&terms(&[
            ("n", json!(70.5)),
            ("o", json!({"b": 1, "a": "x, y", "c": {"d": "e"}})),
            ("l", json!(["customer", "invoice"])),
            (
                "items",
                json!([{"price": "p1", "quantity": "2"}, {"price": "p2"}]),
            ),
            ("e", json!([])),
        ]));
        assert_eq!(
            out,
            r#"70.5; a: "x, y", b: 1, c: (d: e); customer, invoice; (price: p1, quantity: 2), (price: p2); none"#
        );
    }

    /// A section shows only when its term is there; `{...}` lists the terms the rest of the
    /// template does not write out.
    #[test]
    fn sections_and_the_rest() {
        let t = SummaryTemplate::parse(
            "Pay {amount}{?coupon} with coupon **{coupon}**{/coupon}.\n\n{...}",
        )
        .unwrap();
        assert_eq!(t.sections().collect::<Vec<_>>(), ["coupon"]);
        assert_eq!(
            t.placeholders_in_sections().collect::<Vec<_>>(),
            [("amount", None), ("coupon", Some("coupon"))]
        );
        assert!(t.has_rest());
        let without = t.render(&terms(&[("amount", json!("5"))]));
        assert_eq!(without, "Pay 5.\n\n");
        let with = t.render(&terms(&[
            ("amount", json!("5")),
            ("coupon", json!("SAVE")),
            ("metadata", json!({"order_id": "1"})),
            ("expand", json!(["customer"])),
        ]));
        assert_eq!(
            with,
            "Pay 5 with coupon **SAVE**.\n\n- expand: customer\n- metadata: order_id: 1"
        );
        for (text, error) in [
            ("{?a} x", SummaryError::UnclosedSection("a".into())),
            ("x {/a}", SummaryError::UnmatchedClose("a".into())),
            ("{?a}{/b}", SummaryError::UnmatchedClose("b".into())),
            ("{?a}{?b}{/b}{/a}", SummaryError::NestedSection("b".into())),
            ("{...}{...}", SummaryError::Rest),
            ("{?a}{...}{/a}", SummaryError::Rest),
            ("{?}", SummaryError::BadName("?".into())),
            ("{..}", SummaryError::BadName("..".into())),
        ] {
            assert_eq!(SummaryTemplate::parse(text), Err(error), "{text}");
        }
    }

    #[test]
    fn bad_templates() {
        assert!(SummaryTemplate::parse("{open").is_err());
        assert!(SummaryTemplate::parse("close}").is_err());
        assert!(SummaryTemplate::parse("{a b}").is_err());
        assert!(SummaryTemplate::parse("{}").is_err());
    }

    #[test]
    fn values_cannot_make_links_images_or_html() {
        for (raw, expected) in [
            ("[click](http://evil)", r"\[click\](http\://evil)"),
            ("![x](http://e/i.png)", r"\!\[x\](http\://e/i.png)"),
            ("<img src=x>", r"\<img src=x\>"),
            ("<http://evil>", r"\<http\://evil\>"),
            ("www.evil.com", r"www\.evil.com"),
            ("a@b.c", r"a\@b.c"),
            ("**bold**", r"\*\*bold\*\*"),
            ("_em_", r"\_em\_"),
            ("ord_7Hk2", "ord_7Hk2"),
            ("# Heading", r"\# Heading"),
            ("- item", r"\- item"),
            ("1. item", r"1\. item"),
            ("70.00", "70.00"),
            ("a\nb\r\nc", r"a\<U+000A\>b\<U+000D\>\<U+000A\>c"),
            (
                "safe\u{202E}txt.exe",
                r"safe\<U+202E RIGHT-TO-LEFT OVERRIDE\>txt.exe",
            ),
            ("zero\u{200B}width", r"zero\<U+200B ZERO WIDTH SPACE\>width"),
            ("bell\u{7}", r"bell\<U+0007\>"),
        ] {
            assert_eq!(escape_value(raw), expected, "{raw:?}");
        }
    }

    proptest! {
        /// Whatever a value holds, no unescaped link, image or HTML opener survives.
        #[test]
        fn escaped_values_never_open_markup(raw in ".{0,60}") {
            let out = escape_value(&raw);
            let chars: Vec<char> = out.chars().collect();
            for (i, c) in chars.iter().enumerate() {
                if matches!(c, '[' | '<' | '!' | '`') {
                    prop_assert!(i > 0 && chars[i - 1] == '\\', "unescaped {c:?} in {out:?}");
                }
                prop_assert!(!visible::is_hidden(*c), "hidden character {:?} survived", c);
            }
        }
    }
}
