//! What the MCP server's answer to an approved `tools/call` is, before the gateway records
//! it as the operation's answer: only a final result (or error) is one.
//!
//! - A cancelled call's error (`-32800`, or `mcp` 1.x's code 0 "Request cancelled") says
//!   the server stopped *somewhere*: whether the action took effect is unknown (spec
//!   section 7), so it is never recorded or replayed as "failed".
//! - A 2026-07-28 multi-round result (`resultType: "input_required"`) asks the client for
//!   input; the call goes on when the client sends it back with the server's `requestState`.
//! - An event stream the server closed before the response (SEP-1699: it may close it after
//!   a priming event and let the client resume with `Last-Event-ID`) has no answer yet.

use serde_json::Value;

use super::body::{is_response, media_type};
use super::sse;
use crate::protocol::json;

/// The JSON-RPC error code of a cancelled request (MCP's `REQUEST_CANCELLED`).
pub(crate) const REQUEST_CANCELLED: i64 = -32800;

/// What an answer to an approved call is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallAnswer {
    /// The call's final result or error (or an answer that is not MCP at all): recorded.
    Final,
    /// The server answered that it cancelled the call: the outcome is unknown.
    Cancelled,
    /// An interim result asking the client for input; `request_state` is the server's
    /// opaque state the follow-up must carry back (`None` when it sent none).
    InputRequired { request_state: Option<String> },
    /// An event stream that ended without a response; `last_event_id`: the `id` of its last
    /// event that had one, to resume from.
    Unfinished { last_event_id: Option<String> },
}

/// Read an answer to an approved call: its status, `Content-Type` and body. A message with a
/// member twice is final (as one that is not JSON): readers disagree on what it says, and
/// final never releases the claim.
pub(crate) fn read_call_answer(
    status: u16,
    content_type: Option<&[u8]>,
    body: &[u8],
) -> CallAnswer {
    if status != 200 {
        return CallAnswer::Final;
    }
    match media_type(content_type).as_deref() {
        Some("application/json") => match json::from_slice::<Value>(body) {
            Ok(message) => of_response(&message),
            Err(_) => CallAnswer::Final,
        },
        Some("text/event-stream") => {
            let Ok(text) = std::str::from_utf8(body) else {
                return CallAnswer::Final;
            };
            let mut last_event_id = None;
            for event in sse::events(text) {
                if let Some(id) = event.id {
                    last_event_id = Some(id.to_owned());
                }
                let message = match json::from_slice::<Value>(event.data.as_bytes()) {
                    Ok(message) => message,
                    Err(json::ReadError::Duplicate(_)) => return CallAnswer::Final,
                    Err(json::ReadError::Invalid(_)) => continue,
                };
                if is_response(&message) {
                    return of_response(&message);
                }
            }
            CallAnswer::Unfinished { last_event_id }
        }
        _ => CallAnswer::Final,
    }
}

