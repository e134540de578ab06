//! Log lines an operator can act on. [`Relevel`] writes pingora's records that report nothing
//! wrong (an ERROR for every lost race of its connection pool) at the level they deserve; and a
//! log filter lets the Redis client repeat a warning at most once per
//! [`REDIS_CLIENT_WARNINGS_EVERY`]. While a cluster node is down the client warns about every
//! reconnection attempt (about a dozen a second per gateway); the gateway's own lines (a store
//! failure, `/readyz/store`) already say that the store is in trouble.
//!
//! The decision is made once per event, in [`Filter::event_enabled`]: the Redis client logs
//! through the `log` crate, and its bridge asks `enabled` twice for every record, so a rate
//! limit decided there let the first call through and refused the second, and no warning of
//! the client was ever written.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use tracing::{Event, Level, Metadata};
use tracing_log::NormalizeEvent as _;
use tracing_subscriber::layer::{Context, Filter};

/// The level a record of pingora's is written at, when not the one it was logged at.
fn pingora_level(
    target: &str,
    level: log::Level,
    message: &dyn Fn() -> String,
) -> Option<log::Level> {
    if !target.starts_with("pingora") {
        return None;
    }
    // pingora narrates its start and stop at INFO (29 lines: "Bootstrap starting", "Starting
    // service", "Waiting for runtimes to exit!", ...); the gateway's own lines say what an
    // operator needs ("poppy-gateway starting", "shutting down", "stopping").
    if level == log::Level::Info {
        return Some(log::Level::Debug);
    }
    if level > log::Level::Warn {
        return None;
    }
    match target {
        // An idle pooled upstream connection still watched by its idle task when a request
        // wants it: pingora opens another. No request fails (issue 25: about 1000 such ERROR
        // lines in a 10-minute soak, 220 in a burst of 3200 passthrough requests).
        "pingora_core::connectors" if message() == "failed to acquire reusable stream" => {
            Some(log::Level::Debug)
        }
        // A client whose connection broke while its next request head was awaited, or whose
        // HTTP/2 connection opened with something else than HTTP/2: the client's doing, and it
        // has its answer (or no longer wants one).
        "pingora_proxy" => {
            let text = message();
            (text.starts_with("Fail to proxy: ") && text.contains(", downstream session type: "))
                .then_some(log::Level::Info)
        }
        "pingora_core::apps" if message().starts_with("H2 handshake error") => {
            Some(log::Level::Info)
        }
        _ => None,
    }
}

/// A `log` logger in front of another (the bridge to `tracing`) that writes pingora's records
/// at the levels of [`pingora_level`]; every other record passes untouched.
pub struct Relevel<L> {
    inner: L,
}

impl<L> Relevel<L> {
    pub fn new(inner: L) -> Relevel<L> {
        Relevel { inner }
    }
}

impl<L: log::Log> log::Log for Relevel<L> {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        let message = || match record.args().as_str() {
            Some(text) => text.to_owned(),
            None => record.args().to_string(),
        };
        match pingora_level(record.target(), record.level(), &message) {
            Some(level) => self.inner.log(
                &log::Record::builder()
                    .level(level)
                    .target(record.target())
                    .args(*record.args())
                    .module_path(record.module_path())
                    .file(record.file())
                    .line(record.line())
                    .build(),
            ),
            None => self.inner.log(record),
        }
    }

    fn flush(&self) {
        self.inner.flush()
    }
}

/// How often the Redis client may repeat a warning, per module.
pub const REDIS_CLIENT_WARNINGS_EVERY: Duration = Duration::from_secs(10);

/// Warnings held back since the process started: one count for the whole process, as there
/// is one log; [`crate::metrics::Metrics`] exports it as `poppy_log_lines_suppressed_total`.
/// (`None` only if prometheus refused the name, which a unit test rules out.)
pub(crate) static SUPPRESSED: LazyLock<Option<IntCounter>> = LazyLock::new(|| {
    IntCounter::new(
        "poppy_log_lines_suppressed_total",
        "Repeated warnings of the Redis client held back from the log (at most one per module per 10 s is written)",
    )
    .ok()
});

