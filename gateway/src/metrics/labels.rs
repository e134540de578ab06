//! The fixed label values of the gateway's metrics. Each set is small and known in advance,
//! so every series can be created (at 0) when the gateway starts.

use super::Outcome;

impl Outcome {
    /// Every outcome, for creating their series up front.
    pub(crate) const ALL: [Outcome; 15] = [
        Outcome::Held,
        Outcome::Performed,
        Outcome::Replayed,
        Outcome::AlreadyPerformed,
        Outcome::InProgress,
        Outcome::Unknown,
        Outcome::Rejected,
        Outcome::Challenged,
        Outcome::Released,
        Outcome::UpstreamUnavailable,
        Outcome::ExtensionRequired,
        Outcome::BadRequest,
        Outcome::StoreUnavailable,
        Outcome::ShuttingDown,
        Outcome::LookupFailed,
    ];
}

/// One method of the operation store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreCall {
    Generation,
    Lookup,
    Claim,
    Complete,
    Release,
    Resolve,
    Ping,
}

impl StoreCall {
    pub(crate) const ALL: [StoreCall; 7] = [
        StoreCall::Generation,
        StoreCall::Lookup,
        StoreCall::Claim,
        StoreCall::Complete,
        StoreCall::Release,
        StoreCall::Resolve,
        StoreCall::Ping,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StoreCall::Generation => "generation",
            StoreCall::Lookup => "lookup",
            StoreCall::Claim => "claim",
            StoreCall::Complete => "complete",
            StoreCall::Release => "release",
            StoreCall::Resolve => "resolve",
            StoreCall::Ping => "ping",
        }
    }
}

/// The `limit` label of `poppy_limits_hit_total`: which limit refused or closed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// `server.max_held_body_bytes`: `503 gateway_busy`.
    HeldBodies,
    /// `server.body_read_timeout`: `408 request_timeout`.
    BodyTimeout,
    /// `server.header_read_timeout`: the connection was closed.
    HeaderTimeout,
    /// `server.max_connections`: `503` and closed (or closed at once when many are being
    /// refused already).
    Connections,
    /// `server.max_connections`: a connection still waiting for a request head (in its TLS
    /// handshake, before its first request, idle between two) closed to make room for a new one.
    ConnectionsReclaimed,
    /// `server.max_upstream_connections`: no upstream connection came free in time (`503`).
    UpstreamConnections,
}

impl Limit {
    pub(crate) const ALL: [Limit; 6] = [
        Limit::HeldBodies,
        Limit::BodyTimeout,
        Limit::HeaderTimeout,
        Limit::Connections,
        Limit::ConnectionsReclaimed,
        Limit::UpstreamConnections,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Limit::HeldBodies => "held_bodies",
            Limit::BodyTimeout => "body_timeout",
            Limit::HeaderTimeout => "header_timeout",
            Limit::Connections => "connections",
            Limit::ConnectionsReclaimed => "connections_reclaimed",
            Limit::UpstreamConnections => "upstream_connections",
        }
    }
}

/// Whether a policy reload applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReloadResult {
    Success,
    /// The files did not validate: the running policies were kept.
    Failure,
}

impl ReloadResult {
    pub(crate) const ALL: [ReloadResult; 2] = [ReloadResult::Success, ReloadResult::Failure];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Success => "success",
            ReloadResult::Failure => "failure",
        }
    }
}

/// The `class` label of passthrough requests: `none` when no response was written (the
/// client went away first).
pub(crate) const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "none"];

pub(crate) fn status_class(status: Option<u16>) -> &'static str {
    match status {
        Some(100..=199) => "1xx",
        Some(200..=299) => "2xx",
        Some(300..=399) => "3xx",
        Some(400..=499) => "4xx",
        Some(500..=599) => "5xx",
        _ => "none",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::outcome::Rejection;

    #[test]
    fn status_classes() {
        assert_eq!(status_class(Some(204)), "2xx");
        assert_eq!(status_class(Some(404)), "4xx");
        assert_eq!(status_class(Some(503)), "5xx");
        assert_eq!(status_class(Some(101)), "1xx");
        assert_eq!(status_class(None), "none");
        assert_eq!(status_class(Some(999)), "none");
        for class in ["1xx", "2xx", "3xx", "4xx", "5xx", "none"] {
            assert!(STATUS_CLASSES.contains(&class));
        }
    }

    #[test]
    fn label_values_are_distinct() {
        let mut outcomes: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        outcomes.sort_unstable();
        outcomes.dedup();
        assert_eq!(outcomes.len(), Outcome::ALL.len());
        let mut reasons: Vec<&str> = Rejection::ALL.iter().map(|r| r.as_str()).collect();
        reasons.sort_unstable();
        reasons.dedup();
        assert_eq!(reasons.len(), Rejection::ALL.len());
    }
}
