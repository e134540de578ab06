//! Classify the body of a POST to the MCP endpoint: a call of a tool that needs approval
//! (held), something else (forwarded), or something the gateway refuses.
//!
//! Deciding what is held errs on the side of holding: any object with `"method":
//! "tools/call"` and a held tool's name in `params.name` is a held call, whatever else is
//! wrong with it, so no malformed variant of one can slip through to the MCP server.

use serde_json::{Map, Value};

use super::codes::{INVALID_REQUEST, PARSE_ERROR};
use super::page::{answers_the_gateway, initialize_declares_url_elicitation};
use super::version::McpVersion;
use crate::protocol::json::duplicate_member;

mod held;

pub(crate) use held::HeldCall;
use held::{held_call, without_approval};

/// What a POST body is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// One call of a tool that needs approval.
    Held(HeldCall),
    /// Anything else, to forward: the body as received, or re-serialized without an
    /// approval in `_meta` (approvals are the gateway's business, never the upstream's),
    /// and what it does in its MCP session.
    Other { body: Option<Vec<u8>>, role: Role },
    /// Only answers to the gateway's own requests (the page's URL elicitation,
    /// `mcp::page`): accepted, never forwarded.
    ToGateway,
}

/// What a forwarded message does in its MCP session: who may send it depends on it
/// (`proxy::mcp_sessions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// An `initialize`: it opens an MCP session. `url_elicitation`: its client declares
    /// URL-mode elicitation (`mcp::page`).
    Opens { url_elicitation: bool },
    /// It answers requests of the MCP server (a JSON-RPC response, alone or in a batch,
    /// such as the answer to an `elicitation/create`).
    Answers,
    /// A request or a notification of the client's own.
    Asks,
}

/// A JSON-RPC error the gateway answers with, instead of forwarding anything.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    /// The request's `id`, or `null` when there is none to answer.
    pub(crate) id: Value,
    pub(crate) code: i64,
    pub(crate) message: String,
}

impl RpcError {
    pub(super) fn new(id: Value, code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            id,
            code,
            message: message.into(),
        }
    }

    /// The HTTP status to send it with: 200 for an answer to a request (it has an `id`),
    /// 400 when the POST as a whole is refused (MCP Streamable HTTP: an HTTP error status,
    /// with a JSON-RPC error that has no `id`).
    pub(crate) fn http_status(&self) -> u16 {
        if self.id.is_null() { 400 } else { 200 }
    }
}

/// Read a POST body, parsed once: what it is, and the protocol version it speaks (the
/// `MCP-Protocol-Version` header's, else the message's `_meta`).
pub(crate) fn read_post(
    body: &[u8],
    version_header: Option<&[u8]>,
    needs_approval: impl Fn(&str) -> bool,
) -> Result<(Incoming, McpVersion), RpcError> {
    let value = parse(body)?;
    let version = McpVersion::of_request(version_header, Some(&value));
    Ok((classify_value(value, body, needs_approval)?, version))
}

/// Classify a POST body. `needs_approval` says whether a tool name is held.
#[cfg(test)]
pub(crate) fn classify(
    body: &[u8],
    needs_approval: impl Fn(&str) -> bool,
) -> Result<Incoming, RpcError> {
    classify_value(parse(body)?, body, needs_approval)
}

fn parse(body: &[u8]) -> Result<Value, RpcError> {
    serde_json::from_slice(body).map_err(|e| {
        RpcError::new(
            Value::Null,
            PARSE_ERROR,
            format!("Parse error: the body is not JSON ({e})"),
        )
    })
}

/// Classify `value`, parsed from `body`.
fn classify_value(
    value: Value,
    body: &[u8],
    needs_approval: impl Fn(&str) -> bool,
) -> Result<Incoming, RpcError> {
    if let Some(path) = duplicate_member(body) {
        return Err(RpcError::new(
            Value::Null,
            INVALID_REQUEST,
            format!("Invalid Request: `{path}` appears twice in one object; send each member once"),
        ));
    }
    if answers_the_gateway(&value) {
        return Ok(Incoming::ToGateway);
    }
    match value {
        Value::Object(message) => {
            if let Some(tool) = held_tool(&message, &needs_approval) {
                return held_call(message, tool).map(Incoming::Held);
            }
            if !is_jsonrpc_message(&message) {
                return Err(RpcError::new(
                    valid_id(&message).unwrap_or(Value::Null),
                    INVALID_REQUEST,
                    "Invalid Request: not a JSON-RPC request, notification or response",
                ));
            }
            let role = if is_response(&message) {
                Role::Answers
            } else if message.get("method").and_then(Value::as_str) == Some("initialize") {
                Role::Opens {
                    url_elicitation: initialize_declares_url_elicitation(&message),
                }
            } else {
                Role::Asks
            };
            Ok(Incoming::Other {
                body: without_approval(Value::Object(message)),
                role,
            })
        }
        Value::Array(items) => {
            if items.is_empty() {
                return Err(RpcError::new(
                    Value::Null,
                    INVALID_REQUEST,
                    "Invalid Request: an empty batch",
                ));
            }
            let holds = items.iter().any(|item| {
                item.as_object()
                    .is_some_and(|m| held_tool(m, &needs_approval).is_some())
            });
            if holds {
                return Err(RpcError::new(
                    Value::Null,
                    INVALID_REQUEST,
                    "batch requests with calls that need approval are not supported; send them one by one",
                ));
            }
            let answers = items
                .iter()
                .any(|item| item.as_object().is_none_or(is_response));
            Ok(Incoming::Other {
                body: without_approval(Value::Array(items)),
                role: if answers { Role::Answers } else { Role::Asks },
            })
        }
        _ => Err(RpcError::new(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a JSON-RPC message is an object (or a batch of them)",
        )),
    }
}

