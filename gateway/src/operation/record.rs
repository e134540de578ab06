//! The core's vocabulary of what is remembered: an operation's record, the claim that
//! creates it, the answer it keeps, an action's state, and an operator's resolution. The
//! operation core decides with these; the store (`crate::store`) keeps them, and metrics and
//! receipts read them. They live here so that the core names nothing of the I/O around it.

use bytes::Bytes;

use crate::protocol::OperationId;

/// The upstream's complete answer to an approved request, replayed to every later retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedResponse {
    pub status: u16,
    /// Header names in lower case, in the upstream's order; hop-by-hop headers already removed.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
}

/// What the gateway knows about a claimed operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// Claimed and being forwarded by `owner`. Once `lease_until_ms` has passed with no answer
    /// recorded, the outcome is *unknown*: the gateway never forwards it again.
    InFlight { owner: String, lease_until_ms: i64 },
    /// Performed; this is the answer to replay.
    Done(RecordedResponse),
}

/// An operation record, as created by a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationRecord {
    /// The approver scope the operation was minted for (check 1 compares it).
    pub scope: String,
    /// The policy (`[[operation]] name`) that minted it.
    pub policy: String,
    /// The approved revision.
    pub revision: String,
    pub created_at_ms: i64,
    pub state: RecordState,
    /// A keyed digest of the credentials (`Poppy-Session`, `Authorization`) that approved it,
    /// when the gateway does not verify them (`[session] verify = "off"`): a replay goes only
    /// to the same credentials. `None` in records written without one (verified mode, or an
    /// older gateway).
    pub credentials: Option<String>,
    /// The `traceparent` of the span that executed it (`[tracing]` on), for a replay's span
    /// to link to. `None` in records written without one.
    pub trace: Option<String>,
    /// A keyed digest of the request a page approval approved (its fingerprint, bound to its
    /// route: `operation::page::request_digest`), so that its retry is answered from this
    /// record before its lookup runs. `None` for a Poppy agent's approval (its retry names the
    /// operation) and in records written before it existed.
    pub request: Option<String>,
}

/// The record a claim creates when none exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub scope: String,
    pub policy: String,
    pub revision: String,
    /// See [`OperationRecord::credentials`].
    pub credentials: Option<String>,
    /// See [`OperationRecord::trace`].
    pub trace: Option<String>,
    /// See [`OperationRecord::request`].
    pub request: Option<String>,
    pub owner: String,
    pub now_ms: i64,
    pub lease_until_ms: i64,
}

impl Claim {
    /// The record this claim creates: in flight, owned and leased as the claim says.
    pub fn in_flight_record(&self) -> OperationRecord {
        OperationRecord {
            scope: self.scope.clone(),
            policy: self.policy.clone(),
            revision: self.revision.clone(),
            created_at_ms: self.now_ms,
            credentials: self.credentials.clone(),
            trace: self.trace.clone(),
            request: self.request.clone(),
            state: RecordState::InFlight {
                owner: self.owner.clone(),
                lease_until_ms: self.lease_until_ms,
            },
        }
    }
}

/// What a new request for an action (a mint) needs, read in one step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionState {
    /// The action's current generation (0 when never performed or forgotten).
    pub generation: u64,
    /// The action's operations that are claimed and not finished, with their leases: one
    /// whose lease ran out has an unknown outcome, and the action gets no new operation until
    /// an operator resolves it.
    pub in_flight: Vec<(OperationId, i64)>,
}

/// An in-flight operation, as listed for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightOperation {
    pub id: OperationId,
    pub record: OperationRecord,
}

/// The result of `OperationStore::claim`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per claim, returned once: boxing the record would cost an allocation for nothing"
)]
pub enum ClaimOutcome {
    /// This caller owns the operation now and must forward it.
    Claimed,
    /// Somebody claimed it before; here is what is known.
    Exists(OperationRecord),
}

/// An operator's verdict on an in-flight operation, typically one whose outcome is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The upstream did perform it, and this is the answer to replay from now on.
    Performed(RecordedResponse),
    /// The upstream did not perform it: forget the claim, so the same approval can be retried.
    NotPerformed,
}

/// The result of `OperationStore::resolve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveOutcome {
    Resolved,
    /// No record: never claimed, released, or forgotten after its expiry.
    NoRecord,
    /// The operation has a recorded answer already; it was left unchanged.
    AlreadyDone,
    /// In flight with a live lease (its forward may be at the upstream now): left unchanged.
    LeaseLive,
}
