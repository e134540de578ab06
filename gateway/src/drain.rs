//! Graceful shutdown: on SIGTERM, finish the approved forwards in flight (and record their
//! answers) before pingora stops; new approved forwards are refused meanwhile.
//!
//! pingora's own graceful shutdown waits a fixed grace period and then cancels every task, which
//! would cut an approved forward mid-way and leave its outcome unknown. So the gateway watches
//! the signals itself and tells pingora to stop only once nothing is in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::{ShutdownSignal, ShutdownSignalWatch};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;

/// Counts approved forwards in flight and says whether the gateway is draining.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    draining: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
}

/// Held while one approved forward is in flight.
pub(crate) struct ForwardGuard {
    drain: Arc<Drain>,
}

impl Drain {
    /// `None` once draining has begun: the caller must not start a forward.
    pub(crate) fn start_forward(self: &Arc<Self>) -> Option<ForwardGuard> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if self.draining.load(Ordering::SeqCst) {
            self.finish_one();
            return None;
        }
        Some(ForwardGuard {
            drain: Arc::clone(self),
        })
    }

    /// A stop signal has arrived: `/readyz` answers 503 from then on, so that load balancers
    /// stop sending new requests while the approved forwards in flight finish.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    fn finish_one(&self) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Refuse new forwards, then wait (at most `limit`) until those in flight are done.
    pub(crate) async fn drain(&self, limit: Duration) -> bool {
        self.draining.store(true, Ordering::SeqCst);
        let wait = async {
            loop {
                let idle = self.idle.notified();
                if self.in_flight.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

impl Drop for ForwardGuard {
    fn drop(&mut self) {
        self.drain.finish_one();
    }
}

/// On SIGINT, how long the answers of the approved forwards that were just finished get to be
/// written before the process exits.
const FAST_DELIVERY: Duration = Duration::from_millis(250);

/// The signal watch handed to pingora. Every stop signal first finishes (and records) the
/// approved forwards in flight, since cutting one would leave its outcome unknown. Then:
/// SIGTERM and SIGQUIT give other requests `server.shutdown_grace` to finish; SIGINT stops at
/// once (after a moment for the answers of those forwards to be written). SIGQUIT is not
/// pingora's socket-passing upgrade: the gateway has no `--upgrade` mode, so a SIGQUIT would
/// hand its sockets to nobody; it stops like SIGTERM.
pub(crate) struct DrainOnSignal {
    pub(crate) drain: Arc<Drain>,
    /// How long an approved forward may still take: the upstream's connect and answer timeouts.
    pub(crate) limit: Duration,
}

#[async_trait]
impl ShutdownSignalWatch for DrainOnSignal {
    async fn recv(&self) -> ShutdownSignal {
        let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::quit()),
        ) else {
            tracing::error!("cannot watch shutdown signals; stopping");
            return ShutdownSignal::FastShutdown;
        };
        let (name, fast) = tokio::select! {
            _ = term.recv() => ("SIGTERM", false),
            _ = int.recv() => ("SIGINT", true),
            _ = quit.recv() => ("SIGQUIT", false),
        };
        let in_flight = self.drain.in_flight();
        tracing::info!(
            signal = name,
            in_flight,
            "shutting down: finishing approved forwards in flight"
        );
        if self.drain.drain(self.limit).await {
            tracing::info!("no approved forward in flight; stopping");
        } else {
            tracing::error!(
                in_flight = self.drain.in_flight(),
                "approved forwards still in flight after {:?}; their outcome will be unknown",
                self.limit
            );
        }
        if fast {
            // Not pingora's FastShutdown: it drops the runtimes without first stopping the
            // listeners, and an accept loop can then spin on a runtime that is shutting down
            // and never let the process exit (seen in tests/tests/signals.rs). The approved
            // forwards are done and recorded; their answers get a moment to be written (a
            // retry would get the recorded answer anyway), and nothing else has to finish.
            if in_flight > 0 {
                tokio::time::sleep(FAST_DELIVERY).await;
            }
            tracing::info!(signal = name, "exiting now");
            std::process::exit(0);
        }
        ShutdownSignal::GracefulTerminate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_forwards_and_refuses_new_ones() {
        let drain = Arc::new(Drain::default());
        let guard = drain.start_forward().unwrap();
        let waiter = {
            let drain = Arc::clone(&drain);
            tokio::spawn(async move { drain.drain(Duration::from_secs(5)).await })
        };
        // Draining has begun once a new forward is refused.
        tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(g) = drain.start_forward() {
                drop(g);
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        assert!(!waiter.is_finished());
        drop(guard);
        assert!(waiter.await.unwrap());
        assert_eq!(drain.in_flight(), 0);
    }

    #[tokio::test]
    async fn drain_gives_up_after_its_limit() {
        let drain = Arc::new(Drain::default());
        let _guard = drain.start_forward().unwrap();
        assert!(!drain.drain(Duration::from_millis(20)).await);
    }
}
