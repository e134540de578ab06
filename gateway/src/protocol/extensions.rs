//! `Poppy-Extensions`: the extensions a Personal Agent declares (an RFC 9651 List).

use sfv::{BareItem, List, ListEntry, Parser};

/// The header is not a valid structured-field List.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Poppy-Extensions is not an RFC 9651 List: {0}")]
pub struct ExtensionsError(String);

/// The operations versions (major numbers) this gateway implements: the only ones
/// `[protocol] operations_versions` may list. Adding one is docs/protocol-versions.md.
pub const IMPLEMENTED_OPERATIONS_VERSIONS: [&str; 1] = ["2"];

/// How the spec writes the declaration.
const SPEC_SPELLING: &str = r#""operations";v="2""#;

/// What a request's `Poppy-Extensions` declares of the operations extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Declared {
    /// Version 2 (any 2.x), whatever else is listed beside it.
    V2,
    /// `operations` with no version, or only versions of another major.
    Other,
    /// No `operations` member (or no header).
    None,
}

impl Declared {
    /// Every value, in the order metrics export them.
    pub const ALL: [Declared; 3] = [Declared::V2, Declared::Other, Declared::None];

    /// The metric label: the major version when implemented, else `other` or `none`.
    pub fn label(self) -> &'static str {
        match self {
            Declared::V2 => "2",
            Declared::Other => "other",
            Declared::None => "none",
        }
    }
}

/// What the request declares of operations ([`Declared`]). Several header lines are
/// combined as RFC 9651 says (joined with commas). Other extensions and other versions may
/// be listed beside `"operations";v="2"`; a different major version does not count.
pub fn declared_operations<'a>(
    lines: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Declared, ExtensionsError> {
    let joined = super::combine_lines(lines);
    if joined.is_empty() {
        return Ok(Declared::None);
    }
    // The spec's own spelling, which nearly every agent sends: it parses to exactly this, so
    // the structured-field parser (1% of a mint's CPU) is skipped.
    if joined == SPEC_SPELLING.as_bytes() {
        return Ok(Declared::V2);
    }
    let list: List = Parser::new(&joined)
        .parse()
        .map_err(|e| ExtensionsError(e.to_string()))?;
    let mut declared = Declared::None;
    for entry in list.iter() {
        let ListEntry::Item(item) = entry else {
            continue;
        };
        if !names_operations(&item.bare_item) {
            continue;
        }
        if item
            .params
            .iter()
            .any(|(key, value)| key.as_str() == "v" && is_major_two(value))
        {
            return Ok(Declared::V2);
        }
        declared = Declared::Other;
    }
    Ok(declared)
}

fn names_operations(item: &BareItem) -> bool {
    // The spec writes it as a String; a Token of the same name is accepted too.
    item.as_string().map(|s| s.as_str()) == Some("operations")
        || item.as_token().map(|t| t.as_str()) == Some("operations")
}

fn is_major_two(value: &BareItem) -> bool {
    match value.as_string() {
        Some(version) => version.as_str().split('.').next() == Some("2"),
        None => value.as_integer().map(i64::from) == Some(2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declares(value: &str) -> Result<bool, ExtensionsError> {
        declared_operations([value.as_bytes()]).map(|d| d == Declared::V2)
    }

    #[test]
    fn the_spec_spelling_parses_to_what_its_shortcut_answers() {
        let list: List = Parser::new(SPEC_SPELLING.as_bytes()).parse().unwrap();
        assert_eq!(list.len(), 1);
        let ListEntry::Item(item) = &list[0] else {
            panic!("not an item")
        };
        assert!(names_operations(&item.bare_item));
        assert_eq!(item.params.len(), 1);
        assert!(
            item.params
                .iter()
                .all(|(k, v)| k.as_str() == "v" && is_major_two(v))
        );
    }

    #[test]
    fn accepts_v2_alone_or_among_others() {
        assert_eq!(declares(r#""operations";v="2""#), Ok(true));
        assert_eq!(declares(r#""other";v="1", "operations";v="2""#), Ok(true));
        assert_eq!(declares(r#"operations;v="2""#), Ok(true));
        assert_eq!(declares(r#""operations";v="2.1""#), Ok(true));
    }

    #[test]
    fn other_versions_and_names_do_not_count() {
        assert_eq!(declares(r#""operations";v="1""#), Ok(false));
        assert_eq!(declares(r#""operations";v="20""#), Ok(false));
        assert_eq!(declares(r#""operations""#), Ok(false));
        assert_eq!(declares(r#""other";v="2""#), Ok(false));
        assert_eq!(declares(r#"("operations");v="2""#), Ok(false));
        assert_eq!(declared_operations(std::iter::empty()), Ok(Declared::None));
    }

    #[test]
    fn tells_other_majors_from_no_declaration() {
        let of = |value: &str| declared_operations([value.as_bytes()]);
        assert_eq!(of(r#""operations";v="3""#), Ok(Declared::Other));
        assert_eq!(
            of(r#""operations";v="3", "operations";v="2""#),
            Ok(Declared::V2)
        );
        assert_eq!(of(r#""operations""#), Ok(Declared::Other));
        assert_eq!(of(r#""other";v="2""#), Ok(Declared::None));
        assert_eq!(declared_operations(std::iter::empty()), Ok(Declared::None));
    }

    #[test]
    fn several_lines_combine() {
        let lines: [&[u8]; 2] = [br#""other";v="1""#, br#""operations";v="2""#];
        assert_eq!(declared_operations(lines), Ok(Declared::V2));
    }

    #[test]
    fn malformed_is_an_error() {
        for bad in [r#""operations";v="#, "((", r#""unterminated"#, "a,,b", "é"] {
            assert!(declares(bad).is_err(), "{bad}");
        }
    }
}
