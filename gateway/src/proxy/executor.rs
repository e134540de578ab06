//! The executor: carries out the operation core's verdicts (`crate::operation`) against the
//! store and the upstream. The core decides; this only asks the store what a step needs,
//! claims, forwards once, releases or records, and says what the request came to.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::forwarded::ProxyContext;
use super::lookup::{computed_terms, lookup_terms};
use super::outcome::RequestOutcome;
use super::page_offer::PageLink;
use super::rounds::{self, ROUND_TTL, Round};
use super::upstream::{ForwardError, Tap, UpstreamClient};
use crate::clock::Clock;
use crate::config::Upstream;
use crate::drain::{Drain, ForwardGuard};
use crate::identity::Approver;
use crate::ingress::admit::{Admitted, Agents, Via};
use crate::ingress::{ForwardRequest, Refusal};
use crate::metrics::{Metrics, Outcome, Rejection};
use crate::operation::page::PageDecision;
use crate::operation::{
    self, Answer, Approved, Decision, Minted, OperationRequest, PageRead, Prepared, Remember,
    Start, Verdict,
};
use crate::policy::{LivePolicies, Policy, Terms};
use crate::protocol::approved::ApprovedForward;
use crate::protocol::{ApprovalHeader, Keys, OperationId, SigningKey};
use crate::receipts::{Receipt, ReceiptSink, answer_digest, rfc3339_ms};
use crate::store::{
    Claim, ClaimOutcome, FollowUp, KeptAnswer, KeptRound, Lease, OperationRecord, OperationStore,
    RecordedResponse, StoreError,
};
use crate::telemetry::Span;

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

/// What an approved forward's answer is.
pub(crate) enum Read {
    /// The operation's answer: recorded and replayed.
    Final(RecordedResponse),
    /// No answer, or one that says nothing about what was done: the outcome is unknown.
    Unknown(String),
    /// An interim answer for the client: the operation goes on (claimed, nothing recorded)
    /// when a follow-up carries `token` back (see `proxy::rounds`).
    Interim {
        response: RecordedResponse,
        token: Option<String>,
    },
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
    /// Refused by the policy's lookup (a term its URL can't take, a failed lookup): nothing
    /// decided, nothing forwarded.
    Refused(Refusal, Outcome),
}

