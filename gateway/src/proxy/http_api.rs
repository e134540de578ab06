//! Operations on HTTP APIs (spec sections 4 and 6, "APIs"): a Personal Agent's request to a
//! policy route goes through the runner (`runner.rs`: the front door, then the executor), and
//! its decision or refusal is rendered as HTTP.

use std::sync::Arc;

use pingora::proxy::Session;

use super::executor::Operated;
use super::forwarded::ProxyContext;
use super::limits::read_body;
use super::operations::Operations;
use super::reply::Reply;
use super::runner::{self, Arrival, Ran};
use super::step::Step;
use crate::identity::RequestTarget;
use crate::ingress::Target;
use crate::ingress::admit::{Action, ApprovalSource};
use crate::policy::{Captures, Policy};

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
    };
    let body = read_body(session, &ops.body_limits, &ops.metrics);
    match runner::run(&ops.session_claims, &ops.executor, arrival, body, proxy).await {
        Ran::Operated(Operated::Decided(executed)) => {
            let reply = match executed.page_url {
                // `proof = "company_page"`: the operation, and the page where the User
                // approves the same revision.
                Some(url) => Reply::decision_with_page(executed.decision, &url),
                None => Reply::decision(executed.decision),
            };
            Step::Operation(reply, executed.outcome)
        }
        // `403` with the page's link, in the body and a `Link` header.
        Ran::Page(link, outcome) => Step::Operation(
            Reply::error(403, &link.error_body()).with_header("link", link.link_header()),
            outcome,
        ),
        Ran::Operated(Operated::Refused(refusal, outcome)) => {
            Step::refused(&policy.name, outcome, Reply::refusal(&refusal))
        }
        Ran::Refused(refused, outcome) => {
            Step::refused(&policy.name, outcome, Reply::refused(&refused))
        }
        // The Company's own client (`[approval_page.agents]`): proxied as it came, its body
        // unread.
        Ran::NotAnAgent => Step::Continue,
    }
}
