//! What the front door answers when it refuses: one typed refusal, which each interface
//! renders in its own wire form (a JSON error, an MCP tool error).

use crate::identity::ApproverError;
use crate::ingress::Refusal;
use crate::protocol::{ApprovalError, ErrorBody, ExtensionsError, approval};

/// Why a request for an operation was refused before the core: nothing decided, nothing
/// forwarded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// `Poppy-Extensions` can't be read.
    #[error("{0}")]
    UnreadableExtensions(ExtensionsError),
    /// The operations extension is not declared: the Personal Agent gets no operations.
    #[error("the operations extension is not declared")]
    ExtensionRequired,
    /// The Session or the token.
    #[error("{0}")]
    Approver(ApproverError),
    /// An approval that is not one.
    #[error("{0}")]
    Approval(ApprovalError),
    /// The request itself: its body, target, headers, query or terms.
    #[error("{0}")]
    Request(Refusal),
}

impl Refused {
    /// The HTTP status of the refusal as a JSON error (the HTTP API's and the conversations
    /// service's form; MCP renders some refusals as tool errors instead).
    pub(crate) fn status(&self) -> u16 {
        match self {
            Refused::Approver(e) => e.status(),
            Refused::Request(refusal) => refusal.status,
            _ => 400,
        }
    }

    /// The JSON error body: `error`, a readable `detail`, and what it names.
    pub(crate) fn error_body(&self) -> ErrorBody {
        match self {
            Refused::UnreadableExtensions(e) => ErrorBody::new("invalid_header", e.to_string())
                .with("header", "Poppy-Extensions"),
            Refused::ExtensionRequired => ErrorBody::new(
                "extension_required",
                "this action needs the user's approval, and operations go only to a Personal Agent that declares Poppy-Extensions: \"operations\";v=\"2\" (spec 2); nothing was performed",
            )
            .with("extension", "operations"),
            Refused::Approver(e) => ErrorBody::new(e.code(), e.to_string()),
            Refused::Approval(e) if e.place() == approval::HEADER => {
                ErrorBody::new("invalid_header", e.to_string()).with("header", approval::HEADER)
            }
            Refused::Approval(e) => ErrorBody::new("invalid_request", e.to_string()),
            Refused::Request(refusal) => refusal.to_error_body(),
        }
    }

    /// Seconds to wait before sending the same request again, when the refusal is one to
    /// retry (the identity provider could not be asked, the gateway is busy).
    pub(crate) fn retry_after(&self) -> Option<u32> {
        match self {
            Refused::Approver(e) => e.retry_after(),
            Refused::Request(refusal) if refusal.status == 503 => Some(1),
            _ => None,
        }
    }
}

impl From<Refusal> for Refused {
    fn from(refusal: Refusal) -> Refused {
        Refused::Request(refusal)
    }
}
