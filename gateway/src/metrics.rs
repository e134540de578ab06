//! Prometheus metrics: one registry, typed handles. Labels are bounded (policy names and fixed
//! outcome words); operation IDs are never labels.

use prometheus::{Encoder, IntCounterVec, Opts, Registry, TextEncoder};

/// What happened to one request for an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered `403 approval_required` for a request without an approval.
    Held,
    /// Approved and forwarded; the answer was recorded.
    Performed,
    /// A retry answered with the recorded answer.
    Replayed,
    /// A retry while the operation is being performed.
    InProgress,
    /// A retry for an operation whose outcome is unknown (lease ran out with no answer).
    Unknown,
    /// An approval that failed check 1 or 3: answered with a new revision.
    Rejected,
    /// A signed-out Session named an account's operation: answered with a sign-in challenge.
    Challenged,
    /// The upstream's answer proved nothing was performed; the claim was released.
    Released,
    /// The request did not declare the extension.
    ExtensionRequired,
    /// Malformed headers, body or terms.
    BadRequest,
    /// The store could not be reached: nothing was forwarded.
    StoreUnavailable,
    /// The policy's `[operation.lookup]` failed: nothing was forwarded.
    LookupFailed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Held => "held",
            Outcome::Performed => "performed",
            Outcome::Replayed => "replayed",
            Outcome::InProgress => "in_progress",
            Outcome::Unknown => "unknown",
            Outcome::Rejected => "rejected",
            Outcome::Challenged => "challenged",
            Outcome::Released => "released",
            Outcome::ExtensionRequired => "extension_required",
            Outcome::BadRequest => "bad_request",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::LookupFailed => "lookup_failed",
        }
    }
}

pub struct Metrics {
    registry: Registry,
    operations: IntCounterVec,
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let operations = IntCounterVec::new(
            Opts::new(
                "poppy_operations_total",
                "Requests for operations, by policy and outcome",
            ),
            &["operation", "outcome"],
        )?;
        registry.register(Box::new(operations.clone()))?;
        Ok(Metrics {
            registry,
            operations,
        })
    }

    pub fn operation(&self, policy: &str, outcome: Outcome) {
        self.operations
            .with_label_values(&[policy, outcome.as_str()])
            .inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}