/// Why a record found in flight is unknown.
const LEASE_RAN_OUT: &str = "its lease ran out with no answer recorded";
/// How long the gateway keeps trying to record an answer after the store failed.
const RERECORD_FOR: Duration = Duration::from_secs(60);

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

    /// A request the front door let in, carried through: its record first when its policy
    /// has a lookup (check 2 comes before the lookup: a performed operation is replayed even
    /// while the upstream's records can't be read), then the lookup, then [`Self::run`].
    /// The conversations service's: its forwards carry no proxy headers (its client is a
    /// Company Agent, not the Personal Agent the upstream serves).
    pub(crate) async fn operate(&self, admitted: Admitted) -> Operated {
        self.operate_with(admitted, &Reading::plain(ProxyContext::default()))
            .await
    }

    /// [`Self::operate`], its answer read by `reading`.
    pub(crate) async fn operate_with(&self, admitted: Admitted, reading: &Reading<'_>) -> Operated {
        let policy = admitted.policy;
        let approval = admitted.approval;
        let via = admitted.via;
        if via == Via::Page && admitted.approver.who.account.is_none() {
            // Only the account a request acts for can approve it on the page: without a
            // token there is none, and a link would be one nobody can approve.
            return Operated::Refused(page_sign_in_required(), Outcome::Challenged);
        }
        if let Some(executed) = self
            .answer_from_record(&policy, &admitted.approver, approval.as_ref())
            .await
        {
            return Operated::Decided(executed);
        }
        if via == Via::Page
            && let Some(executed) = self
                .page_answer_from_record(
                    &policy,
                    &admitted.approver,
                    &admitted.terms,
                    &admitted.fingerprint,
                    reading,
                )
                .await
        {
            return Operated::Decided(executed);
        }
        let mut terms = admitted.terms;
        // Lookups' upstream calls in a box of their own: inline, their future would make
        // every request's as large (see `decide`).
        let looked_up = if policy.lookups.is_empty() {
            computed_terms(&policy, &mut terms)
        } else {
            Box::pin(lookup_terms(
                &self.parts.upstream,
                &reading.proxy,
                &policy,
                &admitted.headers,
                &admitted.forward.body,
                &mut terms,
            ))
            .await
        };
        if let Err((refusal, outcome)) = looked_up {
            return Operated::Refused(refusal, outcome);
        }
        let request = OperationRequest {
            policy,
            approver: admitted.approver,
            approval,
            terms,
            fingerprint: admitted.fingerprint,
        };
        match via {
            Via::Agent => {
                Operated::Decided(self.run_with(request, &admitted.forward, reading).await)
            }
            Via::Page => self.run_page(request, &admitted.forward, reading).await,
        }
    }

    /// Decide a request, and carry the decision out: mint, replay, or claim and forward it
    /// once. The store failing at any step fails closed: nothing is forwarded.
    #[cfg(test)]
    pub(crate) async fn run(
        &self,
        request: OperationRequest,
        forward: &ForwardRequest,
    ) -> Executed {
        self.run_with(request, forward, &Reading::plain(ProxyContext::default()))
            .await
    }

    /// [`Self::run`], its answer read by `reading`.
    pub(crate) async fn run_with(
        &self,
        request: OperationRequest,
        forward: &ForwardRequest,
        reading: &Reading<'_>,
    ) -> Executed {
        let prepared = self.prepare(request);
        let mut rejection = None;
        let decision = self
            .decide(&prepared, forward, reading, &mut rejection)
            .await;
        self.executed(&prepared, decision, rejection)
    }

    /// A request without the extension (`Via::Page`, docs/approval-page.md): its action's
    /// state and page decisions, read in one round trip. No decision for this very request:
    /// held (a mint, for the page's link). Declined by its account: answered as declined,
    /// nothing performed. Approved by its account: that decision is checked exactly as a
    /// `Poppy-Approval` of its operation and revision (its record, checks 1 to 3), and then
    /// claimed and forwarded once, or replayed.
    async fn run_page(
        &self,
        request: OperationRequest,
        forward: &ForwardRequest,
        reading: &Reading<'_>,
    ) -> Operated {
        let prepared = self.prepare(request);
        let keys = &self.parts.keys;
        let action = operation::action_tag(keys, &prepared);
        let mut rejection = None;
        let read = self.parts.store.page_state(action.as_str()).await;
        let decision = match read {
            Err(e) => Err(e),
            Ok((state, decisions)) => {
                match operation::read_decisions(keys, &prepared, &decisions, self.now()) {
                    PageRead::Hold => Ok(self.minted(&prepared, &action, &state, false)),
                    PageRead::Declined(id) => {
                        tracing::info!(policy = %prepared.policy().name, operation_id = %id, outcome = "declined", "declined on the approval page; nothing performed");
                        return Operated::Refused(declined(&id), Outcome::Rejected);
                    }
                    PageRead::Approved(decision) => {
                        let approved = prepared.with_approval(decision.as_approval());
                        let decided = self
                            .check_and_carry_out(
                                &approved,
                                &decision.operation_id,
                                forward,
                                reading,
                                &mut rejection,
                                Some(&decision),
                            )
                            .await;
                        return Operated::Decided(self.executed(&approved, decided, rejection));
                    }
                }
            }
        };
        Operated::Decided(self.executed(&prepared, decision, rejection))
    }

    /// The request as the core reads it, bound to this executor's route.
    fn prepare(&self, mut request: OperationRequest) -> Prepared {
        request.fingerprint = self.route_bound(&request.fingerprint);
        Prepared::new(request)
    }

    /// A request's fingerprint as its revisions cover it: bound to this executor's route.
    fn route_bound(&self, fingerprint: &[u8]) -> Vec<u8> {
        match &self.parts.route {
            Some(route) => bound_to_route(route, fingerprint),
            None => fingerprint.to_vec(),
        }
    }

    /// What a decision comes to, for the interface: the store failing at any step fails
    /// closed (nothing is forwarded).
    fn executed(
        &self,
        prepared: &Prepared,
        decision: Result<Decision, StoreError>,
        rejection: Option<Rejection>,
    ) -> Executed {
        let policy = prepared.policy();
        let decision = decision.unwrap_or_else(|e| {
            tracing::warn!(policy = %policy.name, error = %e, "store unavailable; nothing forwarded");
            Decision::StoreUnavailable
        });
        let page_url = match &decision {
            Decision::ApprovalRequired { operation, .. } if policy.approval.page_proof => {
                PageLink::for_operation(
                    self.parts.page_url.as_deref(),
                    self.parts.keys.current(),
                    policy,
                    operation,
                    prepared.request.approver.who.account.as_deref(),
                    self.parts.route.as_deref(),
                )
                .map(|link| link.url)
            }
            _ => None,
        };
        let approval = prepared.request.approval.as_ref();
        Executed {
            outcome: RequestOutcome::decided(
                &policy.name,
                &decision,
                approval,
                rejection,
                policy.expires_in,
            )
            .on_route(self.parts.route.as_deref()),
            decision,
            page_url,
        }
    }

    /// Checks 1 and 2 before a policy's lookup runs (see [`operation::record_before_lookup`]):
    /// `None` when the request goes the normal way (no such record, not this approver's, or
    /// the store can't say).
    async fn answer_from_record(
        &self,
        policy: &Policy,
        approver: &Approver,
        approval: Option<&ApprovalHeader>,
    ) -> Option<Executed> {
        let id = operation::record_before_lookup(policy, approval)?;
        let record = self.parts.store.lookup(&id).await.ok()??;
        let linked = record.trace.clone();
        let answer =
            operation::from_record(&self.parts.keys, policy, approver, &id, record, self.now())?;
        Some(self.answered_from_record(policy, &id, answer, linked.as_deref(), approval))
    }

    /// A page request's retry answered from its record before its lookup (as a Poppy agent's
    /// is by [`Self::answer_from_record`]): the operations its account approved on the page
    /// for its action (read by the action tag its request terms give), newest first; the
    /// first whose record was claimed for this very request answers it, for as long as the
    /// record is kept. `None` when the request goes the normal way: no such record, another
    /// request, an action only the lookup can name, or the store can't say (the normal way
    /// then fails closed).
    async fn page_answer_from_record(
        &self,
        policy: &Policy,
        approver: &Approver,
        terms: &Terms,
        fingerprint: &[u8],
        reading: &Reading<'_>,
    ) -> Option<Executed> {
        let keys = &self.parts.keys;
        let action = operation::action_before_lookup(keys, policy, approver, terms)?;
        let (_, decisions) = self.parts.store.page_state(action.as_str()).await.ok()?;
        let candidates =
            operation::approved_operations(&decisions, approver.who.account.as_deref());
        if candidates.is_empty() {
            return None;
        }
        let fingerprint = self.route_bound(fingerprint);
        for id in candidates {
            let Some(record) = self.parts.store.lookup(&id).await.ok()? else {
                continue;
            };
            let linked = record.trace.clone();
            let approval = ApprovalHeader {
                operation_id: id.to_string(),
                revision: record.revision.clone(),
            };
            let Some(answer) = operation::replay_before_lookup(
                keys,
                policy,
                approver,
                &fingerprint,
                &id,
                record,
                self.now(),
            ) else {
                continue;
            };
            if reading.follow_up.is_some()
                && matches!(answer, Answer::InProgress(_) | Answer::Unknown(_))
            {
                // A follow-up of an interim answer goes on under its claim: the normal way.
                return None;
            }
            return Some(self.answered_from_record(
                policy,
                &id,
                answer,
                linked.as_deref(),
                Some(&approval),
            ));
        }
        None
    }

    /// An answer from an operation's record, before any lookup, with what to count and log.
    fn answered_from_record(
        &self,
        policy: &Policy,
        id: &OperationId,
        answer: Answer,
        linked: Option<&str>,
        approval: Option<&ApprovalHeader>,
    ) -> Executed {
        let _replay = replay_span(&answer, linked, &policy.name, id.as_str());
        let decision = self.answer(answer, &policy.name);
        Executed {
            outcome: RequestOutcome::decided(
                &policy.name,
                &decision,
                approval,
                None,
                policy.expires_in,
            )
            .on_route(self.parts.route.as_deref()),
            decision,
            page_url: None,
        }
    }

    async fn decide(
        &self,
        prepared: &Prepared,
        forward: &ForwardRequest,
        reading: &Reading<'_>,
        rejection: &mut Option<Rejection>,
    ) -> Result<Decision, StoreError> {
        match operation::start(prepared) {
            Start::Decided(verdict) => {
                self.carry_out(prepared, verdict, forward, reading, rejection, None, None)
                    .await
            }
            Start::Lookup(id) => {
                self.check_and_carry_out(prepared, &id, forward, reading, rejection, None)
                    .await
            }
        }
    }

    /// Checks 1 to 3 of the approval `prepared` carries, for operation `id` (a
    /// `Poppy-Approval`'s, or the page decision's: `page`), then the verdict carried out.
    async fn check_and_carry_out(
        &self,
        prepared: &Prepared,
        id: &OperationId,
        forward: &ForwardRequest,
        reading: &Reading<'_>,
        rejection: &mut Option<Rejection>,
        page: Option<&PageDecision>,
    ) -> Result<Decision, StoreError> {
        // The action's generation comes in the same round trip, for check 1.
        let (record, generation) = self.parts.store.lookup_with_generation(id).await?;
        // The operation's record's executing span, for a replay's link.
        let linked = record.as_ref().and_then(|r| r.trace.clone());
        let verdict = operation::check(
            &self.parts.keys,
            prepared,
            id,
            record,
            generation,
            self.now(),
        );
        self.carry_out(prepared, verdict, forward, reading, rejection, page, linked)
            .await
    }

    /// Carry a verdict out: mint, answer, or claim and forward once. `page`: the approval
    /// page's decision the approval is (a request without the extension), if it is;
    /// `linked`: the executing span kept with the operation's record, for a replay's link.
    #[allow(clippy::too_many_arguments)]
    async fn carry_out(
        &self,
        prepared: &Prepared,
        mut verdict: Verdict,
        forward: &ForwardRequest,
        reading: &Reading<'_>,
        rejection: &mut Option<Rejection>,
        page: Option<&PageDecision>,
        mut linked: Option<String>,
    ) -> Result<Decision, StoreError> {
        let keys = &self.parts.keys;
        let policy = &prepared.policy().name;
        loop {
            return match verdict {
                // A follow-up carries answers into a call under way: one from a Session that
                // may not approve the operation is refused, not answered with an operation.
                Verdict::Mint(Some(Rejection::NotThisApprover)) if reading.follow_up.is_some() => {
                    *rejection = Some(Rejection::NotThisApprover);
                    match named_operation(prepared) {
                        Some(id) => Ok(self.not_the_approver(id, policy)),
                        None => self.mint(prepared, true).await,
                    }
                }
                Verdict::Mint(refused) => {
                    *rejection = refused;
                    let span = Span::phase("poppy.mint");
                    span.set_with("poppy.policy", || policy.clone());
                    let minted = span.within(self.mint(prepared, refused.is_some())).await;
                    match &minted {
                        Ok(decision) => span.set("poppy.outcome", decision.outcome().as_str()),
                        Err(_) => span.fail("the store did not answer"),
                    }
                    minted
                }
                Verdict::Claim(approved) => {
                    let mut page = page.cloned();
                    if page.is_none() && prepared.policy().approval.page_proof {
                        // `proof = "company_page"`: a Poppy approval counts only once the
                        // account approved this very revision on the page.
                        let (_, decisions) = self
                            .parts
                            .store
                            .page_state(approved.id.action_tag())
                            .await?;
                        page = operation::proven_on_page(
                            prepared,
                            &approved.id,
                            &approved.revision,
                            &decisions,
                        );
                        if page.is_none() {
                            return Ok(Decision::ApprovalRequired {
                                operation: operation::held_again(prepared, &approved),
                                rejected: false,
                            });
                        }
                    }
                    // Boxed, as is the follow-up: a mint's or a replay's future would otherwise be
                    // as large as a forward's, allocated and copied whole for every request
                    // (BENCHMARKS.md, "In flight, part by part").
                    match Box::pin(self.perform(
                        prepared,
                        &approved,
                        forward,
                        reading,
                        page.as_ref(),
                    ))
                    .await?
                    {
                        Ok(decision) => Ok(decision),
                        // Claimed by somebody else meanwhile: checks 1 and 2 against their record.
                        Err(record) => {
                            linked = record.trace.clone();
                            verdict = operation::existing(
                                keys,
                                prepared,
                                &approved.id,
                                record,
                                self.now(),
                            );
                            continue;
                        }
                    }
                }
                Verdict::Answer(answer @ (Answer::InProgress(_) | Answer::Unknown(_)))
                    if reading.follow_up.is_some() =>
                {
                    Ok(Box::pin(self.follow_up(prepared, answer, forward, reading)).await)
                }
                Verdict::Answer(answer) => {
                    let id = prepared
                        .request
                        .approval
                        .as_ref()
                        .map(|a| a.operation_id.as_str());
                    let _replay = replay_span(&answer, linked.as_deref(), policy, id.unwrap_or(""));
                    Ok(self.answer(answer, policy))
                }
            };
        }
    }

    /// A follow-up from a Session that may not approve operation `id`: refused, nothing sent.
    fn not_the_approver(&self, id: OperationId, policy: &str) -> Decision {
        tracing::warn!(policy, operation_id = %id, outcome = "rejected", "a follow-up of an interim answer from a Session that may not approve the operation; not forwarded");
        Decision::NotTheApprover(id)
    }

    fn answer(&self, answer: Answer, policy: &str) -> Decision {
        match answer {
            Answer::SignInRequired => Decision::SignInRequired,
            Answer::Replay(response) => Decision::Replayed(response),
            Answer::InProgress(id) => Decision::InProgress(id),
            Answer::AlreadyPerformed(id) => Decision::AlreadyPerformed(id),
            Answer::Unknown(id) => self.unknown(id, policy, LEASE_RAN_OUT),
        }
    }

    /// A new operation for what the request asks, unless its action's outcome is unknown.
    async fn mint(&self, prepared: &Prepared, rejected: bool) -> Result<Decision, StoreError> {
        let keys = &self.parts.keys;
        let action = operation::action_tag(keys, prepared);
        let state = self.parts.store.action_state(action.as_str()).await?;
        Ok(self.minted(prepared, &action, &state, rejected))
    }

    /// [`Self::mint`], with the action's state read.
    fn minted(
        &self,
        prepared: &Prepared,
        action: &crate::protocol::ActionTag,
        state: &crate::store::ActionState,
        rejected: bool,
    ) -> Decision {
        match operation::mint_for(&self.parts.keys, prepared, action, state, self.now()) {
            Minted::Hold(operation) => Decision::ApprovalRequired {
                operation,
                rejected,
            },
            Minted::Unknown(id) => self.unknown(id, &prepared.policy().name, LEASE_RAN_OUT),
        }
    }

    /// Claim the operation, forward it once, and record the answer before it is delivered.
    /// `Err(record)`: somebody claimed it first; this is their record. Its span,
    /// `poppy.execute` (kept with the record: a replay's span links to it), holds the claim's,
    /// the forward's and the record's.
    async fn perform(
        &self,
        prepared: &Prepared,
        approved: &Approved,
        forward: &ForwardRequest,
        reading: &Reading<'_>,
        page: Option<&PageDecision>,
    ) -> Result<Result<Decision, OperationRecord>, StoreError> {
        let span = Span::phase("poppy.execute");
        span.set_with("poppy.policy", || prepared.policy().name.clone());
        span.set_with("poppy.operation_id", || approved.id.to_string());
        let performed = span
            .within(self.execute(
                prepared,
                approved,
                forward,
                reading,
                page,
                span.traceparent(),
            ))
            .await;
        match &performed {
            Ok(Ok(decision)) => span.set("poppy.outcome", decision.outcome().as_str()),
            Ok(Err(_)) => span.set("poppy.claimed_by_another", true),
            Err(_) => span.fail("the store did not answer"),
        }
        performed
    }

    /// [`Self::perform`]'s steps; `trace`: its span, kept with the claim.
    async fn execute(
        &self,
        prepared: &Prepared,
        approved: &Approved,
        forward: &ForwardRequest,
        reading: &Reading<'_>,
        page: Option<&PageDecision>,
        trace: Option<String>,
    ) -> Result<Result<Decision, OperationRecord>, StoreError> {
        let now_ms = self.now();
        let owner = format!(
            "{}-{}",
            self.instance,
            self.claims_made.fetch_add(1, Ordering::Relaxed)
        );
        let lease_until_ms = operation::lease_until_ms(&self.rules, now_ms);
        let mut claim = operation::claim(
            &self.parts.keys,
            prepared,
            approved,
            owner,
            now_ms,
            lease_until_ms,
        );
        claim.trace = trace;
        if page.is_some() {
            // Its retry names no operation: the record keeps which request it approved.
            claim.request = Some(operation::request_digest(
                self.parts.keys.current(),
                &prepared.request.fingerprint,
            ));
        }
        let Some(guard) = self.parts.drain.start_forward() else {
            return Ok(Ok(Decision::ShuttingDown));
        };
        let id = &approved.id;
        let claimed = Span::phase("poppy.claim");
        let outcome = claimed.within(self.parts.store.claim(id, &claim)).await;
        if let Err(_) | Ok(ClaimOutcome::Exists(_)) = &outcome {
            claimed.set("poppy.claimed", false);
        }
        drop(claimed);
        if let ClaimOutcome::Exists(record) = outcome? {
            return Ok(Err(record));
        }

        let policy = prepared.policy();
        let name = policy.name.as_str();
        let receipt = self
            .parts
            .receipts
            .as_ref()
            .map(|_| operation::draft_receipt(prepared, approved, now_ms, page));
        self.parts
            .metrics
            .approval_delay(name, approved.expires_at, policy.expires_in);
        let via = if page.is_some() { "page" } else { "agent" };
        tracing::info!(policy = name, operation_id = %id, outcome = "claimed", approved_via = via, "approved; forwarding once");
        // With its operation ID in the configured header, for the upstream's logs, and (with
        // `[upstream.approval_header]`) what was approved, signed, for an upstream that checks.
        let terms = approved_terms(prepared);
        let approved_forward = ApprovedForward {
            operation_id: id.as_str(),
            revision: &approved.revision,
            policy: name,
            terms: &terms,
            now_ms: self.now(),
        };
        let sent = self.parts.upstream.send_approved(
            forward.clone(),
            &approved_forward,
            &reading.proxy,
            reading.tap.as_ref(),
        );
        // The forward carries this span's `traceparent`: the upstream's parent.
        let forwarding = Span::client("poppy.forward");
        let answered = forwarding
            .within(self.parts.metrics.upstream_call(name, sent))
            .await;
        match &answered {
            Ok(response) => forwarding.set("http.response.status_code", i64::from(response.status)),
            Err(_) => forwarding.fail("no answer from the upstream"),
        }
        drop(forwarding);
        Ok(Ok(match answered {
            Ok(response) => {
                if operation::releases(&self.rules, response.status, &response.headers) {
                    self.release(name, id, &claim.owner).await;
                    tracing::info!(policy = name, operation_id = %id, status = response.status, outcome = "released", "upstream performed nothing; claim released");
                    return Ok(Ok(Decision::Released(response)));
                }
                let remember = Remember {
                    expires_at: approved.expires_at,
                    expires_in: policy.expires_in,
                    grace: self.parts.remember_grace,
                };
                let round = Round {
                    claim,
                    remember,
                    receipt,
                    revision: approved.revision.clone(),
                    fingerprint: prepared.request.fingerprint.clone(),
                    token: None,
                };
                self.read_answer(id, name, round, guard, forward, response, reading)
                    .await
            }
            Err(ForwardError::NotSent(e)) => {
                self.release(name, id, &claim.owner).await;
                tracing::warn!(policy = name, operation_id = %id, error = %e, outcome = "released", "upstream unreachable; nothing sent, claim released");
                Decision::UpstreamUnavailable
            }
            Err(ForwardError::Unknown(e)) => self.unknown(id.clone(), name, &e),
        }))
    }

    /// A follow-up of an interim answer (the request carries what the server asked for), to
    /// an operation in flight (`answer`: in progress, or unknown once its lease ran out
    /// during the rounds): if it is its round's own (`proxy::rounds`), forwarded under the
    /// same claim; otherwise `answer`, as for any retry.
    async fn follow_up(
        &self,
        prepared: &Prepared,
        answer: Answer,
        forward: &ForwardRequest,
        reading: &Reading<'_>,
    ) -> Decision {
        let name = prepared.policy().name.as_str();
        let (Answer::InProgress(id) | Answer::Unknown(id)) = &answer else {
            return self.answer(answer, name);
        };
        let id = id.clone();
        // The round's claim is the approver's: checked before the round is taken, so that a
        // refused follow-up leaves it for its own.
        match self.parts.store.lookup(&id).await {
            Ok(Some(record)) if operation::may_follow_up(&self.parts.keys, prepared, &record) => {}
            Ok(Some(_)) => return self.not_the_approver(id, name),
            Ok(None) => return self.answer(answer, name),
            Err(e) => {
                tracing::warn!(policy = name, operation_id = %id, error = %e, "store unavailable; the follow-up is not forwarded");
                return Decision::StoreUnavailable;
            }
        }
        let revision = prepared
            .request
            .approval
            .as_ref()
            .map_or("", |a| a.revision.as_str());
        let token = reading.follow_up.as_ref().and_then(Option::as_deref);
        // Kept in the store: the round may have been put there by another gateway, or by
        // this one before a restart (`proxy::rounds`).
        let key = rounds::key(revision, &prepared.request.fingerprint, token);
        let follow_up = FollowUp {
            id: &id,
            key: &key,
            now_ms: self.now(),
        };
        let round = match self.parts.store.take_round(&follow_up).await {
            Ok(Some(kept)) => match Round::decode(&kept) {
                Some(round) => round,
                None => {
                    tracing::warn!(policy = name, operation_id = %id, "an unreadable round in the store; the follow-up is not forwarded");
                    return self.answer(answer, name);
                }
            },
            Ok(None) => return self.answer(answer, name),
            Err(e) => {
                tracing::warn!(policy = name, operation_id = %id, error = %e, "store unavailable; the follow-up is not forwarded");
                return Decision::StoreUnavailable;
            }
        };
        let Some(guard) = self.parts.drain.start_forward() else {
            self.keep_round(&id, name, &round).await;
            return Decision::ShuttingDown;
        };
        tracing::info!(policy = name, operation_id = %id, outcome = "claimed", "a follow-up of an interim answer; forwarding it under the same claim");
        // If this forward's outcome is unknown, the claim's lease ends as a first forward's
        // would have, not with the round (retries then read unknown, not in progress).
        let lapse = (
            round.claim.owner.clone(),
            self.now().saturating_add(forward_lease(&round)),
        );
        let terms = approved_terms(prepared);
        let approved_forward = ApprovedForward {
            operation_id: id.as_str(),
            revision,
            policy: name,
            terms: &terms,
            now_ms: self.now(),
        };
        let sent = self.parts.upstream.send_approved(
            forward.clone(),
            &approved_forward,
            &reading.proxy,
            reading.tap.as_ref(),
        );
        let decision = match self.parts.metrics.upstream_call(name, sent).await {
            Ok(response) => {
                self.read_answer(&id, name, round, guard, forward, response, reading)
                    .await
            }
            Err(ForwardError::NotSent(e)) => {
                // Nothing of this round was sent: the same follow-up may come again. The
                // claim stays (earlier rounds reached the server).
                tracing::warn!(policy = name, operation_id = %id, error = %e, "upstream unreachable; the follow-up was not sent");
                self.keep_round(&id, name, &round).await;
                Decision::UpstreamUnavailable
            }
            Err(ForwardError::Unknown(e)) => self.unknown(id.clone(), name, &e),
        };
        if matches!(decision, Decision::Unknown(_)) {
            let (owner, until_ms) = lapse;
            let lease = Lease {
                id: &id,
                owner: &owner,
                until_ms,
            };
            if let Err(e) = self.parts.store.set_lease(&lease).await {
                tracing::warn!(policy = name, operation_id = %id, error = %e, "the round's lease could not be ended; retries read in progress until it runs out");
            }
        }
        decision
    }

    /// An answer to an approved forward, read as its interface reads it: recorded when it is
    /// final, the claim kept for a follow-up when it is interim, unknown otherwise.
    #[allow(clippy::too_many_arguments)]
    async fn read_answer(
        &self,
        id: &OperationId,
        name: &str,
        mut round: Round,
        guard: ForwardGuard,
        forward: &ForwardRequest,
        response: RecordedResponse,
        reading: &Reading<'_>,
    ) -> Decision {
        match reading
            .reader
            .read(&self.parts.upstream, forward, response, &reading.proxy)
            .await
        {
            Read::Final(response) => {
                let completion = Completion {
                    claim: round.claim,
                    remember: round.remember,
                    policy: name.to_owned(),
                    policies: self.parts.policies.clone(),
                    _guard: guard,
                    receipt: round.receipt,
                };
                let span = Span::phase("poppy.record");
                span.within(self.record(id, response.clone(), completion))
                    .await;
                drop(span);
                Decision::Performed(response)
            }
            Read::Unknown(why) => self.unknown(id.clone(), name, &why),
            Read::Interim { response, token } => {
                round.token = token;
                if !self.keep_round(id, name, &round).await {
                    return self.unknown(
                        id.clone(),
                        name,
                        "the store could not keep the round for its follow-up; this interim answer ends it",
                    );
                }
                tracing::info!(policy = name, operation_id = %id, outcome = "interim", "an interim answer; the operation stays claimed for its follow-up");
                Decision::Interim(response)
            }
        }
    }

    /// Keep `round` in the store for its follow-up, for [`ROUND_TTL`], with the claim leased
    /// until then and its follow-up's forward (as long as the first forward's lease): a
    /// retry meanwhile is "in progress", and "unknown" only once the round could not go on.
    /// False if the store could not, or the claim is no longer this round's (then no
    /// follow-up is ever forwarded: the operation ends unknown).
    async fn keep_round(&self, id: &OperationId, name: &str, round: &Round) -> bool {
        let now = self.now();
        let until = now.saturating_add(i64::try_from(ROUND_TTL.as_millis()).unwrap_or(i64::MAX));
        let (key, encoded) = (round.key(), round.encode());
        let kept = KeptRound {
            id,
            key: &key,
            round: &encoded,
            owner: &round.claim.owner,
            until_ms: until,
            lease_until_ms: until.saturating_add(forward_lease(round)),
            now_ms: now,
        };
        match self.parts.store.put_round(&kept).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(policy = name, operation_id = %id, "the claim is no longer in flight under its owner; the round is not kept");
                false
            }
            Err(e) => {
                tracing::warn!(policy = name, operation_id = %id, error = %e, "the round could not be kept for its follow-up");
                false
            }
        }
    }

    /// Record the answer. If the store fails now, the answer is still delivered, and recording
    /// is retried in the background so that retries can replay it (they get 503 meanwhile).
    /// An answer whose record vanished meanwhile is written all the same.
    async fn record(&self, id: &OperationId, response: RecordedResponse, completion: Completion) {
        let store = &self.parts.store;
        let clock = Arc::clone(&self.parts.clock);
        let until = completion.until_ms(clock.now_millis());
        let policy = completion.policy.clone();
        let answer = KeptAnswer {
            id,
            response: &response,
            remember_until_ms: until,
        };
        match store.complete_claim(&answer, &completion.claim).await {
            Ok(true) => {
                tracing::info!(policy, operation_id = %id, status = response.status, outcome = "performed", "performed; answer recorded");
                completion.write_receipt(self.parts.receipts.as_deref(), &response, clock.as_ref());
            }
            Ok(false) => {
                tracing::error!(policy, operation_id = %id, outcome = "performed", "the record was finished by somebody else before the answer was recorded (an operator's resolution?); it was left as it is")
            }
            Err(e) => {
                tracing::warn!(policy, operation_id = %id, error = %e, outcome = "performed", "answer delivered but not recorded yet; retrying in the background");
                let store = Arc::clone(store);
                let sink = self.parts.receipts.clone();
                let id = id.clone();
                tokio::spawn(async move {
                    let deadline = tokio::time::Instant::now() + RERECORD_FOR;
                    let mut pause = Duration::from_millis(100);
                    while tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(pause).await;
                        let answer = KeptAnswer {
                            id: &id,
                            response: &response,
                            remember_until_ms: completion.until_ms(clock.now_millis()),
                        };
                        match store.complete_claim(&answer, &completion.claim).await {
                            Ok(recorded) => {
                                tracing::info!(policy, operation_id = %id, recorded, "answer recorded after a store failure");
                                if recorded {
                                    completion.write_receipt(
                                        sink.as_deref(),
                                        &response,
                                        clock.as_ref(),
                                    );
                                }
                                return;
                            }
                            Err(e) => {
                                tracing::debug!(operation_id = %id, error = %e, "still cannot record the answer")
                            }
                        }
                        pause = (pause * 2).min(Duration::from_secs(2));
                    }
                    tracing::error!(policy, operation_id = %id, outcome = "unknown", "answer never recorded; retries get 503 until an operator resolves the operation");
                });
            }
        }
    }

    /// An unknown outcome, logged once per operation in this process (every retry would
    /// repeat it).
    fn unknown(&self, id: OperationId, policy: &str, why: &str) -> Decision {
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
        Decision::Unknown(id)
    }

    async fn release(&self, policy: &str, id: &OperationId, owner: &str) {
        if let Err(e) = self.parts.store.release(id, owner).await {
            // The record stays in flight and turns unknown: safe, never forwarded twice.
            tracing::error!(policy, operation_id = %id, outcome = "unknown", error = %e, "claim not released; retries will get 503 until it is resolved");
        }
    }

    fn now(&self) -> i64 {
        self.parts.clock.now_millis()
    }
}

