//! What `memory://` holds: every record and generation counter with its expiry, the in-flight
//! operations of each action, and the estimated bytes, swept of expired entries as it is
//! written and bounded by the store's limits.

use std::collections::HashMap;

use crate::protocol::OperationId;
use crate::store::owner::{Finishable, Finisher};
use crate::store::{KeptAnswer, MemoryLimits, OperationRecord, RecordState};

/// Writes between sweeps of expired entries, at the least; with more live entries the sweep
/// waits for as many writes as there are entries, so its cost stays O(1) per write.
pub(super) const SWEEP_MIN_WRITES: usize = 1024;

/// What an entry costs beyond its strings and body (map slots, the struct, allocator slack):
/// a rough figure, so that `memory_max_bytes` bounds the process's memory and not only the
/// bodies.
const ENTRY_OVERHEAD: usize = 256;

#[derive(Default)]
pub(super) struct Inner {
    /// Keyed by the whole operation_id (action tag + generation tag).
    pub(super) records: HashMap<String, Expiring<OperationRecord>>,
    /// Keyed by the action tag.
    pub(super) generations: HashMap<String, Expiring<u64>>,
    /// The in-flight operations of each action (keyed by the action tag): what a mint reads,
    /// and the operators' listing.
    pub(super) in_flight: HashMap<String, Vec<OperationId>>,
    /// The estimated size of every record held, live or not yet swept.
    pub(super) bytes: usize,
    writes_since_sweep: usize,
}

pub(super) struct Expiring<T> {
    pub(super) value: T,
    /// Wall-clock ms; the entry is absent from then on (as a Redis key after PEXPIREAT).
    /// `i64::MAX` for an in-flight record: it never expires on its own.
    pub(super) expires_at_ms: i64,
}

impl<T> Expiring<T> {
    pub(super) fn live(&self, now_ms: i64) -> bool {
        self.expires_at_ms > now_ms
    }
}

/// The estimated memory one record takes.
fn size_of(key: &str, record: &OperationRecord) -> usize {
    let state = match &record.state {
        RecordState::InFlight { owner, .. } => owner.len(),
        RecordState::Done(response) => {
            response.body.len()
                + response
                    .headers
                    .iter()
                    .map(|(name, value)| name.len() + value.len() + 48)
                    .sum::<usize>()
        }
    };
    ENTRY_OVERHEAD
        + 2 * key.len()
        + record.scope.len()
        + record.policy.len()
        + record.revision.len()
        + record.request.as_ref().map_or(0, String::len)
        + state
}

impl Inner {
    pub(super) fn live_record(&self, key: &str, now: i64) -> Option<&OperationRecord> {
        self.records
            .get(key)
            .filter(|entry| entry.live(now))
            .map(|entry| &entry.value)
    }

    /// Who may finish (complete, resolve, release) the in-flight record of `key`.
    pub(super) fn finishable(&self, key: &str, now: i64, finisher: Finisher<'_>) -> Finishable {
        finisher.finishable(self.live_record(key, now).map(|record| &record.state))
    }

    pub(super) fn insert(&mut self, id: &OperationId, entry: Expiring<OperationRecord>) {
        self.bytes += size_of(id.as_str(), &entry.value);
        if let Some(old) = self.records.insert(id.as_str().to_owned(), entry) {
            self.bytes = self.bytes.saturating_sub(size_of(id.as_str(), &old.value));
        }
    }

    pub(super) fn remove(&mut self, id: &OperationId) {
        if let Some(old) = self.records.remove(id.as_str()) {
            self.bytes = self.bytes.saturating_sub(size_of(id.as_str(), &old.value));
        }
        self.not_in_flight(id);
    }

    fn not_in_flight(&mut self, id: &OperationId) {
        if let Some(ids) = self.in_flight.get_mut(id.action_tag()) {
            ids.retain(|other| other != id);
            if ids.is_empty() {
                self.in_flight.remove(id.action_tag());
            }
        }
    }

    /// Record the answer (of a finishable in-flight record, or of one that vanished) and
    /// move the generation on.
    pub(super) fn record_answer(
        &mut self,
        answer: &KeptAnswer<'_>,
        record: OperationRecord,
        now: i64,
    ) {
        let KeptAnswer {
            id,
            response,
            remember_until_ms,
        } = *answer;
        let expires_at_ms = match self.records.get(id.as_str()) {
            // In flight: it had no expiry of its own.
            Some(entry) if entry.expires_at_ms != i64::MAX => {
                entry.expires_at_ms.max(remember_until_ms)
            }
            _ => remember_until_ms,
        };
        let value = OperationRecord {
            state: RecordState::Done(response.clone()),
            ..record
        };
        self.insert(
            id,
            Expiring {
                value,
                expires_at_ms,
            },
        );
        self.not_in_flight(id);
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
    pub(super) fn wrote(&mut self, now: i64) {
        self.writes_since_sweep += 1;
        let threshold =
            SWEEP_MIN_WRITES.max(self.records.len().saturating_add(self.generations.len()));
        if self.writes_since_sweep >= threshold {
            self.sweep(now);
        }
    }

    pub(super) fn sweep(&mut self, now: i64) {
        let mut freed = 0;
        self.records.retain(|key, entry| {
            let live = entry.live(now);
            if !live {
                freed += size_of(key, &entry.value);
            }
            live
        });
        self.bytes = self.bytes.saturating_sub(freed);
        self.generations.retain(|_, entry| entry.live(now));
        self.writes_since_sweep = 0;
    }

    pub(super) fn full(&self, limits: &MemoryLimits) -> Option<String> {
        if self.records.len() >= limits.max_records {
            Some(format!(
                "memory:// holds {} records (memory_max_records = {})",
                self.records.len(),
                limits.max_records
            ))
        } else if self.bytes >= limits.max_bytes {
            Some(format!(
                "memory:// holds about {} bytes (memory_max_bytes = {})",
                self.bytes, limits.max_bytes
            ))
        } else {
            None
        }
    }

    pub(super) fn generation(&self, action_tag: &str, now: i64) -> u64 {
        self.generations
            .get(action_tag)
            .filter(|entry| entry.live(now))
            .map_or(0, |entry| entry.value)
    }

    pub(super) fn lease_of(&self, id: &OperationId) -> Option<i64> {
        match self
            .records
            .get(id.as_str())
            .map(|entry| &entry.value.state)
        {
            Some(RecordState::InFlight { lease_until_ms, .. }) => Some(*lease_until_ms),
            _ => None,
        }
    }
}
