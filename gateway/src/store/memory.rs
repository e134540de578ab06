//! The embedded store (`memory://`): one process, nothing survives a restart.
//!
//! Each operation is one critical section under a `std::sync::Mutex`, which is what makes a
//! claim atomic here. Nothing in this file awaits, so the lock is never held across an await.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::{
    Claim, ClaimOutcome, OperationRecord, OperationStore, RecordState, RecordedResponse,
    Resolution, ResolveOutcome, StoreError,
};
use crate::protocol::OperationId;

/// Writes between sweeps of expired entries, at the least; with more live entries the sweep
/// waits for as many writes as there are entries, so its cost stays O(1) per write.
const SWEEP_MIN_WRITES: usize = 1024;

/// The embedded, single-process operation store.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Sizes only: the records hold whole response bodies.
        let inner = self.lock();
        f.debug_struct("MemoryStore")
            .field("records", &inner.records.len())
            .field("generations", &inner.generations.len())
            .finish()
    }
}

#[derive(Default)]
struct Inner {
    /// Keyed by the whole operation_id (action tag + generation tag).
    records: HashMap<String, Expiring<OperationRecord>>,
    /// Keyed by the action tag.
    generations: HashMap<String, Expiring<u64>>,
    writes_since_sweep: usize,
}

/// Whose in-flight record a step may finish.
#[derive(Clone, Copy)]
enum Owner<'a> {
    /// The claim's own (complete, release).
    Exactly(&'a str),
    /// Anybody's: an operator's resolution.
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finishable {
    Yes,
    NoRecord,
    Done,
    /// In flight under another owner.
    NotYours,
}

struct Expiring<T> {
    value: T,
    /// Wall-clock ms; the entry is absent from then on (as a Redis key after PEXPIREAT).
    expires_at_ms: i64,
}

impl<T> Expiring<T> {
    fn live(&self, now_ms: i64) -> bool {
        self.expires_at_ms > now_ms
    }
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
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

impl Inner {
    fn live_record(&self, key: &str, now: i64) -> Option<&OperationRecord> {
        self.records
            .get(key)
            .filter(|entry| entry.live(now))
            .map(|entry| &entry.value)
    }

    /// Who may finish (complete, resolve, release) the in-flight record of `key`.
    fn finishable(&self, key: &str, now: i64, owner: Owner<'_>) -> Finishable {
        match self.live_record(key, now).map(|record| &record.state) {
            None => Finishable::NoRecord,
            Some(RecordState::Done(_)) => Finishable::Done,
            Some(RecordState::InFlight { owner: o, .. }) => match owner {
                Owner::Exactly(owner) if o != owner => Finishable::NotYours,
                _ => Finishable::Yes,
            },
        }
    }

    /// Record the answer of a finishable in-flight record and move the generation on.
    fn record_answer(
        &mut self,
        id: &OperationId,
        response: &RecordedResponse,
        remember_until_ms: i64,
        now: i64,
    ) {
        if let Some(entry) = self.records.get_mut(id.as_str()) {
            entry.value.state = RecordState::Done(response.clone());
            entry.expires_at_ms = entry.expires_at_ms.max(remember_until_ms);
        }
        let generation = self
            .generations
            .entry(id.action_tag().to_owned())
            .or_insert(Expiring {
                value: 0,
                expires_at_ms: remember_until_ms,
            });
        if !generation.live(now) {
            // An expired counter is forgotten, exactly like a Redis key past its expiry.
            generation.value = 0;
            generation.expires_at_ms = remember_until_ms;
        }
        generation.value = generation.value.saturating_add(1);
        generation.expires_at_ms = generation.expires_at_ms.max(remember_until_ms);
        self.wrote(now);
    }

    /// Count a write and, now and then, drop expired entries so memory stays bounded by the
    /// live ones.
    fn wrote(&mut self, now: i64) {
        self.writes_since_sweep += 1;
        let threshold =
            SWEEP_MIN_WRITES.max(self.records.len().saturating_add(self.generations.len()));
        if self.writes_since_sweep >= threshold {
            self.records.retain(|_, entry| entry.live(now));
            self.generations.retain(|_, entry| entry.live(now));
            self.writes_since_sweep = 0;
        }
    }
}

#[async_trait]
impl OperationStore for MemoryStore {
    async fn generation(&self, action_tag: &str) -> Result<u64, StoreError> {
        let now = now_ms();
        let inner = self.lock();
        Ok(inner
            .generations
            .get(action_tag)
            .filter(|entry| entry.live(now))
            .map_or(0, |entry| entry.value))
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
        let generation = inner
            .generations
            .get(id.action_tag())
            .filter(|entry| entry.live(now))
            .map_or(0, |entry| entry.value);
        Ok((inner.live_record(id.as_str(), now).cloned(), generation))
    }

    async fn claim(&self, id: &OperationId, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        let now = now_ms();
        let mut inner = self.lock();
        if let Some(existing) = inner.live_record(id.as_str(), now) {
            return Ok(ClaimOutcome::Exists(existing.clone()));
        }
        let record = OperationRecord {
            scope: claim.scope.clone(),
            policy: claim.policy.clone(),
            revision: claim.revision.clone(),
            created_at_ms: claim.now_ms,
            credentials: claim.credentials.clone(),
            state: RecordState::InFlight {
                owner: claim.owner.clone(),
                lease_until_ms: claim.lease_until_ms,
            },
        };
        inner.records.insert(
            id.as_str().to_owned(),
            Expiring {
                value: record,
                expires_at_ms: claim.remember_until_ms,
            },
        );
        inner.wrote(now);
        Ok(ClaimOutcome::Claimed)
    }

    async fn complete(
        &self,
        id: &OperationId,
        owner: &str,
        response: &RecordedResponse,
        remember_until_ms: i64,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut inner = self.lock();
        if inner.finishable(id.as_str(), now, Owner::Exactly(owner)) != Finishable::Yes {
            return Ok(false);
        }
        inner.record_answer(id, response, remember_until_ms, now);
        Ok(true)
    }

    async fn release(&self, id: &OperationId, owner: &str) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut inner = self.lock();
        let owned = inner.finishable(id.as_str(), now, Owner::Exactly(owner)) == Finishable::Yes;
        if owned {
            inner.records.remove(id.as_str());
            inner.wrote(now);
        }
        Ok(owned)
    }

    async fn resolve(
        &self,
        id: &OperationId,
        resolution: &Resolution,
        remember_until_ms: i64,
    ) -> Result<ResolveOutcome, StoreError> {
        let now = now_ms();
        let mut inner = self.lock();
        match inner.finishable(id.as_str(), now, Owner::Any) {
            Finishable::NoRecord => return Ok(ResolveOutcome::NoRecord),
            Finishable::Done => return Ok(ResolveOutcome::AlreadyDone),
            // `Owner::Any` finishes anybody's in-flight record.
            Finishable::Yes | Finishable::NotYours => {}
        }
        match resolution {
            Resolution::Performed(response) => {
                inner.record_answer(id, response, remember_until_ms, now);
            }
            Resolution::NotPerformed => {
                inner.records.remove(id.as_str());
                inner.wrote(now);
            }
        }
        Ok(ResolveOutcome::Resolved)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ScopeKind, SigningKey};

    #[tokio::test]
    async fn expired_entries_are_swept() {
        let key = SigningKey::new(b"memory store sweep test key material".to_vec());
        let store = MemoryStore::new();
        let now = now_ms();
        for i in 0..3 * SWEEP_MIN_WRITES {
            let material = i.to_be_bytes();
            let id = OperationId::derive(&key, "exc", ScopeKind::Session, &[&material], 0);
            let claim = Claim {
                scope: "s".into(),
                policy: "p".into(),
                revision: "r".into(),
                credentials: None,
                owner: "o".into(),
                now_ms: now,
                lease_until_ms: now,
                // Already past: forgotten as soon as it is written.
                remember_until_ms: now - 1,
            };
            assert_eq!(
                store.claim(&id, &claim).await.unwrap(),
                ClaimOutcome::Claimed
            );
            assert_eq!(store.lookup(&id).await.unwrap(), None);
        }
        assert!(store.lock().records.len() <= SWEEP_MIN_WRITES);
    }
}
