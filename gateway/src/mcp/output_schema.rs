//! Held tools' `outputSchema`, widened in `tools/list` answers so that the gateway's own
//! result for a held call still validates on the client.
//!
//! A held call's result carries `structuredContent: {"operation": …}` (spec section 4). When
//! the tool declares an `outputSchema`, that object does not match it, and clients check
//! `structuredContent` against it (the TypeScript SDK even for `isError` results, failing the
//! call with `-32602`). So each held tool's schema is rewritten to admit either what the tool
//! returns or the operation, keeping the tool's own schema at the top:
//!
//! ```json
//! {<the tool's schema: type, properties, x-*, $defs, …, less the keywords below>,
//!  "oneOf": [{<its required, additionalProperties, …>, "not": {"required": ["operation"]}},
//!            <an object with `operation`>]}
//! ```
//!
//! Clients build typed results from the top (fastmcp's type builder reads `properties` and
//! its `x-fastmcp-wrap-result`, and turns a top-level `anyOf` into a union that loses the
//! type), and validators (ajv in the TypeScript SDK, `jsonschema` in the Python SDK) check
//! the alternatives. Only the keywords that say which members must or may be there move
//! into the tool's alternative (with a copy of `properties` where `additionalProperties`
//! needs it); the `not` keeps the two alternatives apart, so exactly one matches. A schema
//! this can't keep whole at the top (one with its own `anyOf`/`oneOf`/…, a property named
//! `operation`, or another `type`) is widened as before: all of it inside an `anyOf`, with
//! `type: "object"` and the keywords that locate references (`$schema`, `$id`, `$defs`,
//! `definitions`) at the top so `#/$defs/…` still resolves.

use serde_json::{Map, Value, json};

use super::body::{MessageChange, rewrite_messages};

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

/// Keywords that say which members an object must or may have: moved into the tool's
/// alternative, so the operation's object passes the top.
const PRESENCE_KEYWORDS: [&str; 10] = [
    "required",
    "additionalProperties",
    "unevaluatedProperties",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
];

/// Keywords whose meaning at the top the widening can't keep (they would apply to the
/// operation's object too): such a schema goes whole into an `anyOf`.
const COMBINING_KEYWORDS: [&str; 8] = [
    "anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$ref",
];

/// A tool's `outputSchema`, widened to admit the held result too.
pub(crate) fn admit_held_result(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else {
        // Not a schema the gateway can read: one that admits anything the tool or the
        // gateway returns, rather than one that fails every held call.
        return json!({"type": "object"});
    };
    let keeps_top = object.get("type") == Some(&Value::from("object"))
        && !COMBINING_KEYWORDS.iter().any(|k| object.contains_key(*k))
        && object
            .get("properties")
            .is_none_or(|p| p.get("operation").is_none());
    if !keeps_top {
        return whole_in_any_of(object);
    }
    let mut top = Map::new();
    let mut tool = Map::new();
    for (key, value) in object {
        if PRESENCE_KEYWORDS.contains(&key.as_str()) {
            tool.insert(key.clone(), value.clone());
        } else {
            top.insert(key.clone(), value.clone());
        }
    }
    // `additionalProperties` and `unevaluatedProperties` see only their own schema's
    // `properties`.
    if tool.contains_key("additionalProperties") || tool.contains_key("unevaluatedProperties") {
        if let Some(properties) = object.get("properties") {
            tool.insert("properties".into(), properties.clone());
        }
    }
    tool.insert("not".into(), json!({"required": ["operation"]}));
    top.insert(
        "oneOf".into(),
        Value::Array(vec![Value::Object(tool), held_result_schema()]),
    );
    Value::Object(top)
}

/// The widening of a schema that can't stay at the top (see the module comment).
fn whole_in_any_of(object: &Map<String, Value>) -> Value {
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
    rewrite_messages(body, content_type, |message| {
        if widen_tools_list(message, &is_held) {
            MessageChange::Changed
        } else {
            MessageChange::Keep
        }
    })
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
    fn the_tool_schema_stays_at_the_top_and_only_presence_moves() {
        let widened = admit_held_result(&exchange_schema());
        for kept in ["type", "$schema", "$defs", "properties"] {
            assert_eq!(widened[kept], exchange_schema()[kept], "{kept}");
        }
        assert!(widened.get("required").is_none());
        assert!(widened.get("additionalProperties").is_none());
        let tool = &widened["oneOf"][0];
        assert_eq!(tool["required"], json!(["exchange"]));
        assert_eq!(tool["additionalProperties"], false);
        assert_eq!(
            tool["properties"],
            exchange_schema()["properties"],
            "for additionalProperties"
        );
        assert_eq!(tool["not"], json!({"required": ["operation"]}));
        assert_eq!(widened["oneOf"][1], held_result_schema());
        assert_eq!(admit_held_result(&json!(true)), json!({"type": "object"}));

        // fastmcp's primitive results: the wrapper and its marker stay where it reads them.
        let wrapped = json!({"type": "object", "properties": {"result": {"type": "integer"}},
            "required": ["result"], "x-fastmcp-wrap-result": true});
        let widened = admit_held_result(&wrapped);
        assert_eq!(widened["x-fastmcp-wrap-result"], true);
        assert_eq!(widened["properties"], wrapped["properties"]);
        assert_eq!(
            widened["oneOf"][0],
            json!({"required": ["result"], "not": {"required": ["operation"]}})
        );
    }

    #[test]
    fn schemas_that_cannot_stay_at_the_top_go_whole_into_an_any_of() {
        let union = json!({"$defs": {"A": {}}, "anyOf": [{"type": "object"}, {"type": "null"}]});
        let own_operation =
            json!({"type": "object", "properties": {"operation": {"type": "string"}}});
        for schema in [union, own_operation] {
            let widened = admit_held_result(&schema);
            assert_eq!(widened["type"], "object", "{schema}");
            assert!(widened.get("oneOf").is_none());
            let tool = &widened["anyOf"][0];
            assert!(tool.get("$defs").is_none());
            assert_eq!(widened["anyOf"][1], held_result_schema());
        }
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
        assert!(tools[0]["outputSchema"]["oneOf"].is_array());
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
        assert!(value["result"]["tools"][0]["outputSchema"]["oneOf"].is_array());
        let stream = format!("event: message\ndata: {message}\n\n");
        let widened =
            widen_tools_list_body(stream.as_bytes(), Some(b"text/event-stream"), held).unwrap();
        let text = String::from_utf8(widened).unwrap();
        assert!(
            text.starts_with("event: message\ndata: ") && text.contains("oneOf"),
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
