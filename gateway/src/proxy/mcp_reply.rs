//! What a held call comes to, as MCP answers it: the decision (a tool result, the recorded
//! answer addressed to this call, or JSON-RPC and HTTP errors where the model can't act), a
//! front door refusal, and the approval page's link. Status, error code and retry time of a
//! decision are the wire table's (`operation::Decision::wire`); the wording and shape here.

use bytes::Bytes;
use serde_json::Value;

use super::reply::Reply;
use crate::ingress::admit::Refused;
use crate::mcp::{
    McpVersion, PageOffer, Readdress, RpcError, already_performed_result, approval_required_result,
    codes, error_response, event_stream, extension_required_result, page_approval_result,
    page_input_required_result, readdress_response, result_response, retry_result,
    tool_error_result, url_elicitation_request,
};
use crate::operation::Decision;
use crate::run::PageLink;
use crate::store::RecordedResponse;

/// How a held call is shown the approval page (`mcp::page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PageForm {
    /// The tool error with the link: what every client reads.
    ToolError,
    /// 2025-11-25: the tool error, after a URL elicitation on the call's event stream.
    WithElicitation,
    /// 2026-07-28: an `input_required` result with the URL elicitation.
    InputRequired,
}

/// The answer to a held call from a client without the extension: the page's link, in
/// `form`. Never the operation (spec section 2): its ID and revision are inside the link.
pub(super) fn page_reply(link: &PageLink, form: PageForm, to: &ReplyTo) -> Reply {
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

/// A front door refusal, as MCP answers it: what the model can act on is a tool result
/// (the extension, the arguments), a malformed approval is the call's invalid params, and
/// a header or Session refusal is HTTP, as for the API.
pub(super) fn refused(why: &Refused, tool: &str, to: &ReplyTo) -> Reply {
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
pub(super) struct ReplyTo {
    pub(super) id: Value,
    pub(super) session_id: Option<Vec<u8>>,
    pub(super) version: McpVersion,
}

/// [`render`] for an operation held under `proof = "company_page"`: its tool error also
/// carries the page's link (`structuredContent.operation.approval_url`, and in its text).
pub(super) fn render_with_page(decision: Decision, url: &str, to: &ReplyTo) -> Reply {
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

/// The answer to a held call's decision. Everything but a sign-in challenge is an MCP
/// answer (HTTP 200, or the MCP server's own status for its answers): an HTTP 503 would end
/// an SDK's session, so "try again" is a tool result too (see [`retry_result`]), carrying the
/// wire table's error code and retry time.
pub(super) fn render(decision: Decision, to: &ReplyTo) -> Reply {
    let wire = decision.wire_error();
    let (detail, id) = match decision {
        Decision::ApprovalRequired {
            operation,
            rejected,
        } => return tool_result(to, approval_required_result(&operation, rejected, None)),
        Decision::Performed(response)
        | Decision::Interim(response)
        | Decision::Released(response) => return Reply::from(readdressed(response, to, false)),
        Decision::Replayed(response) => return Reply::from(readdressed(response, to, true)),
        Decision::AlreadyPerformed(id) => {
            return tool_result(to, already_performed_result(id.as_str()));
        }
        // Not the model's to act on: the client sent answers it may not send.
        Decision::NotTheApprover(id) => {
            return rpc_error(&RpcError {
                id: to.id.clone(),
                code: codes::INVALID_REQUEST,
                message: format!(
                    "Invalid request: operation {id}: {}",
                    Decision::NOT_THE_APPROVER
                ),
            });
        }
        // A sign-in challenge is MCP's authorization challenge: HTTP 401 with
        // WWW-Authenticate, as the API answers it.
        other @ Decision::SignInRequired => return Reply::decision(other),
        Decision::InProgress(id) => (
            "this call is being performed now, with this approval",
            Some(id),
        ),
        Decision::Unknown(id) => (
            "the gateway does not know yet whether this call took effect, and will not perform it again; its answer comes to this approval once known, or ask the company",
            Some(id),
        ),
        Decision::UpstreamUnavailable => (
            "the MCP server could not be reached and nothing was performed",
            None,
        ),
        Decision::ShuttingDown => ("this gateway is shutting down and started nothing", None),
        Decision::StoreUnavailable => (
            "the gateway cannot reach its operation store and performed nothing",
            None,
        ),
    };
    // The table gives every decision left a code and a retry time.
    let (error, retry_after) = wire.map_or(("internal_error", 1), |wire| {
        (wire.error, wire.retry_after.unwrap_or(1))
    });
    let id = id.as_ref().map(|id| id.as_str());
    tool_result(to, retry_result(error, id, retry_after, detail))
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
pub(super) fn accepted(session_id: Option<&[u8]>) -> Reply {
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

pub(super) fn rpc_error(error: &RpcError) -> Reply {
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
}
