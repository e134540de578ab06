//! What each [`Decision`] means on the wire, for every interface: the one table of its HTTP
//! status, its error code and when to try again. The HTTP API (`proxy/reply.rs`), the MCP
//! endpoint (`proxy/mcp_api.rs`, whose tool results carry the code and the retry time in
//! `_meta`) and the conversations service (`conversations/seam.rs`) read it and keep only
//! their own wording and shape.

use super::decision::Decision;

/// A decision the gateway answers itself, as an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireError {
    /// The HTTP status (the API's and the conversations service's; MCP answers most of these
    /// as a tool result, in HTTP 200).
    pub(crate) status: u16,
    /// The JSON `error` member, and MCP's `_meta` retry advice's `error`.
    pub(crate) error: &'static str,
    /// `Retry-After`, in seconds: the same request again after this long may be answered.
    pub(crate) retry_after: Option<u32>,
}

/// What a decision is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// The upstream's answer (performed, replayed, released, or interim), with its own status.
    Answer,
    /// An error the gateway answers.
    Error(WireError),
}

/// Being performed: try again in a second. Also what an interface that has no interim
/// answers (the conversations service) says of one.
pub(crate) const IN_PROGRESS: WireError = WireError {
    status: 503,
    error: "operation_in_progress",
    retry_after: Some(1),
};

/// Claimed, outcome unknown: not before half a minute.
const UNKNOWN: WireError = WireError {
    status: 503,
    error: "operation_outcome_unknown",
    retry_after: Some(30),
};

/// A refusal that a retry of the same request can't change.
const fn error(status: u16, error: &'static str) -> Wire {
    Wire::Error(WireError {
        status,
        error,
        retry_after: None,
    })
}

/// Nothing was performed; the same request again in a second may be.
const fn retry(error: &'static str) -> Wire {
    Wire::Error(WireError {
        status: 503,
        error,
        retry_after: Some(1),
    })
}

impl Decision {
    /// The table: what this decision is on the wire.
    pub(crate) fn wire(&self) -> Wire {
        match self {
            Decision::ApprovalRequired { .. } => error(403, "approval_required"),
            Decision::SignInRequired => error(401, "sign_in_required"),
            Decision::Performed(_)
            | Decision::Interim(_)
            | Decision::Released(_)
            | Decision::Replayed(_) => Wire::Answer,
            // Performed for these claims, by credentials that do not prove they approved it:
            // neither its answer nor a new operation (spec section 7).
            Decision::AlreadyPerformed(_) => error(409, "already_performed"),
            Decision::NotTheApprover(_) => error(403, "not_the_approver"),
            Decision::InProgress(_) => Wire::Error(IN_PROGRESS),
            Decision::Unknown(_) => Wire::Error(UNKNOWN),
            Decision::UpstreamUnavailable => retry("upstream_unavailable"),
            Decision::ShuttingDown => retry("gateway_shutting_down"),
            Decision::StoreUnavailable => retry("store_unavailable"),
        }
    }

    /// [`Decision::wire`] of a decision that is an error; `None` for the upstream's answer.
    pub(crate) fn wire_error(&self) -> Option<WireError> {
        match self.wire() {
            Wire::Error(error) => Some(error),
            Wire::Answer => None,
        }
    }
}

/// One decision of each kind, for the tests that walk every decision through the table and
/// every renderer.
#[cfg(test)]
pub(crate) fn every_decision() -> Vec<Decision> {
    use super::record::RecordedResponse;
    use crate::protocol::{Operation, OperationId};
    let id = || OperationId::parse("exc_sAAAAAAAAAAAAAAAABBBBBBBB").expect("an operation ID");
    let operation = Operation {
        operation_id: "exc_sAAAAAAAAAAAAAAAABBBBBBBB".into(),
        revision: "1-a".into(),
        summary: "Exchange item **i1**.".into(),
        terms: None,
        expires_at: "2026-10-08T19:20:00Z".into(),
    };
    let response = || RecordedResponse {
        status: 201,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#),
    };
    vec![
        Decision::ApprovalRequired {
            operation: operation.clone(),
            rejected: false,
        },
        Decision::ApprovalRequired {
            operation,
            rejected: true,
        },
        Decision::SignInRequired,
        Decision::Performed(response()),
        Decision::Interim(response()),
        Decision::Released(response()),
        Decision::Replayed(response()),
        Decision::AlreadyPerformed(id()),
        Decision::NotTheApprover(id()),
        Decision::InProgress(id()),
        Decision::Unknown(id()),
        Decision::UpstreamUnavailable,
        Decision::ShuttingDown,
        Decision::StoreUnavailable,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every decision has one meaning on the wire: the upstream's answer, or an error with a
    /// code of its own, a status the spec gives it, and a retry time exactly when the same
    /// request may come out otherwise later.
    #[test]
    fn every_decision_has_its_place_in_the_table() {
        let mut codes = std::collections::BTreeMap::new();
        for decision in every_decision() {
            match decision.wire() {
                Wire::Answer => assert!(matches!(
                    decision,
                    Decision::Performed(_)
                        | Decision::Interim(_)
                        | Decision::Released(_)
                        | Decision::Replayed(_)
                )),
                Wire::Error(wire) => {
                    let retried = matches!(wire.status, 503);
                    assert_eq!(wire.retry_after.is_some(), retried, "{decision:?}");
                    assert!((400..600).contains(&wire.status), "{decision:?}");
                    let kind = std::mem::discriminant(&decision);
                    if let Some(other) = codes.insert(wire.error, kind) {
                        assert_eq!(other, kind, "{} names two decisions", wire.error);
                    }
                }
            }
        }
        assert_eq!(
            Decision::SignInRequired.wire_error().map(|w| w.status),
            Some(401)
        );
        assert_eq!(UNKNOWN.retry_after, Some(30));
        assert_eq!(codes.len(), 9, "{codes:?}");
    }
}
