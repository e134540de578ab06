//! Operations on HTTP APIs (spec sections 4 and 6, "APIs"): run a read request's lookup for
//! the flow, and render the flow's decision as an HTTP response.

use std::sync::Arc;

use bytes::Bytes;

use super::approver::Approver;
use super::flow::{Decision, OperationRequest};
use super::reply::Reply;
use super::upstream::{ForwardRequest, UpstreamClient};
use crate::ingress::PolicyReading;
use crate::metrics::Outcome;
use crate::policy::{Policy, TermSource, Terms, extract_from_answer};
use crate::protocol::{ApprovalHeader, ErrorBody};

/// A Personal Agent request to a policy route, read whole and read once by the ingress.
pub struct ApiRequest {
    pub policy: Arc<Policy>,
    pub approver: Approver,
    pub approval: Option<ApprovalHeader>,
    /// The terms from the request and the fingerprint the revision covers.
    pub reading: PolicyReading,
    /// The request's headers, for the lookup.
    pub headers: http::HeaderMap,
    /// What is sent upstream once approved: the bytes the fingerprint covers.
    pub forward: ForwardRequest,
}

/// Run the policy's lookup, if any, and hand the request to the flow. A failed lookup is
/// answered with its reply, and nothing is forwarded.
pub async fn prepare(
    request: ApiRequest,
    upstream: &UpstreamClient,
) -> Result<OperationRequest, (Reply, Outcome)> {
    let bad = |body: ErrorBody| (Reply::error(400, &body), Outcome::BadRequest);
    let policy = &request.policy;
    let mut terms = request.reading.terms;
    if let Some(template) = &policy.lookup {
        // The same lookup runs for the retry with the approval, so its revision matches only
        // while the upstream's record says what the User approved.
        let path_and_query = template.fill(&terms).map_err(|e| {
            bad(ErrorBody::new("invalid_term", e.to_string()).with("term", e.term()))
        })?;
        lookup(
            upstream,
            &request.headers,
            path_and_query,
            &policy.terms,
            &mut terms,
        )
        .await
        .map_err(|detail| {
            tracing::warn!(policy = %policy.name, %detail, "lookup failed; nothing forwarded");
            (
                Reply::error(502, &ErrorBody::new("lookup_failed", detail)),
                Outcome::LookupFailed,
            )
        })?;
    }
    Ok(OperationRequest {
        policy: Arc::clone(&request.policy),
        approver: request.approver,
        approval: request.approval,
        terms,
        fingerprint: request.reading.fingerprint,
        forward: request.forward,
    })
}

/// Headers of the Personal Agent's request a lookup carries: the upstream checks the same
/// credentials for the record as for the action.
const LOOKUP_HEADERS: [&str; 4] = ["host", "authorization", "cookie", "poppy-session"];

/// GET the lookup URL from the upstream (bounded by its timeouts) and read the `lookup` terms
/// out of the answer. Any failure is a readable detail: never a term left empty.
async fn lookup(
    upstream: &UpstreamClient,
    headers: &http::HeaderMap,
    path_and_query: String,
    policy_terms: &[(String, TermSource)],
    terms: &mut Terms,
) -> Result<(), String> {
    let mut forwarded: Vec<(http::HeaderName, http::HeaderValue)> = headers
        .iter()
        .filter(|(name, _)| LOOKUP_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    forwarded.push((
        http::header::ACCEPT,
        http::HeaderValue::from_static("application/json"),
    ));
    let request = ForwardRequest {
        method: http::Method::GET,
        path_and_query: path_and_query.clone(),
        headers: forwarded,
        body: Bytes::new(),
    };
    let answer = upstream.send(request).await.map_err(|e| {
        // The client hears the kind of failure; the log keeps the path and the error.
        tracing::warn!(lookup = %path_and_query, error = %e, "lookup: no answer from the upstream");
        "the record the terms are read from could not be read: the API gave no answer".to_owned()
    })?;
    if !(200..300).contains(&answer.status) {
        tracing::warn!(lookup = %path_and_query, status = answer.status, "lookup: the upstream refused");
        return Err(format!(
            "the record the terms are read from could not be read: the API answered {}; the terms can't be shown without it",
            answer.status
        ));
    }
    extract_from_answer(policy_terms, &answer.body, terms).map_err(|e| {
        tracing::warn!(lookup = %path_and_query, error = %e, "lookup: unreadable answer");
        format!("the record the terms are read from does not say what the terms need: {e}")
    })
}

/// The HTTP answer to a decision.
pub fn render(decision: Decision) -> Reply {
    match decision {
        Decision::ApprovalRequired { operation, rejected } => {
            let detail = if rejected {
                "the approval does not match this request's current terms (or has expired, or is not this Session's to give); ask the user to approve these"
            } else {
                "this action needs the user's approval of these terms; retry the same request with a Poppy-Approval header"
            };
            Reply::error(403, &ErrorBody::approval_required(&operation, detail))
        }
        Decision::SignInRequired => Reply::error(401, &ErrorBody::new("sign_in_required", "this operation belongs to an account: sign in to that account to approve it"))
            .with_header("www-authenticate", "Bearer"),
        Decision::Performed(response) | Decision::Released(response) | Decision::Replayed(response) => Reply::from(response),
        Decision::InProgress(id) => Reply::retry_later(
            1,
            &ErrorBody::new("operation_in_progress", "this operation is being performed; send the same approval again to get its answer").with("operation_id", id.as_str()),
        ),
        Decision::Unknown(id) => Reply::retry_later(
            30,
            &ErrorBody::new(
                "operation_outcome_unknown",
                "the gateway does not know yet whether this operation took effect; it will not be performed again. Retry later, or ask the company",
            )
            .with("operation_id", id.as_str()),
        ),
        Decision::UpstreamUnavailable => Reply::retry_later(1, &ErrorBody::new("upstream_unavailable", "the API could not be reached; nothing was performed, send the same approval again")),
        Decision::ShuttingDown => Reply::retry_later(1, &ErrorBody::new("gateway_shutting_down", "this gateway is shutting down and started nothing; send the same approval again")),
        Decision::StoreUnavailable => Reply::retry_later(1, &ErrorBody::new("store_unavailable", "the gateway cannot reach its operation store; nothing was performed, try again")),
    }
}
