//! Bounded waiting. Tests synchronise on events (the upstream's gate and arrival counter)
//! where they can; where the only signal is "this becomes true", they poll with a deadline.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const POLL: Duration = Duration::from_millis(10);

/// Poll `condition` until it holds; `false` if `timeout` passed first.
pub async fn until<F>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> bool,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Poll an async probe until it returns `Some`; `None` if `timeout` passed first.
pub async fn until_some<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL * 5).await;
    }
}

/// Seconds since the Unix epoch, as a float.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs_f64()
}

/// Wait (on the clock, not as synchronisation) until the wall clock is past `unix_seconds`.
/// Panics if that is more than `limit` away, so a wrong timestamp cannot hang a test.
pub async fn until_clock_passes(unix_seconds: f64, limit: Duration) {
    let wait = unix_seconds - unix_now();
    assert!(
        wait <= limit.as_secs_f64(),
        "refusing to wait {wait:.1}s for the clock (limit {limit:?})"
    );
    while unix_now() <= unix_seconds {
        let left = (unix_seconds - unix_now()).max(0.0);
        tokio::time::sleep(Duration::from_secs_f64(left.min(0.5)) + POLL).await;
    }
}
