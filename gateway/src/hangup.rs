//! SIGHUP, for the background services that act on it (the policy reload, the TLS
//! certificate, the access log's reopen): each gets its own stream of the signal, so one
//! SIGHUP reaches all of them.

use pingora::server::ShutdownWatch;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// This service's SIGHUPs; `None`, logged with what will not happen, when the signal can't be
/// handled.
pub(crate) fn hangups(unless_handled: &str) -> Option<Signal> {
    match signal(SignalKind::hangup()) {
        Ok(hangups) => Some(hangups),
        Err(e) => {
            tracing::error!(error = %e, "cannot handle SIGHUP: {unless_handled}");
            None
        }
    }
}

/// Wait for the next SIGHUP: `false` once the server shuts down (or the signal stream ends).
pub(crate) async fn next(hangups: &mut Signal, shutdown: &mut ShutdownWatch) -> bool {
    tokio::select! {
        received = hangups.recv() => received.is_some(),
        _ = shutdown.changed() => false,
    }
}
