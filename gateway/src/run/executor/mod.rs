//! The executor: the driver of `operation::flow`. The flow decides the order of an
//! operation's life; this carries out each of its needs against the store, the upstream and
//! the interface's reader, one branch per call, with the spans, logs and metrics of each in
//! one place, and feeds the answer back. It decides nothing itself.

mod ended;
mod serve;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use http::HeaderMap;

use super::end_log::EndLog;
use super::outcome::RequestOutcome;
use super::reading::Reading;
use crate::clock::Clock;
use crate::config::Upstream;
use crate::drain::{Drain, ForwardGuard};
use crate::ingress::admit::{Admitted, Agents, Via};
use crate::ingress::{ForwardRequest, Refusal};
use crate::metrics::{Metrics, Outcome};
use crate::operation::flow::{Approves, Asked, Event, Flow, Need, Setup, Step};
use crate::operation::{self, Decision, OperationRequest};
use crate::policy::{LivePolicies, Policy};
use crate::protocol::{Keys, OperationId, SigningKey};
use crate::receipts::ReceiptSink;
use crate::store::{OperationStore, StoreError};
use crate::telemetry::Span;
use crate::upstream::UpstreamClient;

/// What the executor is built from.
pub(crate) struct ExecutorParts {
    pub(crate) keys: Keys,
    pub(crate) store: Arc<dyn OperationStore>,
    pub(crate) upstream: Arc<UpstreamClient>,
    pub(crate) settings: Upstream,
    /// A `[[route]]`'s name: bound into what every revision it mints covers, so an approval
    /// returned on one route never approves a request on another. `None` for the default
    /// route (`[upstream]`), whose revisions are as they always were.
    pub(crate) route: Option<String>,
    pub(crate) remember_grace: Duration,
    /// `[approval_page] public_url`: where the page's links point (none without the table).
    pub(crate) page_url: Option<String>,
    /// `[approval_page.agents]`: which requests without a `Poppy-Session` are agents'.
    pub(crate) agents: Option<Agents>,
    /// The policies in force: a completion remembers the operation as long as a revision
    /// minted under them could be approved, even after a reload during the forward.
    pub(crate) policies: LivePolicies,
    pub(crate) metrics: Arc<Metrics>,
    /// Approved forwards in flight, for a graceful shutdown.
    pub(crate) drain: Arc<Drain>,
    /// `[receipts]`: a receipt for every performed operation.
    pub(crate) receipts: Option<Arc<ReceiptSink>>,
    pub(crate) clock: Arc<dyn Clock>,
}

/// Everything a request for an operation needs, shared by all requests.
pub(crate) struct Executor {
    parts: ExecutorParts,
    /// The core's expiry and release rules' reading of `parts.settings`.
    rules: operation::ForwardRules,
    /// Identifies this process in claims (`owner`), for operators reading records.
    instance: String,
    claims_made: AtomicU64,
    /// How flows ended, logged (unknown outcomes once per operation).
    ends: EndLog,
}

/// A decision, and what to count and log of it.
pub(crate) struct Executed {
    pub(crate) decision: Decision,
    pub(crate) outcome: RequestOutcome,
    /// An operation held under `proof = "company_page"`: its page's link, which the User
    /// opens to approve the same revision there (the HTTP API's `approval_url`).
    pub(crate) page_url: Option<String>,
}

/// What became of a request the front door let in.
pub(crate) enum Operated {
    /// The executor decided (what to count and log of it included).
    Decided(Executed),
    /// Refused by the policy's lookup (a term its URL can't take, a failed lookup), or on
    /// the approval page: nothing decided, nothing forwarded.
    Refused(Refusal, Outcome),
    /// The policy's condition is false for the request's terms: nothing held or recorded;
    /// the interface sends it on as a request no policy names (this is what it sends).
    NotHeld(ForwardRequest),
}

/// One request's carrying out: what it is, and what the driver holds between needs.
struct Run<'r> {
    policy: Arc<Policy>,
    headers: HeaderMap,
    forward: ForwardRequest,
    reading: &'r Reading<'r>,
    /// The phase span the calls are made in: `poppy.mint` or `poppy.execute`.
    phase: Option<Span>,
    /// The forward in flight: a graceful shutdown waits for it until its answer is recorded.
    guard: Option<ForwardGuard>,
    /// The lookup's refusal, for [`End::LookupRefused`].
    refused: Option<(Refusal, Outcome)>,
    /// The store's last failure, for the log.
    store_error: Option<StoreError>,
}

