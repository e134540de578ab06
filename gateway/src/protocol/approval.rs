//! The approval: `operation_id` and `revision`. One reader for every place it travels: the
//! `Poppy-Approval` header (an RFC 9651 Dictionary: `operation_id="…", revision="…"`), an MCP
//! call's `_meta` and a conversation message's extension (a JSON object with the same two
//! members). Each member is checked by the same rule wherever it came from.

use serde_json::Value;
use sfv::{Dictionary, ListEntry, Parser};

use super::is_id;

/// An approval as the Personal Agent sent it. Its members are well-formed IDs; whether the
/// gateway minted them is checked later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalHeader {
    pub operation_id: String,
    pub revision: String,
}

/// Where an approval travelled: named in every error about it.
pub const HEADER: &str = "Poppy-Approval";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    #[error("{0} is not an RFC 9651 Dictionary: {1}")]
    Syntax(&'static str, String),
    #[error("{0} must be an object with string members operation_id and revision")]
    NotAnObject(&'static str),
    #[error("{0} has no `{1}` member")]
    Missing(&'static str, &'static str),
    #[error(
        "{0} member `{1}` must be a string, like {1}=\"…\" (a header) or \"{1}\": \"…\" (JSON)"
    )]
    NotAString(&'static str, &'static str),
    #[error(
        "{0} member `{1}` must be 1 to {max} characters of A-Z a-z 0-9 _ -",
        max = super::MAX_ID_LEN
    )]
    BadCharacters(&'static str, &'static str),
}

impl ApprovalError {
    /// Where the approval that was refused travelled.
    pub fn place(&self) -> &'static str {
        match self {
            ApprovalError::Syntax(place, _)
            | ApprovalError::NotAnObject(place)
            | ApprovalError::Missing(place, _)
            | ApprovalError::NotAString(place, _)
            | ApprovalError::BadCharacters(place, _) => place,
        }
    }
}

/// What one member of an approval was found to be, wherever it travels.
enum Member<'a> {
    Absent,
    Text(&'a str),
    Other,
}

impl ApprovalHeader {
    /// Parse the header's lines (combined with commas, as RFC 9651 says). Members this
    /// version doesn't know are ignored, as the spec requires.
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Result<Self, ApprovalError> {
        let joined = super::combine_lines(lines);
        let dictionary: Dictionary = Parser::new(&joined)
            .parse()
            .map_err(|e| ApprovalError::Syntax(HEADER, e.to_string()))?;
        let member = |name: &str| match dictionary.iter().find(|(key, _)| key.as_str() == name) {
            None => Member::Absent,
            Some((_, ListEntry::Item(item))) => item
                .bare_item
                .as_string()
                .map_or(Member::Other, |s| Member::Text(s.as_str())),
            Some((_, ListEntry::InnerList(_))) => Member::Other,
        };
        Self::from_members(HEADER, member)
    }

    /// Read an approval that travels as JSON (`{"operation_id": "…", "revision": "…"}`) at
    /// `place`. Other members are ignored, as for the header.
    pub fn from_json(value: &Value, place: &'static str) -> Result<Self, ApprovalError> {
        let Value::Object(object) = value else {
            return Err(ApprovalError::NotAnObject(place));
        };
        Self::from_members(place, |name| match object.get(name) {
            None => Member::Absent,
            Some(Value::String(text)) => Member::Text(text),
            Some(_) => Member::Other,
        })
    }

    /// The one rule for both members, wherever they came from.
    fn from_members<'a>(
        place: &'static str,
        member: impl Fn(&str) -> Member<'a>,
    ) -> Result<Self, ApprovalError> {
        let read = |name: &'static str| match member(name) {
            Member::Absent => Err(ApprovalError::Missing(place, name)),
            Member::Other => Err(ApprovalError::NotAString(place, name)),
            Member::Text(text) if !is_id(text) => Err(ApprovalError::BadCharacters(place, name)),
            Member::Text(text) => Ok(text.to_owned()),
        };
        Ok(ApprovalHeader {
            operation_id: read("operation_id")?,
            revision: read("revision")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: &str) -> Result<ApprovalHeader, ApprovalError> {
        ApprovalHeader::parse([value.as_bytes()])
    }

    #[test]
    fn parses_the_spec_example() {
        let approval =
            parse(r#"operation_id="exc_5Rt2", revision="1791487200-k3Jd9Qx2mW8v""#).unwrap();
        assert_eq!(approval.operation_id, "exc_5Rt2");
        assert_eq!(approval.revision, "1791487200-k3Jd9Qx2mW8v");
    }

    #[test]
    fn ignores_unknown_members_in_any_order() {
        let approval = parse(r#"foo=1, revision="r1", bar, operation_id="o1";x=2"#).unwrap();
        assert_eq!(approval.operation_id, "o1");
        assert_eq!(approval.revision, "r1");
    }

    #[test]
    fn rejects_bad_shapes() {
        assert!(matches!(parse("((("), Err(ApprovalError::Syntax(..))));
        assert!(matches!(
            parse(r#"revision="r""#),
            Err(ApprovalError::Missing(HEADER, "operation_id"))
        ));
        assert!(matches!(
            parse(r#"operation_id=o1, revision="r""#),
            Err(ApprovalError::NotAString(HEADER, "operation_id"))
        ));
        assert!(matches!(
            parse(r#"operation_id="o 1", revision="r""#),
            Err(ApprovalError::BadCharacters(HEADER, "operation_id"))
        ));
        assert!(matches!(
            parse(r#"operation_id="o1", revision="""#),
            Err(ApprovalError::BadCharacters(HEADER, "revision"))
        ));
        let long = format!(r#"operation_id="o1", revision="{}""#, "a".repeat(129));
        assert!(matches!(
            parse(&long),
            Err(ApprovalError::BadCharacters(HEADER, "revision"))
        ));
    }

    #[test]
    fn json_approvals_follow_the_header_s_rule() {
        let place = "params._meta approval";
        let read = |value: Value| ApprovalHeader::from_json(&value, place);
        let approval = read(serde_json::json!({"operation_id": "o1", "revision": "r1", "x": 1}));
        assert_eq!(approval.unwrap().revision, "r1");
        assert_eq!(
            read(serde_json::json!("o1")),
            Err(ApprovalError::NotAnObject(place))
        );
        assert_eq!(
            read(serde_json::json!({"revision": "r"})),
            Err(ApprovalError::Missing(place, "operation_id"))
        );
        assert_eq!(
            read(serde_json::json!({"operation_id": 1, "revision": "r"})),
            Err(ApprovalError::NotAString(place, "operation_id"))
        );
        assert_eq!(
            read(serde_json::json!({"operation_id": "o1", "revision": "r 1"})),
            Err(ApprovalError::BadCharacters(place, "revision"))
        );
        // The same member, refused the same way in the header.
        assert_eq!(
            parse(r#"operation_id="o1", revision="r 1""#),
            Err(ApprovalError::BadCharacters(HEADER, "revision"))
        );
    }
}
