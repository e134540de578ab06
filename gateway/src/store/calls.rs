//! The arguments of the store's calls that take more than an operation and one more thing:
//! one struct per call, so that its timestamps are named where it is called (never swapped)
//! and each implementation's signature is one line.

use super::{PageDecision, RecordedResponse, Resolution};
use crate::protocol::OperationId;

/// The answer to an operation, as [`super::OperationStore::complete`] and
/// [`super::OperationStore::complete_claim`] record it.
#[derive(Debug, Clone, Copy)]
pub struct KeptAnswer<'a> {
    pub id: &'a OperationId,
    pub response: &'a RecordedResponse,
    /// Until when the answer is kept (wall-clock ms; never less than an expiry it has).
    pub remember_until_ms: i64,
}

/// An operator's verdict on an operation, as [`super::OperationStore::resolve`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct Ruling<'a> {
    pub id: &'a OperationId,
    pub resolution: &'a Resolution,
    /// Until when a `Performed` answer is kept.
    pub remember_until_ms: i64,
    /// The operator's clock: the record's lease must have run out by then.
    pub now_ms: i64,
}

/// A round of an interim answer, as [`super::OperationStore::put_round`] keeps it.
#[derive(Debug, Clone, Copy)]
pub struct KeptRound<'a> {
    /// The operation whose claim the round goes on under.
    pub id: &'a OperationId,
    /// What its follow-up must present (a digest of what it is bound to).
    pub key: &'a str,
    /// What the follow-up needs to go on under the claim.
    pub round: &'a [u8],
    /// The claim's owner: the round is kept only while the record is in flight under it.
    pub owner: &'a str,
    /// Until when the round waits (wall-clock ms).
    pub until_ms: i64,
    /// The claim's new lease: the round's end and the follow-up's forward.
    pub lease_until_ms: i64,
    pub now_ms: i64,
}

impl<'a> From<&'a crate::operation::flow::KeepRound> for KeptRound<'a> {
    /// The round the flow asks to keep.
    fn from(keep: &'a crate::operation::flow::KeepRound) -> KeptRound<'a> {
        KeptRound {
            id: &keep.id,
            key: &keep.key,
            round: &keep.round,
            owner: &keep.owner,
            until_ms: keep.until_ms,
            lease_until_ms: keep.lease_until_ms,
            now_ms: keep.now_ms,
        }
    }
}

/// A follow-up asking for its round, as [`super::OperationStore::take_round`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct FollowUp<'a> {
    pub id: &'a OperationId,
    /// The round's key ([`KeptRound::key`]).
    pub key: &'a str,
    pub now_ms: i64,
}

/// A new lease of an owner's in-flight claim, as [`super::OperationStore::set_lease`] sets it.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    pub id: &'a OperationId,
    pub owner: &'a str,
    pub until_ms: i64,
}

/// A decision on the approval page, as [`super::OperationStore::decide_on_page`] keeps it.
#[derive(Debug, Clone, Copy)]
pub struct KeptDecision<'a> {
    pub decision: &'a PageDecision,
    /// Until when it is kept: the revision's expiry and the store's grace.
    pub until_ms: i64,
    pub now_ms: i64,
}

/// A conversation message taken by its handler, as [`super::OperationStore::take_message`]
/// takes it.
#[derive(Debug, Clone, Copy)]
pub struct MessageLease<'a> {
    /// The message (see `conversations::messages` for the key).
    pub key: &'a str,
    pub owner: &'a str,
    pub now_ms: i64,
    /// Until when no other owner may take it.
    pub lease_until_ms: i64,
}

/// The end of a message's handling, as [`super::OperationStore::finish_message`] writes it.
#[derive(Debug, Clone, Copy)]
pub struct MessageAnswer<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    /// The answer to keep; `None` lets the message go unanswered.
    pub answer: Option<&'a [u8]>,
    pub remember_until_ms: i64,
}
