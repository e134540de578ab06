//! The operation flow: mint, check an approval, claim, forward once, record, replay.
//!
//! Interface-neutral: the HTTP API service (and the MCP one) prepare an [`OperationRequest`]
//! and render the [`Decision`]. Nothing here falls through to the proxy path.
//!
//! The spec's checks, in its order (section 6):
//! 1. the Session can approve the operation, else handle as if there were no approval;
//! 2. the operation hasn't been performed, else replay (or 503 while it is in flight);
//! 3. the revision is one minted for exactly this request and hasn't expired, else answer
//!    with a new revision.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use std::collections::HashSet;
use std::sync::Mutex;

use super::approver::Approver;
use super::upstream::{ForwardError, ForwardRequest, UpstreamClient};
use crate::config::Upstream;
use crate::drain::{Drain, ForwardGuard};
use crate::metrics::{Metrics, Outcome, Rejection};
use crate::policy::{LivePolicies, Policy, Terms, canonical_json};
use crate::protocol::{
    ActionTag, ApprovalHeader, Keys, Operation, OperationId, Revision, RevisionInput, ScopeKind,
};
use crate::receipts::{Receipt, ReceiptSink, answer_digest, rfc3339_ms};
use crate::store::{
    Claim, ClaimOutcome, OperationRecord, OperationStore, RecordState, RecordedResponse, StoreError,
};

/// A request for an operation, prepared by its interface (HTTP API or MCP).
pub struct OperationRequest {
    pub policy: Arc<Policy>,
    pub approver: Approver,
    pub approval: Option<ApprovalHeader>,
    /// The terms the policy extracted.
    pub terms: Terms,
    /// A canonical fingerprint of the request itself, covered by the revision: an approval
    /// only ever approves the request that returned the operation.
    pub fingerprint: Vec<u8>,
    /// What to send upstream once approved.
    pub forward: ForwardRequest,
}

/// What the flow decided, for the interface to render.
#[derive(Debug, Clone)]
pub enum Decision {
    /// The User's approval is needed (`403 approval_required`, or an MCP tool error).
    /// `rejected`: the request carried an approval that failed check 1 or 3.
    ApprovalRequired {
        operation: Operation,
        rejected: bool,
    },
    /// A signed-out Session named an account's operation.
    SignInRequired,
    /// Forwarded once; this is the upstream's answer, recorded.
    Performed(RecordedResponse),
    /// Forwarded; the upstream's answer proves nothing was performed, so the claim was
    /// released and the same approval may be sent again.
    Released(RecordedResponse),
    /// Performed before; this is the recorded answer.
    Replayed(RecordedResponse),
    /// Being performed.
    InProgress(OperationId),
    /// Claimed, but whether it took effect is unknown: never forwarded again.
    Unknown(OperationId),
    /// The upstream could not be reached; nothing was sent and the claim was released.
    UpstreamUnavailable,
    /// The store could not be reached; nothing was forwarded.
    StoreUnavailable,
    /// The gateway is shutting down and starts no new forward; nothing was claimed.
    ShuttingDown,
}

impl Decision {
    pub fn outcome(&self) -> Outcome {
        match self {
            Decision::ApprovalRequired {
                rejected: false, ..
            } => Outcome::Held,
            Decision::ApprovalRequired { rejected: true, .. } => Outcome::Rejected,
            Decision::SignInRequired => Outcome::Challenged,
            Decision::Performed(_) => Outcome::Performed,
            Decision::Released(_) => Outcome::Released,
            Decision::UpstreamUnavailable => Outcome::UpstreamUnavailable,
            Decision::Replayed(_) => Outcome::Replayed,
            Decision::InProgress(_) => Outcome::InProgress,
            Decision::Unknown(_) => Outcome::Unknown,
            Decision::StoreUnavailable => Outcome::StoreUnavailable,
            Decision::ShuttingDown => Outcome::ShuttingDown,
        }
    }

    /// The operation a decision is about, for logs: the one returned, else the one named.
    pub fn operation_id<'a>(&'a self, approval: Option<&'a ApprovalHeader>) -> &'a str {
        match self {
            Decision::ApprovalRequired { operation, .. } => &operation.operation_id,
            Decision::InProgress(id) | Decision::Unknown(id) => id.as_str(),
            _ => approval.map_or("", |a| a.operation_id.as_str()),
        }
    }
}

