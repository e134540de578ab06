//! Characters a User can't see, shown by name: `s1\u{202E}gpj.exe` reads
//! `s1<U+202E RIGHT-TO-LEFT OVERRIDE>gpj.exe`, and `s1z` and `s1\u{200B}z` read differently.
//! The one rule for every place a User reads a value: the summary's values
//! ([`super::escape_value`]) and the approval page's text and terms.
//!
//! The Unicode tables are ICU4X's (`icu_properties`, already in the tree through `url`) and the
//! names `unicode_names2`'s: new Unicode versions bring new invisible characters, which a
//! hand-written list would miss.

use std::borrow::Cow;

use icu_properties::props::{
    BidiControl, BinaryProperty, DefaultIgnorableCodePoint, EnumeratedProperty, GeneralCategory,
};

/// Whether `c` is hidden from, or changes the order of, what a reader sees: controls (a line
/// break would also start a new Markdown block), format characters (bidi controls, zero-width
/// joiners, the BOM, soft hyphens, tag characters), line and paragraph separators, and every
/// default-ignorable code point (variation selectors, Hangul fillers…).
pub(crate) fn is_hidden(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    matches!(
        GeneralCategory::for_char(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    ) || DefaultIgnorableCodePoint::for_char(c)
        || BidiControl::for_char(c)
}

/// Push `c`'s visible name: `<U+202E RIGHT-TO-LEFT OVERRIDE>`, or `<U+0007>` for a character
/// without a Unicode name (controls have only aliases).
pub(crate) fn push_name(out: &mut String, c: char) {
    out.push_str(&format!("<U+{:04X}", u32::from(c)));
    if let Some(name) = unicode_names2::name(c) {
        out.push(' ');
        out.push_str(&name.to_string());
    }
    out.push('>');
}

/// `text` with each hidden character replaced by its name.
pub(crate) fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 32);
    for c in text.chars() {
        if is_hidden(c) {
            push_name(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bidi_invisible_and_control_characters_are_named() {
        for (raw, expected) in [
            (
                "s1\u{202E}gpj.exe",
                "s1<U+202E RIGHT-TO-LEFT OVERRIDE>gpj.exe",
            ),
            ("s1\u{200B}z", "s1<U+200B ZERO WIDTH SPACE>z"),
            (
                "a\u{2066}b\u{2069}",
                "a<U+2066 LEFT-TO-RIGHT ISOLATE>b<U+2069 POP DIRECTIONAL ISOLATE>",
            ),
            (
                "\u{200E}\u{200F}\u{061C}",
                "<U+200E LEFT-TO-RIGHT MARK><U+200F RIGHT-TO-LEFT MARK><U+061C ARABIC LETTER MARK>",
            ),
            (
                "\u{200D}\u{2060}\u{2064}",
                "<U+200D ZERO WIDTH JOINER><U+2060 WORD JOINER><U+2064 INVISIBLE PLUS>",
            ),
            (
                "\u{FEFF}x\u{00AD}",
                "<U+FEFF ZERO WIDTH NO-BREAK SPACE>x<U+00AD SOFT HYPHEN>",
            ),
            ("x\u{FE0F}", "x<U+FE0F VARIATION SELECTOR-16>"),
            ("x\u{E0100}", "x<U+E0100 VARIATION SELECTOR-17>"),
            (
                "\u{E0001}\u{E0061}",
                "<U+E0001 LANGUAGE TAG><U+E0061 TAG LATIN SMALL LETTER A>",
            ),
            ("\u{3164}", "<U+3164 HANGUL FILLER>"),
            ("\u{2028}", "<U+2028 LINE SEPARATOR>"),
            (
                "bell\u{7}\n\t\u{7F}\u{85}",
                "bell<U+0007><U+000A><U+0009><U+007F><U+0085>",
            ),
            (
                "plain text, ünïcödé, 中文, עברית",
                "plain text, ünïcödé, 中文, עברית",
            ),
        ] {
            assert_eq!(shown(raw), expected, "{raw:?}");
        }
    }

    #[test]
    fn visible_text_is_not_copied() {
        assert!(matches!(shown("itm_4Qa 70.00 €"), Cow::Borrowed(_)));
    }

    proptest! {
        /// Nothing hidden survives, and two texts that differ only by hidden characters read
        /// differently.
        #[test]
        fn hidden_characters_never_survive_nor_vanish(a in "\\PC{0,8}", hidden in "[\\p{Cf}\\p{Cc}]{1,3}", b in "\\PC{0,8}") {
            let plain = format!("{a}{b}");
            let with_hidden = format!("{a}{hidden}{b}");
            let out = shown(&with_hidden);
            prop_assert!(!out.chars().any(is_hidden), "{out:?}");
            prop_assert_ne!(shown(&plain), out);
        }
    }
}