impl Executor {
    pub(crate) fn new(parts: ExecutorParts) -> Executor {
        Executor {
            rules: parts.settings.forward_rules(),
            parts,
            instance: format!("{:08x}", rand::random::<u32>()),
            claims_made: AtomicU64::new(0),
            ends: EndLog::default(),
        }
    }

    /// The store, for the conversations service's own records (its messages).
    pub(crate) fn store(&self) -> Arc<dyn OperationStore> {
        Arc::clone(&self.parts.store)
    }

    /// The key that signs now.
    pub(crate) fn signing_key(&self) -> &SigningKey {
        self.parts.keys.current()
    }

    /// Where the Company's approval page's links point, if the gateway has one.
    pub(crate) fn page_url(&self) -> Option<&str> {
        self.parts.page_url.as_deref()
    }

    /// `[approval_page.agents]` (none without it: requests without a Session pass through).
    pub(crate) fn agents(&self) -> Option<&Agents> {
        self.parts.agents.as_ref()
    }

    /// The `[[route]]` this executor serves (`None`: the default route).
    pub(crate) fn route(&self) -> Option<&str> {
        self.parts.route.as_deref()
    }

    /// The upstream's client, for a request the flow leaves unheld (`super::unheld`).
    pub(crate) fn upstream(&self) -> &UpstreamClient {
        &self.parts.upstream
    }

    /// This process, as claims name it.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// A request the front door let in, carried through its flow, its answer read by
    /// `reading`.
    pub(crate) async fn operate(&self, admitted: Admitted, reading: &Reading<'_>) -> Operated {
        let approves = match admitted.via {
            Via::Agent => Approves::Agent,
            Via::Page => Approves::Page,
        };
        let request = OperationRequest {
            policy: admitted.policy,
            approver: admitted.approver,
            approval: admitted.approval,
            terms: admitted.terms,
            fingerprint: admitted.fingerprint,
        };
        self.drive(
            request,
            approves,
            admitted.headers,
            admitted.forward,
            reading,
        )
        .await
    }

    /// The loop: what the flow needs, carried out, fed back, until it ends.
    async fn drive(
        &self,
        request: OperationRequest,
        approves: Approves,
        headers: HeaderMap,
        forward: ForwardRequest,
        reading: &Reading<'_>,
    ) -> Operated {
        let setup = Setup {
            keys: &self.parts.keys,
            rules: &self.rules,
            route: self.parts.route.as_deref(),
            remember_grace: self.parts.remember_grace,
            receipts: self.parts.receipts.is_some(),
        };
        let asked = Asked {
            request,
            approves,
            follow_up: reading.follow_up.clone(),
        };
        let mut run = Run {
            policy: Arc::clone(&asked.request.policy),
            headers,
            forward,
            reading,
            phase: None,
            guard: None,
            refused: None,
            store_error: None,
        };
        let mut flow = Flow::new(setup, asked);
        loop {
            let need = match flow.next() {
                Step::Need(need) => need,
                Step::Done(end) => return self.ended(&flow, end, run),
            };
            match &need {
                Need::ActionState(_) => {
                    run.phase = Some(phase_span("poppy.mint", &run.policy, None))
                }
                Need::StartForward {
                    id,
                    follow_up: false,
                } => run.phase = Some(phase_span("poppy.execute", &run.policy, Some(id))),
                _ => {}
            }
            let event = match run.phase.take() {
                Some(span) => {
                    let event = span.within(self.serve(need, &mut run, Some(&span))).await;
                    run.phase = Some(span);
                    event
                }
                None => self.serve(need, &mut run, None).await,
            };
            if let (Some(span), Event::Claimed(crate::store::ClaimOutcome::Exists(_))) =
                (&run.phase, &event)
            {
                span.set("poppy.claimed_by_another", true);
                run.phase = None;
            }
            if let (Some(span), Event::StoreFailed) = (&run.phase, &event) {
                span.fail("the store did not answer");
            }
            flow.on(event, self.now());
        }
    }

    fn now(&self) -> i64 {
        self.parts.clock.now_millis()
    }
}

/// A phase span of one operation.
fn phase_span(name: &'static str, policy: &Policy, id: Option<&OperationId>) -> Span {
    let span = Span::phase(name);
    span.set_with("poppy.policy", || policy.name.clone());
    if let Some(id) = id {
        span.set_with("poppy.operation_id", || id.to_string());
    }
    span
}
