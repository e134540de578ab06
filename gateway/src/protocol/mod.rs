//! Pure wire code of the operations extension: structured-field headers, IDs, revisions and the
//! JSON bodies the gateway answers with. No I/O, no pingora, no Redis.

pub mod approval;
pub(crate) mod approved;
pub(crate) mod authorization;
mod body;
mod extensions;
pub(crate) mod json;
mod operation_id;
pub(crate) mod page_link;
pub(crate) mod page_session;
mod revision;
mod signing;

pub use approval::ApprovalHeader;

pub use approval::ApprovalError;
pub(crate) use body::{ALREADY_PERFORMED, ErrorBody, Operation};
pub use extensions::ExtensionsError;
pub use extensions::{Declared, IMPLEMENTED_OPERATIONS_VERSIONS, declared_operations};
pub(crate) use operation_id::ActionTag;
pub use operation_id::{OperationId, ScopeKind};
pub use revision::{Revision, RevisionInput};
pub use signing::{Keys, KeysError, SigningKey};

/// The longest operation_id or revision the gateway accepts in an approval.
pub(crate) const MAX_ID_LEN: usize = 128;

/// The characters of IDs in spec 8.2: `A-Z a-z 0-9 _ -`.
pub(crate) fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Whether `text` is a non-empty ID of at most [`MAX_ID_LEN`] ID characters.
pub(crate) fn is_id(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_ID_LEN && text.bytes().all(is_id_byte)
}

/// Several lines of one structured field, combined as RFC 9651 says: joined with commas.
///
/// An empty field line (nothing but spaces and tabs) adds nothing, wherever it is: it is an
/// empty list member, which HTTP (RFC 9110, 5.6.1.2) tells recipients to ignore. Joining it
/// as it came would make a leading one vanish but a middle or trailing one a syntax error.
fn combine_lines<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut joined = Vec::new();
    for line in lines {
        if line.iter().all(|b| *b == b' ' || *b == b'\t') {
            continue;
        }
        if !joined.is_empty() {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(line);
    }
    joined
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_field_lines_add_nothing_wherever_they_are() {
        let expected = b"a=1, b=2".to_vec();
        for lines in [
            vec!["", "a=1", "b=2"],
            vec!["a=1", "", "b=2"],
            vec!["a=1", "b=2", ""],
            vec![" ", "a=1", "\t", "b=2", "  "],
        ] {
            let bytes: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
            assert_eq!(combine_lines(bytes), expected, "{lines:?}");
        }
        assert!(combine_lines([b"".as_slice(), b" ".as_slice()]).is_empty());
    }

    #[test]
    fn an_approval_parses_the_same_with_an_empty_line_anywhere() {
        let member_lines = [r#"operation_id="o1""#, r#"revision="r1""#];
        for at in 0..=member_lines.len() {
            let mut lines: Vec<&[u8]> = member_lines.iter().map(|l| l.as_bytes()).collect();
            lines.insert(at, b"");
            let approval = ApprovalHeader::parse(lines).expect("an empty line is ignored");
            assert_eq!(
                (approval.operation_id.as_str(), approval.revision.as_str()),
                ("o1", "r1")
            );
        }
        let only_empty: [&[u8]; 2] = [b"", b""];
        assert_eq!(declared_operations(only_empty), Ok(Declared::None));
        let extensions: [&[u8]; 3] = [b"", br#""operations";v="2""#, b""];
        assert_eq!(declared_operations(extensions), Ok(Declared::V2));
    }
}
