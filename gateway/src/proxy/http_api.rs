//! Operations on HTTP APIs (spec sections 4 and 6, "APIs"): read a Personal Agent request to
//! a policy route, run its policy's lookup, hand it to the executor, and render the decision.

use std::sync::Arc;

use pingora::proxy::Session;

use super::limits::read_body;
use super::lookup::lookup_terms;
use super::operations::{Operations, declares_extension};
use super::reply::Reply;
use super::step::Step;
use super::upstream::{ForwardRequest, UpstreamClient, forwarded_headers};
use crate::identity::Approver;
use crate::ingress::{self, PolicyReading, Target, reading::HttpRequest};
use crate::metrics::Outcome;
use crate::operation::OperationRequest;
use crate::policy::{Captures, Policy};
use crate::protocol::{ApprovalHeader, ErrorBody};

/// A Personal Agent request to a policy route, read whole and read once by the ingress.
struct ApiRequest {
    approver: Approver,
    approval: Option<ApprovalHeader>,
    /// The terms from the request and the fingerprint the revision covers.
    reading: PolicyReading,
    /// The request's headers, for the lookup.
    headers: http::HeaderMap,
    /// What is sent upstream once approved: the bytes the fingerprint covers.
    forward: ForwardRequest,
}

/// A request to a policy route: read, checked, looked up, decided, answered.
pub(crate) async fn handle(
    ops: &Operations,
    upstream: &UpstreamClient,
    session: &mut Session,
    policy: Arc<Policy>,
    captures: Captures,
    target: Target,
) -> Step {
    let request = match read(ops, session, &policy, captures, target).await {
        Ok(request) => request,
        Err((reply, outcome)) => return Step::refused(&policy.name, outcome, reply),
    };
    // Check 2 comes before the lookup: a performed operation is replayed even while the
    // upstream's records can't be read.
    if let Some(executed) = ops
        .executor
        .answer_from_record(&policy, &request.approver, request.approval.as_ref())
        .await
    {
        return Step::Operation(Reply::decision(executed.decision), executed.outcome);
    }
    let mut terms = request.reading.terms;
    if let Err((reply, outcome)) =
        lookup_terms(upstream, &policy, &request.headers, &mut terms).await
    {
        return Step::refused(&policy.name, outcome, reply);
    }
    let operation = OperationRequest {
        policy: Arc::clone(&policy),
        approver: request.approver,
        approval: request.approval,
        terms,
        fingerprint: request.reading.fingerprint,
    };
    let executed = ops.executor.run(operation, &request.forward).await;
    Step::Operation(Reply::decision(executed.decision), executed.outcome)
}

/// The checks that come before the flow, in the spec's order: negotiation, Session, body
/// size, approval syntax, then the ingress's one strict reading of the request.
async fn read(
    ops: &Operations,
    session: &mut Session,
    policy: &Policy,
    captures: Captures,
    target: Target,
) -> Result<ApiRequest, (Reply, Outcome)> {
    let bad = |status: u16, body: ErrorBody| (Reply::error(status, &body), Outcome::BadRequest);
    let header = session.req_header();
    let headers = &header.headers;

    let declared = declares_extension(headers).map_err(|e| {
        bad(
            400,
            ErrorBody::new("invalid_header", e.to_string()).with("header", "Poppy-Extensions"),
        )
    })?;
    if !declared {
        return Err((
            Reply::error(400, &ErrorBody::new("extension_required", "this action needs the user's approval: declare Poppy-Extensions: \"operations\";v=\"2\"").with("extension", "operations")),
            Outcome::ExtensionRequired,
        ));
    }

    let approver = ops
        .approver(headers)
        .await
        .map_err(|e| bad(401, ErrorBody::new(e.code(), e.to_string())))?;

    let method = header.method.clone();
    let headers = headers.clone();
    let body = read_body(session, &ops.body_limits, &ops.metrics)
        .await
        .map_err(|refusal| (Reply::refusal(&refusal), Outcome::BadRequest))?;

    // After the body: a request too large is refused as that, whatever else is wrong.
    let approval = if headers.contains_key("poppy-approval") {
        Some(
            ApprovalHeader::parse(
                headers
                    .get_all("poppy-approval")
                    .iter()
                    .map(|v| v.as_bytes()),
            )
            .map_err(|e| {
                bad(
                    400,
                    ErrorBody::new("invalid_header", e.to_string())
                        .with("header", "Poppy-Approval"),
                )
            })?,
        )
    } else {
        None
    };

    let reading = ingress::read_policy_request(
        policy,
        &captures,
        &HttpRequest {
            method: method.as_str(),
            target: &target,
            headers: &headers,
            body: &body,
        },
    )
    .map_err(|refusal| (Reply::refusal(&refusal), Outcome::BadRequest))?;

    let forward = ForwardRequest {
        method,
        path_and_query: target.path_and_query(),
        headers: forwarded_headers(&headers),
        body,
    };
    Ok(ApiRequest {
        approver,
        approval,
        reading,
        headers,
        forward,
    })
}