/// A request without the extension whose account declined it on the approval page.
/// (The operation is not named: a request without the extension gets no operations.)
fn declined(_id: &OperationId) -> Refusal {
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

/// How long one forward's claim is leased for: as the first forward's was.
/// A replay's span, linked to the span that executed the operation (when its record kept
/// one); none for any other answer.
fn replay_span(answer: &Answer, linked: Option<&str>, policy: &str, id: &str) -> Option<Span> {
    if !matches!(answer, Answer::Replay(_)) {
        return None;
    }
    let span = Span::linked("poppy.replay", linked);
    span.set_with("poppy.policy", || policy.to_owned());
    span.set_with("poppy.operation_id", || id.to_owned());
    span.set("poppy.outcome", Outcome::Replayed.as_str());
    Some(span)
}

/// The operation a request's approval names, when it is of this gateway's shape.
fn named_operation(prepared: &Prepared) -> Option<OperationId> {
    OperationId::parse(&prepared.request.approval.as_ref()?.operation_id)
}

fn forward_lease(round: &Round) -> i64 {
    round
        .claim
        .lease_until_ms
        .saturating_sub(round.claim.now_ms)
        .max(0)
}

/// A request's fingerprint, bound to the `[[route]]` it came on: what the revision covers.
fn bound_to_route(route: &str, fingerprint: &[u8]) -> Vec<u8> {
    crate::policy::request_fingerprint("route", route, &[], fingerprint)
}

/// What completing a claim needs, also from a background retry.
struct Completion {
    claim: Claim,
    remember: Remember,
    policy: String,
    policies: LivePolicies,
    /// Keeps a graceful shutdown waiting until the answer is recorded.
    _guard: ForwardGuard,
    receipt: Option<Receipt>,
}

impl Completion {
    /// How long to remember the answer, for a completion now: the policies in force now
    /// count too (a reload during the forward may have made `expires_in` longer).
    fn until_ms(&self, now_ms: i64) -> i64 {
        let reloaded = self
            .policies
            .snapshot()
            .iter()
            .filter(|policy| policy.name == self.policy)
            .map(|policy| policy.expires_in)
            .max();
        self.remember.until_ms(now_ms, reloaded)
    }

    /// Write the receipt, now that the answer is recorded (the guard goes with it).
    fn write_receipt(
        self,
        sink: Option<&ReceiptSink>,
        response: &RecordedResponse,
        clock: &dyn Clock,
    ) {
        if let (Some(sink), Some(mut receipt)) = (sink, self.receipt) {
            receipt.performed_at = rfc3339_ms(clock.now_millis());
            receipt.upstream_status = Some(response.status);
            receipt.answer_sha256 = Some(answer_digest(
                response.status,
                &response.headers,
                &response.body,
            ));
            sink.write(&receipt);
        }
    }
}

/// The approved terms as the operation shows them, for the approval header (its canonical
/// JSON always parses back).
fn approved_terms(prepared: &Prepared) -> serde_json::Value {
    serde_json::from_str(&prepared.terms_json).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    //! The executor against a real memory store and an upstream that refuses connections:
    //! what it carries out, and that it counts nothing itself (`RequestOutcome::record` does,
    //! called once by service.rs).
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use bytes::Bytes;
    use serde_json::json;

    use super::*;
    use crate::clock::SystemClock;
    use crate::metrics::Outcome;
    use crate::policy::PolicySet;
    use crate::protocol::SigningKey;
    use crate::store::MemoryStore;

    const POLICY: &str = r#"[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange on order {order_id}."
[operation.terms]
order_id = { path = "order_id" }
"#;

    struct World {
        executor: Executor,
        store: Arc<dyn OperationStore>,
        metrics: Arc<Metrics>,
        policy: Arc<Policy>,
        /// Bound and never listening: every connection is refused, so nothing is sent.
        _refusing: tokio::net::TcpSocket,
    }

    fn world() -> World {
        world_on(None)
    }

    /// A world whose executor serves `route` (`None`: the default route).
    fn world_on(route: Option<&str>) -> World {
        let refusing = tokio::net::TcpSocket::new_v4().unwrap();
        refusing.bind(([127, 0, 0, 1], 0).into()).unwrap();
        let address = refusing.local_addr().unwrap().to_string();
        let settings = Upstream {
            url: format!("http://{address}"),
            tls: false,
            address: address.clone(),
            host: "127.0.0.1".into(),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            release_statuses: vec![401, 429],
            release_503_with_retry_after: true,
            passthrough: crate::config::Passthrough::default(),
            approval_header: None,
        };
        let policies =
            crate::config::parse_policy_file(Path::new("exchange.toml"), POLICY).unwrap();
        let policy = Arc::new(policies[0].clone());
        let store: Arc<dyn OperationStore> = Arc::new(MemoryStore::new());
        let metrics = Arc::new(Metrics::new().unwrap());
        metrics.policies(["exchange"]);
        let executor = Executor::new(ExecutorParts {
            keys: Keys::new(vec![SigningKey::new(b"executor-test-key-0123".to_vec())]).unwrap(),
            store: Arc::clone(&store),
            upstream: Arc::new(UpstreamClient::new(&settings)),
            settings,
            route: route.map(str::to_owned),
            remember_grace: Duration::from_secs(60),
            page_url: None,
            agents: None,
            policies: LivePolicies::new(PolicySet::new(policies)),
            metrics: Arc::clone(&metrics),
            drain: Arc::new(Drain::default()),
            receipts: None,
            clock: Arc::new(SystemClock),
        });
        World {
            executor,
            store,
            metrics,
            policy,
            _refusing: refusing,
        }
    }

    fn request(policy: &Arc<Policy>, approval: Option<ApprovalHeader>) -> OperationRequest {
        let part = |v: serde_json::Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let session = format!(
            "{}.{}.x",
            part(json!({"alg": "none"})),
            part(json!({"sid": "s1"}))
        );
        let claims = crate::testkit::claims_off();
        OperationRequest {
            policy: Arc::clone(policy),
            approver: Approver::from_headers(session.as_bytes(), None, &claims).unwrap(),
            approval,
            terms: [("order_id".to_owned(), json!("o1"))].into_iter().collect(),
            fingerprint: b"POST /orders/o1/exchanges".to_vec(),
        }
    }

    fn forward() -> ForwardRequest {
        ForwardRequest {
            method: http::Method::POST,
            path_and_query: "/orders/o1/exchanges".into(),
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    fn operations_total(metrics: &Metrics, outcome: &str) -> String {
        let text = String::from_utf8(metrics.render(crate::metrics::Format::Text)).unwrap();
        let series =
            format!("poppy_operations_total{{operation=\"exchange\",outcome=\"{outcome}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&series).map(str::to_owned))
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn an_unreachable_upstream_releases_the_claim_and_counts_nothing_itself() {
        let world = world();
        let held = world
            .executor
            .run(request(&world.policy, None), &forward())
            .await;
        let Decision::ApprovalRequired {
            operation,
            rejected: false,
        } = &held.decision
        else {
            panic!("expected an operation to approve, got {:?}", held.decision)
        };
        assert!(matches!(
            &held.outcome,
            RequestOutcome::Decided {
                outcome: Outcome::Held,
                asked: Some(_),
                ..
            }
        ));
        // Decided, not yet counted: only RequestOutcome::record counts.
        assert_eq!(operations_total(&world.metrics, "held"), "0");
        held.outcome.record(&world.metrics);
        assert_eq!(operations_total(&world.metrics, "held"), "1");

        let approval = ApprovalHeader {
            operation_id: operation.operation_id.clone(),
            revision: operation.revision.clone(),
        };
        let approved = request(&world.policy, Some(approval.clone()));
        let sent = world.executor.run(approved.clone(), &forward()).await;
        assert!(
            matches!(sent.decision, Decision::UpstreamUnavailable),
            "{:?}",
            sent.decision
        );
        // Nothing was sent, so the claim is gone and the same approval may come again.
        let id = OperationId::parse(&approval.operation_id).unwrap();
        assert_eq!(world.store.lookup(&id).await.unwrap(), None);
        let again = world.executor.run(approved, &forward()).await;
        assert!(matches!(again.decision, Decision::UpstreamUnavailable));
        assert_eq!(
            operations_total(&world.metrics, "upstream_unavailable"),
            "0"
        );
    }

    #[tokio::test]
    async fn a_refused_approval_carries_its_reason_to_the_count() {
        let world = world();
        let forged = ApprovalHeader {
            operation_id: "not-ours".into(),
            revision: "1-x".into(),
        };
        let executed = world
            .executor
            .run(request(&world.policy, Some(forged)), &forward())
            .await;
        assert!(matches!(
            executed.decision,
            Decision::ApprovalRequired { rejected: true, .. }
        ));
        assert!(matches!(
            &executed.outcome,
            RequestOutcome::Decided {
                outcome: Outcome::Rejected,
                rejection: Some(Rejection::NotOurs),
                operation_id,
                ..
            } if operation_id.starts_with("exc_")
        ));
    }

    /// The same policy, keys and request on two routes: an approval returned on one is a
    /// refused approval on the other (a new operation to hold), and is performed on its own.
    #[tokio::test]
    async fn an_approval_is_bound_to_the_route_that_returned_it() {
        let (a, b) = (world_on(Some("a")), world_on(Some("b")));
        let held = a.executor.run(request(&a.policy, None), &forward()).await;
        let Decision::ApprovalRequired { operation, .. } = &held.decision else {
            panic!("expected an operation, got {:?}", held.decision)
        };
        let approval = ApprovalHeader {
            operation_id: operation.operation_id.clone(),
            revision: operation.revision.clone(),
        };
        let elsewhere = b
            .executor
            .run(request(&b.policy, Some(approval.clone())), &forward())
            .await;
        assert!(
            matches!(
                elsewhere.decision,
                Decision::ApprovalRequired { rejected: true, .. }
            ),
            "{:?}",
            elsewhere.decision
        );
        let id = OperationId::parse(&approval.operation_id).unwrap();
        assert_eq!(b.store.lookup(&id).await.unwrap(), None, "nothing claimed");
        // On its own route the approval is good: it is claimed and forwarded (to an upstream
        // that refuses the connection, so the claim is released).
        let home = a
            .executor
            .run(request(&a.policy, Some(approval)), &forward())
            .await;
        assert!(
            matches!(home.decision, Decision::UpstreamUnavailable),
            "{:?}",
            home.decision
        );
        // The default route's revisions are not a [[route]]'s either.
        let default = world();
        let unbound = default
            .executor
            .run(
                request(
                    &default.policy,
                    Some(ApprovalHeader {
                        operation_id: operation.operation_id.clone(),
                        revision: operation.revision.clone(),
                    }),
                ),
                &forward(),
            )
            .await;
        assert!(matches!(
            unbound.decision,
            Decision::ApprovalRequired { rejected: true, .. }
        ));
    }
}