/// Everything the flow needs, shared by all requests.
pub struct OperationFlow {
    pub keys: Keys,
    pub store: Arc<dyn OperationStore>,
    pub upstream: Arc<UpstreamClient>,
    pub upstream_settings: Upstream,
    pub remember_grace: Duration,
    /// The policies in force: a completion remembers the operation as long as a revision
    /// minted under them could be approved, even after a reload during the forward.
    pub policies: LivePolicies,
    pub metrics: Arc<Metrics>,
    /// Identifies this process in claims (`owner`), for operators reading records.
    pub instance: String,
    pub claims_made: AtomicU64,
    /// Approved forwards in flight, for a graceful shutdown.
    pub drain: Arc<Drain>,
    /// Operations this process has already logged as unknown (each is logged once).
    pub unknown_logged: Mutex<HashSet<String>>,
    /// `[receipts]`: a receipt for every performed operation.
    pub receipts: Option<Arc<ReceiptSink>>,
}

/// What the MACs cover, computed once per request.
struct Prepared {
    terms_json: String,
    summary: String,
    action_material: Vec<Vec<u8>>,
}

impl OperationFlow {
    /// Decide a request: mint, replay, or claim and forward it once. Counts the outcome.
    pub async fn decide(&self, mut request: OperationRequest) -> Decision {
        let names_session_operation = request
            .approval
            .as_ref()
            .and_then(|a| OperationId::parse(&a.operation_id))
            .is_some_and(|id| id.kind() == ScopeKind::Session);
        if names_session_operation && request.approver.kind == ScopeKind::Account {
            // Returned while this Session was signed out: it stays the Session's to approve.
            request.approver = request.approver.session_only();
        }
        let policy = &request.policy;
        let mut action_material = vec![
            policy.name.clone().into_bytes(),
            request.approver.scope.clone().into_bytes(),
        ];
        action_material.extend(policy.action_material(&request.terms));
        let prepared = Prepared {
            terms_json: canonical_json(&Value::Object(request.terms.clone().into_iter().collect())),
            summary: policy.summary.render(&request.terms),
            action_material,
        };
        let decision = match self.decide_checked(&request, &prepared).await {
            Ok(decision) => decision,
            Err(StoreFailure(e)) => {
                tracing::warn!(policy = %policy.name, error = %e, "store unavailable; nothing forwarded");
                Decision::StoreUnavailable
            }
        };
        self.metrics.operation(&policy.name, decision.outcome());
        if let Decision::ApprovalRequired { operation, .. } = &decision {
            let id = &operation.operation_id;
            self.metrics.asked(&policy.name, id, policy.expires_in);
        }
        let operation_id = decision.operation_id(request.approval.as_ref());
        super::forwarded::note_operation(operation_id, decision.outcome());
        tracing::info!(policy = %policy.name, operation_id, outcome = decision.outcome().as_str(), "operation");
        decision
    }

    /// Checks 1 and 2 alone, for an approval whose request can't be prepared before a policy
    /// lookup runs: an operation this approver already performed (or is performing) is
    /// answered from its record, whatever the upstream's records say now. `None` when there
    /// is no such record (or the store can't say): the request then goes the normal way.
    pub async fn answer_from_record(
        &self,
        policy: &Policy,
        approver: &Approver,
        approval: &ApprovalHeader,
    ) -> Option<Decision> {
        let id = OperationId::parse(&approval.operation_id)?;
        let approver = if id.kind() == ScopeKind::Session && approver.kind == ScopeKind::Account {
            approver.session_only()
        } else {
            approver.clone()
        };
        let record = self.store.lookup(&id).await.ok()??;
        if !self.approved_by(&record, &approver) || record.policy != policy.name {
            return None;
        }
        let decision = match record.state {
            RecordState::Done(response) => Decision::Replayed(response),
            RecordState::InFlight { lease_until_ms, .. } if lease_until_ms < now_millis() => {
                self.log_unknown(
                    &id,
                    &policy.name,
                    "its lease ran out with no answer recorded",
                );
                Decision::Unknown(id)
            }
            RecordState::InFlight { .. } => Decision::InProgress(id),
        };
        self.metrics.operation(&policy.name, decision.outcome());
        Some(decision)
    }

