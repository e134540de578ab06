//! Held tools' `outputSchema`, widened in `tools/list` answers so that the gateway's own
//! result for a held call still validates on the client.
//!
//! A held call's result carries `structuredContent: {"operation": …}` (spec section 4). When
//! the tool declares an `outputSchema`, that object does not match it, and clients check
//! `structuredContent` against it (the TypeScript SDK even for `isError` results, failing the
//! call with `-32602`). So each held tool's schema is rewritten to admit either what the tool
//! returns or the operation:
//!
//! ```json
//! {"type": "object", "$defs": …, "anyOf": [<the tool's schema, less $schema/$id/$defs>,
//!                                           <an object with `operation`>]}
//! ```
//!
//! `type: "object"` stays at the top (2025-06-18 and 2025-11-25 require it there, and the
//! SDKs check it); the keywords that locate references (`$schema`, `$id`, `$defs`,
//! `definitions`) stay at the top too, so `#/$defs/…` still resolves.

use serde_json::{Map, Value, json};

use super::sse::{self, EventChange};

/// Top-level keywords that say how to read the schema or where its references point.
const DOCUMENT_KEYWORDS: [&str; 5] = ["$schema", "$id", "$defs", "definitions", "$anchor"];

/// The schema of the `structuredContent` of a held call's result.
pub(crate) fn held_result_schema() -> Value {
    let string = json!({"type": "string"});
    json!({
        "type": "object",
        "required": ["operation"],
        "properties": {"operation": {
            "type": "object",
            "required": ["operation_id", "revision", "summary", "expires_at"],
            "properties": {
                "operation_id": string,
                "revision": string,
                "summary": string,
                "terms": {"type": "object"},
                "expires_at": string,
            },
        }},
    })
}

/// A tool's `outputSchema`, widened to admit the held result too.
pub(crate) fn admit_held_result(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else {
        // Not a schema the gateway can read: one that admits anything the tool or the
        // gateway returns, rather than one that fails every held call.
        return json!({"type": "object"});
    };
    let mut top = Map::new();
    let mut tool = Map::new();
    for (key, value) in object {
        if DOCUMENT_KEYWORDS.contains(&key.as_str()) {
            top.insert(key.clone(), value.clone());
        } else {
            tool.insert(key.clone(), value.clone());
        }
    }
    top.insert("type".into(), Value::from("object"));
    top.insert(
        "anyOf".into(),
        Value::Array(vec![Value::Object(tool), held_result_schema()]),
    );
    Value::Object(top)
}

/// A `tools/list` result with each held tool's `outputSchema` widened; whether anything
/// changed.
pub(crate) fn widen_tools_list(message: &mut Value, is_held: impl Fn(&str) -> bool) -> bool {
    let Some(tools) = message
        .get_mut("result")
        .and_then(|result| result.get_mut("tools"))
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let mut changed = false;
    for tool in tools {
        let held = tool
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(&is_held);
        if !held {
            continue;
        }
        if let Some(schema) = tool.get_mut("outputSchema") {
            if !schema.is_null() {
                *schema = admit_held_result(schema);
                changed = true;
            }
        }
    }
    changed
}

/// A `tools/list` answer (JSON, or the response event of an SSE stream) with held tools'
/// schemas widened, or `None` when nothing changed or it could not be read (then it is sent
/// as it came).
pub(crate) fn widen_tools_list_body(
    body: &[u8],
    content_type: Option<&[u8]>,
    is_held: impl Fn(&str) -> bool,
) -> Option<Vec<u8>> {
    let media_type = content_type
        .and_then(|ct| std::str::from_utf8(ct).ok())
        .and_then(|ct| ct.split(';').next())
        .map(|mt| mt.trim().to_ascii_lowercase())?;
    match media_type.as_str() {
        "application/json" => {
            let mut message: Value = serde_json::from_slice(body).ok()?;
            widen_tools_list(&mut message, &is_held)
                .then(|| serde_json::to_vec(&message).ok())
                .flatten()
        }
        "text/event-stream" => {
            let text = std::str::from_utf8(body).ok()?;
            sse::rewrite_events(text, |data| {
                let Ok(mut message) = serde_json::from_str::<Value>(data) else {
                    return EventChange::Keep;
                };
                if !widen_tools_list(&mut message, &is_held) {
                    return EventChange::Keep;
                }
                serde_json::to_string(&message).map_or(EventChange::Keep, EventChange::Replace)
            })
            .map(String::into_bytes)
        }
        _ => None,
    }
}

