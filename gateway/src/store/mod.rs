//! Where the gateway remembers claimed and performed operations.
//!
//! Unapproved operations are never stored (revisions are minted statelessly). The store holds
//! two kinds of entries, both keyed by an operation's *action tag* so that everything one
//! operation touches lives in one Redis Cluster hash slot:
//! - an **operation record**, created by [`OperationStore::claim`] when an approval passes the
//!   checks, and turned into a recorded answer by [`OperationStore::complete`];
//! - the action's **generation**, a counter that [`OperationStore::complete`] moves on so that a
//!   new request for the same action, after one was performed, gets a new operation_id;
//! - the action's **in-flight set**: the operations of this action claimed and not finished,
//!   so that a new request (a mint) can see one whose outcome is unknown in the same round
//!   trip as the generation ([`OperationStore::action_state`]);
//! - an **index** of every in-flight operation, for operators ([`OperationStore::in_flight`]);
//! - the **rounds** of an approved call whose answer was interim, each taken once by its
//!   follow-up ([`OperationStore::put_round`], [`OperationStore::take_round`]), expiring on
//!   their own.
//!
//! - the action's **page decisions**: what the User decided on the Company's approval page,
//!   one per operation and revision, set once ([`OperationStore::decide_on_page`]) and read
//!   with the action's state ([`OperationStore::page_state`]).
//!
//! An in-flight record never expires on its own: only `complete`, `release` and an operator's
//! `resolve` end it, so an unknown outcome is never forgotten. A recorded answer is kept until
//! the `remember_until_ms` its completion names (see RELIABILITY.md for how the flow picks it).
//!
//! Every step is one atomic call (one Redis round trip, a Lua script where it writes).
//! [`OperationStore::resolve`] is the operator's way out of an *unknown* outcome.

mod calls;
mod check;
mod instrumented;
mod memory;
mod memory_pages;
mod memory_rounds;
mod messages;
mod owner;
mod redis;

// The core's vocabulary (operation/record.rs): the store keeps what the core decides with.
pub use crate::operation::page::{PageDecided, PageDecision, PageVerdict};
pub use crate::operation::record::{
    ActionState, Claim, ClaimOutcome, InFlightOperation, OperationRecord, RecordState,
    RecordedResponse, Resolution, ResolveOutcome,
};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use calls::{
    FollowUp, KeptAnswer, KeptDecision, KeptRound, Lease, MessageAnswer, MessageLease, Ruling,
};
pub(crate) use check::DurabilityCheck;
pub(crate) use instrumented::InstrumentedStore;
pub use memory::MemoryStore;
pub use messages::MessageSlot;
pub(crate) use redis::Durability;
pub use redis::RedisStore;
pub(crate) use redis::{CLUSTER_SCHEME, DEFAULT_NAMESPACE, MAX_WAIT_TIMEOUT, cluster_seeds};

use crate::protocol::OperationId;

/// A store failure. The gateway fails closed on any of these: nothing is forwarded.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store's URL or options are wrong: it was never opened.
    #[error("{0}")]
    Invalid(String),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store returned a malformed record: {0}")]
    Corrupt(String),
    /// `memory://` holds as many records (or bytes) as it may: new claims fail closed.
    #[error("store full: {0}")]
    Full(String),
}

/// `[store] wait_replicas`: how many replicas must acknowledge a claim before it is used
/// (completions and resolutions wait for them too, but stand without them: see docs/redis.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaWait {
    /// At least 1.
    pub replicas: u32,
    /// How long Redis waits for them (`WAIT`'s timeout); never zero, which would mean forever.
    pub timeout: Duration,
}

/// How to open a store, beyond its URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Prefix of every Redis key (ignored by `memory://`).
    pub namespace: String,
    /// Replica acknowledgement of writes (Redis only; `None` = off).
    pub wait: Option<ReplicaWait>,
    /// Caps of the `memory://` store (ignored by Redis).
    pub memory_limits: MemoryLimits,
}

/// `[store] memory_max_records` and `memory_max_bytes`: what `memory://` may hold at once.
/// When either is reached, new claims fail closed (`503`); nothing is evicted early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    pub max_records: usize,
    pub max_bytes: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            max_records: 100_000,
            max_bytes: 1 << 30,
        }
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            wait: None,
            memory_limits: MemoryLimits::default(),
        }
    }
}

