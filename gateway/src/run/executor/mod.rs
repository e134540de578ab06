//! The executor: the driver of `operation::flow`. The flow decides the order of an
//! operation's life; this carries out each of its needs against the store, the upstream and
//! the interface's reader, one branch per call, with the spans, logs and metrics of each in
//! one place, and feeds the answer back. It decides nothing itself.

mod record;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;

use super::lookup::{computed_terms, lookup_terms};
use super::outcome::RequestOutcome;
use super::page_offer::PageLink;
use crate::clock::Clock;
use crate::config::Upstream;
use crate::drain::{Drain, ForwardGuard};
use crate::ingress::admit::{Admitted, Agents, Via};
use crate::ingress::{ForwardRequest, Refusal};
use crate::metrics::{Metrics, Outcome};
use crate::operation::flow::{
    Approves, Asked, Decided, End, Event, Flow, Forward, Need, NotForwarded, Released, Setup, Step,
};
use crate::operation::{self, Decision, OperationRequest};
use crate::policy::{LivePolicies, Policy};
use crate::protocol::approved::ApprovedForward;
use crate::protocol::{Keys, OperationId, SigningKey};
use crate::receipts::ReceiptSink;
use crate::store::{FollowUp, KeptRound, Lease, OperationStore, RecordedResponse, StoreError};
use crate::telemetry::Span;
use crate::upstream::forwarded::ProxyContext;
use crate::upstream::{ForwardError, Tap, UpstreamClient};
use record::{Completion, Recorder};

pub(crate) use crate::operation::flow::Read;

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

/// How an interface reads an approved forward's answer before it is recorded: the HTTP
/// API's every answer is final; an MCP call's may not be (`proxy::mcp_calls`).
#[async_trait::async_trait]
pub(crate) trait AnswerReader: Send + Sync {
    /// What `response`, the upstream's answer to `forward`, is. `upstream`: for a reader
    /// that must ask for the rest of it (a stream to resume).
    async fn read(
        &self,
        upstream: &UpstreamClient,
        forward: &ForwardRequest,
        response: RecordedResponse,
        proxy: &ProxyContext,
    ) -> Read;
}

/// Every answer is final.
pub(crate) struct FinalAnswers;

#[async_trait::async_trait]
impl AnswerReader for FinalAnswers {
    async fn read(
        &self,
        _: &UpstreamClient,
        _: &ForwardRequest,
        response: RecordedResponse,
        _: &ProxyContext,
    ) -> Read {
        Read::Final(response)
    }
}

/// How one request's answer is read: its interface's reader, and the token it carries back
/// when it is the follow-up of an interim answer; and what the requests sent upstream for it
/// carry (its proxy headers).
pub(crate) struct Reading<'a> {
    pub(crate) reader: &'a dyn AnswerReader,
    /// `Some`: the request is a follow-up, carrying this (`None` inside: nothing).
    pub(crate) follow_up: Option<Option<String>>,
    /// Where an approved forward's event stream also goes as it arrives.
    pub(crate) tap: Option<Tap>,
    /// The request's proxy headers, for its forward and lookup (`forwarded.rs`).
    pub(crate) proxy: ProxyContext,
}

impl Reading<'_> {
    /// Every answer final, no follow-up: the HTTP API and the conversations service.
    pub(crate) fn plain(proxy: ProxyContext) -> Reading<'static> {
        Reading {
            reader: &FinalAnswers,
            follow_up: None,
            tap: None,
            proxy,
        }
    }
}

/// Everything a request for an operation needs, shared by all requests.
pub(crate) struct Executor {
    parts: ExecutorParts,
    /// The core's expiry and release rules' reading of `parts.settings`.
    rules: operation::ForwardRules,
    /// Identifies this process in claims (`owner`), for operators reading records.
    instance: String,
    claims_made: AtomicU64,
    /// Operations this process has already logged as unknown (each is logged once).
    unknown_logged: Mutex<HashSet<String>>,
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
            unknown_logged: Mutex::new(HashSet::new()),
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

