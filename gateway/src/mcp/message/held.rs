//! A held call read off its message: the `tools/call` of a tool that needs approval, checked,
//! with the approval taken out of `params._meta`; and the approval stripped from every other
//! message, which is forwarded (approvals are the gateway's business, never the upstream's).

use serde_json::{Map, Value};

use super::{RpcError, valid_id};
use crate::mcp::codes::{INVALID_PARAMS, INVALID_REQUEST};
use crate::mcp::page::{PageCall, take_page_round};

/// Where the approval is, in `params._meta` (spec section 6, "MCP").
const APPROVAL_META_KEY: &str = "personalagentprotocol.org/approval";

/// A `tools/call` request of a tool that needs approval, well-formed as far as the
/// gateway can tell before the extension and Session checks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HeldCall {
    /// The request's `id` (a string or a number).
    pub(crate) id: Value,
    pub(crate) tool: String,
    /// `params.arguments`, an object (`{}` when absent).
    pub(crate) arguments: Value,
    /// The approval in `_meta`, as sent: the front door reads it (`ingress::admit`), after
    /// the extension and Session checks, with the reader the header and conversations use.
    pub(crate) approval: Option<Value>,
    /// The message to forward once approved: the same, without the approval in `_meta`
    /// (and without `_meta` if nothing else was in it), and without the answer to the
    /// approval page's round (`mcp::page`).
    pub(crate) forward_body: Vec<u8>,
    /// What it says about the approval page.
    pub(crate) page: PageCall,
}

pub(super) fn held_call(
    mut message: Map<String, Value>,
    tool: String,
) -> Result<HeldCall, RpcError> {
    let Some(id) = valid_id(&message) else {
        return Err(RpcError::new(
            Value::Null,
            INVALID_REQUEST,
            format!(
                "Invalid Request: tool `{tool}` needs the user's approval, so its tools/call must be a request with a string or number id"
            ),
        ));
    };
    let invalid = |code: i64, message: String| RpcError::new(id.clone(), code, message);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(
            INVALID_REQUEST,
            "Invalid Request: `jsonrpc` must be \"2.0\"".into(),
        ));
    }
    let Some(Value::Object(params)) = message.get_mut("params") else {
        // held_tool found params.name, so params is an object.
        return Err(invalid(
            INVALID_PARAMS,
            "Invalid params: `params` must be an object".into(),
        ));
    };
    let arguments = match params.get("arguments") {
        None => Value::Object(Map::new()),
        Some(Value::Object(arguments)) => Value::Object(arguments.clone()),
        Some(_) => {
            return Err(invalid(
                INVALID_PARAMS,
                "Invalid params: `arguments` must be an object".into(),
            ));
        }
    };
    let page = take_page_round(params);
    let approval = match params.get_mut("_meta") {
        None => None,
        Some(Value::Object(meta)) => {
            let approval = meta.remove(APPROVAL_META_KEY);
            if meta.is_empty() {
                params.remove("_meta");
            }
            approval
        }
        Some(_) => {
            return Err(invalid(
                INVALID_PARAMS,
                "Invalid params: `_meta` must be an object".into(),
            ));
        }
    };
    // Serializing a JSON value cannot fail.
    let forward_body = serde_json::to_vec(&Value::Object(message)).unwrap_or_default();
    Ok(HeldCall {
        id,
        tool,
        arguments,
        approval,
        forward_body,
        page,
    })
}

