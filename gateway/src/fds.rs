//! File descriptors: every client connection, every upstream connection in use or pooled, and
//! the process's own files (listeners, runtimes, the store, logs) take one. Run out, and
//! `accept` fails (pingora then pauses its accept loop a second at a time), the upstream
//! cannot be reached, the admin listener stops answering health checks.
//!
//! So the process raises its soft limit to the hard one at startup, and the connection caps
//! are fitted under that limit with a reserve for its own files: when `max_connections` and
//! `max_upstream_connections` would need more descriptors than the process may open, both are
//! lowered in proportion (and the gateway says so). Under the caps the limits of
//! listener/connections.rs apply (waiting connections give their place, the rest get `503`), so a
//! flood of connections meets a `503` or a closed connection, never a process out of
//! descriptors.

/// Descriptors kept for the process's own files, besides those per thread.
const RESERVE: u64 = 64;
/// Descriptors per worker thread (its runtimes' epoll and wakers, its store connections).
const RESERVE_PER_THREAD: u64 = 16;
/// Idle upstream connections pingora's passthrough pool keeps at most (its default).
pub(crate) const UPSTREAM_POOL: usize = 128;

/// The caps in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    pub(crate) max_connections: usize,
    pub(crate) max_upstream_connections: usize,
    /// Idle upstream connections kept for reuse (at most one per upstream connection allowed).
    pub(crate) upstream_pool: usize,
}

/// The caps as configured when `limit` descriptors cover them, else lowered in proportion.
/// Each upstream connection in use may leave one idle in the pool, and `refusing` connections
/// over the cap are being answered at once.
pub(crate) fn fit(
    limit: u64,
    threads: usize,
    max_connections: usize,
    max_upstream_connections: usize,
    refusing: usize,
) -> Caps {
    let fixed = RESERVE + RESERVE_PER_THREAD * threads as u64 + refusing as u64;
    let pool = |upstream: usize| upstream.min(UPSTREAM_POOL);
    let needed = |connections: usize, upstream: usize| {
        (connections + upstream + pool(upstream)) as u64 + fixed
    };
    if needed(max_connections, max_upstream_connections) <= limit {
        return Caps {
            max_connections,
            max_upstream_connections,
            upstream_pool: pool(max_upstream_connections),
        };
    }
    // An upstream connection costs up to two descriptors (in use, then pooled).
    let available = limit.saturating_sub(fixed).max(3) as u128;
    let weight = max_connections as u128 + 2 * max_upstream_connections as u128;
    let connections = (available * max_connections as u128 / weight).max(1) as usize;
    let upstream = ((available - connections as u128) / 2).max(1) as usize;
    Caps {
        max_connections: connections.min(max_connections),
        max_upstream_connections: upstream.min(max_upstream_connections),
        upstream_pool: pool(upstream),
    }
}

/// Raise the soft limit on open files to the hard limit; the soft limit in force after,
/// `None` where it cannot be read.
#[cfg(target_os = "linux")]
pub(crate) fn raise_limit() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(soft, hard, error = %e, "could not raise the open-files limit to its hard limit");
        return Some(soft);
    }
    Some(hard.max(soft))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn raise_limit() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enough_descriptors_keep_the_caps() {
        let caps = fit(1 << 20, 2, 10_000, 10_000, 64);
        assert_eq!(
            caps,
            Caps {
                max_connections: 10_000,
                max_upstream_connections: 10_000,
                upstream_pool: 128
            }
        );
    }

    #[test]
    fn too_few_descriptors_lower_both_caps_within_the_limit() {
        for limit in [256, 512, 1024, 4096, 11_000] {
            let caps = fit(limit, 2, 10_000, 10_000, 64);
            let used = caps.max_connections + caps.max_upstream_connections + caps.upstream_pool;
            // The reserve: 64, 16 per thread, 64 being refused.
            assert!(used as u64 + 160 <= limit, "{limit}: {caps:?}");
            assert!(caps.max_connections >= 1 && caps.max_upstream_connections >= 1);
            assert!(caps.max_connections < 10_000 && caps.max_upstream_connections < 10_000);
        }
        let caps = fit(512, 2, 10_000, 10_000, 64);
        assert_eq!(
            (caps.max_connections, caps.max_upstream_connections),
            (117, 117)
        );
    }

    #[test]
    fn a_tiny_limit_still_leaves_one_of_each() {
        let caps = fit(10, 2, 10_000, 10_000, 64);
        assert!(caps.max_connections >= 1 && caps.max_upstream_connections >= 1);
    }
}