    /// A request decided and carried out with no lookup headers: the unit tests'.
    #[cfg(test)]
    pub(crate) async fn run(
        &self,
        request: OperationRequest,
        forward: &ForwardRequest,
    ) -> Executed {
        let reading = Reading::plain(ProxyContext::default());
        let headers = HeaderMap::new();
        match self
            .drive(request, Approves::Agent, headers, forward.clone(), &reading)
            .await
        {
            Operated::Decided(executed) => executed,
            Operated::Refused(refusal, _) => panic!("refused: {}", refusal.detail),
        }
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

    /// One need carried out: one branch per store or upstream call. `phase`: the span it is
    /// made in (the execution's trace goes with its claim).
    async fn serve(&self, need: Need, run: &mut Run<'_>, phase: Option<&Span>) -> Event {
        let store = &self.parts.store;
        let name = run.policy.name.as_str();
        let failed = |run: &mut Run<'_>, e: StoreError| {
            run.store_error = Some(e);
            Event::StoreFailed
        };
        match need {
            Need::Record(id) => match store.lookup(&id).await {
                Ok(record) => Event::Record(record),
                Err(e) => failed(run, e),
            },
            Need::RecordAndGeneration(id) => match store.lookup_with_generation(&id).await {
                Ok((record, generation)) => Event::RecordAndGeneration(record, generation),
                Err(e) => failed(run, e),
            },
            Need::PageState(action) => match store.page_state(&action).await {
                Ok((state, decisions)) => Event::PageState(state, decisions),
                Err(e) => failed(run, e),
            },
            Need::ActionState(action) => match store.action_state(action.as_str()).await {
                Ok(state) => Event::ActionState(state),
                Err(e) => failed(run, e),
            },
            Need::Terms(mut terms) => {
                let policy = Arc::clone(&run.policy);
                // Lookups' upstream calls in a box of their own (as the forward's, below).
                let looked_up = if policy.lookups.is_empty() {
                    computed_terms(&policy, &mut terms)
                } else {
                    Box::pin(lookup_terms(
                        &self.parts.upstream,
                        &run.reading.proxy,
                        &policy,
                        &run.headers,
                        &run.forward.body,
                        &mut terms,
                    ))
                    .await
                };
                match looked_up {
                    Ok(()) => Event::Terms(Some(terms)),
                    Err(refused) => {
                        run.refused = Some(refused);
                        Event::Terms(None)
                    }
                }
            }
            Need::StartForward { .. } => match self.parts.drain.start_forward() {
                Some(guard) => {
                    run.guard = Some(guard);
                    let made = self.claims_made.fetch_add(1, Ordering::Relaxed);
                    Event::Started {
                        owner: format!("{}-{made}", self.instance),
                        trace: phase.and_then(Span::traceparent),
                    }
                }
                None => Event::ShuttingDown,
            },
            Need::Claim(id, claim) => {
                let span = Span::phase("poppy.claim");
                let outcome = span.within(store.claim(&id, &claim)).await;
                if let Err(_) | Ok(crate::store::ClaimOutcome::Exists(_)) = &outcome {
                    span.set("poppy.claimed", false);
                }
                match outcome {
                    Ok(outcome) => Event::Claimed(outcome),
                    Err(e) => failed(run, e),
                }
            }
            // Boxed, as is the record: inline, a forward's future would make
            // every request's (a mint's, a replay's) as large, allocated and copied whole
            // (BENCHMARKS.md, "In flight, part by part").
            Need::Forward(forward) => Event::Forwarded(Box::pin(self.forward(&forward, run)).await),
            Need::ReadAnswer(response) => {
                let reading = run.reading;
                let upstream = &self.parts.upstream;
                let read = reading
                    .reader
                    .read(upstream, &run.forward, response, &reading.proxy);
                Event::Read(read.await)
            }
            Need::Release { id, owner, why } => {
                if let Err(e) = store.release(&id, &owner).await {
                    // The record stays in flight and turns unknown: safe, never forwarded twice.
                    tracing::error!(policy = name, operation_id = %id, outcome = "unknown", error = %e, "claim not released; retries will get 503 until it is resolved");
                }
                match why {
                    Released::Status(status) => {
                        tracing::info!(policy = name, operation_id = %id, status, outcome = "released", "upstream performed nothing; claim released")
                    }
                    Released::NotSent(e) => {
                        tracing::warn!(policy = name, operation_id = %id, error = %e, outcome = "released", "upstream unreachable; nothing sent, claim released")
                    }
                }
                Event::Carried
            }
            Need::Complete {
                id,
                response,
                round,
            } => {
                let policies = self.parts.policies.clone();
                let completion = Completion::new(*round, name, policies, run.guard.take());
                let recorder = Recorder {
                    store,
                    receipts: self.parts.receipts.as_ref(),
                    clock: &self.parts.clock,
                };
                let span = Span::phase("poppy.record");
                span.within(Box::pin(recorder.record(&id, response, completion)))
                    .await;
                Event::Carried
            }
            Need::KeepRound(keep) => {
                let kept = KeptRound {
                    id: &keep.id,
                    key: &keep.key,
                    round: &keep.round,
                    owner: &keep.owner,
                    until_ms: keep.until_ms,
                    lease_until_ms: keep.lease_until_ms,
                    now_ms: keep.now_ms,
                };
                let id = &keep.id;
                Event::RoundKept(match store.put_round(&kept).await {
                    Ok(true) => true,
                    Ok(false) => {
                        tracing::warn!(policy = name, operation_id = %id, "the claim is no longer in flight under its owner; the round is not kept");
                        false
                    }
                    Err(e) => {
                        tracing::warn!(policy = name, operation_id = %id, error = %e, "the round could not be kept for its follow-up");
                        false
                    }
                })
            }
            Need::TakeRound { id, key, now_ms } => {
                let follow_up = FollowUp {
                    id: &id,
                    key: &key,
                    now_ms,
                };
                match store.take_round(&follow_up).await {
                    Ok(kept) => Event::RoundTaken(kept),
                    Err(e) => failed(run, e),
                }
            }
            Need::SetLease {
                id,
                owner,
                until_ms,
            } => {
                let lease = Lease {
                    id: &id,
                    owner: &owner,
                    until_ms,
                };
                if let Err(e) = store.set_lease(&lease).await {
                    tracing::warn!(policy = name, operation_id = %id, error = %e, "the round's lease could not be ended; retries read in progress until it runs out");
                }
                Event::Carried
            }
        }
    }

