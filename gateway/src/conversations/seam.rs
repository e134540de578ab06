//! The one place the conversations service meets the operation core: a described request
//! goes through the HTTP API's own sequence (`proxy::operate`: check 2 before a policy's
//! lookup, the lookup, then the executor: checks 1-3 in the spec's order, the claim, one
//! forward, the recorded answer), its outcome is counted and logged as the proxy's are
//! (`RequestOutcome::record`), and the decision is rendered as the service's answers.
//! Nothing here decides anything the core decides.

use std::sync::Arc;

use super::describe::Described;
use super::wire::Answer;
use crate::identity::Approver;
use crate::metrics::Metrics;
use crate::operation::Decision;
use crate::protocol::{ApprovalHeader, ErrorBody, SigningKey};
use crate::proxy::{ApiRequest, Executor, Operated, RequestOutcome, UpstreamClient, operate};
use crate::store::OperationStore;

/// What the flow is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// The operation for a request (no approval): its terms, to put in a message.
    Propose,
    /// A Personal Agent's message, with or without an approval.
    Perform,
}

pub(crate) struct Seam {
    executor: Arc<Executor>,
    upstream: Arc<UpstreamClient>,
    metrics: Arc<Metrics>,
}

impl Seam {
    pub(crate) fn new(
        executor: Arc<Executor>,
        upstream: Arc<UpstreamClient>,
        metrics: Arc<Metrics>,
    ) -> Seam {
        Seam {
            executor,
            upstream,
            metrics,
        }
    }

    /// The executor's store, for the service's own records (conversation messages).
    pub(crate) fn store(&self) -> Arc<dyn OperationStore> {
        self.executor.store()
    }

    /// The key that signs now, for keying who sent a message.
    pub(crate) fn signing_key(&self) -> &SigningKey {
        self.executor.signing_key()
    }

    /// This process, as the executor names it in claims.
    pub(crate) fn instance(&self) -> &str {
        self.executor.instance()
    }

    /// Decide `described` for `approver`, with the message's approval if any.
    pub(crate) async fn decide(
        &self,
        described: Described,
        approver: Approver,
        approval: Option<ApprovalHeader>,
        call: Call,
    ) -> Answer {
        let policy = Arc::clone(&described.policy);
        let named = approval
            .as_ref()
            .map(|a| a.operation_id.clone())
            .unwrap_or_default();
        let request = ApiRequest {
            policy: Arc::clone(&policy),
            approver,
            approval,
            reading: described.reading,
            headers: described.headers,
            forward: described.forward,
        };
        match operate(&self.executor, &self.upstream, request).await {
            Operated::Decided(executed) => {
                executed.outcome.record(&self.metrics);
                render(executed.decision, &named, call)
            }
            Operated::Refused(reply, outcome) => {
                // A lookup that failed, or a term it can't be filled from: nothing forwarded.
                RequestOutcome::refused(&policy.name, outcome, reply.status).record(&self.metrics);
                Answer {
                    status: reply.status,
                    body: serde_json::from_slice(&reply.body).unwrap_or_default(),
                    retry_after: None,
                }
            }
        }
    }
}

/// The service's answer to a decision. `named`: the operation the approval named.
fn render(decision: Decision, named: &str, call: Call) -> Answer {
    match decision {
        Decision::ApprovalRequired { operation, .. } if call == Call::Propose => {
            Answer::proposed(&operation)
        }
        Decision::ApprovalRequired {
            operation,
            rejected,
        } => {
            let detail = if rejected {
                "the approval does not cover this request in this conversation (other terms, another conversation, expired, or not this Session's to give); nothing was performed: put this operation in your message and ask for its approval"
            } else {
                "the message carries no approval (its text approves nothing); nothing was performed: put this operation in your message and ask for its approval"
            };
            Answer::error(403, &ErrorBody::approval_required(&operation, detail))
        }
        Decision::SignInRequired => Answer::error(
            401,
            &ErrorBody::new(
                "sign_in_required",
                "this operation belongs to an account: the Personal Agent must sign in to that account to approve it; nothing was performed",
            ),
        ),
        Decision::Performed(response) => Answer::outcome("performed", named, &response),
        Decision::Replayed(response) => Answer::outcome("already_performed", named, &response),
        Decision::Released(response) => Answer::outcome("not_performed", named, &response),
        Decision::AlreadyPerformed(id) => {
            Answer::error(409, &ErrorBody::already_performed(id.as_str()))
        }
        Decision::InProgress(id) => Answer::retry_later(
            1,
            &ErrorBody::new(
                "operation_in_progress",
                "this operation is being performed now; it has not failed: send the same message again to get its answer, and tell the user it is under way",
            )
            .with("operation_id", id.as_str()),
        ),
        Decision::Unknown(id) => Answer::retry_later(
            30,
            &ErrorBody::new(
                "operation_outcome_unknown",
                "whether this operation took effect is not known yet, and it will not be performed again; do not tell the user it failed: say it is being checked, and send the same message again later",
            )
            .with("operation_id", id.as_str()),
        ),
        Decision::UpstreamUnavailable => Answer::retry_later(
            1,
            &ErrorBody::new(
                "upstream_unavailable",
                "the API could not be reached; nothing was performed: send the same message again",
            ),
        ),
        Decision::ShuttingDown => Answer::retry_later(
            1,
            &ErrorBody::new(
                "gateway_shutting_down",
                "this gateway is shutting down and started nothing: send the same message again",
            ),
        ),
        Decision::StoreUnavailable => Answer::retry_later(
            1,
            &ErrorBody::new(
                "store_unavailable",
                "the gateway cannot reach its operation store; nothing was performed: try again",
            ),
        ),
    }
}
