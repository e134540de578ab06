//! Pure wire code of the operations extension: structured-field headers, IDs, revisions and the
//! JSON bodies the gateway answers with. No I/O, no pingora, no Redis.

mod approval;
mod body;
mod extensions;
mod operation_id;
mod revision;
mod signing;

pub use approval::{ApprovalError, ApprovalHeader};
pub use body::{ErrorBody, Operation};
pub use extensions::{ExtensionsError, declares_operations_v2};
pub use operation_id::{ActionTag, OperationId, ScopeKind};
pub use revision::{Revision, RevisionInput};
pub use signing::{Keys, SigningKey};

/// The longest operation_id or revision the gateway accepts in an approval.
pub const MAX_ID_LEN: usize = 128;

/// The characters of IDs in spec 8.2: `A-Z a-z 0-9 _ -`.
pub fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Whether `text` is a non-empty ID of at most [`MAX_ID_LEN`] ID characters.
pub fn is_id(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_ID_LEN && text.bytes().all(is_id_byte)
}

/// Several lines of one structured field, combined as RFC 9651 says: joined with commas.
fn combine_lines<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut joined = Vec::new();
    for line in lines {
        if !joined.is_empty() {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(line);
    }
    joined
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
