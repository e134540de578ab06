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
/// The least size at which expired entries are swept out.
const FIRST_SWEEP: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct AskedOnce {
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// operation_id → when it may be forgotten (its approval window has closed).
    until: HashMap<String, Instant>,
    /// Expired entries are swept out when the set reaches this size, which is then twice what
    /// is left: the set holds at most about twice the operations asked within their windows,
    /// and each entry is swept in amortised constant time. (Without it, the set grew until
    /// [`CAPACITY`]: the resident set of an hour's soak rose by 37 KiB a minute.)
    sweep_at: usize,
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
        let Seen { until, sweep_at } = &mut *seen;
        if until.get(operation_id).is_some_and(|until| *until > now) {
            return false;
        }
        if until.len() >= (*sweep_at).max(FIRST_SWEEP) {
            until.retain(|_, until| *until > now);
            if until.len() >= CAPACITY {
                until.clear();
            }
            *sweep_at = until.len() * 2;
        }
        until.insert(operation_id.to_owned(), now + expires_in);
        true
    }

    /// How many operations the set holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.lock().map_or(0, |seen| seen.until.len())
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

    #[test]
    fn expired_operations_are_swept_out() {
        let asked = AskedOnce::default();
        // A steady stream of operations whose windows close at once: the set stays small.
        for i in 0..100_000 {
            assert!(asked.first(&format!("exc_{i}"), Duration::ZERO));
        }
        assert!(asked.len() <= FIRST_SWEEP, "{} held", asked.len());
        // Live ones are kept (each still counts once), and bound the set to twice their number.
        for i in 0..5000 {
            assert!(asked.first(&format!("live_{i}"), Duration::from_secs(900)));
        }
        for i in 0..5000 {
            assert!(!asked.first(&format!("live_{i}"), Duration::from_secs(900)));
        }
        for i in 0..50_000 {
            asked.first(&format!("gone_{i}"), Duration::ZERO);
        }
        assert!(
            asked.len() <= 2 * 5000 + FIRST_SWEEP,
            "{} held",
            asked.len()
        );
    }
}