/// The message re-serialized without approvals in any `tools/call` `_meta`, or `None` when
/// it has none (then the body is forwarded byte for byte).
pub(super) fn without_approval(mut value: Value) -> Option<Vec<u8>> {
    let mut removed = false;
    let mut strip = |message: &mut Value| {
        if message.get("method").and_then(Value::as_str) != Some("tools/call") {
            return;
        }
        let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
            return;
        };
        if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut)
            && meta.remove(APPROVAL_META_KEY).is_some()
        {
            removed = true;
            if meta.is_empty() {
                params.remove("_meta");
            }
        }
    };
    match &mut value {
        Value::Array(items) => items.iter_mut().for_each(&mut strip),
        message => strip(message),
    }
    // Serializing a JSON value cannot fail.
    removed.then(|| serde_json::to_vec(&value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mcp::message::Incoming;
    use crate::mcp::message::tests::{call, classify_json};

    #[test]
    fn a_call_of_a_held_tool_is_held() {
        let message = call(
            json!(8),
            json!({"name": "exchange_item", "arguments": {"order_id": "o1"}}),
        );
        let Ok(Incoming::Held(call)) = classify_json(&message) else {
            panic!("expected a held call");
        };
        assert_eq!(call.id, json!(8));
        assert_eq!(call.tool, "exchange_item");
        assert_eq!(call.arguments, json!({"order_id": "o1"}));
        assert_eq!(call.approval, None);
        assert_eq!(
            serde_json::from_slice::<Value>(&call.forward_body).unwrap(),
            message
        );
    }

    #[test]
    fn the_approval_is_read_from_meta_and_not_forwarded() {
        let message = call(
            json!("req-1"),
            json!({"name": "exchange_item", "arguments": {},
                   "_meta": {APPROVAL_META_KEY: {"operation_id": "exc_1", "revision": "1-a", "future": 1}}}),
        );
        let Ok(Incoming::Held(held)) = classify_json(&message) else {
            panic!("expected a held call");
        };
        assert_eq!(
            held.approval,
            Some(json!({"operation_id": "exc_1", "revision": "1-a", "future": 1}))
        );
        let forwarded: Value = serde_json::from_slice(&held.forward_body).unwrap();
        assert_eq!(
            forwarded,
            call(
                json!("req-1"),
                json!({"name": "exchange_item", "arguments": {}})
            ),
            "_meta is dropped once the approval was its only member"
        );

        let with_progress = call(
            json!(1),
            json!({"name": "exchange_item",
                   "_meta": {"progressToken": 7, APPROVAL_META_KEY: {"operation_id": "exc_1", "revision": "1-a"}}}),
        );
        let Ok(Incoming::Held(held)) = classify_json(&with_progress) else {
            panic!("expected a held call");
        };
        let forwarded: Value = serde_json::from_slice(&held.forward_body).unwrap();
        assert_eq!(forwarded["params"]["_meta"], json!({"progressToken": 7}));
        assert_eq!(held.arguments, json!({}), "absent arguments are {{}}");
    }

    #[test]
    fn malformed_held_calls_are_refused() {
        let cases = [
            (
                json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "exchange_item"}}),
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                call(Value::Null, json!({"name": "exchange_item"})),
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                json!({"jsonrpc": "1.0", "id": 3, "method": "tools/call", "params": {"name": "exchange_item"}}),
                INVALID_REQUEST,
                json!(3),
            ),
            (
                call(json!(4), json!({"name": "exchange_item", "arguments": [1]})),
                INVALID_PARAMS,
                json!(4),
            ),
            (
                call(json!(5), json!({"name": "exchange_item", "_meta": "x"})),
                INVALID_PARAMS,
                json!(5),
            ),
        ];
        for (message, code, id) in cases {
            let error = classify_json(&message).unwrap_err();
            assert_eq!((error.code, &error.id), (code, &id), "{message}");
            assert_eq!(error.http_status(), if id.is_null() { 400 } else { 200 });
        }
    }

    #[test]
    fn approvals_are_stripped_from_other_calls_too() {
        let message = call(
            json!(3),
            json!({"name": "lookup_order", "_meta": {APPROVAL_META_KEY: {"operation_id": "a", "revision": "b"}}}),
        );
        let Ok(Incoming::Other {
            body: Some(body), ..
        }) = classify_json(&message)
        else {
            panic!("expected a re-serialized body");
        };
        let forwarded: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(forwarded["params"], json!({"name": "lookup_order"}));
    }
}
