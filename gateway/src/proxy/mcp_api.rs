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

use super::mcp_calls::HeldCalls;
use super::mcp_clients::{McpClients, NotForwarded, Opened};
use super::mcp_forward::StreamingForwarder;
use super::mcp_held::held_call;
use super::mcp_reply::{accepted, rpc_error};
use super::operations::Operations;
use super::reply::Reply;
use super::step::Step;
use crate::config::{Mcp, Upstream};
use crate::identity::RequestTarget;
use crate::ingress::headers::check_operation_request;
use crate::ingress::{ForwardRequest, Target, forwarded_headers};
use crate::listener::read_body;
use crate::mcp::{
    Incoming, Role, RpcError, cancelled_requests, check_standard_headers, codes, read_post,
};
use crate::policy::PathTemplate;
use crate::protocol::Keys;
use crate::run;
use crate::store::OperationStore;
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
                        Ok(step) => step,
                        // The Company's own client (as it came), or a call the policy's
                        // condition does not hold (as the front door read it, its approval
                        // taken out): forwarded as a call that needs no approval is.
                        Err(forward) => {
                            let forward = forward.unwrap_or(unheld);
                            self.forwarder
                                .stream(session, forward, proxy, needs_approval, None)
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

#[cfg(test)]
mod tests {
    use super::*;

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
