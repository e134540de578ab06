//! What one request for an operation came to. The adapters return it with their reply
//! (`Step::Operation`); `service.rs` counts and logs it, through [`RequestOutcome::record`],
//! just before the reply is written: here and nowhere else. (The conversations service,
//! which has no pingora proxy phases, calls [`RequestOutcome::record`] as it answers.) With
//! `[webhook]`, that is also where an operation held, performed or of unknown outcome raises
//! its event (`crate::events`), queued without waiting.

use std::time::Duration;

use crate::config::{DEFAULT_ROUTE, EventType};
use crate::events::{Event, Happened};
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
        /// The `[[route]]`'s name; `None` for the default route (nothing allocated).
        route: Option<String>,
        /// The upstream's status, when the operation was performed.
        upstream_status: Option<u16>,
        /// The approval page's link, when the request was held for the page (for
        /// `operation.held`, with `[webhook] page_links`).
        approval_url: Option<String>,
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
            route: None,
            upstream_status: match decision {
                Decision::Performed(response) => Some(response.status),
                _ => None,
            },
            approval_url: None,
        }
    }

    /// The same, held for the approval page at `url`.
    pub(crate) fn with_approval_url(mut self, url: &str) -> RequestOutcome {
        if let RequestOutcome::Decided { approval_url, .. } = &mut self {
            *approval_url = Some(url.to_owned());
        }
        self
    }

    /// The same, decided on the `[[route]]` named `route` (`None`: the default route).
    pub(crate) fn on_route(mut self, route: Option<&str>) -> RequestOutcome {
        if let RequestOutcome::Decided { route: on, .. } = &mut self {
            *on = route.map(str::to_owned);
        }
        self
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

    /// The event it raises (`[webhook]`), if any: an operation held (after a refused approval
    /// too: a new operation to approve), performed, or of unknown outcome.
    fn event(&self, at_ms: i64) -> Option<Event> {
        let RequestOutcome::Decided {
            policy,
            outcome,
            operation_id,
            asked,
            route,
            upstream_status,
            approval_url,
            ..
        } = self
        else {
            return None;
        };
        let kind = match outcome {
            Outcome::Performed => EventType::Performed,
            Outcome::Unknown => EventType::Unknown,
            _ if asked.is_some() => EventType::Held,
            _ => return None,
        };
        if operation_id.is_empty() {
            return None;
        }
        let mut event = Event::new(Happened {
            kind,
            operation_id,
            policy,
            route: route.as_deref().unwrap_or(DEFAULT_ROUTE),
            outcome: outcome.as_str(),
            at_ms,
        });
        event.upstream_status = *upstream_status;
        if kind == EventType::Held {
            event.approval_url.clone_from(approval_url);
        }
        Some(event)
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
                ..
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
                if let Some(events) = crate::events::sink()
                    && let Some(event) = self.event(crate::clock::now_millis())
                {
                    events.emit(event);
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::OperationId;
    use crate::store::RecordedResponse;

    const ID: &str = "exc_aAAAAAAAAAAAAAAAABBBBBBBB";

    fn outcome(decision: &Decision, route: Option<&str>) -> RequestOutcome {
        let approval = ApprovalHeader {
            operation_id: ID.into(),
            revision: "1-x".into(),
        };
        let expires_in = Duration::from_secs(900);
        RequestOutcome::decided("exchange", decision, Some(&approval), None, expires_in)
            .on_route(route)
    }

    fn id() -> OperationId {
        OperationId::parse(ID).expect("an id of the gateway's shape")
    }

    #[test]
    fn performed_and_unknown_outcomes_raise_their_events_on_their_route() {
        let response = RecordedResponse {
            status: 201,
            headers: Vec::new(),
            body: Default::default(),
        };
        let performed = outcome(&Decision::Performed(response), Some("billing"))
            .event(5)
            .expect("an event");
        assert_eq!(performed.kind, EventType::Performed);
        assert_eq!(performed.operation_id, ID);
        assert_eq!(performed.route, "billing");
        assert_eq!(performed.upstream_status, Some(201));
        assert_eq!(performed.at_ms, 5);

        let unknown = outcome(&Decision::Unknown(id()), None)
            .event(0)
            .expect("an event");
        assert_eq!(unknown.kind, EventType::Unknown);
        assert_eq!(unknown.route, "default");
        assert_eq!(unknown.upstream_status, None);
    }

    #[test]
    fn other_outcomes_raise_none() {
        assert_eq!(outcome(&Decision::InProgress(id()), None).event(0), None);
        assert_eq!(
            outcome(&Decision::AlreadyPerformed(id()), None).event(0),
            None
        );
        assert_eq!(outcome(&Decision::StoreUnavailable, None).event(0), None);
        assert_eq!(outcome(&Decision::SignInRequired, None).event(0), None);
        let refused = RequestOutcome::refused("exchange", Outcome::BadRequest, 400);
        assert_eq!(refused.event(0), None);
    }
}