    async fn decide_checked(
        &self,
        request: &OperationRequest,
        prepared: &Prepared,
    ) -> Result<Decision, StoreFailure> {
        let Some(approval) = &request.approval else {
            return self.mint(request, prepared, None).await;
        };
        let Some(id) = OperationId::parse(&approval.operation_id) else {
            // Not of this gateway's shape, so not one it returned.
            self.metrics
                .rejected(&request.policy.name, Rejection::NotOurs);
            return self.mint(request, prepared, Some(approval)).await;
        };

        // Checks 1 and 2: an existing record decides (replay, in flight, or not yours). The
        // action's generation comes in the same round trip, for check 1 below.
        let (record, generation) = self.store.lookup_with_generation(&id).await?;
        if let Some(record) = record {
            return self
                .answer_existing(request, prepared, approval, &id, record)
                .await;
        }

        // Check 1 for operations nobody claimed yet: the ID must be this requester's for this
        // action, under one of the keys.
        let material: Vec<&[u8]> = prepared.action_material.iter().map(Vec::as_slice).collect();
        let Some((key, action)) = self.keys.all().iter().find_map(|key| {
            let action = ActionTag::derive(
                key,
                &request.policy.id_prefix,
                request.approver.kind,
                &material,
            );
            (action.as_str() == id.action_tag()).then_some((key, action))
        }) else {
            if id.kind() == ScopeKind::Account && request.approver.kind == ScopeKind::Session {
                return Ok(Decision::SignInRequired);
            }
            self.metrics
                .rejected(&request.policy.name, Rejection::NotThisApprover);
            return self.mint(request, prepared, Some(approval)).await;
        };
        if action.operation_id(key, generation) != id {
            // Performed and forgotten, or an ID of another generation: not approvable now.
            self.metrics
                .rejected(&request.policy.name, Rejection::StaleGeneration);
            return self.mint(request, prepared, Some(approval)).await;
        }

        // Check 3: the revision is one minted for exactly this request, and still open.
        let input = revision_input(&id, request, prepared);
        match Revision::check(&self.keys, &approval.revision, &input, now_seconds()) {
            Revision::Valid { expires_at } if outlives_policy(expires_at, &request.policy) => {
                // Minted before a reload shortened `expires_in`: it could outlive what a
                // completion remembers (see `remember_until_ms`), so it is refused as expired.
                self.metrics
                    .rejected(&request.policy.name, Rejection::RevisionExpired);
                self.mint(request, prepared, Some(approval)).await
            }
            Revision::Valid { expires_at } => {
                self.perform(request, prepared, approval, &id, expires_at)
                    .await
            }
            Revision::Expired => {
                self.metrics
                    .rejected(&request.policy.name, Rejection::RevisionExpired);
                self.mint(request, prepared, Some(approval)).await
            }
            Revision::Invalid => {
                self.metrics
                    .rejected(&request.policy.name, Rejection::RevisionInvalid);
                self.mint(request, prepared, Some(approval)).await
            }
        }
    }

