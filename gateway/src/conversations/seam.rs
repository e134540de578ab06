//! The one place the conversations service meets the operation core: a described request
//! goes through the proxy's runner (`proxy::run`'s halves: the front door's extension,
//! Session, body size, approval and terms, then the executor: check 2 before a policy's
//! lookup, the lookup, checks 1-3 in the spec's order, the claim, one forward, the recorded
//! answer), its outcome is counted and logged as the proxy's are (`RequestOutcome::record`),
//! and the decision is rendered as the service's answers. Nothing here decides anything the
//! core decides, and nothing here checks anything the front door checks.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::describe::{Described, bound_to_conversation};
use super::wire::Answer;
use crate::identity::{RequestTarget, SessionClaims};
use crate::ingress::admit::{Admitted, ApprovalSource, Refused, body_size};
use crate::metrics::{Metrics, Unheld};
use crate::operation::Decision;
use crate::protocol::{ErrorBody, SigningKey};
use crate::proxy::{
    Admission, Arrival, Door, Executor, Operated, ProxyContext, Ran, RequestOutcome, UpstreamSlots,
    admit_request, offer_page, refused_outcome,
};
use crate::store::OperationStore;

/// Where a message's approval travels, as its errors name it.
const APPROVAL_PLACE: &str = "message.extensions.operations.approval";

/// What the flow is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// The operation for a request (no approval): its terms, to put in a message.
    Propose,
    /// A Personal Agent's message, with or without an approval.
    Perform,
}

/// The service's way into the front door and the executor (fields set by mod.rs).
pub(crate) struct Seam {
    pub(super) executor: Arc<Executor>,
    pub(super) claims: SessionClaims,
    pub(super) metrics: Arc<Metrics>,
    pub(super) max_body_bytes: usize,
    /// The proxy's `max_upstream_connections`, shared: a message's lookups and forward use the
    /// upstream as a proxied request does.
    pub(super) upstream_slots: Arc<UpstreamSlots>,
    /// How long to wait for a slot: the route's `connect_timeout`, as the proxy waits.
    pub(super) slot_wait: Duration,
}

impl Seam {
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

    /// The front door for `described` (as for the proxy's requests), and the conversation
    /// bound into what the revision covers. `signed_for`: the Personal Agent's request a
    /// verified Session is signed for; `approval`: the message's, as sent.
    pub(crate) async fn admit(
        &self,
        described: Described,
        conversation_id: &str,
        signed_for: RequestTarget<'_>,
        approval: Option<&Value>,
    ) -> Result<Admitted, Answer> {
        let policy = Arc::clone(described.action.policy());
        let max_body_bytes = self.max_body_bytes;
        let body = described.body;
        let arrival = Arrival {
            headers: described.headers,
            signed_for,
            action: described.action,
            approval: ApprovalSource::Json {
                value: approval,
                place: APPROVAL_PLACE,
            },
        };
        let body = async move { body_size(body.len(), max_body_bytes).map(|()| body) };
        match admit_request(
            &self.claims,
            &Door::of(&self.executor, &self.metrics),
            arrival,
            body,
        )
        .await
        {
            // `[approval_page.agents]` says these credentials are not an agent's: the
            // service holds nothing for them.
            Ok(Admission::NotAnAgent) => Err(not_an_agent()),
            Ok(Admission::Admitted(mut admitted)) => {
                admitted.fingerprint =
                    bound_to_conversation(conversation_id, &admitted.fingerprint);
                Ok(admitted)
            }
            Err(refused) => {
                let answer = refused_answer(&refused);
                RequestOutcome::refused(&policy.name, refused_outcome(&refused), answer.status)
                    .record(&self.metrics);
                Err(answer)
            }
        }
    }

