//! What one request for an operation came to. The adapters return it with their reply
//! (`Step::Operation`); `service.rs` counts and logs it, through [`RequestOutcome::record`],
//! just before the reply is written: here and nowhere else. (The conversations service,
//! which has no pingora proxy phases, calls [`RequestOutcome::record`] as it answers.)

use std::time::Duration;

use crate::metrics::{Metrics, Outcome, Rejection};
use crate::operation::Decision;
use crate::protocol::ApprovalHeader;

/// The outcome of one request for an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RequestOutcome {
    /// The executor decided.
    Decided {
        policy: String,
        outcome: Outcome,
        /// The operation returned, else the one named (empty when there is none).
        operation_id: String,
        /// Why the approval the request carried was refused, if it was.
        rejection: Option<Rejection>,
        /// The policy's `expires_in`, when the answer asked the User to approve an operation.
        asked: Option<Duration>,
    },
    /// Refused before the flow (nothing decided, nothing forwarded); `status` is the reply's.
    Refused {
        policy: String,
        outcome: Outcome,
        status: u16,
    },
}

impl RequestOutcome {
    /// The outcome of a decision about a request for `policy`.
    pub(crate) fn decided(
        policy: &str,
        decision: &Decision,
        approval: Option<&ApprovalHeader>,
        rejection: Option<Rejection>,
        expires_in: Duration,
    ) -> RequestOutcome {
        RequestOutcome::Decided {
            policy: policy.to_owned(),
            outcome: decision.outcome(),
            operation_id: decision.operation_id(approval),
            rejection,
            asked: matches!(decision, Decision::ApprovalRequired { .. }).then_some(expires_in),
        }
    }

    /// A request for an operation refused before the executor, answered with `status`.
    pub(crate) fn refused(policy: &str, outcome: Outcome, status: u16) -> RequestOutcome {
        RequestOutcome::Refused {
            policy: policy.to_owned(),
            outcome,
            status,
        }
    }

    /// The operation it was about (empty when none is named).
    pub(crate) fn operation_id(&self) -> &str {
        match self {
            RequestOutcome::Decided { operation_id, .. } => operation_id,
            RequestOutcome::Refused { .. } => "",
        }
    }

    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            RequestOutcome::Decided { outcome, .. } | RequestOutcome::Refused { outcome, .. } => {
                *outcome
            }
        }
    }

    /// Note it on the request's span (the metrics' words).
    pub(crate) fn trace(&self, span: &crate::telemetry::Span) {
        let (RequestOutcome::Decided { policy, .. } | RequestOutcome::Refused { policy, .. }) =
            self;
        span.set_with("poppy.policy", || policy.clone());
        span.set("poppy.outcome", self.outcome().as_str());
        if !self.operation_id().is_empty() {
            span.set_with("poppy.operation_id", || self.operation_id().to_owned());
        }
    }

    /// Count it, and log it: the one place either happens.
    pub(crate) fn record(&self, metrics: &Metrics) {
        match self {
            RequestOutcome::Decided {
                policy,
                outcome,
                operation_id,
                rejection,
                asked,
            } => {
                if let Some(reason) = rejection {
                    metrics.rejected(policy, *reason);
                }
                metrics.operation(policy, *outcome);
                if let Some(expires_in) = asked {
                    metrics.asked(policy, operation_id, *expires_in);
                }
                // `debug`: one line per request is the access log's job (`[access_log]`);
                // at `info` this line was 6% of a mint's or replay's CPU, with a `write` of its
                // own (BENCHMARKS.md). What changes state (a claim, an answer recorded, a
                // release, an unknown outcome) is logged at `info` or above by the executor.
                tracing::debug!(
                    policy = %policy,
                    operation_id = operation_id.as_str(),
                    outcome = outcome.as_str(),
                    "operation"
                );
            }
            RequestOutcome::Refused {
                policy,
                outcome,
                status,
            } => {
                metrics.operation(policy, *outcome);
                tracing::debug!(policy = %policy, outcome = outcome.as_str(), status, "operation request refused before the flow");
            }
        }
    }
}
