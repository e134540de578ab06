//! Operations on an MCP server (spec sections 4 and 6, "MCP"), over Streamable HTTP.
//!
//! A Personal Agent's POST to the MCP endpoint is read whole (at most `max_body_bytes`) and
//! classified. A call of a tool that a `[[tool]]` policy names is held: it goes through the
//! same flow as an API operation, and the gateway answers it as a JSON-RPC response (a tool
//! error with the operation, or the recorded answer with the call's own `id`). Anything else
//! is forwarded as it is, its answer streamed back ([`StreamingForwarder`]); an answer to the
//! MCP server's requests only from whoever opened the MCP session (`mcp_clients`). Requests to the
//! endpoint that are not POSTs, or not from a Personal Agent, never come here: they take
//! pingora's proxy path untouched; but with `[approval_page.agents]` a POST without a
//! `Poppy-Session` that may be an agent's (a plain OAuth MCP client) comes here too, and a
//! held call the runner finds is not an agent's (`Ran::NotAnAgent`) is forwarded as it came.
//!
//! A held call from a client without the extension, on a policy the User may approve on the
//! Company's page, gets the page's link in the form its protocol version and declared
//! capabilities can carry ([`page_reply`], `mcp::page`).

use std::sync::Arc;

use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::Value;

use super::limits::read_body;
use super::mcp_calls::{HeldCalls, McpAnswers};
use super::mcp_clients::{McpClients, NotForwarded, Opened};
use super::mcp_forward::StreamingForwarder;
use super::mcp_stream::stream_while;
use super::operations::Operations;
use super::reply::Reply;
use super::step::Step;
use crate::config::{Mcp, Upstream};
use crate::identity::RequestTarget;
use crate::ingress::admit::{Action, ApprovalSource, Refused};
use crate::ingress::headers::check_operation_request;
use crate::ingress::{ForwardRequest, Target, forwarded_headers};
use crate::mcp::{
    HeldCall, Incoming, McpVersion, PageOffer, Readdress, Role, RpcError, UrlElicitation,
    already_performed_result, approval_required_result, cancelled_requests, check_standard_headers,
    codes, error_response, event_stream, extension_required_result, follow_up_of,
    page_approval_result, page_input_required_result, read_post, readdress_response,
    result_response, retry_result, tool_error_result, url_elicitation_request,
};
use crate::operation::Decision;
use crate::policy::{PathTemplate, Policy};
use crate::protocol::Keys;
use crate::run::{self, Arrival, Operated, PageLink, Ran, Reading, RequestOutcome, Straight};
use crate::store::{OperationStore, RecordedResponse};
use crate::upstream::UpstreamClient;
use crate::upstream::forwarded::ProxyContext;

/// The MCP endpoint: where it is, and how messages that need no approval are forwarded.
pub(crate) struct McpEndpoint {
    path: PathTemplate,
    forwarder: StreamingForwarder,
    /// Held calls being answered, whose cancellations are not forwarded (`mcp_calls`).
    calls: HeldCalls,
    /// How MCP sessions were opened: who by, whether with URL-mode elicitation
    /// (`mcp_clients`).
    clients: McpClients,
}

impl McpEndpoint {
    /// `route`: the route's name; `store`: the operation store, where what clients declared
    /// is kept for every replica.
    pub(crate) fn new(
        mcp: &Mcp,
        client: &UpstreamClient,
        settings: &Upstream,
        route: &str,
        store: Arc<dyn OperationStore>,
        keys: Keys,
    ) -> McpEndpoint {
        McpEndpoint {
            path: mcp.template.clone(),
            forwarder: StreamingForwarder::new(client, settings),
            calls: HeldCalls::default(),
            clients: McpClients::new(store, route, keys),
        }
    }

    /// The endpoint's path, matched by the ingress as forgivingly as policy routes (other
    /// spellings a server might read as it, such as `/mcp;x=1`, are refused there).
    pub(crate) fn template(&self) -> &PathTemplate {
        &self.path
    }

