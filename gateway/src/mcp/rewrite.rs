//! A recorded answer to a tools/call is replayed to every retry of its approval, and each
//! retry is a new JSON-RPC request with its own `id`: the client matches the answer to the
//! request by that `id`, so the recorded one is replaced.

use serde_json::Value;

use super::McpVersion;
use super::body::{MessageChange, is_response, rewrite_messages};

/// How a recorded answer is readdressed to the call it answers now.
pub(crate) struct Readdress<'a> {
    /// The call's JSON-RPC `id`.
    pub(crate) id: &'a Value,
    /// The call's protocol version: a replayed result gets what this version requires.
    pub(crate) version: &'a McpVersion,
    /// A replay: only the response is sent. The recorded stream's other messages answered
    /// another call: its `notifications/progress` name that call's `progressToken`, which MCP
    /// forbids once that call is over, and its own requests were answered already.
    pub(crate) replay: bool,
}

/// The body readdressed (see [`Readdress`]), or `None` when there is nothing to change (not
/// JSON or SSE, already right, or not readable: then the recorded body is sent as it is).
///
/// Only responses (objects with `result` or `error`) are changed: in an SSE stream of a
/// first answer, the server's own requests and notifications keep their ids.
pub(crate) fn readdress_response(
    body: &[u8],
    content_type: Option<&[u8]>,
    to: &Readdress<'_>,
) -> Option<Vec<u8>> {
    rewrite_messages(body, content_type, |message| {
        if !is_response(message) {
            // A replay sends the response only (see [`Readdress::replay`]).
            return if to.replay {
                MessageChange::Drop
            } else {
                MessageChange::Keep
            };
        }
        if readdress_message(message, to) {
            MessageChange::Changed
        } else {
            MessageChange::Keep
        }
    })
}

/// The body with the `id` of each JSON-RPC response in it set to `id` (nothing else changed).
#[cfg(test)]
pub(crate) fn rewrite_response_id(
    body: &[u8],
    content_type: Option<&[u8]>,
    id: &Value,
) -> Option<Vec<u8>> {
    let version = McpVersion::of_request(None, None);
    readdress_response(
        body,
        content_type,
        &Readdress {
            id,
            version: &version,
            replay: false,
        },
    )
}

/// Readdress a response; whether anything changed.
fn readdress_message(message: &mut Value, to: &Readdress<'_>) -> bool {
    if !is_response(message) {
        return false;
    }
    let Some(object) = message.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    if object.get("id") != Some(to.id) {
        object.insert("id".into(), to.id.clone());
        changed = true;
    }
    if let Some(result) = object.get_mut("result") {
        let finished = to.version.finish(result.clone());
        if &finished != result {
            *result = finished;
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_ct() -> Option<&'static [u8]> {
        Some(b"application/json; charset=utf-8")
    }

    #[test]
    fn rewrites_a_json_response() {
        let body = json!({"jsonrpc": "2.0", "id": 8, "result": {"content": []}}).to_string();
        let rewritten = rewrite_response_id(body.as_bytes(), json_ct(), &json!("retry-2")).unwrap();
        let value: Value = serde_json::from_slice(&rewritten).unwrap();
        assert_eq!(
            value,
            json!({"jsonrpc": "2.0", "id": "retry-2", "result": {"content": []}})
        );
        assert_eq!(
            rewrite_response_id(body.as_bytes(), json_ct(), &json!(8)),
            None,
            "the same id: replayed byte for byte"
        );
        let error =
            json!({"jsonrpc": "2.0", "id": 8, "error": {"code": 1, "message": "x"}}).to_string();
        let rewritten = rewrite_response_id(error.as_bytes(), json_ct(), &json!(9)).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&rewritten).unwrap()["id"],
            9
        );
    }

    #[test]
    fn leaves_what_it_cannot_read() {
        let id = json!(1);
        assert_eq!(rewrite_response_id(b"not json", json_ct(), &id), None);
        assert_eq!(rewrite_response_id(b"{}", json_ct(), &id), None);
        assert_eq!(
            rewrite_response_id(br#"{"id":2,"result":{}}"#, Some(b"text/plain"), &id),
            None
        );
        assert_eq!(
            rewrite_response_id(br#"{"id":2,"result":{}}"#, None, &id),
            None
        );
        assert_eq!(
            rewrite_response_id(br#"{"id":2,"method":"ping"}"#, json_ct(), &id),
            None,
            "a request is not an answer"
        );
    }

    #[test]
    fn a_replay_is_the_response_alone_as_the_call_needs_it() {
        let body = concat!(
            "id: ev-0\ndata: \n\n",
            "event: message\nid: ev-1\n",
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":7,\"progress\":1}}\n\n",
            "event: message\nid: ev-2\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{\"content\":[]}}\n\n",
        );
        let version = McpVersion::of_request(Some(b"2026-07-28"), None);
        let to = Readdress {
            id: &json!(9),
            version: &version,
            replay: true,
        };
        let replayed =
            readdress_response(body.as_bytes(), Some(b"text/event-stream"), &to).unwrap();
        let text = String::from_utf8(replayed).unwrap();
        assert!(!text.contains("progress"), "{text}");
        assert!(
            text.starts_with("id: ev-0\ndata: \n\nevent: message\nid: ev-2\ndata: "),
            "{text}"
        );
        let data = text.split("data: ").last().unwrap().trim();
        assert_eq!(
            serde_json::from_str::<Value>(data).unwrap(),
            json!({"jsonrpc": "2.0", "id": 9, "result": {"content": [], "resultType": "complete"}})
        );
        let first_answer = Readdress {
            replay: false,
            ..to
        };
        let again =
            readdress_response(body.as_bytes(), Some(b"text/event-stream"), &first_answer).unwrap();
        assert!(
            String::from_utf8(again)
                .unwrap()
                .contains("notifications/progress")
        );
    }

    #[test]
    fn rewrites_the_response_in_an_event_stream() {
        let body = concat!(
            ": keep-alive\n\n",
            "event: message\nid: ev-1\n",
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n",
            "event: message\r\nid: ev-2\r\n",
            "data: {\"jsonrpc\":\"2.0\",\r\ndata: \"id\":8,\"result\":{\"content\":[]}}\r\n\r\n",
        );
        let rewritten =
            rewrite_response_id(body.as_bytes(), Some(b"text/event-stream"), &json!("r2")).unwrap();
        let text = String::from_utf8(rewritten).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 3, "{text}");
        assert_eq!(events[0], ": keep-alive");
        assert!(events[1].contains("notifications/progress"), "{text}");
        assert!(
            events[2].starts_with("event: message\nid: ev-2\ndata: "),
            "{text}"
        );
        let data = events[2].split("data: ").nth(1).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(data).unwrap(),
            json!({"jsonrpc": "2.0", "id": "r2", "result": {"content": []}})
        );
    }
}
