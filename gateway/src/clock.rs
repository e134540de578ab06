//! The wall clock. The operation core decides with the times it is given, so its tests pin
//! them; the executor reads them from the [`Clock`] it was built with.

use std::time::{SystemTime, UNIX_EPOCH};

/// Where "now" comes from.
pub(crate) trait Clock: Send + Sync + 'static {
    /// Unix time in milliseconds.
    fn now_millis(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        now_millis()
    }
}

/// Unix time in milliseconds (0 before 1970, which no deployed clock reads).
pub(crate) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