    /// The approved request, forwarded once: with its operation ID in the configured header,
    /// for the upstream's logs, and (with `[upstream.approval_header]`) what was approved,
    /// signed, for an upstream that checks.
    async fn forward(
        &self,
        forward: &Forward,
        run: &Run<'_>,
    ) -> Result<RecordedResponse, NotForwarded> {
        let name = run.policy.name.as_str();
        let id = &forward.id;
        match forward.first {
            Some(expires_at) => {
                let expires_in = run.policy.expires_in;
                self.parts
                    .metrics
                    .approval_delay(name, expires_at, expires_in);
                let via = if forward.via_page { "page" } else { "agent" };
                tracing::info!(policy = name, operation_id = %id, outcome = "claimed", approved_via = via, "approved; forwarding once");
            }
            None => {
                tracing::info!(policy = name, operation_id = %id, outcome = "claimed", "a follow-up of an interim answer; forwarding it under the same claim")
            }
        }
        let approved = ApprovedForward {
            operation_id: id.as_str(),
            revision: &forward.revision,
            policy: name,
            terms: &forward.terms,
            now_ms: self.now(),
        };
        let reading = run.reading;
        let sent = self.parts.upstream.send_approved(
            run.forward.clone(),
            &approved,
            &reading.proxy,
            reading.tap.as_ref(),
        );
        let answered = if forward.first.is_some() {
            // The forward carries this span's `traceparent`: the upstream's parent.
            let span = Span::client("poppy.forward");
            let answered = span
                .within(self.parts.metrics.upstream_call(name, sent))
                .await;
            match &answered {
                Ok(response) => span.set("http.response.status_code", i64::from(response.status)),
                Err(_) => span.fail("no answer from the upstream"),
            }
            answered
        } else {
            self.parts.metrics.upstream_call(name, sent).await
        };
        answered.map_err(|e| match e {
            ForwardError::NotSent(e) => {
                if forward.first.is_none() {
                    tracing::warn!(policy = name, operation_id = %id, error = %e, "upstream unreachable; the follow-up was not sent");
                }
                NotForwarded::NotSent(e)
            }
            ForwardError::Unknown(e) => NotForwarded::Unknown(e),
        })
    }