    /// Claim the operation, forward it once, and record the answer before it is delivered.
    async fn perform(
        &self,
        request: &OperationRequest,
        prepared: &Prepared,
        approval: &ApprovalHeader,
        id: &OperationId,
        expires_at: i64,
    ) -> Result<Decision, StoreFailure> {
        let now_ms = now_millis();
        let upstream = &self.upstream_settings;
        let lease = upstream.connect_timeout + upstream.timeout + Duration::from_secs(1);
        let lease_until_ms = now_ms.saturating_add(lease.as_millis() as i64);
        let owner = format!(
            "{}-{}",
            self.instance,
            self.claims_made.fetch_add(1, Ordering::Relaxed)
        );
        let claim = Claim {
            scope: request.approver.scope.clone(),
            policy: request.policy.name.clone(),
            revision: approval.revision.clone(),
            credentials: request
                .approver
                .credentials
                .as_ref()
                .map(|c| c.digest(self.keys.current())),
            owner: owner.clone(),
            now_ms,
            lease_until_ms,
        };
        let Some(guard) = self.drain.start_forward() else {
            return Ok(Decision::ShuttingDown);
        };
        if let ClaimOutcome::Exists(record) = self.store.claim(id, &claim).await? {
            return self
                .answer_existing(request, prepared, approval, id, record)
                .await;
        }

        let policy = request.policy.name.as_str();
        let receipt = self
            .receipts
            .as_ref()
            .map(|_| draft_receipt(request, prepared, approval, id, now_ms));
        self.metrics
            .approval_delay(policy, expires_at, request.policy.expires_in);
        tracing::info!(policy, operation_id = %id, outcome = "claimed", "approved; forwarding once");
        let sent = self
            .upstream
            .send_approved(request.forward.clone(), id.as_str());
        match self.metrics.upstream_call(policy, sent).await {
            Ok(response) => {
                if self.proves_nothing_performed(response.status, &response.headers) {
                    self.release(policy, id, &owner).await;
                    tracing::info!(policy, operation_id = %id, status = response.status, outcome = "released", "upstream performed nothing; claim released");
                    return Ok(Decision::Released(response));
                }
                let remember = Remember {
                    expires_at,
                    policy: Arc::clone(&request.policy),
                    policies: self.policies.clone(),
                    grace: self.remember_grace,
                };
                let completion = Completion {
                    claim,
                    remember,
                    guard,
                    receipt,
                };
                self.record(policy, id, response.clone(), completion).await;
                Ok(Decision::Performed(response))
            }
            Err(ForwardError::NotSent(e)) => {
                self.release(policy, id, &owner).await;
                tracing::warn!(policy, operation_id = %id, error = %e, outcome = "released", "upstream unreachable; nothing sent, claim released");
                Ok(Decision::UpstreamUnavailable)
            }
            Err(ForwardError::Unknown(e)) => {
                self.log_unknown(id, policy, &e);
                Ok(Decision::Unknown(id.clone()))
            }
        }
    }