    /// A Personal Agent request to the MCP endpoint.
    pub(crate) async fn handle(
        &self,
        ops: &Operations,
        session: &mut Session,
        target: Target,
        proxy: &ProxyContext,
    ) -> Step {
        if session.req_header().method != http::Method::POST {
            return Step::Continue;
        }
        if let Err(refusal) = check_operation_request(&session.req_header().headers) {
            return Step::Respond(Reply::refusal(&refusal));
        }
        let body = match read_body(session, &ops.body_limits, &ops.runner.metrics).await {
            Ok(body) => body,
            Err(refusal) => {
                let mut reply = rpc_error(&RpcError {
                    id: Value::Null,
                    code: codes::INVALID_REQUEST,
                    message: refusal.detail,
                });
                reply.status = refusal.status;
                if refusal.status == 503 {
                    reply = reply.with_header("retry-after", "1");
                }
                return Step::Respond(reply);
            }
        };
        let headers = session.req_header().headers.clone();
        let path_and_query = target.path_and_query();
        let needs_approval = |name: &str| ops.policies.find_tool(name).is_some();
        let read = read_post(
            &body,
            headers.get("mcp-protocol-version").map(|v| v.as_bytes()),
            needs_approval,
        )
        .and_then(|(incoming, version)| {
            check_standard_headers(
                &incoming,
                headers.get("mcp-method").map(|v| v.as_bytes()),
                headers.get("mcp-name").map(|v| v.as_bytes()),
                &version,
                needs_approval,
            )
            .map(|()| (incoming, version))
        });
        match read {
            Err(error) => Step::Respond(rpc_error(&error)),
            // The client's answer to the page's URL elicitation: the user agreed to open the
            // page or not; either way the call was answered, and the MCP server never asked.
            Ok((Incoming::ToGateway, _)) => Step::Respond(accepted(
                headers.get("mcp-session-id").map(|v| v.as_bytes()),
            )),
            Ok((
                Incoming::Other {
                    body: stripped,
                    role,
                },
                _,
            )) => {
                let body = stripped.map(Bytes::from).unwrap_or(body);
                let session_id = headers.get("mcp-session-id").map(|v| v.as_bytes());
                if self.calls.all_held(session_id, &cancelled_requests(&body)) {
                    // An approved call is performed to the end and its answer recorded for
                    // the retry: its cancellation is accepted and not forwarded.
                    return Step::Respond(accepted(session_id));
                }
                let opened = match self.bind(ops, role, &headers, &target).await {
                    Ok(opened) => opened,
                    Err(refused) => return Step::Respond(refused),
                };
                let request = ForwardRequest {
                    method: http::Method::POST,
                    path_and_query,
                    headers: forwarded_headers(&headers),
                    body,
                };
                let opening = opened.as_ref().map(|opened| (&self.clients, opened));
                self.forwarder
                    .stream(session, request, proxy, needs_approval, opening)
                    .await
            }
            Ok((Incoming::Held(call), version)) => match ops.policies.find_tool(&call.tool) {
                Some(policy) => {
                    // As sent, should `[approval_page.agents]` find it is not an agent's.
                    let unheld = ForwardRequest {
                        method: http::Method::POST,
                        path_and_query: path_and_query.clone(),
                        headers: forwarded_headers(&headers),
                        body,
                    };
                    let held = {
                        let _held = self.calls.hold(
                            headers.get("mcp-session-id").map(|v| v.as_bytes()),
                            &call.id,
                        );
                        held_call(
                            ops,
                            session,
                            headers,
                            path_and_query,
                            policy,
                            call,
                            version,
                            proxy,
                            &self.clients,
                        )
                        .await
                    };
                    match held {
                        Some(step) => step,
                        // The Company's own client: forwarded as a call that needs no
                        // approval is.
                        None => {
                            self.forwarder
                                .stream(session, unheld, proxy, needs_approval, None)
                                .await
                        }
                    }
                }
                // read_post holds only calls of tools a policy names.
                None => Step::Respond(rpc_error(&RpcError {
                    id: call.id,
                    code: codes::INVALID_REQUEST,
                    message: "no policy for this tool".into(),
                })),
            },
        }
    }
}

