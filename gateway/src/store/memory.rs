//! The embedded store (`memory://`): one process, nothing survives a restart.
//!
//! Each operation is one critical section under a `std::sync::Mutex`, which is what makes a
//! claim atomic here. Nothing in this file awaits, so the lock is never held across an await.

mod records;

use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::memory_pages::MemoryPages;
use super::memory_rounds::MemoryRounds;
use super::messages::{MemoryMessages, MessageSlot};
use super::owner::{Finishable, Finisher};
use super::{
    ActionState, Claim, ClaimOutcome, FollowUp, InFlightOperation, KeptAnswer, KeptDecision,
    KeptRound, Lease, MemoryLimits, MessageAnswer, MessageLease, OperationRecord, OperationStore,
    PageDecided, PageDecision, RecordState, Resolution, ResolveOutcome, Ruling, StoreError,
};
use crate::protocol::OperationId;

use self::records::{Expiring, Inner};

/// The embedded, single-process operation store.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    limits: MemoryLimits,
    /// Conversations: answers to Personal Agents' messages (see `messages.rs`).
    messages: MemoryMessages,
    /// Rounds of interim answers waiting for their follow-up.
    rounds: MemoryRounds,
    /// Decisions made on the approval page.
    pages: MemoryPages,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Sizes only: the records hold whole response bodies.
        let inner = self.lock();
        f.debug_struct("MemoryStore")
            .field("records", &inner.records.len())
            .field("bytes", &inner.bytes)
            .field("generations", &inner.generations.len())
            .field("limits", &self.limits)
            .finish()
    }
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A store that refuses new claims once it holds `limits` records or bytes.
    pub fn with_limits(limits: MemoryLimits) -> MemoryStore {
        MemoryStore {
            inner: Mutex::default(),
            limits,
            messages: MemoryMessages::with_limits(limits),
            rounds: MemoryRounds::default(),
            pages: MemoryPages::default(),
        }
    }

    /// Change the lease of `owner`'s in-flight record of `id`; false if there is none.
    fn lease(&self, id: &OperationId, owner: &str, new: impl FnOnce(i64) -> i64) -> bool {
        let now = now_ms();
        let mut inner = self.lock();
        match inner
            .records
            .get_mut(id.as_str())
            .filter(|entry| entry.live(now))
            .map(|entry| &mut entry.value.state)
        {
            Some(RecordState::InFlight {
                owner: holder,
                lease_until_ms,
            }) if holder == owner => {
                *lease_until_ms = new(*lease_until_ms);
                true
            }
            _ => false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section is a handful of single-step map updates that cannot leave a
        // half-written entry, so the data behind a poisoned lock is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[async_trait]
impl OperationStore for MemoryStore {
    async fn generation(&self, action_tag: &str) -> Result<u64, StoreError> {
        let now = now_ms();
        Ok(self.lock().generation(action_tag, now))
    }

    async fn action_state(&self, action_tag: &str) -> Result<ActionState, StoreError> {
        let now = now_ms();
        let inner = self.lock();
        let in_flight = inner
            .in_flight
            .get(action_tag)
            .into_iter()
            .flatten()
            .filter_map(|id| Some((id.clone(), inner.lease_of(id)?)))
            .collect();
        Ok(ActionState {
            generation: inner.generation(action_tag, now),
            in_flight,
        })
    }

    async fn in_flight(&self, limit: usize) -> Result<Vec<InFlightOperation>, StoreError> {
        let inner = self.lock();
        let mut listed: Vec<InFlightOperation> = inner
            .in_flight
            .values()
            .flatten()
            .filter_map(|id| {
                let record = inner.records.get(id.as_str())?.value.clone();
                Some(InFlightOperation {
                    id: id.clone(),
                    record,
                })
            })
            .collect();
        listed.sort_by_key(|op| match op.record.state {
            RecordState::InFlight { lease_until_ms, .. } => lease_until_ms,
            RecordState::Done(_) => i64::MAX,
        });
        listed.truncate(limit);
        Ok(listed)
    }

    async fn unknown_count(&self, now_ms: i64) -> Result<u64, StoreError> {
        let inner = self.lock();
        let count = inner
            .in_flight
            .values()
            .flatten()
            .filter(|id| inner.lease_of(id).is_some_and(|lease| lease < now_ms))
            .count();
        Ok(count as u64)
    }

    async fn lookup(&self, id: &OperationId) -> Result<Option<OperationRecord>, StoreError> {
        let now = now_ms();
        let inner = self.lock();
        Ok(inner.live_record(id.as_str(), now).cloned())
    }

    async fn lookup_with_generation(
        &self,
        id: &OperationId,
    ) -> Result<(Option<OperationRecord>, u64), StoreError> {
        let now = now_ms();
        let inner = self.lock();
        let generation = inner.generation(id.action_tag(), now);
        Ok((inner.live_record(id.as_str(), now).cloned(), generation))
    }

    async fn claim(&self, id: &OperationId, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        let now = now_ms();
        let mut inner = self.lock();
        if let Some(existing) = inner.live_record(id.as_str(), now) {
            return Ok(ClaimOutcome::Exists(existing.clone()));
        }
        if inner.full(&self.limits).is_some() {
            // Expired entries may still be counted: drop them before refusing.
            inner.sweep(now);
        }
        if let Some(full) = inner.full(&self.limits) {
            // Fail closed: nothing claimed, nothing forwarded. Nothing is evicted either:
            // a performed record forgotten early could let its operation run again.
            return Err(StoreError::Full(full));
        }
        let record = claim.in_flight_record();
        inner.insert(
            id,
            Expiring {
                value: record,
                expires_at_ms: i64::MAX,
            },
        );
        inner
            .in_flight
            .entry(id.action_tag().to_owned())
            .or_default()
            .push(id.clone());
        inner.wrote(now);
        Ok(ClaimOutcome::Claimed)
    }

    async fn complete(&self, answer: &KeptAnswer<'_>, owner: &str) -> Result<bool, StoreError> {
        let id = answer.id;
        let now = now_ms();
        let mut inner = self.lock();
        if inner.finishable(id.as_str(), now, Finisher::Owner(owner)) != Finishable::Yes {
            return Ok(false);
        }
        let Some(record) = inner.live_record(id.as_str(), now).cloned() else {
            return Ok(false);
        };
        inner.record_answer(answer, record, now);
        Ok(true)
    }

    async fn complete_claim(
        &self,
        answer: &KeptAnswer<'_>,
        claim: &Claim,
    ) -> Result<bool, StoreError> {
        let id = answer.id;
        let now = now_ms();
        let mut inner = self.lock();
        let record = match inner.finishable(id.as_str(), now, Finisher::Restore(claim)) {
            // `Restore` is the owner's: never `LeaseLive`.
            Finishable::Done | Finishable::NotYours | Finishable::LeaseLive => return Ok(false),
            Finishable::Yes => inner.live_record(id.as_str(), now).cloned(),
            Finishable::NoRecord => None,
        };
        let record = record.unwrap_or_else(|| claim.in_flight_record());
        inner.record_answer(answer, record, now);
        Ok(true)
    }

    async fn release(&self, id: &OperationId, owner: &str) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut inner = self.lock();
        let owned = inner.finishable(id.as_str(), now, Finisher::Owner(owner)) == Finishable::Yes;
        if owned {
            inner.remove(id);
            inner.wrote(now);
        }
        Ok(owned)
    }

    async fn resolve(&self, ruling: &Ruling<'_>) -> Result<ResolveOutcome, StoreError> {
        let id = ruling.id;
        let now = now_ms();
        let mut inner = self.lock();
        let operator = Finisher::Operator {
            now_ms: ruling.now_ms,
        };
        match inner.finishable(id.as_str(), now, operator) {
            Finishable::NoRecord => return Ok(ResolveOutcome::NoRecord),
            Finishable::Done => return Ok(ResolveOutcome::AlreadyDone),
            Finishable::LeaseLive => return Ok(ResolveOutcome::LeaseLive),
            // An operator finishes anybody's in-flight record.
            Finishable::Yes | Finishable::NotYours => {}
        }
        match ruling.resolution {
            Resolution::Performed(response) => {
                if let Some(record) = inner.live_record(id.as_str(), now).cloned() {
                    let answer = KeptAnswer {
                        id,
                        response,
                        remember_until_ms: ruling.remember_until_ms,
                    };
                    inner.record_answer(&answer, record, now);
                }
            }
            Resolution::NotPerformed => {
                inner.remove(id);
                inner.wrote(now);
            }
        }
        Ok(ResolveOutcome::Resolved)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn put_round(&self, kept: &KeptRound<'_>) -> Result<bool, StoreError> {
        if !self.lease(kept.id, kept.owner, |lease| lease.max(kept.lease_until_ms)) {
            return Ok(false);
        }
        let key = format!("{}:{}", kept.id, kept.key);
        self.rounds
            .put(key, kept.round, kept.now_ms, kept.until_ms)?;
        Ok(true)
    }

    async fn set_lease(&self, lease: &Lease<'_>) -> Result<bool, StoreError> {
        Ok(self.lease(lease.id, lease.owner, |_| lease.until_ms))
    }

    async fn take_round(&self, follow_up: &FollowUp<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        let key = format!("{}:{}", follow_up.id, follow_up.key);
        self.rounds.take(&key, follow_up.now_ms)
    }

    async fn decide_on_page(&self, kept: &KeptDecision<'_>) -> Result<PageDecided, StoreError> {
        self.pages.decide(kept.decision, kept.until_ms, kept.now_ms)
    }

    async fn page_state(
        &self,
        action_tag: &str,
    ) -> Result<(ActionState, Vec<PageDecision>), StoreError> {
        let state = self.action_state(action_tag).await?;
        Ok((state, self.pages.of_action(action_tag, now_ms())))
    }

    async fn take_message(&self, lease: &MessageLease<'_>) -> Result<MessageSlot, StoreError> {
        self.messages.take(lease)
    }

    async fn finish_message(&self, answer: &MessageAnswer<'_>) -> Result<(), StoreError> {
        self.messages.finish(answer);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::records::SWEEP_MIN_WRITES;
    use super::*;
    use crate::protocol::{ScopeKind, SigningKey};
    use crate::store::RecordedResponse;
    use bytes::Bytes;

    fn key() -> SigningKey {
        SigningKey::new(b"memory store sweep test key material".to_vec())
    }

    fn claim(now: i64) -> Claim {
        Claim {
            scope: "s".into(),
            policy: "p".into(),
            revision: "r".into(),
            credentials: None,
            trace: None,
            request: None,
            owner: "o".into(),
            now_ms: now,
            lease_until_ms: now,
        }
    }

    /// Complete `id`'s claim by "o" with an answer of `bytes`, kept until `until`.
    async fn complete(store: &MemoryStore, id: &OperationId, bytes: usize, until: i64) -> bool {
        let response = RecordedResponse {
            status: 201,
            headers: Vec::new(),
            body: Bytes::from(vec![7u8; bytes]),
        };
        let answer = KeptAnswer {
            id,
            response: &response,
            remember_until_ms: until,
        };
        store.complete(&answer, "o").await.unwrap()
    }

    #[tokio::test]
    async fn expired_entries_are_swept() {
        let store = MemoryStore::new();
        let now = now_ms();
        for i in 0..3 * SWEEP_MIN_WRITES {
            let material = i.to_be_bytes();
            let id = OperationId::derive(&key(), "exc", ScopeKind::Session, &[&material], 0);
            assert_eq!(
                store.claim(&id, &claim(now)).await.unwrap(),
                ClaimOutcome::Claimed
            );
            // Already past: forgotten as soon as it is written.
            assert!(complete(&store, &id, 10, now - 1).await);
            assert_eq!(store.lookup(&id).await.unwrap(), None);
        }
        assert!(store.lock().records.len() <= SWEEP_MIN_WRITES);
    }

    #[tokio::test]
    async fn a_full_store_refuses_claims_and_keeps_what_it_holds() {
        let store = MemoryStore::with_limits(MemoryLimits {
            max_records: 3,
            max_bytes: usize::MAX,
        });
        let now = now_ms();
        let ids: Vec<OperationId> = (0..4u32)
            .map(|i| OperationId::derive(&key(), "exc", ScopeKind::Session, &[&i.to_be_bytes()], 0))
            .collect();
        for id in &ids[..3] {
            store.claim(id, &claim(now)).await.unwrap();
            assert!(complete(&store, id, 10, now + 60_000).await);
        }
        assert!(matches!(
            store.claim(&ids[3], &claim(now)).await,
            Err(StoreError::Full(_))
        ));
        for id in &ids[..3] {
            assert!(store.lookup(id).await.unwrap().is_some(), "never evicted");
        }

        let store = MemoryStore::with_limits(MemoryLimits {
            max_records: 1000,
            max_bytes: 100_000,
        });
        store.claim(&ids[0], &claim(now)).await.unwrap();
        // An answer is recorded even past the cap: the upstream performed it.
        assert!(complete(&store, &ids[0], 200_000, now + 60_000).await);
        assert!(matches!(
            store.claim(&ids[1], &claim(now)).await,
            Err(StoreError::Full(_))
        ));
    }
}
