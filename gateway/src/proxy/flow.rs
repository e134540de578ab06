//! The operation flow: mint, check an approval, claim, forward once, record, replay.
//!
//! It runs after the service has read the whole request; it answers every request itself and
//! never falls through to the proxy path. The spec's checks, in its order (section 6):
//! 1. the Session can approve the operation, else handle as if there were no approval;
//! 2. the operation hasn't been performed, else replay (or 503 while it is in flight);
//! 3. the revision is one minted for exactly this request and hasn't expired, else answer
//!    with a new revision.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::Value;

use super::approver::Approver;
use super::reply::Reply;
use super::upstream::{ForwardError, ForwardRequest, HOP_BY_HOP, UpstreamClient};
use crate::config::Upstream;
use crate::metrics::{Metrics, Outcome};
use crate::policy::{Captures, Policy, RequestParts, Terms, canonical_json, extract};
use crate::protocol::{
    ActionTag, ApprovalHeader, ErrorBody, Keys, Operation, OperationId, Revision, RevisionInput,
    ScopeKind,
};
use crate::store::{Claim, ClaimOutcome, OperationRecord, OperationStore, RecordState, StoreError};

/// A Personal Agent request to a policy route, read whole.
pub struct OperationRequest {
    pub policy: Arc<Policy>,
    pub captures: Captures,
    pub approver: Approver,
    pub approval: Option<ApprovalHeader>,
    pub method: http::Method,
    pub path: String,
    pub query: Option<String>,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// Everything the flow needs, shared by all requests.
pub struct OperationFlow {
    pub keys: Keys,
    pub store: Arc<dyn OperationStore>,
    pub upstream: Arc<UpstreamClient>,
    pub upstream_settings: Upstream,
    pub remember_grace: Duration,
    pub metrics: Arc<Metrics>,
    /// Identifies this process in claims (`owner`), for operators reading records.
    pub instance: String,
    pub claims_made: AtomicU64,
}

/// The request, prepared once: terms, summary and the fingerprints the MACs cover.
struct Prepared {
    terms: Terms,
    terms_json: String,
    summary: String,
    fingerprint: Vec<u8>,
    action_material: Vec<Vec<u8>>,
}

impl OperationFlow {
    pub async fn handle(&self, mut request: OperationRequest) -> Reply {
        let policy = Arc::clone(&request.policy);
        let names_session_operation = request
            .approval
            .as_ref()
            .and_then(|a| OperationId::parse(&a.operation_id))
            .is_some_and(|id| id.kind() == ScopeKind::Session);
        if names_session_operation && request.approver.kind == ScopeKind::Account {
            // Returned while this Session was signed out: it stays the Session's to approve.
            request.approver = request.approver.session_only();
        }
        let (reply, outcome) = match self.prepare(&request) {
            Err(reply) => (reply, Outcome::BadRequest),
            Ok(prepared) => match self.decide(&request, &prepared).await {
                Ok(done) => done,
                Err(StoreFailure(e)) => {
                    tracing::warn!(policy = %policy.name, error = %e, "store unavailable; nothing forwarded");
                    (
                        Reply::retry_later(
                            1,
                            &ErrorBody::new(
                                "store_unavailable",
                                "the gateway cannot reach its operation store; nothing was performed, try again",
                            ),
                        ),
                        Outcome::StoreUnavailable,
                    )
                }
            },
        };
        self.metrics.operation(&policy.name, outcome);
        reply
    }