    /// What the flow's end comes to for the interface, with its log lines and spans.
    fn ended(&self, flow: &Flow<'_>, end: End, mut run: Run<'_>) -> Operated {
        let policy = flow.policy();
        let name = policy.name.as_str();
        let decided = match end {
            End::PageSignInRequired => {
                return Operated::Refused(page_sign_in_required(), Outcome::Challenged);
            }
            End::Declined(id) => {
                tracing::info!(policy = name, operation_id = %id, outcome = "declined", "declined on the approval page; nothing performed");
                return Operated::Refused(declined(), Outcome::Rejected);
            }
            End::LookupRefused => match run.refused.take() {
                Some((refusal, outcome)) => return Operated::Refused(refusal, outcome),
                None => Decided {
                    decision: Decision::StoreUnavailable,
                    rejection: None,
                    approval: None,
                    linked: None,
                    why: None,
                },
            },
            End::Decided(decided) => decided,
        };
        let Decided {
            decision,
            rejection,
            approval,
            linked,
            why,
        } = decided;
        let operation_id = approval.as_ref().map_or("", |a| a.operation_id.as_str());
        match &decision {
            Decision::StoreUnavailable => match &run.store_error {
                Some(e) => {
                    tracing::warn!(policy = name, error = %e, "store unavailable; nothing forwarded")
                }
                None => tracing::warn!(policy = name, "store unavailable; nothing forwarded"),
            },
            Decision::Unknown(id) => self.log_unknown(id, name, why.as_deref().unwrap_or_default()),
            Decision::NotTheApprover(id) => {
                tracing::warn!(policy = name, operation_id = %id, outcome = "rejected", "a follow-up of an interim answer from a Session that may not approve the operation; not forwarded")
            }
            Decision::Interim(_) => {
                tracing::info!(
                    policy = name,
                    operation_id = operation_id,
                    outcome = "interim",
                    "an interim answer; the operation stays claimed for its follow-up"
                )
            }
            Decision::Replayed(_) => {
                // Linked to the span that executed the operation, when its record kept one.
                let span = Span::linked("poppy.replay", linked.as_deref());
                span.set_with("poppy.policy", || name.to_owned());
                span.set_with("poppy.operation_id", || operation_id.to_owned());
                span.set("poppy.outcome", Outcome::Replayed.as_str());
            }
            _ => {}
        }
        if let Some(span) = &run.phase {
            span.set("poppy.outcome", decision.outcome().as_str());
        }
        let page_url = match &decision {
            Decision::ApprovalRequired { operation, .. } if policy.approval.page_proof => {
                PageLink::for_operation(
                    self.parts.page_url.as_deref(),
                    self.parts.keys.current(),
                    policy,
                    operation,
                    flow.account(),
                    self.parts.route.as_deref(),
                )
                .map(|link| link.url)
            }
            _ => None,
        };
        let outcome = RequestOutcome::decided(
            name,
            &decision,
            approval.as_ref(),
            rejection,
            policy.expires_in,
        )
        .on_route(self.parts.route.as_deref());
        Operated::Decided(Executed {
            decision,
            outcome,
            page_url,
        })
    }

    /// An unknown outcome, logged once per operation in this process (every retry would
    /// repeat it).
    fn log_unknown(&self, id: &OperationId, policy: &str, why: &str) {
        let first = match self.unknown_logged.lock() {
            Ok(mut seen) => {
                if seen.len() >= 10_000 {
                    seen.clear();
                }
                seen.insert(id.to_string())
            }
            Err(_) => true,
        };
        if first {
            tracing::error!(policy, operation_id = %id, outcome = "unknown", why, "outcome unknown; the operation will not be forwarded again unless an operator resolves it as not performed");
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

/// A request without the extension whose account declined it on the approval page.
/// (The operation is not named: a request without the extension gets no operations.)
fn declined() -> Refusal {
    Refusal::new(
        403,
        "approval_declined",
        "the user declined this action on the company's approval page; nothing was performed. The same request gets this answer until the declined approval expires; a request with other terms gets a new approval link",
    )
}

/// A request without the extension and without a bearer token: nobody can approve it on
/// the page, which asks the account the request acts for to sign in.
fn page_sign_in_required() -> Refusal {
    Refusal::new(
        401,
        "sign_in_required",
        "this action is approved on the company's approval page by the account it acts for: send the request with the user's token (Authorization: Bearer …) to get the approval link; nothing was performed",
    )
}