fn of_response(message: &Value) -> CallAnswer {
    if let Some(error) = message.get("error") {
        let code = error.get("code").and_then(Value::as_i64);
        let text = error.get("message").and_then(Value::as_str).unwrap_or("");
        // mcp 1.x answers a cancelled request with code 0 and this message.
        let cancelled = code == Some(REQUEST_CANCELLED)
            || (code == Some(0) && text.eq_ignore_ascii_case("request cancelled"));
        return if cancelled {
            CallAnswer::Cancelled
        } else {
            CallAnswer::Final
        };
    }
    let result = message.get("result");
    if result
        .and_then(|r| r.get("resultType"))
        .and_then(Value::as_str)
        == Some("input_required")
    {
        return CallAnswer::InputRequired {
            request_state: result
                .and_then(|r| r.get("requestState"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
    }
    CallAnswer::Final
}

/// What a `tools/call` carries back to the server after an `input_required` result, from the
/// forwarded body: `None` when it is not such a follow-up (it has neither `inputResponses`
/// nor `requestState`), else its `requestState` (`None` inside when it has none).
pub(crate) fn follow_up_of(body: &[u8]) -> Option<Option<String>> {
    let message: Value = serde_json::from_slice(body).ok()?;
    let params = message.get("params")?;
    let state = params.get("requestState");
    if state.is_none() && params.get("inputResponses").is_none() {
        return None;
    }
    Some(state.and_then(Value::as_str).map(str::to_owned))
}

/// The request a `notifications/cancelled` names (`params.requestId`), for a body that is
/// one (or a batch holding one); each as sent.
pub(crate) fn cancelled_requests(body: &[u8]) -> Vec<Value> {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let one = |message: &Value| {
        (message.get("method").and_then(Value::as_str) == Some("notifications/cancelled"))
            .then(|| message.get("params")?.get("requestId").cloned())
            .flatten()
    };
    match &value {
        Value::Array(items) => items.iter().filter_map(one).collect(),
        message => one(message).into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const JSON: Option<&[u8]> = Some(b"application/json");
    const SSE: Option<&[u8]> = Some(b"text/event-stream");

    fn json_answer(message: &Value) -> CallAnswer {
        read_call_answer(200, JSON, message.to_string().as_bytes())
    }

    #[test]
    fn only_a_final_answer_is_final() {
        let result = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": true}});
        assert_eq!(json_answer(&result), CallAnswer::Final);
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "x"}});
        assert_eq!(json_answer(&error), CallAnswer::Final);
        for cancelled in [
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32800, "message": "Request cancelled"}}),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": 0, "message": "Request cancelled"}}),
        ] {
            assert_eq!(
                json_answer(&cancelled),
                CallAnswer::Cancelled,
                "{cancelled}"
            );
        }
        let rounds = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "resultType": "input_required", "inputRequests": {}, "requestState": "s1"}});
        assert_eq!(
            json_answer(&rounds),
            CallAnswer::InputRequired {
                request_state: Some("s1".into())
            }
        );
        assert_eq!(
            read_call_answer(500, JSON, b"{}"),
            CallAnswer::Final,
            "not an MCP answer: recorded as today"
        );
        assert_eq!(read_call_answer(200, JSON, b"nope"), CallAnswer::Final);
    }

    #[test]
    fn a_stream_without_its_response_is_unfinished() {
        let primed = "id: ev-0\nretry: 100\ndata: \n\n";
        assert_eq!(
            read_call_answer(200, SSE, primed.as_bytes()),
            CallAnswer::Unfinished {
                last_event_id: Some("ev-0".into())
            }
        );
        let progress = format!(
            "{primed}id: ev-1\nevent: message\ndata: {}\n\n",
            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
        );
        assert_eq!(
            read_call_answer(200, SSE, progress.as_bytes()),
            CallAnswer::Unfinished {
                last_event_id: Some("ev-1".into())
            }
        );
        let answered = format!(
            "{progress}id: ev-2\ndata: {}\n\n",
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32800, "message": "Request cancelled"}})
        );
        assert_eq!(
            read_call_answer(200, SSE, answered.as_bytes()),
            CallAnswer::Cancelled
        );
        assert_eq!(
            read_call_answer(200, SSE, b""),
            CallAnswer::Unfinished {
                last_event_id: None
            }
        );
    }

    #[test]
    fn reads_what_a_follow_up_and_a_cancellation_carry() {
        let follow_up = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "t", "arguments": {}, "requestState": "s1", "inputResponses": {}}});
        assert_eq!(
            follow_up_of(follow_up.to_string().as_bytes()),
            Some(Some("s1".into()))
        );
        let answers_only = json!({"params": {"inputResponses": {}}});
        assert_eq!(
            follow_up_of(answers_only.to_string().as_bytes()),
            Some(None)
        );
        assert_eq!(follow_up_of(b"{\"params\":{\"name\":\"t\"}}"), None);
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "timeout"}});
        assert_eq!(
            cancelled_requests(cancel.to_string().as_bytes()),
            [json!(7)]
        );
        let batch = json!([cancel, {"jsonrpc": "2.0", "method": "notifications/initialized"}]);
        assert_eq!(cancelled_requests(batch.to_string().as_bytes()), [json!(7)]);
        assert!(cancelled_requests(b"{\"method\":\"ping\",\"id\":1}").is_empty());
    }
}
