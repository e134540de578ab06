//! The flow's transitions: from each state, given what the driver found, the next need.

use super::{Approves, End, Event, Flow, Kept, Need, NotForwarded, Read, Released, State, Step};
use crate::operation::outcome::Rejection;
use crate::operation::page::PageRead;
use crate::operation::record::{ActionState, ClaimOutcome};
use crate::operation::round::{self, Round};
use crate::operation::{
    Answer, Decision, Minted, OperationRequest, Prepared, Start, Verdict, action_before_lookup,
    action_tag, approved_operations, check, claim, existing, from_record, held_again,
    lease_until_ms, may_follow_up, mint_for, proven_on_page, read_decisions, record_before_lookup,
    releases, replay_before_lookup, request_digest, start,
};
use crate::protocol::{ActionTag, ApprovalHeader, OperationId};

/// Why a record found in flight is unknown.
pub(crate) const LEASE_RAN_OUT: &str = "its lease ran out with no answer recorded";

impl Flow<'_> {
    /// The first step: a page request nobody can approve is refused; a policy with lookups
    /// reads the named operation's record before its lookup.
    pub(super) fn begin(&mut self) -> Step {
        if self.approves == Approves::Page && self.asked.approver.who.account.is_none() {
            return self.over(End::PageSignInRequired);
        }
        match record_before_lookup(&self.policy, self.asked.approval.as_ref()) {
            Some(id) => self.wait(State::RecordFirst(id.clone()), Need::Record(id)),
            None => self.page_approvals(),
        }
    }

    pub(super) fn transition(&mut self, state: State, event: Event, now: i64) -> Step {
        let keys = self.setup.keys;
        match (state, event) {
            (State::RecordFirst(id), Event::Record(Some(record))) => {
                let linked = record.trace.clone();
                let request = &self.asked;
                match from_record(keys, &self.policy, &request.approver, &id, record, now) {
                    Some(answer) => {
                        self.linked = linked;
                        self.answered(answer)
                    }
                    None => self.page_approvals(),
                }
            }
            // No record, or the store can't say: the normal way (which then fails closed).
            (State::RecordFirst(_), _) => self.page_approvals(),
            (State::PageApprovals, Event::PageState(_, decisions)) => {
                let account = self.asked.approver.who.account.as_deref();
                let candidates = approved_operations(&decisions, account);
                self.candidates(candidates)
            }
            (State::PageApprovals, _) => self.terms(),
            (State::PageCandidate(id, rest), Event::Record(Some(record))) => {
                let (linked, revision) = (record.trace.clone(), record.revision.clone());
                let fingerprint = self.route_bound(&self.asked.fingerprint);
                let request = &self.asked;
                let answer = replay_before_lookup(
                    keys,
                    &self.policy,
                    &request.approver,
                    &fingerprint,
                    &id,
                    record,
                    now,
                );
                match answer {
                    None => self.candidates(rest),
                    // A follow-up of an interim answer goes on under its claim: the normal way.
                    Some(Answer::InProgress(_) | Answer::Unknown(_))
                        if self.follow_up.is_some() =>
                    {
                        self.terms()
                    }
                    Some(answer) => {
                        self.approval = Some(ApprovalHeader {
                            operation_id: id.to_string(),
                            revision,
                        });
                        self.linked = linked;
                        self.answered(answer)
                    }
                }
            }
            (State::PageCandidate(_, rest), Event::Record(None)) => self.candidates(rest),
            (State::PageCandidate(..), _) => self.terms(),
            (State::Terms, Event::Terms(Some(terms))) => self.prepare(terms),
            (State::Terms, _) => self.over(End::LookupRefused),
            (State::PageDecisions(action), Event::PageState(state, decisions)) => {
                let Some(prepared) = self.prepared.as_deref() else {
                    return self.stray();
                };
                match read_decisions(keys, prepared, &decisions, now) {
                    PageRead::Hold => self.minted(&action, &state, now),
                    PageRead::Declined(id) => self.over(End::Declined(id)),
                    PageRead::Approved(decision) => {
                        // Checked exactly as a `Poppy-Approval` of that operation and revision.
                        let approval = decision.as_approval();
                        self.prepared = Some(Box::new(prepared.with_approval(approval.clone())));
                        self.approval = Some(approval);
                        let id = decision.operation_id.clone();
                        self.page = Some(decision);
                        self.wait(State::Checking(id.clone()), Need::RecordAndGeneration(id))
                    }
                }
            }
            (State::Checking(id), Event::RecordAndGeneration(record, generation)) => {
                self.linked = record.as_ref().and_then(|r| r.trace.clone());
                let Some(prepared) = self.prepared.as_deref() else {
                    return self.stray();
                };
                let verdict = check(keys, prepared, &id, record, generation, now);
                self.verdict(verdict)
            }
            (State::Minting(action), Event::ActionState(state)) => {
                self.minted(&action, &state, now)
            }
            (State::Proving(approved), Event::PageState(_, decisions)) => {
                let Some(prepared) = self.prepared.as_deref() else {
                    return self.stray();
                };
                match proven_on_page(prepared, &approved.id, &approved.revision, &decisions) {
                    None => {
                        let operation = held_again(prepared, &approved);
                        self.end(Decision::ApprovalRequired {
                            operation,
                            rejected: false,
                        })
                    }
                    Some(page) => {
                        self.page = Some(page);
                        self.start_forward(approved)
                    }
                }
            }
            (State::Starting(_), Event::ShuttingDown) => self.end(Decision::ShuttingDown),
            (State::Starting(approved), Event::Started { owner, trace }) => {
                let Some(prepared) = self.prepared.as_deref() else {
                    return self.stray();
                };
                let lease = lease_until_ms(self.setup.rules, now);
                let mut claim = claim(keys, prepared, &approved, owner, now, lease);
                claim.trace = trace;
                if self.page.is_some() {
                    // Its retry names no operation: the record keeps which request it approved.
                    let fingerprint = &prepared.request.fingerprint;
                    claim.request = Some(request_digest(keys.current(), fingerprint));
                }
                let need = Need::Claim(approved.id.clone(), Box::new(claim.clone()));
                self.wait(State::Claiming(approved, Box::new(claim)), need)
            }
            (State::Claiming(approved, _), Event::Claimed(ClaimOutcome::Exists(record))) => {
                // Claimed by somebody else meanwhile: checks 1 and 2 against their record.
                self.linked = record.trace.clone();
                let Some(prepared) = self.prepared.as_deref() else {
                    return self.stray();
                };
                let verdict = existing(keys, prepared, &approved.id, record, now);
                self.verdict(verdict)
            }
            (State::Claiming(approved, claim), Event::Claimed(ClaimOutcome::Claimed)) => {
                self.forward_claimed(approved, *claim)
            }
            (State::Forwarding(id, round), Event::Forwarded(Ok(response))) => {
                let first = self.lapse.is_none();
                if first && releases(self.setup.rules, response.status, &response.headers) {
                    let need = Need::Release {
                        id,
                        owner: round.claim.owner.clone(),
                        why: Released::Status(response.status),
                    };
                    return self.wait(State::Releasing(Decision::Released(response)), need);
                }
                self.wait(State::Reading(id, round), Need::ReadAnswer(response))
            }
            (State::Forwarding(id, round), Event::Forwarded(Err(NotForwarded::NotSent(e)))) => {
                if self.lapse.is_some() {
                    // Nothing of this round was sent: the same follow-up may come again. The
                    // claim stays (earlier rounds reached the server).
                    self.lapse = None;
                    return self.keep_round(id, *round, Kept::NotSent, now);
                }
                let need = Need::Release {
                    id,
                    owner: round.claim.owner.clone(),
                    why: Released::NotSent(e),
                };
                self.wait(State::Releasing(Decision::UpstreamUnavailable), need)
            }
            (State::Forwarding(id, _), Event::Forwarded(Err(NotForwarded::Unknown(why)))) => {
                self.end_why(Decision::Unknown(id), Some(why))
            }
            (State::Reading(id, round), Event::Read(read)) => match read {
                Read::Final(response) => {
                    let need = Need::Complete {
                        id,
                        response: response.clone(),
                        round,
                    };
                    self.wait(State::Recording(response), need)
                }
                Read::Unknown(why) => self.end_why(Decision::Unknown(id), Some(why)),
                Read::Interim { response, token } => {
                    let mut round = *round;
                    round.token = token;
                    let kept = Kept::Interim(id.clone(), response);
                    self.keep_round(id, round, kept, now)
                }
            },
            (State::Releasing(decision), _) => self.end(decision),
            (State::Recording(response), _) => self.end(Decision::Performed(response)),
            (State::KeepingRound(kept), event) => {
                let stored = matches!(event, Event::RoundKept(true));
                match kept {
                    Kept::Interim(_, response) if stored => self.end(Decision::Interim(response)),
                    Kept::Interim(id, _) => self.end_why(
                        Decision::Unknown(id),
                        Some("the store could not keep the round for its follow-up; this interim answer ends it".into()),
                    ),
                    Kept::ShuttingDown => self.end(Decision::ShuttingDown),
                    Kept::NotSent => self.end(Decision::UpstreamUnavailable),
                }
            }
            (State::FollowUpRecord(id, fallback), Event::Record(Some(record))) => {
                let Some(prepared) = self.prepared.as_deref() else {
                    return self.stray();
                };
                // The round's claim is the approver's: checked before the round is taken, so
                // that a refused follow-up leaves it for its own.
                if !may_follow_up(keys, prepared, &record) {
                    return self.end(Decision::NotTheApprover(id));
                }
                let request = &prepared.request;
                let revision = request
                    .approval
                    .as_ref()
                    .map_or("", |a| a.revision.as_str());
                let token = self.follow_up.as_ref().and_then(Option::as_deref);
                let key = round::key(revision, &request.fingerprint, token);
                let need = Need::TakeRound {
                    id: id.clone(),
                    key,
                    now_ms: now,
                };
                self.wait(State::TakingRound(id, fallback), need)
            }
            (State::FollowUpRecord(_, fallback), Event::Record(None)) => self.decided(fallback),
            (State::TakingRound(id, fallback), Event::RoundTaken(Some(kept))) => {
                match Round::decode(&kept) {
                    Some(round) => {
                        let need = Need::StartForward {
                            id: id.clone(),
                            follow_up: true,
                        };
                        self.wait(State::FollowUpStarting(id, Box::new(round)), need)
                    }
                    // An unreadable round: the follow-up is not forwarded.
                    None => self.decided(fallback),
                }
            }
            (State::TakingRound(_, fallback), Event::RoundTaken(None)) => self.decided(fallback),
            (State::FollowUpStarting(id, round), Event::ShuttingDown) => {
                self.keep_round(id, *round, Kept::ShuttingDown, now)
            }
            (State::FollowUpStarting(id, round), Event::Started { .. }) => {
                self.follow_up_forward(id, round, now)
            }
            (State::Lapsing(decided), _) => self.over(End::Decided(decided)),
            // The store failed, or an event the state did not ask for: fail closed.
            _ => self.end(Decision::StoreUnavailable),
        }
    }

    /// A page request's retry, answered before its lookup from the record of an operation its
    /// account approved on the page (when its action is known from the request's terms).
    fn page_approvals(&mut self) -> Step {
        if self.approves == Approves::Page {
            let request = &self.asked;
            let action = action_before_lookup(
                self.setup.keys,
                &self.policy,
                &request.approver,
                &request.terms,
            );
            if let Some(action) = action {
                let need = Need::PageState(action.as_str().to_owned());
                return self.wait(State::PageApprovals, need);
            }
        }
        self.terms()
    }

    /// The next candidate's record, newest first; none left: the normal way.
    fn candidates(&mut self, mut ids: Vec<OperationId>) -> Step {
        if ids.is_empty() {
            return self.terms();
        }
        let id = ids.remove(0);
        self.wait(State::PageCandidate(id.clone(), ids), Need::Record(id))
    }

    fn terms(&mut self) -> Step {
        let terms = std::mem::take(&mut self.asked.terms);
        self.wait(State::Terms, Need::Terms(terms))
    }

    /// The request as the core reads it, bound to the route; then its first step.
    fn prepare(&mut self, terms: crate::policy::Terms) -> Step {
        let request = OperationRequest {
            terms,
            fingerprint: self.route_bound(&self.asked.fingerprint),
            ..self.asked.clone()
        };
        let prepared = Prepared::new(request);
        let keys = self.setup.keys;
        let step = match self.approves {
            Approves::Page => {
                let action = action_tag(keys, &prepared);
                let need = Need::PageState(action.as_str().to_owned());
                Err((need, State::PageDecisions(action)))
            }
            Approves::Agent => Ok(start(&prepared)),
        };
        self.prepared = Some(Box::new(prepared));
        match step {
            Err((need, state)) => self.wait(state, need),
            Ok(Start::Decided(verdict)) => self.verdict(verdict),
            Ok(Start::Lookup(id)) => {
                self.wait(State::Checking(id.clone()), Need::RecordAndGeneration(id))
            }
        }
    }

    /// A verdict carried out: mint, claim (after the page proof), answer, or a follow-up.
    fn verdict(&mut self, verdict: Verdict) -> Step {
        match verdict {
            // A follow-up carries answers into a call under way: one from a Session that may
            // not approve the operation is refused, not answered with an operation.
            Verdict::Mint(Some(Rejection::NotThisApprover)) if self.follow_up.is_some() => {
                self.rejection = Some(Rejection::NotThisApprover);
                match self.named_operation() {
                    Some(id) => self.end(Decision::NotTheApprover(id)),
                    None => self.mint(),
                }
            }
            Verdict::Mint(refused) => {
                self.rejection = refused;
                self.mint()
            }
            Verdict::Claim(approved) => {
                if self.page.is_none() && self.policy.approval.page_proof {
                    // `proof = "company_page"`: a Poppy approval counts only once the account
                    // approved this very revision on the page.
                    let need = Need::PageState(approved.id.action_tag().to_owned());
                    return self.wait(State::Proving(approved), need);
                }
                self.start_forward(approved)
            }
            Verdict::Answer(answer @ (Answer::InProgress(_) | Answer::Unknown(_)))
                if self.follow_up.is_some() =>
            {
                // Forwarded under the same claim if it is its round's own (`operation::round`);
                // otherwise answered as any retry (`fallback`).
                let (Answer::InProgress(id) | Answer::Unknown(id)) = &answer else {
                    return self.answered(answer);
                };
                let id = id.clone();
                let fallback = self.decided_answer(answer);
                self.wait(
                    State::FollowUpRecord(id.clone(), fallback),
                    Need::Record(id),
                )
            }
            Verdict::Answer(answer) => self.answered(answer),
        }
    }

    fn mint(&mut self) -> Step {
        let Some(prepared) = self.prepared.as_deref() else {
            return self.stray();
        };
        let action = action_tag(self.setup.keys, prepared);
        self.wait(State::Minting(action.clone()), Need::ActionState(action))
    }

    /// A new operation for what the request asks, unless its action's outcome is unknown,
    /// or the policy's condition is false for its terms. Decided here, where the request
    /// would be held for a new operation: a replay, an operation in progress or unknown, and
    /// an approval that checks out are answered as without a condition (a condition that
    /// turned false after a reload or a lookup's change never forwards an approved operation
    /// a second time).
    fn minted(&mut self, action: &ActionTag, state: &ActionState, now: i64) -> Step {
        let Some(prepared) = self.prepared.as_deref() else {
            return self.stray();
        };
        match mint_for(self.setup.keys, prepared, action, state, now) {
            Minted::Hold(_) if self.policy.needs_approval(&prepared.request.terms) == Ok(false) => {
                self.over(End::NotHeld)
            }
            Minted::Hold(operation) => {
                let rejected = self.rejection.is_some();
                self.end(Decision::ApprovalRequired {
                    operation,
                    rejected,
                })
            }
            Minted::Unknown(id) => self.end_why(Decision::Unknown(id), Some(LEASE_RAN_OUT.into())),
        }
    }
}
