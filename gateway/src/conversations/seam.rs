//! The one place the conversations service meets the operation core: a described request
//! goes through the one entry the proxy's requests take (`run::Runner::run`: the front door's
//! extension, Session, body size, approval and terms, then the executor: check 2 before a
//! policy's lookup, the lookup, checks 1-3 in the spec's order, the claim, one forward, the
//! recorded answer), with the conversation's own step between the two ([`InConversation`]).
//! Its outcome is counted and logged as the proxy's are (`RequestOutcome::record`), and the
//! decision is rendered as the service's answers, with the status, code and retry time of the
//! wire table (`operation::Decision::wire`). Nothing here decides anything the core decides,
//! and nothing here checks anything the front door checks.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::describe::{Described, bound_to_conversation};
use super::messages::{Delivery, Handling, Messages};
use super::wire::Answer;
use crate::identity::RequestTarget;
use crate::ingress::admit::{Admitted, ApprovalSource, Refused, body_size};
use crate::listener::{UpstreamSlot, UpstreamSlots};
use crate::operation::{Decision, IN_PROGRESS, WireError};
use crate::protocol::{ALREADY_PERFORMED, ErrorBody, OperationId, SigningKey};
use crate::run::{Arrival, Between, Operated, Ran, Reading, RequestOutcome, Runner};
use crate::store::OperationStore;
use crate::upstream::forwarded::ProxyContext;

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
    /// The default route's, as the proxy's requests to it are run.
    pub(super) runner: Runner,
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
        self.runner.executor.store()
    }

    /// The key that signs now, for keying who sent a message.
    pub(crate) fn signing_key(&self) -> &SigningKey {
        self.runner.executor.signing_key()
    }

    /// This process, as the executor names it in claims.
    pub(crate) fn instance(&self) -> &str {
        self.runner.executor.instance()
    }

    /// `described` through the one entry the proxy's requests take (`run::Runner::run`: the
    /// front door, then the executor), as the service's answer. `Err`: refused by the front
    /// door, before anything was decided. `signed_for`: the Personal Agent's request a
    /// verified Session is signed for; `approval`: the message's, as sent; `message`: a
    /// message's delivery (`perform`), decided once its sender is known.
    pub(crate) async fn run(
        &self,
        described: Described,
        to: To<'_>,
        message: Option<&mut Delivering<'_>>,
    ) -> Result<Answer, Answer> {
        let policy = Arc::clone(described.action.policy());
        let max_body_bytes = self.max_body_bytes;
        let body = described.body;
        let arrival = Arrival {
            headers: described.headers,
            signed_for: to.signed_for,
            action: described.action,
            approval: ApprovalSource::Json {
                value: to.approval,
                place: APPROVAL_PLACE,
            },
        };
        let body = async move { body_size(body.len(), max_body_bytes).map(|()| body) };
        let mut between = InConversation {
            seam: self,
            conversation_id: to.conversation_id,
            message,
            slot: None,
            admitted: false,
            named: String::new(),
        };
        // Plain answers; its forwards carry no proxy headers (its client is a Company Agent,
        // not the Personal Agent the upstream serves).
        let reading = Reading::plain(ProxyContext::default());
        let ran = self.runner.run(arrival, body, &reading, &mut between).await;
        let (admitted, named) = (between.admitted, between.named);
        let record = |outcome, answer: &Answer| {
            RequestOutcome::refused(&policy.name, outcome, answer.status)
                .record(&self.runner.metrics);
        };
        match ran {
            Ran::Operated(Operated::Decided(executed)) => {
                executed.outcome.record(&self.runner.metrics);
                Ok(render(executed.decision, &named, to.call))
            }
            // The same link the proxy gives the Personal Agent's own request.
            Ran::Page(link, outcome) => {
                outcome.record(&self.runner.metrics);
                Ok(Answer::error(403, &link.error_body()))
            }
            Ran::Operated(Operated::Refused(refusal, outcome)) => {
                // A lookup that failed, or a term it can't be filled from: nothing forwarded.
                let answer = refused_answer(&Refused::Request(refusal));
                record(outcome, &answer);
                Ok(answer)
            }
            Ran::Refused(refused, outcome) => {
                let answer = refused_answer(&refused);
                record(outcome, &answer);
                if admitted { Ok(answer) } else { Err(answer) }
            }
            // `needs_approval_when` is false: no operation. A message performs it as a
            // request no policy names (once: its answer is kept for the message's retry);
            // a proposal performs nothing.
            Ran::Operated(Operated::NotHeld(forward)) => match to.call {
                Call::Propose => Ok(Answer::not_held(None)),
                Call::Perform => {
                    let plain = ProxyContext::default();
                    match self.runner.send_unheld(&policy.name, forward, &plain).await {
                        Ok(response) => Ok(Answer::not_held(Some(&response))),
                        Err(unanswered) => Ok(Answer::error(502, &unanswered)),
                    }
                }
            },
            // `[approval_page.agents]` says these credentials are not an agent's: the
            // service holds nothing for them.
            Ran::NotAnAgent => Err(not_an_agent()),
            // A retried message's answer, or no upstream slot.
            Ran::Answered(answer) => Ok(answer),
        }
    }
}

/// Where a described request goes, and what it is for.
pub(crate) struct To<'a> {
    pub(crate) conversation_id: &'a str,
    pub(crate) signed_for: RequestTarget<'a>,
    pub(crate) approval: Option<&'a Value>,
    pub(crate) call: Call,
}

