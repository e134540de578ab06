//! A held call of a tool a `[[tool]]` policy names: through the one runner (`crate::run`:
//! the front door, then the executor), answered as MCP (`mcp_reply`). An approved forward's
//! event stream reaches the client as it arrives (`mcp_stream`); a call from a client without
//! the extension, on a policy the User may approve on the Company's page, gets the page's
//! link in the form its protocol version and declared capabilities can carry.

use std::sync::Arc;

use bytes::Bytes;
use pingora::proxy::Session;

use super::mcp_calls::McpAnswers;
use super::mcp_clients::McpClients;
use super::mcp_reply::{PageForm, ReplyTo, page_reply, refused, render, render_with_page};
use super::mcp_stream::stream_while;
use super::operations::Operations;
use super::step::Step;
use crate::identity::RequestTarget;
use crate::ingress::ForwardRequest;
use crate::ingress::admit::{Action, ApprovalSource, Refused};
use crate::mcp::{HeldCall, McpVersion, UrlElicitation, follow_up_of};
use crate::metrics::{Outcome, Unheld};
use crate::operation::Decision;
use crate::policy::Policy;
use crate::run::{Arrival, Operated, Ran, Reading, RequestOutcome, Straight};
use crate::upstream::forwarded::ProxyContext;

/// Where a held call's approval travels, as its errors name it.
const APPROVAL_PLACE: &str = "the approval in params._meta[\"personalagentprotocol.org/approval\"]";

/// A held call through the runner (the front door, then the executor), answered as MCP. An
/// approved forward's event stream reaches the client as it arrives (`mcp_stream`). `Err`:
/// a call to forward as one that needs no approval: not an agent's (`[approval_page.agents]`,
/// `None`: as it came), or one the policy's `needs_approval_when` does not hold (this).
#[allow(clippy::too_many_arguments)]
pub(super) async fn held_call(
    ops: &Operations,
    session: &mut Session,
    headers: http::HeaderMap,
    path_and_query: String,
    policy: Arc<Policy>,
    call: HeldCall,
    version: McpVersion,
    proxy: &ProxyContext,
    clients: &McpClients,
) -> Result<Step, Option<ForwardRequest>> {
    let page_call = call.page;
    let to = ReplyTo {
        id: call.id,
        session_id: headers.get("mcp-session-id").map(|v| v.as_bytes().to_vec()),
        version,
    };
    // A verified Session is signed for the endpoint's path (docs/sessions.md).
    let signed_path = path_and_query
        .split_once('?')
        .map_or(path_and_query.as_str(), |(path, _)| path)
        .to_owned();
    let arrival = Arrival {
        headers,
        signed_for: RequestTarget {
            method: "POST",
            path: &signed_path,
        },
        action: Action::Tool {
            policy: Arc::clone(&policy),
            tool: call.tool.clone(),
            arguments: call.arguments,
            path_and_query,
        },
        approval: ApprovalSource::Json {
            value: call.approval.as_ref(),
            place: APPROVAL_PLACE,
        },
    };
    let (tap, taps) = tokio::sync::mpsc::unbounded_channel();
    let reading = Reading {
        reader: &McpAnswers,
        follow_up: follow_up_of(&call.forward_body),
        tap: Some(tap),
        proxy: proxy.clone(),
    };
    let body = std::future::ready(Ok(Bytes::from(call.forward_body)));
    let mut straight = Straight;
    let running = ops.runner.run(arrival, body, &reading, &mut straight);
    let (ran, streamed) = stream_while(session, running, taps, to.session_id.as_deref()).await;
    if let Some(streamed) = streamed {
        // The forward's stream is on its way to the client: it ends with what it came to.
        return Ok(match ran {
            Ran::Operated(Operated::Decided(executed)) => Step::OperationStreamed(
                streamed
                    .finish(session, executed.decision, |d| render(d, &to))
                    .await,
                executed.outcome,
            ),
            // Nothing is streamed before a forward, and a refusal or a page request's
            // operation comes before one.
            Ran::Page(_, outcome) => Step::OperationStreamed(
                streamed
                    .finish(session, Decision::UpstreamUnavailable, |d| render(d, &to))
                    .await,
                outcome,
            ),
            Ran::Operated(Operated::Refused(_, outcome)) | Ran::Refused(_, outcome) => {
                Step::OperationStreamed(
                    streamed
                        .finish(session, Decision::UpstreamUnavailable, |d| render(d, &to))
                        .await,
                    RequestOutcome::refused(&policy.name, outcome, 200),
                )
            }
            // Decided before any forward: nothing was streamed.
            Ran::NotAnAgent => return Err(None),
            // Decided before any forward too; were anything streamed, not forwarded again.
            Ran::Operated(Operated::NotHeld(_)) => Step::OperationStreamed(
                streamed
                    .finish(session, Decision::UpstreamUnavailable, |d| render(d, &to))
                    .await,
                RequestOutcome::refused(&policy.name, Outcome::BadRequest, 200),
            ),
            Ran::Answered(never) => match never {},
        });
    }
    Ok(match ran {
        Ran::Operated(Operated::Decided(executed)) => {
            let reply = match executed.page_url.as_deref() {
                // `proof = "company_page"`: the operation, and the page where the User
                // approves the same revision.
                Some(url) => render_with_page(executed.decision, url, &to),
                None => render(executed.decision, &to),
            };
            Step::Operation(reply, executed.outcome)
        }
        Ran::Page(link, outcome) => {
            let form = match to.version.url_elicitation() {
                // One round: its follow-up gets the tool error, whatever the user chose.
                UrlElicitation::InResult
                    if page_call.declares_url_elicitation && !page_call.answered =>
                {
                    PageForm::InputRequired
                }
                UrlElicitation::Request => match &to.session_id {
                    Some(id) if clients.declared_url_elicitation(id).await => {
                        PageForm::WithElicitation
                    }
                    _ => PageForm::ToolError,
                },
                _ => PageForm::ToolError,
            };
            Step::Operation(page_reply(&link, form, &to), outcome)
        }
        // Tool policies have no lookup; a computed term that has no value refuses, as a tool
        // error.
        Ran::Operated(Operated::Refused(refusal, outcome)) => Step::refused(
            &policy.name,
            outcome,
            refused(&Refused::Request(refusal), &call.tool, &to),
        ),
        Ran::Refused(why, outcome) => {
            Step::refused(&policy.name, outcome, refused(&why, &call.tool, &to))
        }
        Ran::NotAnAgent => return Err(None),
        // `needs_approval_when` is false: forwarded as a call of a tool no policy names.
        Ran::Operated(Operated::NotHeld(forward)) => {
            ops.runner
                .metrics
                .unheld(&policy.name, Unheld::ConditionFalse);
            return Err(Some(forward));
        }
        Ran::Answered(never) => match never {},
    })
}
