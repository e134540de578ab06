//! Form field names (`To`, `customer[name]`, `items[]`, `lines[0][sku]`), as policies write
//! them and as the gateway reads a form body's decoded names: one grammar, so that a name
//! every common form reader reads the same way is accepted, and any other is refused.
//!
//! Flat readers (Werkzeug's `request.form`, Starlette, Go, Express's `extended: false`) take a
//! name as it is; nested readers (PHP, Rack, Express's `qs`) split it at brackets. The names
//! below mean the same field to both kinds:
//!
//! - a plain name: no `.`, white space, `[` or `]` (PHP reads `a.b` and `a b` as `a_b`, Spring
//!   binds `a.b` as a nested property);
//! - `name[key]…`: at most [`MAX_GROUPS`] groups (`qs` keeps deeper ones as a literal key), no
//!   white space, `[` or `]` in a key, nothing after the last `]` (`qs` and PHP drop it);
//! - `name[]` last only, for a list (`a[][b]` groups differently in PHP and Rack);
//! - an index `[0]`, `[1]`… written plainly (`[01]` is a name to PHP, an index to `qs`) and
//!   below [`MAX_LIST`] (`qs` reads larger ones as object keys);
//! - no name `qs` skips as a prototype member (`__proto__`, `toString`, …), and no method
//!   override (`_method`, which Rails, Laravel and Symfony read as the request's method) or
//!   charset sentinel (`_charset_`).

use std::fmt;

/// The most bracket groups in a name: `qs`'s default depth.
pub(crate) const MAX_GROUPS: usize = 5;

/// The most values of a list (`a[]`), and one more than the largest index: `qs`'s default
/// `arrayLimit` (longer lists, larger indices become objects).
pub(crate) const MAX_LIST: usize = 20;

/// Names some frameworks read as the request's real method (Laravel, Symfony, Rails,
/// method-override middleware), in a query or a form body.
pub(crate) const METHOD_OVERRIDE_NAMES: [&str; 4] = [
    "_method",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Names `qs` (Express's nested reader) drops unless told otherwise: members of every
/// JavaScript object.
const PROTOTYPE_NAMES: [&str; 12] = [
    "__proto__",
    "constructor",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toLocaleString",
    "toString",
    "valueOf",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
];

/// A checked form field name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FormName {
    /// As written (decoded).
    text: String,
    /// The name before any bracket, then each group.
    parts: Vec<FormKey>,
}

/// One step of a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FormKey {
    /// The leading name, or a `[key]`.
    Name(String),
    /// `[0]`, `[1]`, …
    Index(usize),
    /// `[]`, last: the field is a list.
    Append,
}

/// Why a name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FormNameError {
    #[error("has no name")]
    Empty,
    #[error(
        "has `{0}` before its first `[`, which readers rewrite (PHP reads `.` and ` ` as `_`, Spring `.` as a nested name)"
    )]
    PlainName(char),
    #[error(
        "has a `[` or `]` that does not make a `[key]` group, or text after its last `]`, which readers drop or keep differently"
    )]
    Brackets,
    #[error("has a key with white space, which some readers trim")]
    KeySpace,
    #[error("has `[]` before its end: PHP and Rack group `a[][b]` into different lists")]
    AppendInside,
    #[error(
        "nests deeper than {MAX_GROUPS} `[…]` groups, beyond which qs keeps the rest as a literal key"
    )]
    TooDeep,
    #[error(
        "has the index `{0}`, which PHP reads as a name and qs as a number: write it without leading zeros"
    )]
    IndexSpelling(String),
    #[error(
        "has an index of {MAX_LIST} or more, which qs reads as an object key and PHP as an index"
    )]
    IndexTooLarge,
    #[error("uses `{0}`, which qs (Express) skips as a JavaScript object member")]
    Prototype(String),
    #[error("is read as the request's method by Rails, Laravel and Symfony")]
    MethodOverride,
    #[error("is the charset sentinel some readers decode the form by")]
    Charset,
    #[error("has a control character, where some servers cut it")]
    Control,
}