/// Rate-limits the Redis client's warnings; everything else passes untouched.
#[derive(Debug, Default)]
pub struct QuietRedisClient {
    last: Mutex<HashMap<String, Instant>>,
}

impl<S> Filter<S> for QuietRedisClient {
    fn enabled(&self, _metadata: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        // A `log` record's target is in the event's fields, not its (shared) metadata.
        let normalized = event.normalized_metadata();
        let metadata = normalized.as_ref().unwrap_or_else(|| event.metadata());
        if !metadata.target().starts_with("redis") || *metadata.level() > Level::WARN {
            return true;
        }
        // The map only remembers times; whatever a panic left in it is still usable.
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let written = rate_limited(&mut last, metadata.target(), Instant::now());
        if !written {
            if let Some(suppressed) = SUPPRESSED.as_ref() {
                suppressed.inc();
            }
        }
        written
    }
}

/// Whether `target` may log at `now`, given when each target last did (and note it if so).
fn rate_limited(last: &mut HashMap<String, Instant>, target: &str, now: Instant) -> bool {
    match last.get(target) {
        Some(at) if now.duration_since(*at) < REDIS_CLIENT_WARNINGS_EVERY => false,
        _ => {
            last.insert(target.to_owned(), now);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    #[test]
    fn pingoras_routine_errors_are_written_at_a_lower_level() {
        let level = |target: &str, level: log::Level, text: &str| {
            pingora_level(target, level, &|| text.to_owned())
        };
        assert_eq!(
            level(
                "pingora_core::connectors",
                log::Level::Error,
                "failed to acquire reusable stream"
            ),
            Some(log::Level::Debug)
        );
        assert_eq!(
            level(
                "pingora_proxy",
                log::Level::Error,
                "Fail to proxy: Downstream ReadError context: reset, downstream session type: HTTP/1.1"
            ),
            Some(log::Level::Info)
        );
        // The rest of pingora's errors stay errors.
        assert_eq!(
            level(
                "pingora_core::services::listening",
                log::Level::Error,
                "Accept() failed: Too many open files"
            ),
            None
        );
        assert_eq!(
            level(
                "pingora_proxy",
                log::Level::Error,
                "Fail to proxy: upstream"
            ),
            None
        );
        assert_eq!(
            level(
                "pingora_core::connectors",
                log::Level::Debug,
                "failed to acquire reusable stream"
            ),
            None
        );
        // Its start and stop narration is below INFO; nobody else's INFO is touched.
        for text in ["Server starting", "Waiting for runtimes to exit!"] {
            assert_eq!(
                level("pingora_core::server", log::Level::Info, text),
                Some(log::Level::Debug)
            );
        }
        assert_eq!(level("redis", log::Level::Info, "connected"), None);
    }

    #[test]
    fn redis_client_warnings_are_rate_limited_per_module() {
        let mut last = HashMap::new();
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let a = "redis::cluster_handling::async_connection";
        // A dozen a second for 12 s: two get through.
        let passed = (0..144)
            .filter(|i| rate_limited(&mut last, a, at(i * 83)))
            .count();
        assert_eq!(passed, 2);
        assert!(
            rate_limited(&mut last, "redis::aio", at(100)),
            "another module"
        );
    }

    /// Through the real `log` bridge, as the Redis client logs: the first warning is written,
    /// repeats within the period are not, and the gateway's own lines always are.
    #[test]
    fn the_first_redis_client_warning_is_written() {
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .with_filter(QuietRedisClient::default());
        let subscriber = tracing_subscriber::registry().with(layer);
        let logger = tracing_log::LogTracer::new();
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..5 {
                log::Log::log(
                    &logger,
                    &log::Record::builder()
                        .level(log::Level::Warn)
                        .target("redis::cluster_handling::async_connection")
                        .args(format_args!("Failed to connect to node"))
                        .build(),
                );
                tracing::warn!("store unavailable");
            }
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text.matches("Failed to connect to node").count(),
            1,
            "{text}"
        );
        assert_eq!(text.matches("store unavailable").count(), 5, "{text}");
        // Other tests of this process may hold back warnings too: at least these four.
        assert!(SUPPRESSED.as_ref().unwrap().get() >= 4);
    }
}
