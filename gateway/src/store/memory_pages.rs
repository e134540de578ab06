//! Page decisions in `memory://` (see `OperationStore::decide_on_page`): one process's, as
//! its records are. By action tag, then by field (operation and revision).

use std::collections::HashMap;
use std::sync::Mutex;

use super::{PageDecided, PageDecision, StoreError};

/// How many decisions may be kept at once; past it, expired ones are dropped first, then new
/// decisions fail closed (the page stores nothing and says so).
const MAX_DECISIONS: usize = 100_000;

/// A decision and until when (wall-clock ms) it is kept.
type Kept = (PageDecision, i64);

#[derive(Default)]
pub(super) struct MemoryPages {
    actions: Mutex<HashMap<String, HashMap<String, Kept>>>,
}

impl MemoryPages {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Kept>>> {
        // Single-step map updates: the data behind a poisoned lock is consistent.
        self.actions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn decide(
        &self,
        decision: &PageDecision,
        until_ms: i64,
        now_ms: i64,
    ) -> Result<PageDecided, StoreError> {
        let mut actions = self.lock();
        let tag = decision.operation_id.action_tag().to_owned();
        let field = decision.field();
        if let Some((kept, _)) = actions
            .get(&tag)
            .and_then(|fields| fields.get(&field))
            .filter(|(_, until)| *until > now_ms)
        {
            return Ok(PageDecided::Exists(kept.clone()));
        }
        let count: usize = actions.values().map(HashMap::len).sum();
        if count >= MAX_DECISIONS {
            for fields in actions.values_mut() {
                fields.retain(|_, (_, until)| *until > now_ms);
            }
            actions.retain(|_, fields| !fields.is_empty());
            if actions.values().map(HashMap::len).sum::<usize>() >= MAX_DECISIONS {
                return Err(StoreError::Full(format!(
                    "memory:// holds {MAX_DECISIONS} page decisions"
                )));
            }
        }
        let fields = actions.entry(tag).or_default();
        fields.retain(|_, (_, until)| *until > now_ms);
        fields.insert(field, (decision.clone(), until_ms));
        Ok(PageDecided::Stored)
    }

    pub(super) fn of_action(&self, action_tag: &str, now_ms: i64) -> Vec<PageDecision> {
        self.lock()
            .get(action_tag)
            .into_iter()
            .flat_map(HashMap::values)
            .filter(|(_, until)| *until > now_ms)
            .map(|(decision, _)| decision.clone())
            .collect()
    }
}