impl FormName {
    /// Check a decoded name.
    pub(crate) fn parse(text: &str) -> Result<FormName, FormNameError> {
        if text.chars().any(char::is_control) {
            return Err(FormNameError::Control);
        }
        let (base, mut rest) = match text.find(['[', ']']) {
            Some(at) => text.split_at(at),
            None => (text, ""),
        };
        if base.is_empty() {
            return Err(if text.is_empty() {
                FormNameError::Empty
            } else {
                FormNameError::Brackets
            });
        }
        if let Some(c) = base.chars().find(|c| *c == '.' || c.is_whitespace()) {
            return Err(FormNameError::PlainName(c));
        }
        let folded = base.to_ascii_lowercase();
        if METHOD_OVERRIDE_NAMES.contains(&folded.as_str()) {
            return Err(FormNameError::MethodOverride);
        }
        if folded == "_charset_" {
            return Err(FormNameError::Charset);
        }
        check_prototype(base)?;
        let mut parts = vec![FormKey::Name(base.to_owned())];
        while !rest.is_empty() {
            if parts.last() == Some(&FormKey::Append) {
                return Err(FormNameError::AppendInside);
            }
            let inner = rest.strip_prefix('[').ok_or(FormNameError::Brackets)?;
            let close = inner.find(']').ok_or(FormNameError::Brackets)?;
            let key = &inner[..close];
            rest = &inner[close + 1..];
            if key.contains('[') {
                return Err(FormNameError::Brackets);
            }
            if key.chars().any(char::is_whitespace) {
                return Err(FormNameError::KeySpace);
            }
            parts.push(if key.is_empty() {
                FormKey::Append
            } else if key.bytes().all(|b| b.is_ascii_digit()) {
                if key.len() > 1 && key.starts_with('0') {
                    return Err(FormNameError::IndexSpelling(key.to_owned()));
                }
                match key.parse::<usize>() {
                    Ok(index) if index < MAX_LIST => FormKey::Index(index),
                    _ => return Err(FormNameError::IndexTooLarge),
                }
            } else {
                check_prototype(key)?;
                FormKey::Name(key.to_owned())
            });
            if parts.len() > MAX_GROUPS + 1 {
                return Err(FormNameError::TooDeep);
            }
        }
        Ok(FormName {
            text: text.to_owned(),
            parts,
        })
    }

    /// The name as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    pub(crate) fn parts(&self) -> &[FormKey] {
        &self.parts
    }

    /// Whether the field is a list (`a[]`).
    pub(crate) fn is_list(&self) -> bool {
        self.parts.last() == Some(&FormKey::Append)
    }

    /// Whether this name is `other` or a group `other` holds (`metadata` holds
    /// `metadata[a][b]`): an `ignore` entry covers the fields it holds.
    pub(crate) fn is_within(&self, other: &FormName) -> bool {
        self.parts.starts_with(&other.parts)
    }
}

impl fmt::Display for FormName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn check_prototype(name: &str) -> Result<(), FormNameError> {
    match PROTOTYPE_NAMES.iter().find(|p| **p == name) {
        Some(p) => Err(FormNameError::Prototype((*p).to_owned())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_every_reader_shares() {
        let parts = |text: &str| FormName::parse(text).unwrap().parts;
        assert_eq!(parts("To"), vec![FormKey::Name("To".into())]);
        assert_eq!(
            parts("customer[name]"),
            vec![
                FormKey::Name("customer".into()),
                FormKey::Name("name".into())
            ]
        );
        assert_eq!(
            parts("lines[0][sku]"),
            vec![
                FormKey::Name("lines".into()),
                FormKey::Index(0),
                FormKey::Name("sku".into())
            ]
        );
        assert!(FormName::parse("items[]").unwrap().is_list());
        assert!(FormName::parse("metadata[order.id]").is_ok());
        assert!(FormName::parse("a[b][c][d][e][f]").is_ok());
        assert!(FormName::parse("caf\u{e9}").is_ok());
        assert!(FormName::parse("lines[19]").is_ok());
        let metadata = FormName::parse("metadata").unwrap();
        assert!(
            FormName::parse("metadata[a][b]")
                .unwrap()
                .is_within(&metadata)
        );
        assert!(metadata.is_within(&metadata));
        assert!(!FormName::parse("metadatas").unwrap().is_within(&metadata));
    }

    #[test]
    fn names_readers_part_on_are_refused() {
        for (name, error) in [
            ("", FormNameError::Empty),
            ("[a]", FormNameError::Brackets),
            ("a.b", FormNameError::PlainName('.')),
            ("a b", FormNameError::PlainName(' ')),
            ("a[b", FormNameError::Brackets),
            ("a]", FormNameError::Brackets),
            ("a[b]c", FormNameError::Brackets),
            ("a[b]]", FormNameError::Brackets),
            ("a[[b]]", FormNameError::Brackets),
            ("a[ b]", FormNameError::KeySpace),
            ("a[][b]", FormNameError::AppendInside),
            ("a[][]", FormNameError::AppendInside),
            ("a[b][c][d][e][f][g]", FormNameError::TooDeep),
            ("a[01]", FormNameError::IndexSpelling("01".into())),
            ("a[20]", FormNameError::IndexTooLarge),
            ("a[99999999999999999999999]", FormNameError::IndexTooLarge),
            ("__proto__[x]", FormNameError::Prototype("__proto__".into())),
            ("a[toString]", FormNameError::Prototype("toString".into())),
            ("_method", FormNameError::MethodOverride),
            ("_METHOD", FormNameError::MethodOverride),
            ("_method[x]", FormNameError::MethodOverride),
            ("_charset_", FormNameError::Charset),
            ("a\u{0}b", FormNameError::Control),
        ] {
            assert_eq!(FormName::parse(name), Err(error), "{name:?}");
        }
    }
}
