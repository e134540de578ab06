//! The life of one operation, in the spec's order, as a state machine with no I/O.
//!
//! A [`Flow`] is made from the admitted request and how the User approves it. [`Flow::next`]
//! says what it needs ([`Need`]: a record, the page state, the lookup terms, a claim, a
//! forward, a round, a lease, a record write) or that it is over ([`End`]); the driver
//! (`run::executor`) carries the need out and feeds the answer back with [`Flow::on`],
//! with the time it read. Every ordering rule lives here; the driver only does I/O, spans,
//! logs and metrics. The states, in order (`State`):
//!
//! - `RecordFirst`: a policy with lookups reads the named operation's record before its
//!   lookup (check 2 first: a performed operation is replayed while a lookup can't be read);
//! - `PageApprovals`, `PageCandidate`: a page request's retry, answered from the record of an
//!   operation its account approved on the page for this very request;
//! - `Terms`: the policy's lookups and computed terms;
//! - `PageDecisions` (a page request) or `Checking` (an approval's record and generation):
//!   checks 1 to 3 give a [`Verdict`];
//! - `Minting`: the action's state, then the operation to hold; or, where the policy's
//!   condition is false for the terms, none: the request is not held (`End::NotHeld`);
//! - `Proving`: `proof = "company_page"` holds a Poppy approval until the page approved it;
//! - `Starting`, `Claiming`, `Forwarding`, `Reading`: the claim, the one forward and its
//!   answer (a claim found taken goes back to checks 1 and 2);
//! - `Releasing`, `Recording`, `KeepingRound`: the release rule, the record written before
//!   the answer is delivered, or the claim kept for a follow-up;
//! - `FollowUpRecord`, `TakingRound`: a follow-up of an interim answer, under its claim;
//! - `Lapsing`: a follow-up whose outcome is unknown ends its round's lease.

mod claim;
#[cfg(test)]
mod condition_tests;
#[cfg(test)]
mod more_tests;
#[cfg(test)]
mod sim;
mod steps;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use super::outcome::Rejection;
use super::page::PageDecision;
use super::record::{ActionState, Claim, ClaimOutcome, OperationRecord, RecordedResponse};
use super::round::Round;
use super::{Approved, Decision, ForwardRules, OperationRequest, Prepared};
use crate::policy::{Policy, Terms};
use crate::protocol::{ActionTag, ApprovalHeader, Keys, OperationId};

/// What every flow of one executor shares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup<'a> {
    pub(crate) keys: &'a Keys,
    pub(crate) rules: &'a ForwardRules,
    /// The `[[route]]`'s name, bound into every fingerprint (`None`: the default route).
    pub(crate) route: Option<&'a str>,
    pub(crate) remember_grace: Duration,
    /// Whether performed operations get receipts (a draft is kept with the claim).
    pub(crate) receipts: bool,
}

/// How the User approves the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Approves {
    /// With a `Poppy-Approval` the Personal Agent carries back.
    Agent,
    /// On the Company's approval page (a request without the extension).
    Page,
}

/// A request for an operation, as the front door admitted it.
#[derive(Debug, Clone)]
pub(crate) struct Asked {
    /// Its terms as the request gave them (the lookup adds the rest) and its fingerprint
    /// before it is bound to the route.
    pub(crate) request: OperationRequest,
    pub(crate) approves: Approves,
    /// `Some`: the follow-up of an interim answer, carrying this token (`None` inside:
    /// nothing).
    pub(crate) follow_up: Option<Option<String>>,
}

/// What the flow needs carried out next.
#[derive(Debug, Clone)]
pub(crate) enum Need {
    /// An operation's record ([`Event::Record`]).
    Record(OperationId),
    /// An operation's record and its action's generation ([`Event::RecordAndGeneration`]).
    RecordAndGeneration(OperationId),
    /// The action's state and page decisions ([`Event::PageState`]).
    PageState(String),
    /// The action's state, to mint ([`Event::ActionState`]).
    ActionState(ActionTag),
    /// The policy's lookups and computed terms over these ([`Event::Terms`]).
    Terms(Terms),
    /// A forward of `id` may start (no shutdown) under a new claim owner
    /// ([`Event::Started`]); `follow_up`: under the claim of an interim answer.
    StartForward { id: OperationId, follow_up: bool },
    /// Claim the operation ([`Event::Claimed`]).
    Claim(OperationId, Box<Claim>),
    /// Forward the approved request once ([`Event::Forwarded`]).
    Forward(Forward),
    /// Read the upstream's answer as the interface does ([`Event::Read`]).
    ReadAnswer(RecordedResponse),
    /// Release the claim: the upstream performed nothing ([`Event::Carried`]).
    Release {
        id: OperationId,
        owner: String,
        why: Released,
    },
    /// Record the answer under the round's claim before it is delivered ([`Event::Carried`]).
    Complete {
        id: OperationId,
        response: RecordedResponse,
        round: Box<Round>,
    },
    /// Keep the round for its follow-up ([`Event::RoundKept`]).
    KeepRound(KeepRound),
    /// Take the round this follow-up is for ([`Event::RoundTaken`]).
    TakeRound {
        id: OperationId,
        key: String,
        now_ms: i64,
    },
    /// End the claim's lease at `until_ms` ([`Event::Carried`]).
    SetLease {
        id: OperationId,
        owner: String,
        until_ms: i64,
    },
}

