//! The spec's checks (section 6), in its order, as pure functions of what the store returned.
//!
//! 1. The approver can approve the operation, else the request is handled as if it had no
//!    approval (a new operation), or challenged to sign in when it names an account's;
//! 2. the operation hasn't been performed, else replay (or try again while it is in flight,
//!    or while its outcome is unknown);
//! 3. the revision is one minted for exactly this request and hasn't expired, else answer
//!    with a new revision.

use super::outcome::Rejection;
use super::record::{ActionState, Claim, OperationRecord, RecordState, RecordedResponse};
use super::{Prepared, terms_value};
use crate::identity::Approver;
use crate::policy::Policy;
use crate::protocol::{
    ActionTag, ApprovalHeader, Keys, Operation, OperationId, Revision, RevisionInput, ScopeKind,
};

/// What the core decided about a request, given what the store returned so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Answer with a new operation for what the request asks (read the action's state, then
    /// [`mint`]). `Some`: the approval the request carried was refused, and why.
    Mint(Option<Rejection>),
    /// Every check passed: claim the operation and forward it once.
    Claim(Approved),
    /// Nothing to mint or claim: answer with this.
    Answer(Answer),
}

/// A verdict answered as it is: from the operation's record, or with a challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A signed-out Session named an account's operation: challenge it to sign in.
    SignInRequired,
    /// Performed before: answer with this recorded answer.
    Replay(RecordedResponse),
    /// Performed before, for this approver's claims, but their credentials do not prove
    /// they are the ones that approved (`verify = "off"`): say it was performed, without the
    /// recorded answer, and offer no new operation (approving one would run it twice).
    AlreadyPerformed(OperationId),
    /// Being performed: try again shortly.
    InProgress(OperationId),
    /// Claimed, its lease ran out and no answer was recorded: never forwarded again.
    Unknown(OperationId),
}

/// An approval that passed checks 1 to 3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Approved {
    pub(crate) id: OperationId,
    /// The approved revision.
    pub(crate) revision: String,
    /// Its `expires_at`, in Unix seconds.
    pub(crate) expires_at: i64,
}

/// The first step of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// Decide without an operation record: no approval, or one this gateway never returned.
    Decided(Verdict),
    /// Read this operation's record and its action's generation, then [`check`].
    Lookup(OperationId),
}

/// What a mint came to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Minted {
    /// Ask the User to approve this.
    Hold(Operation),
    /// The action has an operation whose outcome is unknown: no new one until an operator
    /// resolves it, or the User could approve the action twice (spec section 7).
    Unknown(OperationId),
}

/// What the store must be asked first.
pub(crate) fn start(prepared: &Prepared) -> Start {
    let Some(approval) = &prepared.request.approval else {
        return Start::Decided(Verdict::Mint(None));
    };
    match OperationId::parse(&approval.operation_id) {
        Some(id) => Start::Lookup(id),
        // Not of this gateway's shape, so not one it returned.
        None => Start::Decided(Verdict::Mint(Some(Rejection::NotOurs))),
    }
}

/// Checks 1 to 3 for the operation the approval names, given its record (if any) and its
/// action's current generation.
pub(crate) fn check(
    keys: &Keys,
    prepared: &Prepared,
    id: &OperationId,
    record: Option<OperationRecord>,
    generation: u64,
    now_ms: i64,
) -> Verdict {
    // Checks 1 and 2: an existing record decides (replay, in flight, or not yours).
    if let Some(record) = record {
        return existing(keys, prepared, id, record, now_ms);
    }
    let request = &prepared.request;
    let policy = &request.policy;

    // Check 1 for operations nobody claimed yet: the ID must be this requester's for this
    // action, under one of the keys.
    let material: Vec<&[u8]> = prepared.action_material.iter().map(Vec::as_slice).collect();
    let Some((key, action)) = keys.all().iter().find_map(|key| {
        let action = ActionTag::derive(key, &policy.id_prefix, request.approver.kind, &material);
        (action.as_str() == id.action_tag()).then_some((key, action))
    }) else {
        return not_this_approver(id, &request.approver);
    };
    if action.operation_id(key, generation) != *id {
        // Performed and forgotten, or an ID of another generation: not approvable now.
        return Verdict::Mint(Some(Rejection::StaleGeneration));
    }

    // Check 3: the revision is one minted for exactly this request, and still open.
    let Some(approval) = &request.approval else {
        return Verdict::Mint(None);
    };
    let now = now_ms.div_euclid(1000);
    let input = revision_input(id, prepared);
    match Revision::check(keys, &approval.revision, &input, now) {
        // Minted before a reload shortened `expires_in`: it could outlive what a completion
        // remembers (see `Remember`), so it is refused as expired.
        Revision::Valid { expires_at } if outlives_policy(expires_at, policy, now) => {
            Verdict::Mint(Some(Rejection::RevisionExpired))
        }
        Revision::Valid { expires_at } => Verdict::Claim(Approved {
            id: id.clone(),
            revision: approval.revision.clone(),
            expires_at,
        }),
        Revision::Expired => Verdict::Mint(Some(Rejection::RevisionExpired)),
        Revision::Invalid => Verdict::Mint(Some(Rejection::RevisionInvalid)),
    }
}