    /// Parse the body and extract the terms; a bad request is answered here.
    fn prepare(&self, request: &OperationRequest) -> Result<Prepared, Reply> {
        let policy = &request.policy;
        let parsed_body: Option<Value> = if request.body.is_empty() {
            None
        } else {
            serde_json::from_slice(&request.body).ok()
        };
        if policy.needs_body() && parsed_body.is_none() {
            let detail = if request.body.is_empty() {
                "this action's terms come from a JSON request body, and the request has none"
                    .to_owned()
            } else {
                "the request body is not valid JSON, and this action's terms come from it"
                    .to_owned()
            };
            return Err(Reply::error(400, &ErrorBody::new("invalid_body", detail)));
        }
        let parts = RequestParts {
            captures: &request.captures,
            query: request.query.as_deref(),
            headers: &request.headers,
            body: parsed_body.as_ref(),
            arguments: None,
        };
        let terms = extract(&policy.terms, &parts).map_err(|e| {
            Reply::error(
                400,
                &ErrorBody::new("missing_term", e.to_string()).with("term", e.term()),
            )
        })?;
        let terms_json = canonical_json(&Value::Object(terms.clone().into_iter().collect()));
        let summary = policy.summary.render(&terms);
        let mut fingerprint = Vec::with_capacity(request.path.len() + request.body.len() + 16);
        for part in [
            request.method.as_str().as_bytes(),
            request.path.as_bytes(),
            request.query.as_deref().unwrap_or("").as_bytes(),
        ] {
            fingerprint.extend_from_slice(&(part.len() as u64).to_be_bytes());
            fingerprint.extend_from_slice(part);
        }
        // Equal JSON bodies are the same request however their keys are ordered.
        match &parsed_body {
            Some(json) => fingerprint.extend_from_slice(canonical_json(json).as_bytes()),
            None => fingerprint.extend_from_slice(&request.body),
        }
        let mut action_material = vec![
            policy.name.clone().into_bytes(),
            request.approver.scope.clone().into_bytes(),
        ];
        action_material.extend(policy.action_material(&terms));
        Ok(Prepared {
            terms,
            terms_json,
            summary,
            fingerprint,
            action_material,
        })
    }

    async fn decide(
        &self,
        request: &OperationRequest,
        prepared: &Prepared,
    ) -> Result<(Reply, Outcome), StoreFailure> {
        let Some(approval) = &request.approval else {
            return Ok((
                self.mint(request, prepared, None, None).await?,
                Outcome::Held,
            ));
        };
        let Some(id) = OperationId::parse(&approval.operation_id) else {
            // Not of this gateway's shape, so not one it returned.
            return self.reject(request, prepared, approval).await;
        };

        // Checks 1 and 2: an existing record decides (replay, in flight, or not yours).
        if let Some(record) = self.store.lookup(&id).await? {
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
                return Ok(self.challenge(request));
            }
            return self.reject(request, prepared, approval).await;
        };
        let generation = self.store.generation(action.as_str()).await?;
        if action.operation_id(key, generation) != id {
            // Performed and forgotten, or an ID of another generation: not approvable now.
            return self.reject(request, prepared, approval).await;
        }

        // Check 3: the revision is one minted for exactly this request, and still open.
        let input = self.revision_input(&id, request, prepared);
        let expires_at =
            match Revision::check(&self.keys, &approval.revision, &input, now_seconds()) {
                Revision::Valid { expires_at } => expires_at,
                Revision::Expired | Revision::Invalid => {
                    return self.reject(request, prepared, approval).await;
                }
            };

        self.perform(request, prepared, approval, &id, expires_at)
            .await
    }

