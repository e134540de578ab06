//! `Poppy-Approval`: `operation_id="…", revision="…"` (an RFC 9651 Dictionary).

use sfv::{Dictionary, ListEntry, Parser};

use super::is_id;

/// An approval as the Personal Agent sent it. Its members are well-formed IDs; whether the
/// gateway minted them is checked later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalHeader {
    pub operation_id: String,
    pub revision: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    #[error("Poppy-Approval is not an RFC 9651 Dictionary: {0}")]
    Syntax(String),
    #[error("Poppy-Approval has no `{0}` member")]
    Missing(&'static str),
    #[error("Poppy-Approval member `{0}` must be a String, like {0}=\"…\"")]
    NotAString(&'static str),
    #[error(
        "Poppy-Approval member `{0}` must be 1 to {max} characters of A-Z a-z 0-9 _ -",
        max = super::MAX_ID_LEN
    )]
    BadCharacters(&'static str),
}

impl ApprovalHeader {
    /// Parse the header's lines (combined with commas, as RFC 9651 says). Members this
    /// version doesn't know are ignored, as the spec requires.
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Result<Self, ApprovalError> {
        let joined = super::combine_lines(lines);
        let dictionary: Dictionary = Parser::new(&joined)
            .parse()
            .map_err(|e| ApprovalError::Syntax(e.to_string()))?;
        Ok(ApprovalHeader {
            operation_id: member(&dictionary, "operation_id")?,
            revision: member(&dictionary, "revision")?,
        })
    }
}

fn member(dictionary: &Dictionary, name: &'static str) -> Result<String, ApprovalError> {
    let entry = dictionary
        .iter()
        .find(|(key, _)| key.as_str() == name)
        .map(|(_, entry)| entry)
        .ok_or(ApprovalError::Missing(name))?;
    let text = match entry {
        ListEntry::Item(item) => item.bare_item.as_string().map(|s| s.as_str().to_owned()),
        ListEntry::InnerList(_) => None,
    }
    .ok_or(ApprovalError::NotAString(name))?;
    if !is_id(&text) {
        return Err(ApprovalError::BadCharacters(name));
    }
    Ok(text)
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
        assert!(matches!(parse("((("), Err(ApprovalError::Syntax(_))));
        assert!(matches!(
            parse(r#"revision="r""#),
            Err(ApprovalError::Missing("operation_id"))
        ));
        assert!(matches!(
            parse(r#"operation_id=o1, revision="r""#),
            Err(ApprovalError::NotAString("operation_id"))
        ));
        assert!(matches!(
            parse(r#"operation_id="o 1", revision="r""#),
            Err(ApprovalError::BadCharacters("operation_id"))
        ));
        assert!(matches!(
            parse(r#"operation_id="o1", revision="""#),
            Err(ApprovalError::BadCharacters("revision"))
        ));
        let long = format!(r#"operation_id="o1", revision="{}""#, "a".repeat(129));
        assert!(matches!(
            parse(&long),
            Err(ApprovalError::BadCharacters("revision"))
        ));
    }
}