impl McpEndpoint {
    /// A forwarded message's tie to its MCP session's opener (`proxy::mcp_clients`): an
    /// `initialize` gives what to note of the session it opens; an answer to the server's
    /// requests is refused unless its sender opened the session.
    async fn bind(
        &self,
        ops: &Operations,
        role: Role,
        headers: &http::HeaderMap,
        target: &Target,
    ) -> Result<Option<Opened>, Reply> {
        let signed_for = RequestTarget {
            method: "POST",
            path: &target.path,
        };
        let sender = || {
            run::sender(
                &ops.runner.session_claims,
                headers,
                target.query.as_deref(),
                &signed_for,
            )
        };
        match role {
            Role::Asks => Ok(None),
            // Opening a session changes nothing the gateway decides by itself: one it can't
            // read the sender of is opened, and nobody may answer the server in it.
            Role::Opens { url_elicitation } => {
                let sender = sender().await.ok();
                Ok(Some(self.clients.opening(url_elicitation, sender.as_ref())))
            }
            Role::Answers => {
                let sender = sender().await.map_err(|why| Reply::refused(&why))?;
                let session_id = headers.get("mcp-session-id").map(|v| v.as_bytes());
                match self.clients.may_answer(session_id, &sender).await {
                    Ok(()) => Ok(None),
                    Err(why) => {
                        let mut reply = rpc_error(&RpcError {
                            id: Value::Null,
                            code: codes::INVALID_REQUEST,
                            message: format!("Invalid request: {why}"),
                        });
                        reply.status = why.status();
                        if why == NotForwarded::StoreUnavailable {
                            reply = reply.with_header("retry-after", "1");
                        }
                        Err(reply)
                    }
                }
            }
        }
    }
}

/// A held call through the runner (the front door, then the executor), answered as MCP. An
/// approved forward's event stream reaches the client as it arrives (`mcp_stream`). `None`:
/// not an agent's call (`[approval_page.agents]`), to forward as it came.
#[allow(clippy::too_many_arguments)]
async fn held_call(
    ops: &Operations,
    session: &mut Session,
    headers: http::HeaderMap,
    path_and_query: String,
    policy: Arc<Policy>,
    call: HeldCall,
    version: McpVersion,
    proxy: &ProxyContext,
    clients: &McpClients,
) -> Option<Step> {
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
        return Some(match ran {
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
            Ran::NotAnAgent => return None,
            Ran::Answered(never) => match never {},
        });
    }
    Some(match ran {
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
        Ran::NotAnAgent => return None,
        Ran::Answered(never) => match never {},
    })
}

/// How a held call is shown the approval page (`mcp::page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageForm {
    /// The tool error with the link: what every client reads.
    ToolError,
    /// 2025-11-25: the tool error, after a URL elicitation on the call's event stream.
    WithElicitation,
    /// 2026-07-28: an `input_required` result with the URL elicitation.
    InputRequired,
}

/// The answer to a held call from a client without the extension: the page's link, in
/// `form`. Never the operation (spec section 2): its ID and revision are inside the link.
fn page_reply(link: &PageLink, form: PageForm, to: &ReplyTo) -> Reply {
    let offer = PageOffer {
        url: &link.url,
        summary: &link.summary,
        expires_at: &link.expires_at,
    };
    let tool_error = page_approval_result(&link.url, &link.summary, &link.expires_at);
    match form {
        PageForm::ToolError => tool_result(to, tool_error),
        PageForm::InputRequired => tool_result(to, page_input_required_result(&offer)),
        PageForm::WithElicitation => {
            let events = event_stream(&[
                url_elicitation_request(&offer, rand::random()),
                result_response(&to.id, to.version.finish(tool_error)),
            ]);
            let reply = Reply {
                status: 200,
                headers: Vec::new(),
                body: Bytes::from(events),
            }
            .with_header("content-type", "text/event-stream")
            .with_header("cache-control", "no-store");
            match &to.session_id {
                Some(session_id) => reply.with_header("mcp-session-id", session_id.clone()),
                None => reply,
            }
        }
    }
}

/// Where a held call's approval travels, as its errors name it.
const APPROVAL_PLACE: &str = "the approval in params._meta[\"personalagentprotocol.org/approval\"]";

