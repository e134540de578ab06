//! What the flow's end comes to for the interface: the decision with what to count and log
//! of it, or a refusal (a lookup's, the approval page's), with its log lines and spans.

use super::{Executed, Executor, Operated, Run};
use crate::ingress::Refusal;
use crate::metrics::Outcome;
use crate::operation::Decision;
use crate::operation::flow::{Decided, End, Flow};
use crate::protocol::OperationId;
use crate::run::outcome::RequestOutcome;
use crate::run::page_offer::PageLink;
use crate::telemetry::Span;

impl Executor {
    /// What the flow's end comes to for the interface, with its log lines and spans.
    pub(super) fn ended(&self, flow: &Flow<'_>, end: End, mut run: Run<'_>) -> Operated {
        let policy = flow.policy();
        let name = policy.name.as_str();
        let decided = match end {
            End::PageSignInRequired => {
                return Operated::Refused(page_sign_in_required(), Outcome::Challenged);
            }
            End::Declined(id) => {
                tracing::info!(policy = name, operation_id = %id, outcome = "declined", "declined on the approval page; nothing performed");
                return Operated::Refused(declined(), Outcome::Rejected);
            }
            End::NotHeld => {
                tracing::info!(
                    policy = name,
                    outcome = "not_held",
                    "needs_approval_when is false for these terms; passed through unheld"
                );
                return Operated::NotHeld(run.forward);
            }
            End::LookupRefused => match run.refused.take() {
                Some((refusal, outcome)) => return Operated::Refused(refusal, outcome),
                None => Decided {
                    decision: Decision::StoreUnavailable,
                    rejection: None,
                    approval: None,
                    linked: None,
                    why: None,
                },
            },
            End::Decided(decided) => decided,
        };
        let Decided {
            decision,
            rejection,
            approval,
            linked,
            why,
        } = decided;
        let operation_id = approval.as_ref().map_or("", |a| a.operation_id.as_str());
        match &decision {
            Decision::StoreUnavailable => match &run.store_error {
                Some(e) => {
                    tracing::warn!(policy = name, error = %e, "store unavailable; nothing forwarded")
                }
                None => tracing::warn!(policy = name, "store unavailable; nothing forwarded"),
            },
            Decision::Unknown(id) => self.log_unknown(id, name, why.as_deref().unwrap_or_default()),
            Decision::NotTheApprover(id) => {
                tracing::warn!(policy = name, operation_id = %id, outcome = "rejected", "a follow-up of an interim answer from a Session that may not approve the operation; not forwarded")
            }
            Decision::Interim(_) => {
                tracing::info!(
                    policy = name,
                    operation_id = operation_id,
                    outcome = "interim",
                    "an interim answer; the operation stays claimed for its follow-up"
                )
            }
            Decision::Replayed(_) => {
                // Linked to the span that executed the operation, when its record kept one.
                let span = Span::linked("poppy.replay", linked.as_deref());
                span.set_with("poppy.policy", || name.to_owned());
                span.set_with("poppy.operation_id", || operation_id.to_owned());
                span.set("poppy.outcome", Outcome::Replayed.as_str());
            }
            _ => {}
        }
        if let Some(span) = &run.phase {
            span.set("poppy.outcome", decision.outcome().as_str());
        }
        let page_url = match &decision {
            Decision::ApprovalRequired { operation, .. } if policy.approval.page_proof => {
                PageLink::for_operation(
                    self.parts.page_url.as_deref(),
                    self.parts.keys.current(),
                    policy,
                    operation,
                    flow.account(),
                    self.parts.route.as_deref(),
                )
                .map(|link| link.url)
            }
            _ => None,
        };
        let outcome = RequestOutcome::decided(
            name,
            &decision,
            approval.as_ref(),
            rejection,
            policy.expires_in,
        )
        .on_route(self.parts.route.as_deref());
        Operated::Decided(Executed {
            decision,
            outcome,
            page_url,
        })
    }

    /// An unknown outcome, logged once per operation in this process (every retry would
    /// repeat it).
    fn log_unknown(&self, id: &OperationId, policy: &str, why: &str) {
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

/// A request without the extension whose account declined it on the approval page.
/// (The operation is not named: a request without the extension gets no operations.)
fn declined() -> Refusal {
    Refusal::new(
        403,
        "approval_declined",
        "the user declined this action on the company's approval page; nothing was performed. The same request gets this answer until the declined approval expires; a request with other terms gets a new approval link",
    )
}

/// A request without the extension and without a bearer token: nobody can approve it on
/// the page, which asks the account the request acts for to sign in.
fn page_sign_in_required() -> Refusal {
    Refusal::new(
        401,
        "sign_in_required",
        "this action is approved on the company's approval page by the account it acts for: send the request with the user's token (Authorization: Bearer …) to get the approval link; nothing was performed",
    )
}
