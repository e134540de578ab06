//! Operations on HTTP APIs (spec sections 4 and 6, "APIs"): read a Personal Agent request to
//! a policy route, run its policy's lookup, hand it to the executor, and render the decision.
//! [`operate`] is also how the conversations service (`crate::conversations`) runs a request
//! it was described: the same order, the same executor.

use std::sync::Arc;

use pingora::proxy::Session;

use super::executor::{Executed, Executor};
use super::limits::read_body;
use super::lookup::lookup_terms;
use super::operations::{Operations, declares_extension};
use super::reply::Reply;
use super::step::Step;
use super::upstream::{ForwardRequest, UpstreamClient, forwarded_headers};
use crate::identity::{Approver, RequestTarget};
use crate::ingress::{self, PolicyReading, Target, reading::HttpRequest};
use crate::metrics::Outcome;
use crate::operation::OperationRequest;
use crate::policy::{Captures, Policy};
use crate::protocol::{ApprovalHeader, ErrorBody};

/// A Personal Agent request to a policy route, read whole and read once by the ingress.
pub(crate) struct ApiRequest {
    pub(crate) policy: Arc<Policy>,
    pub(crate) approver: Approver,
    pub(crate) approval: Option<ApprovalHeader>,
    /// The terms from the request and the fingerprint the revision covers.
    pub(crate) reading: PolicyReading,
    /// The request's headers, for the lookup.
    pub(crate) headers: http::HeaderMap,
    /// What is sent upstream once approved: the bytes the fingerprint covers.
    pub(crate) forward: ForwardRequest,
}

/// What became of a request read for an operation.
pub(crate) enum Operated {
    /// The executor decided (what to count and log of it included).
    Decided(Executed),
    /// Refused before the executor (a term the lookup URL can't take, a failed lookup):
    /// nothing decided, nothing forwarded.
    Refused(Reply, Outcome),
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
    match operate(&ops.executor, upstream, request).await {
        Operated::Decided(executed) => {
            Step::Operation(Reply::decision(executed.decision), executed.outcome)
        }
        Operated::Refused(reply, outcome) => Step::refused(&policy.name, outcome, reply),
    }
}

/// A request read for an operation, carried through: its record first when it has a lookup
/// (check 2 comes before the lookup: a performed operation is replayed even while the
/// upstream's records can't be read), then the lookup, then the executor.
pub(crate) async fn operate(
    executor: &Executor,
    upstream: &UpstreamClient,
    request: ApiRequest,
) -> Operated {
    let policy = request.policy;
    if let Some(executed) = executor
        .answer_from_record(&policy, &request.approver, request.approval.as_ref())
        .await
    {
        return Operated::Decided(executed);
    }
    let mut terms = request.reading.terms;
    if let Err((reply, outcome)) =
        lookup_terms(upstream, &policy, &request.headers, &mut terms).await
    {
        return Operated::Refused(reply, outcome);
    }
    let operation = OperationRequest {
        policy,
        approver: request.approver,
        approval: request.approval,
        terms,
        fingerprint: request.reading.fingerprint,
    };
    Operated::Decided(executor.run(operation, &request.forward).await)
}

/// The checks that come before the flow, in the spec's order: negotiation, Session, body
/// size, approval syntax, then the ingress's one strict reading of the request.
async fn read(
    ops: &Operations,
    session: &mut Session,
    policy: &Arc<Policy>,
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

    let signed_for = RequestTarget {
        method: header.method.as_str(),
        path: header.uri.path(),
    };
    let approver = ops
        .approver(headers, &signed_for)
        .await
        .map_err(|e| (Reply::approver_refused(&e), Outcome::BadRequest))?;

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
        policy: Arc::clone(policy),
        approver,
        approval,
        reading,
        headers,
        forward,
    })
}