/// A front door refusal, as MCP answers it: what the model can act on is a tool result
/// (the extension, the arguments), a malformed approval is the call's invalid params, and
/// a header or Session refusal is HTTP, as for the API.
fn refused(why: &Refused, tool: &str, to: &ReplyTo) -> Reply {
    match why {
        Refused::ExtensionRequired => tool_result(to, extension_required_result(tool)),
        Refused::Approval(e) => rpc_error(&RpcError {
            id: to.id.clone(),
            code: codes::INVALID_PARAMS,
            message: format!("Invalid params: {e}"),
        }),
        // A header or the query (credentials the gateway can't read one way): the client's
        // to fix, not the model's; HTTP, as for the API.
        Refused::Request(refusal) if matches!(refusal.names, Some(("header" | "parameter", _))) => {
            Reply::refused(why)
        }
        // A tool error, not a protocol error: the model can call again with it.
        Refused::Request(refusal) => {
            let text = format!("Not done: {}. Nothing was performed.", refusal.detail);
            tool_result(to, tool_error_result(&text))
        }
        Refused::UnreadableExtensions(_) | Refused::Approver(_) => Reply::refused(why),
    }
}

/// Who an answer to a held call goes to: the call's JSON-RPC `id`, its MCP session (the
/// `Mcp-Session-Id` it sent, if any) and its protocol version.
struct ReplyTo {
    id: Value,
    session_id: Option<Vec<u8>>,
    version: McpVersion,
}

/// The answer to a held call's decision. Everything but a sign-in challenge is an MCP
/// answer (HTTP 200, or the MCP server's own status for its answers): an HTTP 503 would end
/// an SDK's session, so "try again" is a tool result too (see [`retry_result`]).
/// [`render`] for an operation held under `proof = "company_page"`: its tool error also
/// carries the page's link (`structuredContent.operation.approval_url`, and in its text).
fn render_with_page(decision: Decision, url: &str, to: &ReplyTo) -> Reply {
    match decision {
        Decision::ApprovalRequired {
            operation,
            rejected,
        } => tool_result(
            to,
            approval_required_result(&operation, rejected, Some(url)),
        ),
        other => render(other, to),
    }
}

fn render(decision: Decision, to: &ReplyTo) -> Reply {
    match decision {
        Decision::ApprovalRequired {
            operation,
            rejected,
        } => tool_result(to, approval_required_result(&operation, rejected, None)),
        Decision::Performed(response)
        | Decision::Interim(response)
        | Decision::Released(response) => Reply::from(readdressed(response, to, false)),
        Decision::Replayed(response) => Reply::from(readdressed(response, to, true)),
        Decision::AlreadyPerformed(id) => tool_result(to, already_performed_result(id.as_str())),
        // Not the model's to act on: the client sent answers it may not send.
        Decision::NotTheApprover(id) => rpc_error(&RpcError {
            id: to.id.clone(),
            code: codes::INVALID_REQUEST,
            message: format!(
                "Invalid request: operation {id}: {}",
                Decision::NOT_THE_APPROVER
            ),
        }),
        Decision::InProgress(id) => tool_result(
            to,
            retry_result(
                "operation_in_progress",
                Some(id.as_str()),
                1,
                "this call is being performed now, with this approval",
            ),
        ),
        Decision::Unknown(id) => tool_result(
            to,
            retry_result(
                "operation_outcome_unknown",
                Some(id.as_str()),
                30,
                "the gateway does not know yet whether this call took effect, and will not perform it again; its answer comes to this approval once known, or ask the company",
            ),
        ),
        Decision::UpstreamUnavailable => tool_result(
            to,
            retry_result(
                "upstream_unavailable",
                None,
                1,
                "the MCP server could not be reached and nothing was performed",
            ),
        ),
        Decision::ShuttingDown => tool_result(
            to,
            retry_result(
                "gateway_shutting_down",
                None,
                1,
                "this gateway is shutting down and started nothing",
            ),
        ),
        Decision::StoreUnavailable => tool_result(
            to,
            retry_result(
                "store_unavailable",
                None,
                1,
                "the gateway cannot reach its operation store and performed nothing",
            ),
        ),
        // A sign-in challenge is MCP's authorization challenge: HTTP 401 with
        // WWW-Authenticate, as the API answers it.
        other @ Decision::SignInRequired => Reply::decision(other),
    }
}

