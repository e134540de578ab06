//! Operations on HTTP APIs (spec sections 4 and 6, "APIs"): a Personal Agent's request to a
//! policy route goes through the runner (`crate::run`: the front door, then the executor), and
//! its decision or refusal is rendered as HTTP.

use std::sync::Arc;

use pingora::proxy::Session;

use super::operations::Operations;
use super::reply::Reply;
use super::step::Step;
use crate::identity::RequestTarget;
use crate::ingress::admit::{Action, ApprovalSource};
use crate::ingress::{Refusal, Target};
use crate::listener::read_body;
use crate::metrics::Unheld;
use crate::policy::{Captures, Policy};
use crate::run::{Arrival, Operated, Ran, Reading, Straight};
use crate::upstream::forwarded::ProxyContext;

/// What pingora's retry buffer keeps of a body read before the proxy path sends it
/// (`BODY_BUF_LIMIT`, 64 KiB).
const FORWARDED_AFTER_READING: usize = 64 * 1024;

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
    // Without a Session under `[approval_page.agents]`, the body may be read to find the
    // token (a form, `ingress::credentials`) and the request still be the Company's own: then
    // pingora's proxy path sends the bytes read, kept in its retry buffer, before the rest.
    let may_read_for_a_token = ops.runner.executor.agents().is_some()
        && !session.req_header().headers.contains_key("poppy-session");
    if may_read_for_a_token {
        session.enable_retry_buffering();
    }
    let body = read_body(session, &ops.body_limits, &ops.runner.metrics);
    let reading = Reading::plain(proxy.clone());
    match ops.runner.run(arrival, body, &reading, &mut Straight).await {
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
        // `needs_approval_when` is false: sent as a request no policy names would be (its
        // body was read whole, so by the gateway's own client), and counted as unheld.
        Ran::Operated(Operated::NotHeld(forward)) => {
            match ops.runner.send_unheld(&policy.name, forward, proxy).await {
                Ok(response) => Step::Respond(Reply::from(response)),
                Err(unanswered) => Step::Respond(Reply::error(502, &unanswered)),
            }
        }
        Ran::Operated(Operated::Refused(refusal, outcome)) => {
            Step::refused(&policy.name, outcome, Reply::refusal(&refusal))
        }
        Ran::Refused(refused, outcome) => {
            Step::refused(&policy.name, outcome, Reply::refused(&refused))
        }
        // The Company's own client (`[approval_page.agents]`): proxied as it came, its body
        // unread, or read and sent as received; a body larger than the retry buffer can't be.
        Ran::NotAnAgent if session.retry_buffer_truncated() => {
            Step::Respond(Reply::refusal(&Refusal::new(
                413,
                "body_too_large",
                format!(
                    "a form body on a route that needs approval is read for an `access_token`, and only {FORWARDED_AFTER_READING} bytes of one read can be forwarded: send the token in `Authorization`, or a smaller form; nothing was forwarded"
                ),
            )))
        }
        Ran::NotAnAgent => Step::Unheld(policy, Unheld::CompanyClient),
        Ran::Answered(never) => match never {},
    }
}