/// Why a claim is released, for the driver's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Released {
    /// The upstream answered with a status that proves nothing was performed.
    Status(u16),
    /// Nothing was sent: this is why.
    NotSent(String),
}

/// An approved forward.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Forward {
    pub(crate) id: OperationId,
    pub(crate) revision: String,
    /// The approved terms, for the approval header.
    pub(crate) terms: serde_json::Value,
    /// The first forward of the claim (its `expires_at`, for the approval delay), or a
    /// follow-up under it (`None`).
    pub(crate) first: Option<i64>,
    /// Approved on the Company's page.
    pub(crate) via_page: bool,
}

/// A round to keep in the store.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeepRound {
    pub(crate) id: OperationId,
    pub(crate) key: String,
    pub(crate) round: Vec<u8>,
    pub(crate) owner: String,
    pub(crate) until_ms: i64,
    pub(crate) lease_until_ms: i64,
    pub(crate) now_ms: i64,
}

/// What the driver found, fed back to the flow.
#[derive(Debug)]
pub(crate) enum Event {
    Record(Option<OperationRecord>),
    RecordAndGeneration(Option<OperationRecord>, u64),
    PageState(ActionState, Vec<PageDecision>),
    ActionState(ActionState),
    /// The terms filled in; `None`: the lookup refused (the driver answers its refusal).
    Terms(Option<Terms>),
    /// A forward may start: claims name this owner; `trace`: the execution's span.
    Started {
        owner: String,
        trace: Option<String>,
    },
    /// The gateway is shutting down: no new forward.
    ShuttingDown,
    Claimed(ClaimOutcome),
    Forwarded(Result<RecordedResponse, NotForwarded>),
    Read(Read),
    RoundKept(bool),
    RoundTaken(Option<Vec<u8>>),
    /// Done, whatever came of it (the driver logs a failure).
    Carried,
    /// The store did not answer (the driver logs why).
    StoreFailed,
}

/// A forward with no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotForwarded {
    /// Nothing was sent.
    NotSent(String),
    /// Sent, and whether it took effect is unknown.
    Unknown(String),
}

/// What an approved forward's answer is, as its interface reads it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Read {
    /// The operation's answer: recorded and replayed.
    Final(RecordedResponse),
    /// No answer, or one that says nothing about what was done: the outcome is unknown.
    Unknown(String),
    /// An interim answer for the client: the operation goes on (claimed, nothing recorded)
    /// when a follow-up carries `token` back.
    Interim {
        response: RecordedResponse,
        token: Option<String>,
    },
}

/// What the flow came to.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    Need(Need),
    Done(End),
}

/// How an operation's flow ended. Moved once, never kept: boxing the decision would
/// allocate for every request instead.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum End {
    /// A page request without a token: nobody can approve it on the page.
    PageSignInRequired,
    /// The policy's lookup refused: nothing decided (the driver holds the refusal).
    LookupRefused,
    /// The account declined the request on the page: nothing performed.
    Declined(OperationId),
    /// The policy's condition (`needs_approval_when`) is false for the request's terms: it
    /// needs no approval, and goes on as if no policy named it (nothing minted or recorded).
    NotHeld,
    Decided(Decided),
}

/// A decision, with what to count and log of it.
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    pub(crate) decision: Decision,
    /// Why the approval the request carried was refused.
    pub(crate) rejection: Option<Rejection>,
    /// The approval the decision is about (a page decision's, for a page request).
    pub(crate) approval: Option<ApprovalHeader>,
    /// The execution span kept with the operation's record: a replay links to it.
    pub(crate) linked: Option<String>,
    /// Why the outcome is unknown, for [`Decision::Unknown`].
    pub(crate) why: Option<String>,
}