/// The recorded answer, addressed to this call: its `id` and protocol version in the body,
/// its own `Mcp-Session-Id` (or none) in the headers, never the recorded one (another MCP
/// session's, whose id a client would adopt). `replay`: only the response, none of the first
/// call's progress notifications.
fn readdressed(mut response: RecordedResponse, to: &ReplyTo, replay: bool) -> RecordedResponse {
    response
        .headers
        .retain(|(name, _)| !name.eq_ignore_ascii_case("mcp-session-id"));
    if let Some(session_id) = &to.session_id {
        response
            .headers
            .push(("mcp-session-id".into(), session_id.clone()));
    }
    let header = |wanted: &str| {
        response
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .map(|(_, value)| value.as_slice())
    };
    if header("content-encoding").is_some_and(|v| !v.eq_ignore_ascii_case(b"identity")) {
        tracing::warn!(
            "the MCP server compressed its answer although asked not to; replayed as recorded, with the first call's id"
        );
        return response;
    }
    let readdress = Readdress {
        id: &to.id,
        version: &to.version,
        replay,
    };
    if let Some(body) = readdress_response(&response.body, header("content-type"), &readdress) {
        response.body = Bytes::from(body);
        // The length is set anew when the reply is written; a recorded one would be wrong.
        response
            .headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("content-length"));
    }
    response
}

/// `202 Accepted`, no body: a notification taken.
fn accepted(session_id: Option<&[u8]>) -> Reply {
    let reply = Reply {
        status: 202,
        headers: Vec::new(),
        body: Bytes::new(),
    };
    match session_id {
        Some(session_id) => reply.with_header("mcp-session-id", session_id.to_vec()),
        None => reply,
    }
}

fn tool_result(to: &ReplyTo, result: Value) -> Reply {
    let reply = Reply::json(200, &result_response(&to.id, to.version.finish(result)))
        .with_header("cache-control", "no-store");
    match &to.session_id {
        Some(session_id) => reply.with_header("mcp-session-id", session_id.clone()),
        None => reply,
    }
}

