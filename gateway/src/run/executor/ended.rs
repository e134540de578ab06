//! What the flow's end comes to for the interface: the decision with what to count and log
//! of it, or a refusal (a lookup's, the approval page's).

use super::{Executed, Executor, Operated, Run};
use crate::metrics::Outcome;
use crate::operation::Decision;
use crate::operation::flow::{Decided, End, Flow};
use crate::run::outcome::RequestOutcome;
use crate::run::page_offer::{self, PageLink};

impl Executor {
    /// What the flow's end comes to for the interface, logged (`run::end_log`).
    pub(super) fn ended(&self, flow: &Flow<'_>, end: End, mut run: Run<'_>) -> Operated {
        let policy = flow.policy();
        let name = policy.name.as_str();
        let decided = match end {
            End::PageSignInRequired => {
                return Operated::Refused(page_offer::sign_in_required(), Outcome::Challenged);
            }
            End::Declined(id) => {
                self.ends.declined(name, &id);
                return Operated::Refused(page_offer::declined(), Outcome::Rejected);
            }
            End::NotHeld => {
                self.ends.not_held(name);
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
        self.ends.decided(name, &decided, run.store_error.as_ref());
        let Decided {
            decision,
            rejection,
            approval,
            ..
        } = decided;
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
}