/// A message's delivery (`perform`): whether this delivery handles it, once its sender is
/// known (`messages.rs`).
pub(crate) struct Delivering<'a> {
    pub(crate) messages: &'a Messages,
    pub(crate) message_id: &'a str,
    /// What became of the delivery once admitted (`None`: refused before).
    pub(crate) delivered: Option<Delivered>,
    /// The policy's `expires_in`, once admitted: how long the answer is kept, with the grace.
    pub(crate) expires_in: Duration,
}

/// What became of a message's delivery.
pub(crate) enum Delivered {
    /// A retried message, answered from its record (the run's answer).
    Retried,
    /// This delivery handles the message: [`Messages::finish`] ends it.
    Handled(Handling),
    /// Answered before, to a sender whose credentials this delivery's do not prove to be:
    /// the flow answers it again (performing nothing twice), and nothing is kept.
    Unproven,
}

/// What a conversation does between the front door and the executor (`run::Between`).
struct InConversation<'s, 'm, 'd> {
    seam: &'s Seam,
    conversation_id: &'s str,
    message: Option<&'m mut Delivering<'d>>,
    /// Held until the answer is decided: the lookups and the forward are under the cap.
    slot: Option<UpstreamSlot>,
    /// The front door let the request in (its refusals after are not the front door's).
    admitted: bool,
    /// The operation the approval names (empty without one), as the answer names it.
    named: String,
}

impl Between for InConversation<'_, '_, '_> {
    type Answer = Answer;

    async fn admitted(&mut self, admitted: &mut Admitted) -> Result<(), Answer> {
        self.admitted = true;
        if let Some(approval) = &admitted.approval {
            self.named = approval.operation_id.clone();
        }
        // The conversation, bound into what the revision covers.
        admitted.fingerprint = bound_to_conversation(self.conversation_id, &admitted.fingerprint);
        if let Some(message) = self.message.as_deref_mut() {
            message.expires_in = admitted.policy.expires_in;
            let delivery = message
                .messages
                .deliver(
                    &admitted.approver,
                    self.seam.signing_key(),
                    self.conversation_id,
                    message.message_id,
                )
                .await;
            let (delivered, answered) = match delivery {
                Delivery::Answered(answer) => (Delivered::Retried, Some(answer)),
                Delivery::Handle(handling) => (Delivered::Handled(handling), None),
                Delivery::Unproven => (Delivered::Unproven, None),
            };
            message.delivered = Some(delivered);
            if let Some(answer) = answered {
                return Err(answer);
            }
        }
        let upstream = &self.seam.upstream_slots;
        match upstream.take(self.seam.slot_wait).await {
            Ok(slot) => {
                self.slot = Some(slot);
                Ok(())
            }
            Err(busy) => Err(refused_answer(&Refused::Request(busy))),
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

/// The service's answer to a decision. `named`: the operation the approval named. Its
/// status, error code and retry time are the wire table's (`operation::Decision::wire`).
pub(crate) fn render(decision: Decision, named: &str, call: Call) -> Answer {
    let wire = decision.wire_error();
    let (detail, id) = match decision {
        Decision::ApprovalRequired { operation, .. } if call == Call::Propose => {
            return Answer::proposed(&operation);
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
            let body = ErrorBody::approval_required(&operation, detail);
            return Answer::error(wire.map_or(500, |w| w.status), &body);
        }
        Decision::Performed(response) => {
            return Answer::outcome("performed", named, &response);
        }
        Decision::Replayed(response) => {
            return Answer::outcome("already_performed", named, &response);
        }
        Decision::Released(response) => {
            return Answer::outcome("not_performed", named, &response);
        }
        // Only an MCP call's answer is ever interim; were one, it is not an outcome yet.
        Decision::Interim(_) => {
            let detail = "this operation is being performed now; it has not failed: send the same message again to get its answer";
            return wire_answer(Some(IN_PROGRESS), detail, Some(named));
        }
        Decision::SignInRequired => (
            "this operation belongs to an account: the Personal Agent must sign in to that account to approve it; nothing was performed",
            None,
        ),
        Decision::AlreadyPerformed(id) => (ALREADY_PERFORMED, Some(id)),
        // Only an MCP call has follow-ups.
        Decision::NotTheApprover(id) => (Decision::NOT_THE_APPROVER, Some(id)),
        Decision::InProgress(id) => (
            "this operation is being performed now; it has not failed: send the same message again to get its answer, and tell the user it is under way",
            Some(id),
        ),
        Decision::Unknown(id) => (
            "whether this operation took effect is not known yet, and it will not be performed again; do not tell the user it failed: say it is being checked, and send the same message again later",
            Some(id),
        ),
        Decision::UpstreamUnavailable => (
            "the API could not be reached; nothing was performed: send the same message again",
            None,
        ),
        Decision::ShuttingDown => (
            "this gateway is shutting down and started nothing: send the same message again",
            None,
        ),
        Decision::StoreUnavailable => (
            "the gateway cannot reach its operation store; nothing was performed: try again",
            None,
        ),
    };
    wire_answer(wire, detail, id.as_ref().map(OperationId::as_str))
}

/// An error of the wire table as the service's answer: its status and code, `detail`, the
/// operation it is about, and `Retry-After` when it has one. (`None`: the table has no error
/// for the decision, which the renderer never asks of it.)
fn wire_answer(wire: Option<WireError>, detail: &str, id: Option<&str>) -> Answer {
    let Some(wire) = wire else {
        return Answer::error(500, &ErrorBody::new("internal_error", detail));
    };
    let mut body = ErrorBody::new(wire.error, detail);
    if let Some(id) = id {
        body = body.with("operation_id", id);
    }
    Answer {
        retry_after: wire.retry_after,
        ..Answer::error(wire.status, &body)
    }
}
