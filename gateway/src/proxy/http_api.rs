//! Operations on HTTP APIs (spec sections 4 and 6, "APIs"): a Personal Agent's request to a
//! policy route goes through the runner (`runner.rs`: the front door, then the executor), and
//! its decision or refusal is rendered as HTTP.

use std::sync::Arc;

use pingora::proxy::Session;

use super::executor::Executor;
use super::executor::Operated;
use super::forwarded::ProxyContext;
use super::limits::read_body;
use super::operations::Operations;
use super::reply::Reply;
use super::runner::{self, Arrival, Ran};
use super::step::Step;
use crate::identity::RequestTarget;
use crate::ingress::Target;
use crate::ingress::admit::{self, Action, ApprovalSource, Refused};
use crate::operation::Decision;
use crate::policy::{Captures, Policy};
use crate::protocol::page_link::{self, Details};
use crate::protocol::{ErrorBody, Operation, OperationId};

/// A request to a policy route: admitted, decided, answered.
pub(crate) async fn handle(
    ops: &Operations,
    session: &mut Session,
    policy: Arc<Policy>,
    captures: Captures,
    target: Target,
    proxy: &ProxyContext,
) -> Step {
    let header = session.req_header();
    // No operations extension, on a policy the User may approve on the Company's page: the
    // answer is the page's link (spec 2: such a request never gets an operation).
    let page_url = ops.page_url.as_deref().filter(|_| {
        policy.approval.allows_page()
            && matches!(
                admit::extension(&header.headers),
                Err(Refused::ExtensionRequired)
            )
    });
    let method = header.method.clone();
    // A verified Session is signed for the path as sent (docs/sessions.md).
    let signed_path = header.uri.path().to_owned();
    let arrival = Arrival {
        headers: header.headers.clone(),
        signed_for: RequestTarget {
            method: method.as_str(),
            path: &signed_path,
        },
        action: Action::Http {
            policy: Arc::clone(&policy),
            captures,
            method: method.clone(),
            target,
        },
        approval: ApprovalSource::Header,
        page: page_url.is_some(),
    };
    let body = read_body(session, &ops.body_limits, &ops.metrics);
    match runner::run(&ops.session_claims, &ops.executor, arrival, body, proxy).await {
        Ran::Operated(Operated::Decided(executed)) => match (page_url, executed.decision) {
            (Some(page_url), Decision::ApprovalRequired { operation, .. }) => {
                let reply = page_link_reply(&ops.executor, page_url, &policy, &operation);
                Step::Operation(reply, executed.outcome)
            }
            (_, decision) => Step::Operation(Reply::decision(decision), executed.outcome),
        },
        Ran::Operated(Operated::Refused(refusal, outcome)) => {
            Step::refused(&policy.name, outcome, Reply::refusal(&refusal))
        }
        Ran::Refused(refused, outcome) => {
            Step::refused(&policy.name, outcome, Reply::refused(&refused))
        }
    }
}

/// `403 approval_required` with the page's link for `operation`, in the body
/// (`approval_url`, the summary, terms and expiry) and a `Link` header; none of the
/// operation's Poppy members (its ID and revision travel only inside the link).
fn page_link_reply(
    executor: &Executor,
    page_url: &str,
    policy: &Policy,
    operation: &Operation,
) -> Reply {
    let expires_at = time::OffsetDateTime::parse(
        &operation.expires_at,
        &time::format_description::well_known::Rfc3339,
    )
    .map(|t| t.unix_timestamp());
    let details = Details {
        policy: policy.name.clone(),
        summary: operation.summary.clone(),
        terms: operation
            .terms
            .as_ref()
            .and_then(|t| t.as_object().cloned())
            .unwrap_or_default(),
        expires_at: expires_at.unwrap_or_default(),
    };
    let link = match (OperationId::parse(&operation.operation_id), expires_at) {
        (Some(id), Ok(_)) => {
            page_link::mint(executor.signing_key(), &id, &operation.revision, &details)
        }
        _ => Err(page_link::LinkError::Malformed("operation")),
    };
    let path = match link {
        Ok(path) => path,
        Err(e) => {
            // Nothing was held for the User to approve: the agent is told as if the policy
            // had no page.
            tracing::warn!(policy = %policy.name, error = %e, "no approval page link for this operation");
            return Reply::refused(&Refused::ExtensionRequired);
        }
    };
    let url = format!("{page_url}{path}");
    let body = ErrorBody::new(
        "approval_required",
        "this action needs the user's approval of these terms: open approval_url (the user signs in on the company's page and approves), then send the same request again; nothing was performed",
    )
    .with("approval_url", url.as_str())
    .with("summary", operation.summary.as_str())
    .with("expires_at", operation.expires_at.as_str());
    let body = match &operation.terms {
        Some(terms) => body.with("terms", terms.clone()),
        None => body,
    };
    Reply::error(403, &body).with_header("link", format!("<{url}>; rel=\"approval\""))
}
