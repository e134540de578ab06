//! Conversation messages (issue 18): what the operations service answered to a Personal
//! Agent's message, keyed by the message (see `conversations::messages` for the key).
//!
//! Spec 7: "in a conversation, a message retried with the same ID gets the original
//! response". A message is *taken* by the call that handles it (a lease, so that two
//! deliveries of one message are never handled at once) and then either answered (the answer
//! is kept) or let go (no final answer: the next delivery is handled anew). At most once does
//! not rest on this: the operation's own claim does. This only makes the answer to a retried
//! message the original one.
//!
//! [`MemoryMessages`] is `memory://`'s; the Redis store keeps them in `redis/messages.rs`.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;

use super::{MemoryLimits, MessageAnswer, MessageLease, StoreError};

/// What [`super::OperationStore::take_message`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageSlot {
    /// The caller handles the message now: it is new, or its last handler's lease ran out.
    Taken,
    /// Another call is handling it now.
    Busy,
    /// Answered before: the answer as the service recorded it.
    Answered(Bytes),
}

#[derive(Debug, Clone)]
enum Entry {
    Busy { owner: String, lease_until_ms: i64 },
    Answered { answer: Bytes, until_ms: i64 },
}

impl Entry {
    fn live(&self, now_ms: i64) -> bool {
        match self {
            // A lapsed lease is kept until taken over; the sweep drops it a minute later.
            Entry::Busy { lease_until_ms, .. } => lease_until_ms.saturating_add(60_000) > now_ms,
            Entry::Answered { until_ms, .. } => *until_ms > now_ms,
        }
    }

    fn size(&self, key: &str) -> usize {
        // Map slot and struct overhead, roughly, as for operation records.
        256 + key.len()
            + match self {
                Entry::Busy { owner, .. } => owner.len(),
                Entry::Answered { answer, .. } => answer.len(),
            }
    }
}

/// `memory://`'s messages: one map under a lock, bounded like its records.
#[derive(Debug, Default)]
pub(super) struct MemoryMessages {
    inner: Mutex<Inner>,
    limits: MemoryLimits,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    bytes: usize,
}

