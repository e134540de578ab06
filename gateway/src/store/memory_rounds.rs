//! Rounds of interim answers in `memory://` (see `OperationStore::put_round`): one process's,
//! as its records are.

use std::collections::HashMap;
use std::sync::Mutex;

use super::StoreError;

/// How many rounds may wait at once; past it, expired ones are dropped first, then new
/// rounds fail closed (their interim answer ends the operation as unknown).
const MAX_ROUNDS: usize = 10_000;

#[derive(Default)]
pub(super) struct MemoryRounds {
    /// By operation and key: the round and until when (wall-clock ms) it waits.
    open: Mutex<HashMap<String, (Vec<u8>, i64)>>,
}

impl MemoryRounds {
    pub(super) fn put(
        &self,
        key: String,
        round: &[u8],
        now_ms: i64,
        until_ms: i64,
    ) -> Result<(), StoreError> {
        let mut open = self
            .open
            .lock()
            .map_err(|_| StoreError::Unavailable("the rounds' lock is poisoned".into()))?;
        if open.len() >= MAX_ROUNDS && !open.contains_key(&key) {
            open.retain(|_, (_, until)| *until > now_ms);
            if open.len() >= MAX_ROUNDS {
                return Err(StoreError::Full(format!(
                    "{MAX_ROUNDS} rounds wait for their follow-up"
                )));
            }
        }
        open.insert(key, (round.to_vec(), until_ms));
        Ok(())
    }

    pub(super) fn take(&self, key: &str, now_ms: i64) -> Result<Option<Vec<u8>>, StoreError> {
        let mut open = self
            .open
            .lock()
            .map_err(|_| StoreError::Unavailable("the rounds' lock is poisoned".into()))?;
        Ok(open
            .remove(key)
            .filter(|(_, until)| *until > now_ms)
            .map(|(round, _)| round))
    }
}
