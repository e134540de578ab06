//! What a request for an operation came to, for its interface to render.

use super::outcome::Outcome;
use super::record::RecordedResponse;
use crate::protocol::{ApprovalHeader, Operation, OperationId};

/// What the executor decided, for the interface (HTTP API or MCP) to render.
#[derive(Debug, Clone)]
pub(crate) enum Decision {
    /// The User's approval is needed (`403 approval_required`, or an MCP tool error).
    /// `rejected`: the request carried an approval that failed check 1 or 3.
    ApprovalRequired {
        operation: Operation,
        rejected: bool,
    },
    /// A signed-out Session named an account's operation.
    SignInRequired,
    /// Forwarded once; this is the upstream's answer, recorded.
    Performed(RecordedResponse),
    /// Forwarded; the upstream's answer is interim (an MCP call's `input_required` result):
    /// the operation is still being performed, nothing is recorded, and this goes to the
    /// client, whose follow-up goes on under the same claim.
    Interim(RecordedResponse),
    /// Forwarded; the upstream's answer proves nothing was performed, so the claim was
    /// released and the same approval may be sent again.
    Released(RecordedResponse),
    /// Performed before; this is the recorded answer.
    Replayed(RecordedResponse),
    /// Performed before, for this approver; their credentials do not prove they are the
    /// ones that approved, so the recorded answer is not theirs to read.
    AlreadyPerformed(OperationId),
    /// Being performed.
    InProgress(OperationId),
    /// The follow-up of an interim answer (an MCP round) from a Session that may not send
    /// it: only the approver the operation is claimed for, proven as for a replay, may
    /// carry answers into the call. Nothing was forwarded.
    NotTheApprover(OperationId),
    /// Claimed, but whether it took effect is unknown: never forwarded again.
    Unknown(OperationId),
    /// The upstream could not be reached; nothing was sent and the claim was released.
    UpstreamUnavailable,
    /// The store could not be reached; nothing was forwarded.
    StoreUnavailable,
    /// The gateway is shutting down and starts no new forward; nothing was claimed.
    ShuttingDown,
}

impl Decision {
    /// Why [`Decision::NotTheApprover`] refused, as every interface says it.
    pub(crate) const NOT_THE_APPROVER: &str = "this follow-up answers a call under way, which only the Session that approved the operation may do; nothing was forwarded";

    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            Decision::ApprovalRequired {
                rejected: false, ..
            } => Outcome::Held,
            Decision::ApprovalRequired { rejected: true, .. } | Decision::NotTheApprover(_) => {
                Outcome::Rejected
            }
            Decision::SignInRequired => Outcome::Challenged,
            Decision::Performed(_) => Outcome::Performed,
            Decision::Released(_) => Outcome::Released,
            Decision::UpstreamUnavailable => Outcome::UpstreamUnavailable,
            Decision::Replayed(_) => Outcome::Replayed,
            Decision::AlreadyPerformed(_) => Outcome::AlreadyPerformed,
            Decision::InProgress(_) | Decision::Interim(_) => Outcome::InProgress,
            Decision::Unknown(_) => Outcome::Unknown,
            Decision::StoreUnavailable => Outcome::StoreUnavailable,
            Decision::ShuttingDown => Outcome::ShuttingDown,
        }
    }

    /// The operation a decision is about, for logs: the one returned, else the one named.
    pub(crate) fn operation_id(&self, approval: Option<&ApprovalHeader>) -> String {
        match self {
            Decision::ApprovalRequired { operation, .. } => operation.operation_id.clone(),
            Decision::InProgress(id)
            | Decision::Unknown(id)
            | Decision::AlreadyPerformed(id)
            | Decision::NotTheApprover(id) => id.to_string(),
            _ => approval.map_or_else(String::new, |a| a.operation_id.clone()),
        }
    }
}
