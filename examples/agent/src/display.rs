//! Company text on the User's terminal, as plain text only.
//!
//! A summary is the Company's words (spec 8: untrusted content). It MAY use emphasis, which
//! this agent strips; it MUST NOT make links, images or HTML, so nothing is rendered and
//! nothing is made clickable: control characters (ESC starts terminal escape sequences,
//! OSC 8 makes hyperlinks) and bidi/invisible characters (they reorder or hide what the User
//! reads) are shown by code point, `<U+202E>`, never passed to the terminal nor dropped (then
//! `s1z` and `s1<U+200B>z` would read the same), and what a terminal would linkify on its own
//! (`scheme://`, `www.`, `user@host`) is defanged: `http[:]//evil`, `www[.]evil`, `a[@]b`.

/// Characters that change how text reads without being seen: bidi controls, zero-width
/// characters, the BOM.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// Show control characters (but line breaks) and invisible characters by code point.
pub fn clean(text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    let spaced: String = text
        .chars()
        .map(|c| if c == '\t' || c == '\r' { ' ' } else { c })
        .collect();
    named(&spaced, |c| c == '\n')
}

/// `text` with every control and invisible character but those `keep` allows as `<U+XXXX>`.
fn named(text: &str, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if !keep(c) && (c.is_control() || is_invisible(c)) {
            out.push_str(&format!("<U+{:04X}>", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Break what terminals turn into links by themselves.
pub fn defang(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let rest = |n: usize| chars[i..].iter().take(n).collect::<String>();
        if c == ':' && rest(3) == "://" {
            out.push_str("[:]");
        } else if c == '@' {
            out.push_str("[@]");
        } else if (c == 'w' || c == 'W') && rest(4).eq_ignore_ascii_case("www.") {
            out.push_str(&rest(3));
            out.push_str("[.]");
            i += 4;
            continue;
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

/// Remove CommonMark backslash escapes and emphasis markers, leaving the text. Escaped
/// characters stay as the characters they are (`\*` is a star the Company meant literally).
pub fn markdown_to_plain(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && chars.get(i + 1).is_some_and(char::is_ascii_punctuation) {
            out.push(chars[i + 1]);
            i += 2;
            continue;
        }
        if c == '*' || c == '_' {
            let end = chars[i..]
                .iter()
                .position(|&d| d != c)
                .map_or(chars.len(), |n| i + n);
            let before = i.checked_sub(1).map(|j| chars[j]);
            let after = chars.get(end).copied();
            let spaced = |x: Option<char>| x.is_none_or(char::is_whitespace);
            // A run with space on both sides is no emphasis (a list bullet, `2 * 3`), nor is
            // an underscore inside a word (`ord_7Hk2`): keep those.
            let keep = (spaced(before) && spaced(after))
                || (c == '_'
                    && before.is_some_and(char::is_alphanumeric)
                    && after.is_some_and(char::is_alphanumeric));
            if keep {
                out.extend(&chars[i..end]);
            }
            i = end;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// A summary (or other Company Markdown) for the terminal.
pub fn summary(text: &str) -> String {
    defang(&markdown_to_plain(&clean(text)))
}

/// A plain value (the Company's name, a term) for the terminal: one line, every hidden
/// character named.
pub fn value(text: &str) -> String {
    defang(&named(text, |_| false))
}

/// A JSON value as plain text: strings as they are, anything else as compact JSON.
pub fn json_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_images_and_html_stay_text() {
        assert_eq!(
            summary(r"Exchange x\](http\://evil) and [help](http://help.example/x)"),
            "Exchange x](http[:]//evil) and [help](http[:]//help.example/x)"
        );
        assert_eq!(
            summary(r"\!\[x\](http\://e/i.png) <img src=x>"),
            "![x](http[:]//e/i.png) <img src=x>"
        );
        assert_eq!(summary(r"www\.evil.com a\@b.c"), "www[.]evil.com a[@]b.c");
    }

    #[test]
    fn escape_sequences_and_invisible_characters_are_named() {
        let osc8 = "\u{1b}]8;;http://evil\u{1b}\\click\u{1b}]8;;\u{1b}\\";
        let shown = summary(osc8);
        assert!(!shown.contains('\u{1b}'), "{shown:?}");
        assert_eq!(
            value("safe\u{202E}txt.exe\u{7}"),
            "safe<U+202E>txt.exe<U+0007>"
        );
        assert_ne!(value("s1z"), value("s1\u{200B}z"));
        assert_eq!(value("a\nb"), "a<U+000A>b");
        assert_eq!(clean("a\r\nb\tc\u{9b}d"), "a\nb c<U+009B>d");
    }

    #[test]
    fn emphasis_markers_go_and_literal_characters_stay() {
        assert_eq!(
            markdown_to_plain(r"Exchange **itm\_4Qa** on _order_ ord_7Hk2 for \*\*x\*\*"),
            "Exchange itm_4Qa on order ord_7Hk2 for **x**"
        );
        assert_eq!(markdown_to_plain("* item\n2 * 3"), "* item\n2 * 3");
        assert_eq!(
            markdown_to_plain(r"costs **190.00 USD**."),
            "costs 190.00 USD."
        );
    }
}