/// The tool name, when `message` calls a tool that needs approval.
fn held_tool(
    message: &Map<String, Value>,
    needs_approval: &impl Fn(&str) -> bool,
) -> Option<String> {
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let name = message.get("params")?.get("name")?.as_str()?;
    needs_approval(name).then(|| name.to_owned())
}

fn is_jsonrpc_message(message: &Map<String, Value>) -> bool {
    let request = message.get("method").is_some_and(Value::is_string);
    let response = message.contains_key("id")
        && (message.contains_key("result") || message.contains_key("error"));
    request || response
}

/// Whether `message` answers a request of the MCP server: it has no `method`. (A batch's
/// items are not checked one by one: any that is not a request or notification counts,
/// so that no spelling of an answer passes as the client's own.)
fn is_response(message: &Map<String, Value>) -> bool {
    !message.contains_key("method")
}

/// `id` when it is one a response can carry back (a string or a number).
fn valid_id(message: &Map<String, Value>) -> Option<Value> {
    message
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn held(name: &str) -> bool {
        name == "exchange_item"
    }

    pub(super) fn classify_json(value: &Value) -> Result<Incoming, RpcError> {
        classify(value.to_string().as_bytes(), held)
    }

    pub(super) fn call(id: Value, params: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    }

    #[test]
    fn everything_else_is_forwarded_as_it_came() {
        for message in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"capabilities": {"elicitation": {}}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            call(json!(3), json!({"name": "lookup_order", "arguments": {}})),
            json!([{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}]),
        ] {
            let role = match classify_json(&message) {
                Ok(Incoming::Other { body: None, role }) => role,
                other => panic!("{message}: {other:?}"),
            };
            let expected = if message["method"] == "initialize" {
                Role::Opens {
                    url_elicitation: false,
                }
            } else {
                Role::Asks
            };
            assert_eq!(role, expected, "{message}");
        }
        let url_mode = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"capabilities": {"elicitation": {"form": {}, "url": {}}}}});
        assert_eq!(
            classify_json(&url_mode),
            Ok(Incoming::Other {
                body: None,
                role: Role::Opens {
                    url_elicitation: true
                }
            })
        );
    }

    #[test]
    fn answers_to_the_servers_requests_are_told_apart() {
        for message in [
            json!({"jsonrpc": "2.0", "id": 4, "result": {}}),
            json!({"jsonrpc": "2.0", "id": "e-1", "error": {"code": -1, "message": "no"}}),
            json!([{"jsonrpc": "2.0", "id": 5, "method": "ping"},
                   {"jsonrpc": "2.0", "id": 6, "result": {"action": "accept"}}]),
        ] {
            assert_eq!(
                classify_json(&message),
                Ok(Incoming::Other {
                    body: None,
                    role: Role::Answers
                }),
                "{message}"
            );
        }
    }

    #[test]
    fn answers_to_the_gateways_requests_stay_here() {
        use crate::mcp::page::{PAGE_INPUT_KEY, PAGE_REQUEST_ID_PREFIX, PAGE_REQUEST_STATE};
        let answer = json!({"jsonrpc": "2.0", "id": format!("{PAGE_REQUEST_ID_PREFIX}1"),
            "result": {"action": "accept"}});
        assert_eq!(classify_json(&answer), Ok(Incoming::ToGateway));
        // A 2026-07-28 call answering the page's round: held, the round taken out.
        let follow_up = call(
            json!(9),
            json!({"name": "exchange_item", "arguments": {"order_id": "o1"},
                   "inputResponses": {PAGE_INPUT_KEY: {"action": "accept"}},
                   "requestState": PAGE_REQUEST_STATE}),
        );
        let Ok(Incoming::Held(held)) = classify_json(&follow_up) else {
            panic!("expected a held call");
        };
        assert!(held.page.answered);
        assert_eq!(
            serde_json::from_slice::<Value>(&held.forward_body).unwrap(),
            call(
                json!(9),
                json!({"name": "exchange_item", "arguments": {"order_id": "o1"}})
            )
        );
    }

    #[test]
    fn batches_with_held_calls_and_bad_json_are_refused() {
        let batch = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            call(json!(2), json!({"name": "exchange_item"})),
        ]);
        let error = classify_json(&batch).unwrap_err();
        assert_eq!(error.code, INVALID_REQUEST);
        assert!(error.message.contains("one by one"));
        assert_eq!(error.http_status(), 400);

        assert_eq!(classify(b"{not json", held).unwrap_err().code, PARSE_ERROR);
        assert_eq!(classify(b"", held).unwrap_err().code, PARSE_ERROR);
        assert_eq!(classify(b"[]", held).unwrap_err().code, INVALID_REQUEST);
        assert_eq!(classify(b"42", held).unwrap_err().code, INVALID_REQUEST);
        assert_eq!(
            classify(br#"{"id": 1, "params": {}}"#, held).unwrap_err(),
            RpcError::new(
                json!(1),
                INVALID_REQUEST,
                "Invalid Request: not a JSON-RPC request, notification or response"
            )
        );
    }

    #[test]
    fn a_name_given_twice_is_refused_whichever_comes_first() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","name":"exchange_item"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exchange_item","name":"lookup_order"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"exchange_item"}}"#,
        ] {
            let error = classify(body.as_bytes(), held).unwrap_err();
            assert_eq!(error.code, INVALID_REQUEST, "{body}");
            assert!(error.message.contains("twice"), "{}", error.message);
        }
    }
}