impl Inner {
    fn sweep(&mut self, now_ms: i64) {
        let mut freed = 0;
        self.entries.retain(|key, entry| {
            let live = entry.live(now_ms);
            if !live {
                freed += entry.size(key);
            }
            live
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }

    fn put(&mut self, key: &str, entry: Entry) {
        self.bytes += entry.size(key);
        if let Some(old) = self.entries.insert(key.to_owned(), entry) {
            self.bytes = self.bytes.saturating_sub(old.size(key));
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes = self.bytes.saturating_sub(old.size(key));
        }
    }
}

impl MemoryMessages {
    pub(super) fn with_limits(limits: MemoryLimits) -> MemoryMessages {
        MemoryMessages {
            inner: Mutex::default(),
            limits,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Single-step map updates: the data behind a poisoned lock is consistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn take(&self, lease: &MessageLease<'_>) -> Result<MessageSlot, StoreError> {
        let MessageLease {
            key,
            owner,
            now_ms,
            lease_until_ms,
        } = *lease;
        let mut inner = self.lock();
        match inner.entries.get(key).filter(|entry| entry.live(now_ms)) {
            Some(Entry::Answered { answer, .. }) => {
                return Ok(MessageSlot::Answered(answer.clone()));
            }
            Some(Entry::Busy { lease_until_ms, .. }) if *lease_until_ms >= now_ms => {
                return Ok(MessageSlot::Busy);
            }
            _ => {}
        }
        let full = |inner: &Inner| {
            inner.entries.len() >= self.limits.max_records || inner.bytes >= self.limits.max_bytes
        };
        if full(&inner) {
            inner.sweep(now_ms);
        }
        if full(&inner) {
            // Fail closed: the message is not handled, so nothing is performed for it.
            return Err(StoreError::Full(format!(
                "memory:// holds {} conversation messages (memory_max_records = {}, memory_max_bytes = {})",
                inner.entries.len(),
                self.limits.max_records,
                self.limits.max_bytes
            )));
        }
        inner.put(
            key,
            Entry::Busy {
                owner: owner.to_owned(),
                lease_until_ms,
            },
        );
        Ok(MessageSlot::Taken)
    }

    pub(super) fn finish(&self, answer: &MessageAnswer<'_>) {
        let MessageAnswer {
            key,
            owner,
            answer,
            remember_until_ms,
        } = *answer;
        let mut inner = self.lock();
        let ours =
            matches!(inner.entries.get(key), Some(Entry::Busy { owner: o, .. }) if o == owner);
        if !ours {
            return;
        }
        match answer {
            Some(answer) => inner.put(
                key,
                Entry::Answered {
                    answer: Bytes::copy_from_slice(answer),
                    until_ms: remember_until_ms,
                },
            ),
            None => inner.remove(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(
        store: &MemoryMessages,
        key: &str,
        owner: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<MessageSlot, StoreError> {
        store.take(&MessageLease {
            key,
            owner,
            now_ms,
            lease_until_ms,
        })
    }

    fn finish(store: &MemoryMessages, key: &str, owner: &str, answer: Option<&[u8]>, until: i64) {
        store.finish(&MessageAnswer {
            key,
            owner,
            answer,
            remember_until_ms: until,
        });
    }

    fn messages(max_records: usize) -> MemoryMessages {
        MemoryMessages::with_limits(MemoryLimits {
            max_records,
            max_bytes: usize::MAX,
        })
    }

    #[test]
    fn a_message_is_handled_once_at_a_time_and_answered_once() {
        let store = messages(10);
        assert_eq!(take(&store, "m", "a", 0, 100).unwrap(), MessageSlot::Taken);
        assert_eq!(take(&store, "m", "b", 50, 150).unwrap(), MessageSlot::Busy);
        // Another owner's answer changes nothing.
        finish(&store, "m", "b", Some(b"theirs"), 1000);
        assert_eq!(take(&store, "m", "b", 60, 160).unwrap(), MessageSlot::Busy);
        finish(&store, "m", "a", Some(b"first"), 1000);
        assert_eq!(
            take(&store, "m", "c", 70, 170).unwrap(),
            MessageSlot::Answered(Bytes::from_static(b"first"))
        );
        // Forgotten once its time is up.
        assert_eq!(
            take(&store, "m", "c", 1000, 1100).unwrap(),
            MessageSlot::Taken
        );
    }

    #[test]
    fn a_lapsed_lease_is_taken_over_and_a_let_go_message_is_handled_anew() {
        let store = messages(10);
        assert_eq!(take(&store, "m", "a", 0, 100).unwrap(), MessageSlot::Taken);
        assert_eq!(
            take(&store, "m", "b", 101, 200).unwrap(),
            MessageSlot::Taken
        );
        // The first handler's late answer is not kept: the message is b's now.
        finish(&store, "m", "a", Some(b"late"), 1000);
        finish(&store, "m", "b", None, 1000);
        assert_eq!(
            take(&store, "m", "c", 150, 250).unwrap(),
            MessageSlot::Taken
        );
    }

    #[test]
    fn a_full_store_refuses_new_messages() {
        let store = messages(2);
        assert_eq!(take(&store, "m1", "a", 0, 100).unwrap(), MessageSlot::Taken);
        assert_eq!(take(&store, "m2", "a", 0, 100).unwrap(), MessageSlot::Taken);
        assert!(matches!(
            take(&store, "m3", "a", 0, 100),
            Err(StoreError::Full(_))
        ));
        finish(&store, "m1", "a", Some(b"x"), 10);
        // Expired entries are swept before refusing.
        assert_eq!(
            take(&store, "m3", "a", 61_000, 61_100).unwrap(),
            MessageSlot::Taken
        );
    }
}