/// Checks 1 and 2 against an existing record: the one a lookup found, or the one a claim
/// found in its place.
pub(crate) fn existing(
    keys: &Keys,
    prepared: &Prepared,
    id: &OperationId,
    record: OperationRecord,
    now_ms: i64,
) -> Verdict {
    let request = &prepared.request;
    if record.policy != request.policy.name {
        return not_this_approver(id, &request.approver);
    }
    match approved_by(keys, &record, &request.approver) {
        Approval::Not => not_this_approver(id, &request.approver),
        proven => Verdict::Answer(answer_of(id, record.state, proven, now_ms)),
    }
}

/// Checks 1 and 2 alone, for an approval whose request can't be prepared before its policy's
/// lookup runs: an operation this approver already performed (or is performing) is answered
/// from its record, whatever the upstream's records say now. `None` when the record is not
/// this approver's: the request then goes the normal way.
pub(crate) fn from_record(
    keys: &Keys,
    policy: &Policy,
    approver: &Approver,
    id: &OperationId,
    record: OperationRecord,
    now_ms: i64,
) -> Option<Answer> {
    let approver = if id.kind() == ScopeKind::Session && approver.kind == ScopeKind::Account {
        approver.session_only()
    } else {
        approver.clone()
    };
    if record.policy != policy.name {
        return None;
    }
    match approved_by(keys, &record, &approver) {
        Approval::Not => None,
        proven => Some(answer_of(id, record.state, proven, now_ms)),
    }
}

/// Whether `prepared` may send the follow-up of an interim answer of the operation `record`
/// is the claim of: a follow-up carries the approver's answers into the approved call, so it
/// takes what a replay takes (check 1 proven: the approver's scope and, unverified, the very
/// credentials that approved), never less.
pub(crate) fn may_follow_up(keys: &Keys, prepared: &Prepared, record: &OperationRecord) -> bool {
    record.policy == prepared.request.policy.name
        && approved_by(keys, record, &prepared.request.approver) == Approval::Proven
}

/// Who approved, or opened an MCP session, as kept: the approver's scope and, for
/// credentials the gateway did not verify, their digest (under the key of the time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kept<'a> {
    pub(crate) scope: &'a str,
    pub(crate) credentials: Option<&'a str>,
}

/// What to keep of `approver` so that [`is_proven`] knows it again.
pub(crate) fn keep(keys: &Keys, approver: &Approver) -> (String, Option<String>) {
    let credentials = approver.credentials.as_ref();
    (
        approver.scope.clone(),
        credentials.map(|c| c.digest(keys.current())),
    )
}

/// Whether `approver` is the one `kept`, as a follow-up of an interim answer must be the
/// operation's approver ([`may_follow_up`]): the same scope, proven (verified, or the very
/// credentials). Who may answer an MCP server's requests in a session is decided by it.
pub(crate) fn is_proven(keys: &Keys, kept: Kept<'_>, approver: &Approver) -> bool {
    proven(keys, kept, approver) == Approval::Proven
}

/// Whether an approval must be answered from its record before the policy's lookup runs:
/// check 2 comes first, so a performed operation is replayed even while the upstream's
/// records can't be read.
pub(crate) fn record_before_lookup(
    policy: &Policy,
    approval: Option<&ApprovalHeader>,
) -> Option<OperationId> {
    if policy.lookups.is_empty() {
        return None;
    }
    OperationId::parse(&approval?.operation_id)
}

/// Check 2: what a record of this approver's says. The recorded answer goes only to the
/// credentials that approved it; the others are told it was performed.
fn answer_of(id: &OperationId, state: RecordState, approval: Approval, now_ms: i64) -> Answer {
    match state {
        RecordState::Done(response) if approval == Approval::Proven => Answer::Replay(response),
        RecordState::Done(_) => Answer::AlreadyPerformed(id.clone()),
        RecordState::InFlight { lease_until_ms, .. } if lease_until_ms < now_ms => {
            Answer::Unknown(id.clone())
        }
        RecordState::InFlight { .. } => Answer::InProgress(id.clone()),
    }
}

/// Check 1 failed: a signed-out Session naming an account's operation is asked to sign in;
/// anybody else gets a new operation of their own.
fn not_this_approver(id: &OperationId, approver: &Approver) -> Verdict {
    if id.kind() == ScopeKind::Account && approver.kind == ScopeKind::Session {
        Verdict::Answer(Answer::SignInRequired)
    } else {
        Verdict::Mint(Some(Rejection::NotThisApprover))
    }
}