    /// Claim the operation, forward it once, record the answer and deliver it.
    async fn perform(
        &self,
        request: &OperationRequest,
        prepared: &Prepared,
        approval: &ApprovalHeader,
        id: &OperationId,
        expires_at: i64,
    ) -> Result<(Reply, Outcome), StoreFailure> {
        let now_ms = now_millis();
        let upstream = &self.upstream_settings;
        let lease = upstream.connect_timeout + upstream.timeout + Duration::from_secs(5);
        let remember_until_ms = expires_at
            .saturating_mul(1000)
            .saturating_add(self.remember_grace.as_millis() as i64);
        let owner = format!(
            "{}-{}",
            self.instance,
            self.claims_made.fetch_add(1, Ordering::Relaxed)
        );
        let claim = Claim {
            scope: request.approver.scope.clone(),
            policy: request.policy.name.clone(),
            revision: approval.revision.clone(),
            owner: owner.clone(),
            now_ms,
            lease_until_ms: now_ms.saturating_add(lease.as_millis() as i64),
            remember_until_ms: remember_until_ms
                .max(now_ms.saturating_add(lease.as_millis() as i64)),
        };
        match self.store.claim(id, &claim).await? {
            ClaimOutcome::Exists(record) => {
                return self
                    .answer_existing(request, prepared, approval, id, record)
                    .await;
            }
            ClaimOutcome::Claimed => {}
        }

        let policy = &request.policy.name;
        tracing::info!(policy = %policy, operation_id = %id, "approved; forwarding once");
        match self.upstream.send(forward_request(request)).await {
            Ok(response) => {
                if self.proves_nothing_performed(response.status, &response.headers) {
                    self.release(id, &owner).await;
                    tracing::info!(policy = %policy, operation_id = %id, status = response.status, "upstream performed nothing; claim released");
                    return Ok((Reply::from(response), Outcome::Released));
                }
                match self
                    .store
                    .complete(id, &owner, &response, remember_until_ms)
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::error!(policy = %policy, operation_id = %id, "claim lost before the answer was recorded; retries will not replay it")
                    }
                    Err(e) => {
                        tracing::error!(policy = %policy, operation_id = %id, error = %e, "answer not recorded; retries will get 503 until it is resolved")
                    }
                }
                Ok((Reply::from(response), Outcome::Performed))
            }
            Err(ForwardError::NotSent(e)) => {
                self.release(id, &owner).await;
                tracing::warn!(policy = %policy, operation_id = %id, error = %e, "upstream unreachable; nothing sent, claim released");
                Ok((
                    Reply::retry_later(
                        1,
                        &ErrorBody::new(
                            "upstream_unavailable",
                            "the API could not be reached; nothing was performed, send the same approval again",
                        ),
                    ),
                    Outcome::Released,
                ))
            }
            Err(ForwardError::Unknown(e)) => {
                tracing::error!(policy = %policy, operation_id = %id, error = %e, "outcome unknown; the operation will not be forwarded again");
                Ok((in_flight_reply(id, true), Outcome::Unknown))
            }
        }
    }

    async fn release(&self, id: &OperationId, owner: &str) {
        if let Err(e) = self.store.release(id, owner).await {
            // The record stays in flight and turns unknown: safe, never forwarded twice.
            tracing::error!(operation_id = %id, error = %e, "claim not released; retries will get 503 until it is resolved");
        }
    }

    fn proves_nothing_performed(&self, status: u16, headers: &[(String, Vec<u8>)]) -> bool {
        let settings = &self.upstream_settings;
        settings.release_statuses.contains(&status)
            || (status == 503
                && settings.release_503_with_retry_after
                && headers.iter().any(|(n, _)| n == "retry-after"))
    }

    /// Checks 1 and 2 against an existing record.
    async fn answer_existing(
        &self,
        request: &OperationRequest,
        prepared: &Prepared,
        approval: &ApprovalHeader,
        id: &OperationId,
        record: OperationRecord,
    ) -> Result<(Reply, Outcome), StoreFailure> {
        if record.scope != request.approver.scope || record.policy != request.policy.name {
            if id.kind() == ScopeKind::Account && request.approver.kind == ScopeKind::Session {
                return Ok(self.challenge(request));
            }
            return self.reject(request, prepared, approval).await;
        }
        match record.state {
            RecordState::Done(response) => Ok((Reply::from(response), Outcome::Replayed)),
            RecordState::InFlight { lease_until_ms, .. } => {
                if lease_until_ms < now_millis() {
                    Ok((in_flight_reply(id, true), Outcome::Unknown))
                } else {
                    Ok((in_flight_reply(id, false), Outcome::InProgress))
                }
            }
        }
    }

    /// A failed check: answer with the operation for what the request asks, never with the
    /// revision the approval named.
    async fn reject(
        &self,
        request: &OperationRequest,
        prepared: &Prepared,
        approval: &ApprovalHeader,
    ) -> Result<(Reply, Outcome), StoreFailure> {
        Ok((self.mint(request, prepared, Some(approval), Some("the approval does not match this request's current terms; ask the user to approve these")).await?, Outcome::Rejected))
    }

    async fn mint(
        &self,
        request: &OperationRequest,
        prepared: &Prepared,
        approval: Option<&ApprovalHeader>,
        detail: Option<&str>,
    ) -> Result<Reply, StoreFailure> {
        let key = self.keys.current();
        let material: Vec<&[u8]> = prepared.action_material.iter().map(Vec::as_slice).collect();
        let action = ActionTag::derive(
            key,
            &request.policy.id_prefix,
            request.approver.kind,
            &material,
        );
        let generation = self.store.generation(action.as_str()).await?;
        let id = action.operation_id(key, generation);
        let input = self.revision_input(&id, request, prepared);
        let mut expires_at =
            now_seconds().saturating_add(request.policy.expires_in.as_secs() as i64);
        let mut revision = Revision::mint(key, &input, expires_at);
        if approval.is_some_and(|a| a.revision == revision) {
            // Never answer an approval with the revision it names (the agent would loop).
            expires_at += 1;
            revision = Revision::mint(key, &input, expires_at);
        }
        let operation = Operation {
            operation_id: id.to_string(),
            revision,
            summary: prepared.summary.clone(),
            terms: Some(Value::Object(prepared.terms.clone().into_iter().collect())),
            expires_at: rfc3339(expires_at),
        };
        let detail = detail.unwrap_or("this action needs the user's approval of these terms; retry the same request with a Poppy-Approval header");
        Ok(Reply::error(
            403,
            &ErrorBody::approval_required(&operation, detail),
        ))
    }

    fn challenge(&self, request: &OperationRequest) -> (Reply, Outcome) {
        tracing::info!(policy = %request.policy.name, "signed-out Session named an account's operation; challenged");
        (
            Reply::error(
                401,
                &ErrorBody::new(
                    "sign_in_required",
                    "this operation belongs to an account: sign in to that account to approve it",
                ),
            )
            .with_header("www-authenticate", "Bearer"),
            Outcome::Challenged,
        )
    }

    fn revision_input<'a>(
        &self,
        id: &'a OperationId,
        request: &'a OperationRequest,
        prepared: &'a Prepared,
    ) -> RevisionInput<'a> {
        RevisionInput {
            operation_id: id.as_str(),
            summary: &prepared.summary,
            terms: &prepared.terms_json,
            scope: &request.approver.scope,
            request: &prepared.fingerprint,
        }
    }
}

