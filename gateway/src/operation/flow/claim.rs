//! The flow's steps around the claim: the forward, the round kept for a follow-up, and the
//! decisions its answers come to.

use super::steps::LEASE_RAN_OUT;
use super::{Decided, End, Flow, Forward, KeepRound, Kept, Need, State, Step, forward_lease};
use crate::operation::record::Claim;
use crate::operation::round::{ROUND_TTL, Round};
use crate::operation::{Answer, Approved, Decision, Prepared, Remember, draft_receipt};
use crate::protocol::OperationId;

impl Flow<'_> {
    /// The claim and one forward of an approved operation start here.
    pub(super) fn start_forward(&mut self, approved: Approved) -> Step {
        let need = Need::StartForward {
            id: approved.id.clone(),
            follow_up: false,
        };
        self.wait(State::Starting(approved), need)
    }

    /// Claimed: forward once, with what recording the answer needs kept as its round.
    pub(super) fn forward_claimed(&mut self, approved: Approved, claim: Claim) -> Step {
        let Some(prepared) = self.prepared.as_deref() else {
            return self.stray();
        };
        let receipt = self
            .setup
            .receipts
            .then(|| draft_receipt(prepared, &approved, claim.now_ms, self.page.as_ref()));
        let round = Round {
            claim,
            remember: Remember {
                expires_at: approved.expires_at,
                expires_in: self.policy.expires_in,
                grace: self.setup.remember_grace,
            },
            receipt,
            revision: approved.revision.clone(),
            fingerprint: prepared.request.fingerprint.clone(),
            token: None,
        };
        let forward = Forward {
            id: approved.id.clone(),
            revision: approved.revision,
            terms: approved_terms(prepared),
            first: Some(approved.expires_at),
            via_page: self.page.is_some(),
        };
        self.wait(
            State::Forwarding(approved.id, Box::new(round)),
            Need::Forward(forward),
        )
    }

    /// A follow-up forwarded under its round's claim. If its outcome is unknown, the claim's
    /// lease ends as a first forward's would have, not with the round (retries then read
    /// unknown, not in progress).
    pub(super) fn follow_up_forward(
        &mut self,
        id: OperationId,
        round: Box<Round>,
        now: i64,
    ) -> Step {
        let Some(prepared) = self.prepared.as_deref() else {
            return self.stray();
        };
        let revision = prepared
            .request
            .approval
            .as_ref()
            .map_or_else(String::new, |a| a.revision.clone());
        let forward = Forward {
            id: id.clone(),
            revision,
            terms: approved_terms(prepared),
            first: None,
            via_page: false,
        };
        let until = now.saturating_add(forward_lease(&round));
        self.lapse = Some((round.claim.owner.clone(), until));
        self.wait(State::Forwarding(id, round), Need::Forward(forward))
    }

    /// Keep `round` for its follow-up, for [`ROUND_TTL`], with the claim leased until then
    /// and its follow-up's forward (as long as the first forward's lease): a retry meanwhile
    /// is "in progress", and "unknown" only once the round could not go on.
    pub(super) fn keep_round(
        &mut self,
        id: OperationId,
        round: Round,
        then: Kept,
        now: i64,
    ) -> Step {
        let ttl = i64::try_from(ROUND_TTL.as_millis()).unwrap_or(i64::MAX);
        let until_ms = now.saturating_add(ttl);
        let need = Need::KeepRound(KeepRound {
            id,
            key: round.key(),
            round: round.encode(),
            owner: round.claim.owner.clone(),
            until_ms,
            lease_until_ms: until_ms.saturating_add(forward_lease(&round)),
            now_ms: now,
        });
        self.wait(State::KeepingRound(then), need)
    }

    pub(super) fn answered(&mut self, answer: Answer) -> Step {
        let decided = self.decided_answer(answer);
        self.decided(decided)
    }

    /// An answer from the record, as decided now.
    pub(super) fn decided_answer(&self, answer: Answer) -> Decided {
        let (decision, why) = match answer {
            Answer::SignInRequired => (Decision::SignInRequired, None),
            Answer::Replay(response) => (Decision::Replayed(response), None),
            Answer::InProgress(id) => (Decision::InProgress(id), None),
            Answer::AlreadyPerformed(id) => (Decision::AlreadyPerformed(id), None),
            Answer::Unknown(id) => (Decision::Unknown(id), Some(LEASE_RAN_OUT.to_owned())),
        };
        Decided {
            decision,
            rejection: self.rejection,
            approval: self.approval.clone(),
            linked: self.linked.clone(),
            why,
        }
    }

    pub(super) fn decided(&mut self, decided: Decided) -> Step {
        self.over(End::Decided(decided))
    }

    /// An event the state did not ask for: fail closed (nothing forwarded).
    pub(super) fn stray(&mut self) -> Step {
        self.end(Decision::StoreUnavailable)
    }

    /// The operation the request's approval names, when it is of this gateway's shape.
    pub(super) fn named_operation(&self) -> Option<OperationId> {
        OperationId::parse(&self.approval.as_ref()?.operation_id)
    }

    /// A request's fingerprint as its revisions cover it: bound to the route.
    pub(super) fn route_bound(&self, fingerprint: &[u8]) -> Vec<u8> {
        match self.setup.route {
            Some(route) => crate::policy::request_fingerprint("route", route, &[], fingerprint),
            None => fingerprint.to_vec(),
        }
    }
}

/// The approved terms as the operation shows them, for the approval header (its canonical
/// JSON always parses back).
fn approved_terms(prepared: &Prepared) -> serde_json::Value {
    serde_json::from_str(&prepared.terms_json).unwrap_or_default()
}
