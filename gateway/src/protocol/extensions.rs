//! `Poppy-Extensions`: the extensions a Personal Agent declares (an RFC 9651 List).

use sfv::{BareItem, List, ListEntry, Parser};

/// The header is not a valid structured-field List.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Poppy-Extensions is not an RFC 9651 List: {0}")]
pub struct ExtensionsError(String);

/// How the spec writes the declaration.
const SPEC_SPELLING: &str = r#""operations";v="2""#;

/// Whether the request declares `"operations";v="2"`. Several header lines are combined as
/// RFC 9651 says (joined with commas). Other extensions and other versions may be listed
/// beside it; a different major version does not count.
pub fn declares_operations_v2<'a>(
    lines: impl IntoIterator<Item = &'a [u8]>,
) -> Result<bool, ExtensionsError> {
    let joined = super::combine_lines(lines);
    if joined.is_empty() {
        return Ok(false);
    }
    // The spec's own spelling, which nearly every agent sends: it parses to exactly this, so
    // the structured-field parser (1% of a mint's CPU) is skipped.
    if joined == SPEC_SPELLING.as_bytes() {
        return Ok(true);
    }
    let list: List = Parser::new(&joined)
        .parse()
        .map_err(|e| ExtensionsError(e.to_string()))?;
    Ok(list.iter().any(|entry| match entry {
        ListEntry::Item(item) => {
            names_operations(&item.bare_item)
                && item
                    .params
                    .iter()
                    .any(|(key, value)| key.as_str() == "v" && is_major_two(value))
        }
        ListEntry::InnerList(_) => false,
    }))
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
        declares_operations_v2([value.as_bytes()])
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
        assert_eq!(declares_operations_v2(std::iter::empty()), Ok(false));
    }

    #[test]
    fn several_lines_combine() {
        let lines: [&[u8]; 2] = [br#""other";v="1""#, br#""operations";v="2""#];
        assert_eq!(declares_operations_v2(lines), Ok(true));
    }

    #[test]
    fn malformed_is_an_error() {
        for bad in [r#""operations";v="#, "((", r#""unterminated"#, "a,,b", "é"] {
            assert!(declares(bad).is_err(), "{bad}");
        }
    }
}