/// Whether a JSON-RPC message is a `tools/list` request.
pub(crate) fn is_tools_list(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Method>(body)
        .ok()
        .and_then(|m| m.method)
        .is_some_and(|m| m == "tools/list")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange_schema() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"exchange": {"$ref": "#/$defs/Exchange"}},
            "required": ["exchange"],
            "additionalProperties": false,
            "$defs": {"Exchange": {"type": "object", "properties": {"id": {"type": "string"}}}},
        })
    }

    #[test]
    fn the_widened_schema_keeps_the_tool_and_its_references() {
        let widened = admit_held_result(&exchange_schema());
        assert_eq!(widened["type"], "object");
        assert_eq!(widened["$schema"], exchange_schema()["$schema"]);
        assert_eq!(widened["$defs"], exchange_schema()["$defs"]);
        let tool = &widened["anyOf"][0];
        assert_eq!(tool["required"], json!(["exchange"]));
        assert_eq!(tool["additionalProperties"], false);
        assert!(tool.get("$defs").is_none() && tool.get("$schema").is_none());
        assert_eq!(widened["anyOf"][1], held_result_schema());
        assert_eq!(admit_held_result(&json!(true)), json!({"type": "object"}));
    }

    #[test]
    fn only_held_tools_with_a_schema_change() {
        let mut list = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [
            {"name": "exchange_item", "inputSchema": {"type": "object"}, "outputSchema": exchange_schema()},
            {"name": "cancel_order", "inputSchema": {"type": "object"}},
            {"name": "lookup_order", "inputSchema": {"type": "object"}, "outputSchema": exchange_schema()},
        ], "ttlMs": 1000}});
        assert!(widen_tools_list(&mut list, |name| name != "lookup_order"));
        let tools = &list["result"]["tools"];
        assert!(tools[0]["outputSchema"]["anyOf"].is_array());
        assert!(tools[1].get("outputSchema").is_none());
        assert_eq!(tools[2]["outputSchema"], exchange_schema());
        assert_eq!(list["result"]["ttlMs"], 1000, "other members stay");
        let mut error = json!({"jsonrpc": "2.0", "id": 2, "error": {"code": 1, "message": "x"}});
        assert!(!widen_tools_list(&mut error, |_| true));
    }

    #[test]
    fn widens_json_and_event_stream_answers() {
        let message = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [
            {"name": "exchange_item", "inputSchema": {"type": "object"}, "outputSchema": exchange_schema()}]}});
        let held = |name: &str| name == "exchange_item";
        let json_body = message.to_string();
        let widened =
            widen_tools_list_body(json_body.as_bytes(), Some(b"application/json"), held).unwrap();
        let value: Value = serde_json::from_slice(&widened).unwrap();
        assert!(value["result"]["tools"][0]["outputSchema"]["anyOf"].is_array());
        let stream = format!("event: message\ndata: {message}\n\n");
        let widened =
            widen_tools_list_body(stream.as_bytes(), Some(b"text/event-stream"), held).unwrap();
        let text = String::from_utf8(widened).unwrap();
        assert!(
            text.starts_with("event: message\ndata: ") && text.contains("anyOf"),
            "{text}"
        );
        assert_eq!(
            widen_tools_list_body(json_body.as_bytes(), Some(b"application/json"), |_| false),
            None
        );
    }

    #[test]
    fn recognizes_tools_list() {
        assert!(is_tools_list(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#
        ));
        assert!(!is_tools_list(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#
        ));
        assert!(!is_tools_list(br#"[{"method":"tools/list"}]"#));
        assert!(!is_tools_list(b"nope"));
    }
}