/// One operation's flow.
pub(crate) struct Flow<'a> {
    setup: Setup<'a>,
    approves: Approves,
    follow_up: Option<Option<String>>,
    policy: Arc<Policy>,
    /// The request as admitted: its terms move into the lookup and back.
    asked: OperationRequest,
    /// The request as the core reads it, once its terms are complete.
    prepared: Option<Box<Prepared>>,
    /// The page decision the approval is, for a page request.
    page: Option<PageDecision>,
    approval: Option<ApprovalHeader>,
    rejection: Option<Rejection>,
    linked: Option<String>,
    /// A follow-up's claim owner and when its lease ends if its outcome is unknown.
    lapse: Option<(String, i64)>,
    state: State,
    pending: Option<Step>,
}

/// Where a flow waits: each state takes the event its [`Need`] asked for.
#[derive(Debug)]
enum State {
    RecordFirst(OperationId),
    PageApprovals,
    PageCandidate(OperationId, Vec<OperationId>),
    Terms,
    PageDecisions(ActionTag),
    Checking(OperationId),
    Minting(ActionTag),
    Proving(Approved),
    Starting(Approved),
    Claiming(Approved, Box<Claim>),
    Forwarding(OperationId, Box<Round>),
    Reading(OperationId, Box<Round>),
    Releasing(Decision),
    Recording(RecordedResponse),
    KeepingRound(Kept),
    FollowUpRecord(OperationId, Decided),
    TakingRound(OperationId, Decided),
    FollowUpStarting(OperationId, Box<Round>),
    Lapsing(Decided),
    Over,
}

/// What a kept (or unkept) round comes to.
#[derive(Debug)]
enum Kept {
    /// An interim answer: delivered if the round is kept, else the operation is unknown.
    Interim(OperationId, RecordedResponse),
    /// Shutting down: the follow-up may come again.
    ShuttingDown,
    /// Nothing of the follow-up was sent: it may come again.
    NotSent,
}

impl<'a> Flow<'a> {
    /// The flow of `asked`.
    pub(crate) fn new(setup: Setup<'a>, asked: Asked) -> Flow<'a> {
        let mut flow = Flow {
            setup,
            approves: asked.approves,
            follow_up: asked.follow_up,
            policy: Arc::clone(&asked.request.policy),
            approval: asked.request.approval.clone(),
            asked: asked.request,
            prepared: None,
            page: None,
            rejection: None,
            linked: None,
            lapse: None,
            state: State::Over,
            pending: None,
        };
        let step = flow.begin();
        flow.pending = Some(step);
        flow
    }

    /// What the flow needs now, or how it ended. Taken: asked again before [`Flow::on`],
    /// it fails closed (`StoreUnavailable`, nothing forwarded).
    pub(crate) fn next(&mut self) -> Step {
        self.pending
            .take()
            .unwrap_or_else(|| self.end(Decision::StoreUnavailable))
    }

    /// The answer to what [`Flow::next`] needed, read at `now_ms`.
    pub(crate) fn on(&mut self, event: Event, now_ms: i64) {
        let state = std::mem::replace(&mut self.state, State::Over);
        let step = self.transition(state, event, now_ms);
        self.pending = Some(step);
    }

    /// The policy the request is for.
    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The account the request acts for (a page link is for it).
    pub(crate) fn account(&self) -> Option<&str> {
        let request = self.prepared.as_ref().map_or(&self.asked, |p| &p.request);
        request.approver.who.account.as_deref()
    }

    fn wait(&mut self, state: State, need: Need) -> Step {
        self.state = state;
        Step::Need(need)
    }

    fn end(&mut self, decision: Decision) -> Step {
        self.end_why(decision, None)
    }

    /// The flow is over with `decision`; a follow-up whose outcome is unknown first ends
    /// its round's lease, as a first forward's would have ended.
    fn end_why(&mut self, decision: Decision, why: Option<String>) -> Step {
        let decided = Decided {
            decision,
            rejection: self.rejection,
            approval: self.approval.clone(),
            linked: self.linked.clone(),
            why,
        };
        if let (Decision::Unknown(id), Some((owner, until_ms))) =
            (&decided.decision, self.lapse.take())
        {
            let need = Need::SetLease {
                id: id.clone(),
                owner,
                until_ms,
            };
            return self.wait(State::Lapsing(decided), need);
        }
        self.state = State::Over;
        Step::Done(End::Decided(decided))
    }

    fn over(&mut self, end: End) -> Step {
        self.state = State::Over;
        Step::Done(end)
    }
}

/// How long one forward's claim is leased for: as the first forward's was.
fn forward_lease(round: &Round) -> i64 {
    round
        .claim
        .lease_until_ms
        .saturating_sub(round.claim.now_ms)
        .max(0)
}