/// How a record's approver is this request's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Approval {
    /// Another scope: check 1 fails.
    Not,
    /// The approver's scope, read from claims that nothing proves (`verify = "off"`) and
    /// credentials that are not the ones that approved: check 1 passes (a new operation
    /// would let the action run twice), but the recorded answer is not given.
    Claimed,
    /// The approver's scope, verified, or with the very credentials (or delegated key)
    /// that approved.
    Proven,
}

/// Check 1 against a record: the approver's scope, and, when the approver's credentials
/// were not (all) verified, whether they are the ones that approved it. A record without a
/// digest (written verified, or by an older gateway) proves nothing for unverified
/// credentials.
fn approved_by(keys: &Keys, record: &OperationRecord, approver: &Approver) -> Approval {
    let kept = Kept {
        scope: &record.scope,
        credentials: record.credentials.as_deref(),
    };
    proven(keys, kept, approver)
}

fn proven(keys: &Keys, kept: Kept<'_>, approver: &Approver) -> Approval {
    if kept.scope != approver.scope {
        return Approval::Not;
    }
    let Some(credentials) = &approver.credentials else {
        return Approval::Proven;
    };
    let proven = kept
        .credentials
        .is_some_and(|kept| keys.all().iter().any(|key| credentials.digest(key) == kept));
    if proven {
        Approval::Proven
    } else {
        Approval::Claimed
    }
}

/// The operation for what the request asks, given its action's state. Answering a refused
/// approval, never with the revision it named (the agent would retry it in a loop).
pub(crate) fn mint(keys: &Keys, prepared: &Prepared, state: &ActionState, now_ms: i64) -> Minted {
    mint_for(keys, prepared, &action_tag(keys, prepared), state, now_ms)
}

/// [`mint`], with the action tag the caller already derived to read the action's state (two
/// MACs fewer per mint).
pub(crate) fn mint_for(
    keys: &Keys,
    prepared: &Prepared,
    action: &ActionTag,
    state: &ActionState,
    now_ms: i64,
) -> Minted {
    if let Some((unknown, _)) = state.in_flight.iter().find(|(_, lease)| *lease < now_ms) {
        return Minted::Unknown(unknown.clone());
    }
    let request = &prepared.request;
    let key = keys.current();
    let id = action.operation_id(key, state.generation);
    let input = revision_input(&id, prepared);
    let mut expires_at = now_ms
        .div_euclid(1000)
        .saturating_add(seconds(request.policy.expires_in));
    let mut revision = Revision::mint(key, &input, expires_at);
    if request
        .approval
        .as_ref()
        .is_some_and(|a| a.revision == revision)
    {
        expires_at += 1;
        revision = Revision::mint(key, &input, expires_at);
    }
    Minted::Hold(Operation {
        operation_id: id.to_string(),
        revision,
        summary: prepared.summary.clone(),
        terms: Some(terms_value(&request.terms)),
        expires_at: rfc3339(expires_at),
    })
}

/// The action a request is for, under the current key: the store keys its state by it.
pub(crate) fn action_tag(keys: &Keys, prepared: &Prepared) -> ActionTag {
    let request = &prepared.request;
    derive_action(
        keys,
        &request.policy,
        request.approver.kind,
        &prepared.action_material,
    )
}

/// The action tag of `material` (see [`Prepared::action_material`]), under the current key.
pub(super) fn derive_action(
    keys: &Keys,
    policy: &Policy,
    kind: ScopeKind,
    material: &[Vec<u8>],
) -> ActionTag {
    let material: Vec<&[u8]> = material.iter().map(Vec::as_slice).collect();
    ActionTag::derive(keys.current(), &policy.id_prefix, kind, &material)
}

/// The record a claim of an approved operation creates: in flight under `owner` until
/// `lease_until_ms`, bound to the approver's scope and, unverified, to their credentials.
pub(crate) fn claim(
    keys: &Keys,
    prepared: &Prepared,
    approved: &Approved,
    owner: String,
    now_ms: i64,
    lease_until_ms: i64,
) -> Claim {
    let request = &prepared.request;
    let (scope, credentials) = keep(keys, &request.approver);
    Claim {
        scope,
        policy: request.policy.name.clone(),
        revision: approved.revision.clone(),
        credentials,
        trace: None,
        request: None,
        owner,
        now_ms,
        lease_until_ms,
    }
}

/// Whether a valid revision expires later than one minted now by this policy could: minted
/// before a reload shortened `expires_in`.
fn outlives_policy(expires_at: i64, policy: &Policy, now: i64) -> bool {
    let latest = now
        .saturating_add(seconds(policy.expires_in))
        .saturating_add(1);
    expires_at > latest
}

fn seconds(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}

pub(super) fn revision_input<'a>(id: &'a OperationId, prepared: &'a Prepared) -> RevisionInput<'a> {
    RevisionInput {
        operation_id: id.as_str(),
        summary: &prepared.summary,
        terms: &prepared.terms_json,
        scope: &prepared.request.approver.scope,
        request: &prepared.request.fingerprint,
    }
}

pub(super) fn rfc3339(unix_seconds: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix_seconds)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