#[async_trait]
pub trait OperationStore: Send + Sync + 'static {
    /// The action's current generation (0 when never performed or forgotten).
    async fn generation(&self, action_tag: &str) -> Result<u64, StoreError>;

    /// The action's generation and its in-flight operations, in one round trip: what a mint
    /// reads.
    async fn action_state(&self, action_tag: &str) -> Result<ActionState, StoreError>;

    /// Every in-flight operation (unknown ones included), oldest lease first, at most `limit`.
    async fn in_flight(&self, limit: usize) -> Result<Vec<InFlightOperation>, StoreError>;

    /// How many in-flight operations have a lease that ran out before `now_ms`: unknown
    /// outcomes nobody resolved yet.
    async fn unknown_count(&self, now_ms: i64) -> Result<u64, StoreError>;

    /// The record for this operation, if one exists, and its action's generation, in one
    /// round trip: what an approval needs first (a replay needs nothing more).
    async fn lookup_with_generation(
        &self,
        id: &OperationId,
    ) -> Result<(Option<OperationRecord>, u64), StoreError> {
        Ok((
            self.lookup(id).await?,
            self.generation(id.action_tag()).await?,
        ))
    }

    /// The record for this operation, if one exists.
    async fn lookup(&self, id: &OperationId) -> Result<Option<OperationRecord>, StoreError>;

    /// Atomically create an in-flight record for `id`, unless one exists; it never expires
    /// while in flight. With
    /// [`ReplicaWait`], a new claim is used only once enough replicas hold it; otherwise it is
    /// released again and the call fails with `Unavailable`.
    async fn claim(&self, id: &OperationId, claim: &Claim) -> Result<ClaimOutcome, StoreError>;

    /// Record the answer of an operation this `owner` claimed, and move the action's
    /// generation on; the record is kept until `answer.remember_until_ms` (never less than an expiry
    /// it already has). Returns false (and changes nothing) if the record is gone or not
    /// in flight under `owner`.
    async fn complete(&self, answer: &KeptAnswer<'_>, owner: &str) -> Result<bool, StoreError>;

    /// [`OperationStore::complete`] for the gateway that performed `claim`: when the record
    /// vanished (Redis restarted empty, or an operator resolved it as not performed while it
    /// was still being forwarded), the answer is written anyway, as a new performed record,
    /// since the upstream did perform it. Returns false only when the record is done already
    /// or in flight under another owner.
    async fn complete_claim(
        &self,
        answer: &KeptAnswer<'_>,
        claim: &Claim,
    ) -> Result<bool, StoreError>;

    /// Forget a claim whose forward provably performed nothing, so the same approval can be
    /// retried. Only the owner's in-flight record is removed; returns whether it was.
    async fn release(&self, id: &OperationId, owner: &str) -> Result<bool, StoreError>;

    /// An operator's verdict on an operation (admin API): one whose outcome is unknown. One
    /// atomic step, whoever owns the in-flight record, once its lease ran out (by
    /// `ruling.now_ms`):
    /// while the lease is live the forward may still be at the upstream, and the record is
    /// left alone ([`ResolveOutcome::LeaseLive`]). `Performed` records the answer exactly as [`OperationStore::complete`]
    /// does (expiry at least `remember_until_ms`, generation moved on); `NotPerformed` deletes
    /// the record and leaves the generation alone. A recorded answer is never changed.
    async fn resolve(&self, ruling: &Ruling<'_>) -> Result<ResolveOutcome, StoreError>;

    /// A cheap round trip, for `/readyz`.
    async fn ping(&self) -> Result<(), StoreError>;

    /// What the server promises about keeping records through a restart or when full; `None`
    /// for a store with nothing to check (`memory://`: its records die with the process, and
    /// so do the keys that could approve them).
    async fn durability(&self) -> Result<Option<Durability>, StoreError> {
        Ok(None)
    }

    // Rounds of an approved call whose answer was interim (an MCP `input_required` result,
    // `crate::proxy` rounds): what its follow-up needs to go on under the same claim, on any
    // gateway sharing the store. A store without them fails closed: the interim answer ends
    // its operation as unknown.

    /// Keep a round for operation `kept.id` (replacing any under the same key), and lease its
    /// claim until `kept.lease_until_ms` (never shorter than it was), in one atomic step;
    /// only while the record is in flight under `kept.owner` (false: nothing written).
    async fn put_round(&self, _kept: &KeptRound<'_>) -> Result<bool, StoreError> {
        Err(StoreError::Unavailable("this store keeps no rounds".into()))
    }

    /// Take the round the follow-up asks for, if one is kept and has not expired by its
    /// `now_ms`: read and removed in one atomic step, so only one follow-up ever gets it.
    async fn take_round(&self, _follow_up: &FollowUp<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        Err(StoreError::Unavailable("this store keeps no rounds".into()))
    }

    /// Set the lease of `lease.owner`'s in-flight claim of `lease.id`, longer or shorter (false: not in
    /// flight under `owner`, nothing written): a round's lease ends with its follow-up's
    /// forward when that forward's outcome is unknown.
    async fn set_lease(&self, _lease: &Lease<'_>) -> Result<bool, StoreError> {
        Err(StoreError::Unavailable("this store keeps no rounds".into()))
    }

    // The approval page (`crate::approval_page`, issue 29): what the User decided there, one
    // decision per operation and revision. A store without them fails closed: the page
    // stores nothing, and a page request is only ever held.

    /// Keep `kept.decision` for its operation's revision unless that revision has one already
    /// (which is then returned, unchanged), until `kept.until_ms` (the revision's expiry, then
    /// as long as a record of its operation may be kept: `approval_page::keep_after`).
    /// Decisions of the action whose time is up by `kept.now_ms` may be dropped.
    async fn decide_on_page(&self, _kept: &KeptDecision<'_>) -> Result<PageDecided, StoreError> {
        Err(StoreError::Unavailable(
            "this store keeps no page decisions".into(),
        ))
    }

    /// The action's state (what a mint reads) and every page decision kept for its
    /// operations, in one round trip: what a request without the extension reads.
    async fn page_state(
        &self,
        _action_tag: &str,
    ) -> Result<(ActionState, Vec<PageDecision>), StoreError> {
        Err(StoreError::Unavailable(
            "this store keeps no page decisions".into(),
        ))
    }

    // Conversations (`crate::conversations`, see `messages.rs`): the answer the operations
    // service gave to a Personal Agent's message, so that the message retried with the same
    // ID gets it again. A store without them fails closed: the service answers 503.

    /// Take the message `lease.key` for its owner until `lease_until_ms`, unless it was answered or
    /// another owner's lease on it still runs at `now_ms`. One atomic step.
    async fn take_message(&self, _lease: &MessageLease<'_>) -> Result<MessageSlot, StoreError> {
        Err(StoreError::Unavailable(
            "this store keeps no conversation messages".into(),
        ))
    }

    /// `answer.owner`'s answer to the message `answer.key`, kept until `remember_until_ms`; `None` lets the
    /// message go unanswered (the next delivery of it is handled anew). Changes nothing when
    /// the message is not `owner`'s any more.
    async fn finish_message(&self, _answer: &MessageAnswer<'_>) -> Result<(), StoreError> {
        Err(StoreError::Unavailable(
            "this store keeps no conversation messages".into(),
        ))
    }
}

/// The store a `[store] url` names, with the default options: `memory://`; `redis://…` (or
/// `valkey://`, `unix://`, as the redis client reads them); or `redis+cluster://h1:p1,h2:p2`,
/// the seed nodes of a Redis Cluster. `rediss://` is refused with a clear error until the
/// redis crate's TLS feature is enabled. Never connects: a Redis store connects on first use.
pub fn open(url: &str) -> Result<Arc<dyn OperationStore>, StoreError> {
    open_with(url, &StoreOptions::default())
}

/// [`open`] with every option.
pub(crate) fn open_with(
    url: &str,
    options: &StoreOptions,
) -> Result<Arc<dyn OperationStore>, StoreError> {
    if url == "memory://" {
        if options.wait.is_some() {
            return Err(StoreError::Invalid(
                "wait_replicas needs a Redis store: memory:// has no replicas".into(),
            ));
        }
        return Ok(Arc::new(MemoryStore::with_limits(options.memory_limits)));
    }
    Ok(Arc::new(RedisStore::with_options(url, options)?))
}