    /// Decide `admitted`: the executor's, rendered as the service's answer.
    pub(crate) async fn decide(&self, admitted: Admitted, call: Call) -> Answer {
        let policy = Arc::clone(&admitted.policy);
        let named = admitted
            .approval
            .as_ref()
            .map(|a| a.operation_id.clone())
            .unwrap_or_default();
        // Held until the answer is decided: the lookups and the forward are under the cap.
        let _slot = match self.upstream_slots.take(self.slot_wait).await {
            Ok(slot) => slot,
            Err(busy) => return refused_answer(&Refused::Request(busy)),
        };
        let via = admitted.via;
        let account = admitted.approver.who.account.clone();
        let operated = self.executor.operate(admitted).await;
        match offer_page(&self.executor, via, &policy, account.as_deref(), operated) {
            Ran::Operated(Operated::Decided(executed)) => {
                executed.outcome.record(&self.metrics);
                render(executed.decision, &named, call)
            }
            // The same link the proxy gives the Personal Agent's own request.
            Ran::Page(link, outcome) => {
                outcome.record(&self.metrics);
                Answer::error(403, &link.error_body())
            }
            Ran::Operated(Operated::Refused(refusal, outcome)) => {
                // A lookup that failed, or a term it can't be filled from: nothing forwarded.
                let answer = refused_answer(&Refused::Request(refusal));
                RequestOutcome::refused(&policy.name, outcome, answer.status).record(&self.metrics);
                answer
            }
            Ran::Refused(refused, outcome) => {
                let answer = refused_answer(&refused);
                RequestOutcome::refused(&policy.name, outcome, answer.status).record(&self.metrics);
                answer
            }
            // `needs_approval_when` is false: no operation. A message performs it as a
            // request no policy names (once: its answer is kept for the message's retry);
            // a proposal performs nothing.
            Ran::Operated(Operated::NotHeld(forward)) => match call {
                Call::Propose => Answer::not_held(None),
                Call::Perform => {
                    self.metrics.unheld(&policy.name, Unheld::ConditionFalse);
                    match self
                        .executor
                        .send_unheld(forward, &ProxyContext::default())
                        .await
                    {
                        Ok(response) => Answer::not_held(Some(&response)),
                        Err(e) => {
                            tracing::warn!(policy = policy.name.as_str(), error = %e, "a request not held (needs_approval_when is false) got no answer from the upstream");
                            Answer::error(
                                502,
                                &ErrorBody::new(
                                    "upstream_unavailable",
                                    "this request needs no approval (the policy's needs_approval_when is false for its terms), and the API did not answer it",
                                ),
                            )
                        }
                    }
                }
            },
            // Only the front door says so, and `admit` answered it.
            Ran::NotAnAgent => not_an_agent(),
        }
    }
}

/// A description without a Poppy-Session whose token is a client's that
/// `[approval_page.agents]` does not list: not an agent's, so not the service's to hold.
fn not_an_agent() -> Answer {
    Answer::error(
        403,
        &ErrorBody::new(
            "not_an_agent",
            "the authorization is a client's that this gateway does not take for an agent ([approval_page.agents] clients): the service holds nothing for it; nothing was performed",
        ),
    )
}

/// A front door refusal as the service's answer: the proxy's JSON error, status and
/// `Retry-After`.
pub(crate) fn refused_answer(refused: &Refused) -> Answer {
    let body = refused.error_body();
    match refused.retry_after() {
        Some(seconds) => Answer::retry_later(seconds, &body),
        None => Answer::error(refused.status(), &body),
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
        // Only an MCP call has follow-ups.
        Decision::NotTheApprover(id) => Answer::error(
            403,
            &ErrorBody::new("not_the_approver", Decision::NOT_THE_APPROVER)
                .with("operation_id", id.as_str()),
        ),
        Decision::InProgress(id) => Answer::retry_later(
            1,
            &ErrorBody::new(
                "operation_in_progress",
                "this operation is being performed now; it has not failed: send the same message again to get its answer, and tell the user it is under way",
            )
            .with("operation_id", id.as_str()),
        ),
        // Only an MCP call's answer is ever interim; were one, it is not an outcome yet.
        Decision::Interim(_) => Answer::retry_later(
            1,
            &ErrorBody::new(
                "operation_in_progress",
                "this operation is being performed now; it has not failed: send the same message again to get its answer",
            )
            .with("operation_id", named),
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