fn rpc_error(error: &RpcError) -> Reply {
    Reply::json(
        error.http_status(),
        &error_response(&error.id, error.code, &error.message),
    )
    .with_header("cache-control", "no-store")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply_to(id: Value, session_id: Option<&str>, version: &str) -> ReplyTo {
        ReplyTo {
            id,
            session_id: session_id.map(|s| s.as_bytes().to_vec()),
            version: McpVersion::of_request(Some(version.as_bytes()), None),
        }
    }

    #[test]
    fn replays_carry_the_retry_id_and_its_own_session() {
        let recorded = RecordedResponse {
            status: 200,
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                ("mcp-session-id".into(), b"session-b".to_vec()),
            ],
            body: Bytes::from(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#),
        };
        let replayed = readdressed(
            recorded.clone(),
            &reply_to(json!("r-2"), Some("session-a"), "2025-11-25"),
            true,
        );
        let body: Value = serde_json::from_slice(&replayed.body).unwrap();
        assert_eq!(body["id"], "r-2");
        let sessions: Vec<&[u8]> = replayed
            .headers
            .iter()
            .filter(|(name, _)| name == "mcp-session-id")
            .map(|(_, value)| value.as_slice())
            .collect();
        assert_eq!(sessions, [b"session-a".as_slice()]);
        let sessionless = readdressed(
            recorded.clone(),
            &reply_to(json!(1), None, "2026-07-28"),
            true,
        );
        assert!(
            sessionless
                .headers
                .iter()
                .all(|(name, _)| name != "mcp-session-id")
        );
        let body: Value = serde_json::from_slice(&sessionless.body).unwrap();
        assert_eq!(body["result"]["resultType"], "complete");
    }

    #[test]
    fn answers_that_are_not_final_are_tool_results() {
        let to = reply_to(json!(7), Some("s1"), "2026-07-28");
        let operation = crate::protocol::OperationId::parse("exc_sAAAAAAAAAAAAAAAABBBBBBBB");
        for decision in [
            Decision::StoreUnavailable,
            Decision::UpstreamUnavailable,
            Decision::ShuttingDown,
        ] {
            let reply = render(decision, &to);
            assert_eq!(reply.status, 200);
            let body: Value = serde_json::from_slice(&reply.body).unwrap();
            assert_eq!(body["id"], 7);
            assert_eq!(body["result"]["isError"], true);
            assert_eq!(body["result"]["resultType"], "complete");
            assert!(body["result"]["_meta"][crate::mcp::RETRY_META_KEY]["error"].is_string());
            assert!(
                reply
                    .headers
                    .iter()
                    .any(|(n, v)| n == "mcp-session-id" && v == b"s1")
            );
        }
        let reply = render(Decision::InProgress(operation.unwrap()), &to);
        assert_eq!(reply.status, 200);
        let body: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(
            body["result"]["_meta"][crate::mcp::RETRY_META_KEY]["operation_id"],
            "exc_sAAAAAAAAAAAAAAAABBBBBBBB"
        );
    }

    #[test]
    fn the_page_goes_in_the_form_the_client_reads() {
        let link = PageLink {
            url: "https://approve.example/approve/exc_1?r=1-a&d=x&m=y".into(),
            summary: "Exchange item **i1**.".into(),
            terms: Some(json!({"item_id": "i1"})),
            expires_at: "2026-12-04T14:15:00Z".into(),
        };
        let header = |reply: &Reply, name: &str| {
            reply
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        let old = reply_to(json!(3), Some("s1"), "2025-11-25");
        let plain = page_reply(&link, PageForm::ToolError, &old);
        let body: Value = serde_json::from_slice(&plain.body).unwrap();
        assert_eq!(body["id"], 3);
        assert_eq!(body["result"]["isError"], true);
        assert!(
            body["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains(&link.url)
        );

        let streamed = page_reply(&link, PageForm::WithElicitation, &old);
        assert_eq!(streamed.status, 200);
        assert_eq!(
            header(&streamed, "content-type").as_deref(),
            Some("text/event-stream")
        );
        assert_eq!(header(&streamed, "mcp-session-id").as_deref(), Some("s1"));
        let text = std::str::from_utf8(&streamed.body).unwrap();
        let events: Vec<Value> = crate::mcp::sse_events(text)
            .iter()
            .map(|e| serde_json::from_str(&e.data).unwrap())
            .collect();
        assert_eq!(events.len(), 2, "{text}");
        assert_eq!(events[0]["method"], "elicitation/create");
        assert_eq!(events[0]["params"]["mode"], "url");
        assert_eq!(events[0]["params"]["url"], link.url.as_str());
        assert_eq!(events[1], body, "then the same tool error, the response");

        let new = reply_to(json!("c"), None, "2026-07-28");
        let asked = page_reply(&link, PageForm::InputRequired, &new);
        let body: Value = serde_json::from_slice(&asked.body).unwrap();
        assert_eq!(body["id"], "c");
        assert_eq!(body["result"]["resultType"], "input_required");
        let final_answer = page_reply(&link, PageForm::ToolError, &new);
        let body: Value = serde_json::from_slice(&final_answer.body).unwrap();
        assert_eq!(body["result"]["resultType"], "complete");
        for reply in [plain, streamed, asked, final_answer] {
            let text = String::from_utf8_lossy(&reply.body);
            assert!(
                !text.contains("operation_id") && !text.contains("\"revision\""),
                "no operation for a client without the extension: {text}"
            );
        }
    }

    #[test]
    fn approvals_and_hop_by_hop_headers_stay_here() {
        let mut headers = http::HeaderMap::new();
        for (name, value) in [
            ("poppy-approval", "x"),
            ("connection", "keep-alive"),
            ("content-length", "10"),
            ("mcp-session-id", "s1"),
            ("poppy-session", "jwt"),
        ] {
            headers.insert(
                http::HeaderName::from_static(name),
                http::HeaderValue::from_static(value),
            );
        }
        let forward = forwarded_headers(&headers);
        let names: Vec<&str> = forward.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&"mcp-session-id") && names.contains(&"poppy-session"));
    }
}