    /// Record the answer. If the store fails now, the answer is still delivered, and recording
    /// is retried in the background so that retries can replay it (they get 503 meanwhile).
    /// An answer whose record vanished meanwhile is written all the same.
    async fn record(
        &self,
        policy: &str,
        id: &OperationId,
        response: RecordedResponse,
        completion: Completion,
    ) {
        let Completion {
            claim,
            remember,
            guard,
            receipt,
        } = completion;
        let sink = self.receipts.clone();
        let write_receipt = move |response: &RecordedResponse| {
            if let (Some(sink), Some(mut receipt)) = (sink, receipt) {
                receipt.performed_at = rfc3339_ms(now_millis());
                receipt.upstream_status = Some(response.status);
                receipt.answer_sha256 = Some(answer_digest(
                    response.status,
                    &response.headers,
                    &response.body,
                ));
                sink.write(&receipt);
            }
        };
        match self
            .store
            .complete_claim(id, &claim, &response, remember.until_ms(now_millis()))
            .await
        {
            Ok(true) => {
                tracing::info!(policy, operation_id = %id, status = response.status, outcome = "performed", "performed; answer recorded");
                write_receipt(&response);
            }
            Ok(false) => {
                tracing::error!(policy, operation_id = %id, outcome = "performed", "the record was finished by somebody else before the answer was recorded (an operator's resolution?); it was left as it is")
            }
            Err(e) => {
                tracing::warn!(policy, operation_id = %id, error = %e, outcome = "performed", "answer delivered but not recorded yet; retrying in the background");
                let store = Arc::clone(&self.store);
                let (id, policy) = (id.clone(), policy.to_owned());
                tokio::spawn(async move {
                    // Keeps a graceful shutdown waiting until the answer is recorded.
                    let _guard = guard;
                    let deadline = tokio::time::Instant::now() + RERECORD_FOR;
                    let mut pause = Duration::from_millis(100);
                    while tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(pause).await;
                        match store
                            .complete_claim(&id, &claim, &response, remember.until_ms(now_millis()))
                            .await
                        {
                            Ok(recorded) => {
                                tracing::info!(policy, operation_id = %id, recorded, "answer recorded after a store failure");
                                if recorded {
                                    write_receipt(&response);
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

    /// Log an unknown outcome once per operation in this process (every retry would repeat it).
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

    async fn release(&self, policy: &str, id: &OperationId, owner: &str) {
        if let Err(e) = self.store.release(id, owner).await {
            // The record stays in flight and turns unknown: safe, never forwarded twice.
            tracing::error!(policy, operation_id = %id, outcome = "unknown", error = %e, "claim not released; retries will get 503 until it is resolved");
        }
    }

    fn proves_nothing_performed(&self, status: u16, headers: &[(String, Vec<u8>)]) -> bool {
        let settings = &self.upstream_settings;
        settings.release_statuses.contains(&status)
            || (status == 503
                && settings.release_503_with_retry_after
                && headers.iter().any(|(n, _)| n == "retry-after"))
    }

    /// Check 1 against a record: the approver's scope, and, when the approver's credentials
    /// were not (all) verified, the very credentials that approved it. A record without a
    /// digest (written verified, or by an older gateway) then answers nobody: nothing proves
    /// who asks now.
    fn approved_by(&self, record: &OperationRecord, approver: &Approver) -> bool {
        if record.scope != approver.scope {
            return false;
        }
        let Some(credentials) = &approver.credentials else {
            return true;
        };
        record.credentials.as_deref().is_some_and(|kept| {
            self.keys
                .all()
                .iter()
                .any(|key| credentials.digest(key) == kept)
        })
    }

    /// Checks 1 and 2 against an existing record.
    async fn answer_existing(
        &self,
        request: &OperationRequest,
        prepared: &Prepared,
        approval: &ApprovalHeader,
        id: &OperationId,
        record: OperationRecord,
    ) -> Result<Decision, StoreFailure> {
        if !self.approved_by(&record, &request.approver) || record.policy != request.policy.name {
            if id.kind() == ScopeKind::Account && request.approver.kind == ScopeKind::Session {
                return Ok(Decision::SignInRequired);
            }
            self.metrics
                .rejected(&request.policy.name, Rejection::NotThisApprover);
            return self.mint(request, prepared, Some(approval)).await;
        }
        Ok(match record.state {
            RecordState::Done(response) => Decision::Replayed(response),
            RecordState::InFlight { lease_until_ms, .. } if lease_until_ms < now_millis() => {
                self.log_unknown(
                    id,
                    &request.policy.name,
                    "its lease ran out with no answer recorded",
                );
                Decision::Unknown(id.clone())
            }
            RecordState::InFlight { .. } => Decision::InProgress(id.clone()),
        })
    }

    /// The operation for what the request asks. Answering a failed approval, never with the
    /// revision it named (the agent would retry it in a loop).
    async fn mint(
        &self,
        request: &OperationRequest,
        prepared: &Prepared,
        approval: Option<&ApprovalHeader>,
    ) -> Result<Decision, StoreFailure> {
        let key = self.keys.current();
        let material: Vec<&[u8]> = prepared.action_material.iter().map(Vec::as_slice).collect();
        let action = ActionTag::derive(
            key,
            &request.policy.id_prefix,
            request.approver.kind,
            &material,
        );
        let state = self.store.action_state(action.as_str()).await?;
        let now = now_millis();
        if let Some((unknown, _)) = state.in_flight.iter().find(|(_, lease)| *lease < now) {
            // Its outcome is unknown: no new operation for the same action until an operator
            // resolves it, or the user could approve the action twice (spec section 7).
            self.log_unknown(
                unknown,
                &request.policy.name,
                "its lease ran out with no answer recorded",
            );
            return Ok(Decision::Unknown(unknown.clone()));
        }
        let id = action.operation_id(key, state.generation);
        let input = revision_input(&id, request, prepared);
        let mut expires_at =
            now_seconds().saturating_add(request.policy.expires_in.as_secs() as i64);
        let mut revision = Revision::mint(key, &input, expires_at);
        if approval.is_some_and(|a| a.revision == revision) {
            expires_at += 1;
            revision = Revision::mint(key, &input, expires_at);
        }
        Ok(Decision::ApprovalRequired {
            operation: Operation {
                operation_id: id.to_string(),
                revision,
                summary: prepared.summary.clone(),
                terms: Some(Value::Object(request.terms.clone().into_iter().collect())),
                expires_at: rfc3339(expires_at),
            },
            rejected: approval.is_some(),
        })
    }
}

/// How long a performed operation (its record and its action's generation) is remembered:
/// while any revision of it could still be approved, plus `store.remember_grace`. Every
/// revision of an operation is minted before its completion moves the generation on, so it
/// expires by the completion time + the policy's `expires_in` (+1 s: a re-minted revision
/// may be one second later); the approved one by its own `expires_at`. A revision minted
/// under a longer `expires_in`, before a reload shortened it, is refused at check 3
/// ([`outlives_policy`]), so the current `expires_in` is always enough; one made longer by a
/// reload while the operation was being forwarded is read at completion.
struct Remember {
    /// The approved revision's, in Unix seconds.
    expires_at: i64,
    /// The policy the request was decided with.
    policy: Arc<Policy>,
    /// The policies in force at completion.
    policies: LivePolicies,
    grace: Duration,
}

impl Remember {
    fn until_ms(&self, completed_at_ms: i64) -> i64 {
        let reloaded = self
            .policies
            .snapshot()
            .iter()
            .filter(|policy| policy.name == self.policy.name)
            .map(|policy| policy.expires_in)
            .max()
            .unwrap_or_default();
        let expires_in = self.policy.expires_in.max(reloaded);
        let any_revision = completed_at_ms
            .saturating_add(duration_ms(expires_in))
            .saturating_add(1000);
        self.expires_at
            .saturating_mul(1000)
            .max(any_revision)
            .saturating_add(duration_ms(self.grace))
    }
}

fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Whether a valid revision expires later than one minted now by this policy could: minted
/// before a reload shortened `expires_in`.
fn outlives_policy(expires_at: i64, policy: &Policy) -> bool {
    let latest = now_seconds()
        .saturating_add(i64::try_from(policy.expires_in.as_secs()).unwrap_or(i64::MAX))
        .saturating_add(1);
    expires_at > latest
}

/// What [`OperationFlow::record`] needs of the claim it completes.
struct Completion {
    claim: Claim,
    remember: Remember,
    /// Keeps a graceful shutdown waiting until the answer is recorded.
    guard: ForwardGuard,
    receipt: Option<Receipt>,
}

/// A receipt for an operation about to be forwarded; [`OperationFlow::record`] adds the answer.
fn draft_receipt(
    request: &OperationRequest,
    prepared: &Prepared,
    approval: &ApprovalHeader,
    id: &OperationId,
    approved_at_ms: i64,
) -> Receipt {
    let approver = &request.approver;
    Receipt {
        kind: "performed",
        operation_id: id.to_string(),
        revision: approval.revision.clone(),
        policy: request.policy.name.clone(),
        summary: Some(prepared.summary.clone()),
        terms: Some(Value::Object(request.terms.clone().into_iter().collect())),
        scope: approver.scope.clone(),
        agent: Some(approver.who.agent.clone()),
        user: approver.who.user.clone(),
        session: Some(approver.who.session.clone()),
        account: approver.who.account.clone(),
        identity: Some(if approver.credentials.is_none() {
            "verified"
        } else {
            "unverified"
        }),
        approved_at: Some(rfc3339_ms(approved_at_ms)),
        performed_at: String::new(),
        upstream_status: None,
        answer_sha256: None,
    }
}

fn revision_input<'a>(
    id: &'a OperationId,
    request: &'a OperationRequest,
    prepared: &'a Prepared,
) -> RevisionInput<'a> {
    RevisionInput {
        operation_id: id.as_str(),
        summary: &prepared.summary,
        terms: &prepared.terms_json,
        scope: &request.approver.scope,
        request: &request.fingerprint,
    }
}

/// How long the gateway keeps trying to record an answer after the store failed.
const RERECORD_FOR: Duration = Duration::from_secs(60);

/// The store failed: fail closed.
struct StoreFailure(StoreError);

impl From<StoreError> for StoreFailure {
    fn from(e: StoreError) -> Self {
        StoreFailure(e)
    }
}

pub fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn now_seconds() -> i64 {
    now_millis() / 1000
}

fn rfc3339(unix_seconds: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix_seconds)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
