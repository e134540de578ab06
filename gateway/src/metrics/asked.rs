//! Distinct operations asked for approval. Every request without a (valid) approval is
//! answered `403 approval_required`, and an agent may send the same request several times
//! before its user decides, so counting 403s would count one operation many times and make
//! the approval rate read low. This set counts each operation_id once per process until it
//! expires.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Past this many live operations, the set is cleared rather than grown: memory stays bounded
/// and an operation asked again afterwards is counted a second time (the rate reads low,
/// never high).
const CAPACITY: usize = 100_000;

#[derive(Debug, Default)]
pub(crate) struct AskedOnce {
    /// operation_id → when it may be forgotten (its approval window has closed).
    seen: Mutex<HashMap<String, Instant>>,
}

impl AskedOnce {
    /// Whether this is the first time this process asks approval for `operation_id`.
    pub(crate) fn first(&self, operation_id: &str, expires_in: Duration) -> bool {
        let now = Instant::now();
        let mut seen = match self.seen.lock() {
            Ok(seen) => seen,
            // A panic elsewhere while holding the lock: the set is still a valid map.
            Err(poisoned) => poisoned.into_inner(),
        };
        if seen.get(operation_id).is_some_and(|until| *until > now) {
            return false;
        }
        if seen.len() >= CAPACITY {
            seen.retain(|_, until| *until > now);
            if seen.len() >= CAPACITY {
                seen.clear();
            }
        }
        seen.insert(operation_id.to_owned(), now + expires_in);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operation_counts_once_until_it_expires() {
        let asked = AskedOnce::default();
        let long = Duration::from_secs(900);
        assert!(asked.first("exc_a", long));
        assert!(!asked.first("exc_a", long));
        assert!(asked.first("exc_b", long));
        assert!(asked.first("exc_c", Duration::ZERO));
        // Expired: its approval window closed, so a new ask is a new decision to make.
        assert!(asked.first("exc_c", long));
        assert!(!asked.first("exc_c", long));
    }
}