/// The store failed: fail closed.
struct StoreFailure(StoreError);

impl From<StoreError> for StoreFailure {
    fn from(e: StoreError) -> Self {
        StoreFailure(e)
    }
}

fn in_flight_reply(id: &OperationId, unknown: bool) -> Reply {
    let (error, detail, retry) = if unknown {
        (
            "operation_outcome_unknown",
            "the gateway does not know yet whether this operation took effect; it will not be performed again. Retry later, or ask the company",
            30,
        )
    } else {
        (
            "operation_in_progress",
            "this operation is being performed; send the same approval again to get its answer",
            1,
        )
    };
    Reply::retry_later(
        retry,
        &ErrorBody::new(error, detail).with("operation_id", id.as_str()),
    )
}

/// The request to send upstream: the Personal Agent's own, without `Poppy-Approval` and
/// hop-by-hop headers.
fn forward_request(request: &OperationRequest) -> ForwardRequest {
    let headers = request
        .headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            name != "poppy-approval" && name != "content-length" && !HOP_BY_HOP.contains(&name)
        })
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let path_and_query = match &request.query {
        Some(query) => format!("{}?{query}", request.path),
        None => request.path.clone(),
    };
    ForwardRequest {
        method: request.method.clone(),
        path_and_query,
        headers,
        body: request.body.clone(),
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
