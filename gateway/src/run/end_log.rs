//! The log lines and spans of how an operation's flow ended, written as the executor reaches
//! the end (counting is [`super::RequestOutcome::record`]'s, at the reply). An unknown outcome
//! is logged once per operation in this process: every retry would repeat it.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::metrics::Outcome;
use crate::operation::Decision;
use crate::operation::flow::Decided;
use crate::protocol::OperationId;
use crate::store::StoreError;
use crate::telemetry::Span;

/// The operations this process has already logged as unknown.
#[derive(Default)]
pub(crate) struct EndLog {
    unknown_logged: Mutex<HashSet<String>>,
}

impl EndLog {
    /// Declined on the approval page.
    pub(crate) fn declined(&self, policy: &str, id: &OperationId) {
        tracing::info!(policy, operation_id = %id, outcome = "declined", "declined on the approval page; nothing performed");
    }

    /// The policy's condition is false: passed through unheld.
    pub(crate) fn not_held(&self, policy: &str) {
        tracing::info!(
            policy,
            outcome = "not_held",
            "needs_approval_when is false for these terms; passed through unheld"
        );
    }

    /// A decision; `store_error`: the store's last failure, if it had one.
    pub(crate) fn decided(
        &self,
        policy: &str,
        decided: &Decided,
        store_error: Option<&StoreError>,
    ) {
        let operation_id = decided
            .approval
            .as_ref()
            .map_or("", |a| a.operation_id.as_str());
        match &decided.decision {
            Decision::StoreUnavailable => match store_error {
                Some(e) => {
                    tracing::warn!(policy, error = %e, "store unavailable; nothing forwarded")
                }
                None => tracing::warn!(policy, "store unavailable; nothing forwarded"),
            },
            Decision::Unknown(id) => {
                self.unknown(id, policy, decided.why.as_deref().unwrap_or_default())
            }
            Decision::NotTheApprover(id) => {
                tracing::warn!(policy, operation_id = %id, outcome = "rejected", "a follow-up of an interim answer from a Session that may not approve the operation; not forwarded")
            }
            Decision::Interim(_) => {
                tracing::info!(
                    policy,
                    operation_id,
                    outcome = "interim",
                    "an interim answer; the operation stays claimed for its follow-up"
                )
            }
            Decision::Replayed(_) => {
                // Linked to the span that executed the operation, when its record kept one.
                let span = Span::linked("poppy.replay", decided.linked.as_deref());
                span.set_with("poppy.policy", || policy.to_owned());
                span.set_with("poppy.operation_id", || operation_id.to_owned());
                span.set("poppy.outcome", Outcome::Replayed.as_str());
            }
            _ => {}
        }
    }

    fn unknown(&self, id: &OperationId, policy: &str, why: &str) {
        let first = match self.unknown_logged.lock() {
            Ok(mut seen) => {
                if seen.len() >= 10_000 {
                    seen.clear();
                }
                seen.insert(id.to_string())
            }
            Err(_) => true,
        };
        if first {
            tracing::error!(policy, operation_id = %id, outcome = "unknown", why, "outcome unknown; the operation will not be forwarded again unless an operator resolves it as not performed");
        }
    }
}
