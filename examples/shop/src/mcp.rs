//! The shop's actions as MCP tools, at `POST /mcp` (MCP Streamable HTTP), hand-written:
//! `initialize`, notifications, `ping`, `tools/list`, and `tools/call` of `exchange_item`
//! `{order_id, item_id, replacement_sku}` and `cancel_order` `{order_id}`.
//!
//! Like the HTTP routes, it knows nothing of approvals: every call that reaches it is
//! performed. Answers are `application/json`, or `text/event-stream` when the client
//! accepts only that, or accepts it and the shop runs with `--mcp-sse`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::state::{Shop, ShopError};

/// Protocol versions the shop speaks; it answers `initialize` with the client's if listed.
const VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

#[derive(Clone)]
struct McpState {
    shop: Arc<Mutex<Shop>>,
    /// Answer requests as SSE when the client accepts it.
    prefer_sse: bool,
    sessions: Arc<AtomicU64>,
}

/// The `/mcp` routes, on the same shop as the HTTP routes.
pub fn router(shop: Arc<Mutex<Shop>>, prefer_sse: bool) -> Router {
    Router::new()
        .route("/mcp", post(handle).get(no_stream).delete(end_session))
        .with_state(McpState {
            shop,
            prefer_sse,
            sessions: Arc::new(AtomicU64::new(1)),
        })
}

/// No server-initiated stream: the shop never sends anything of its own.
async fn no_stream() -> StatusCode {
    StatusCode::METHOD_NOT_ALLOWED
}

async fn end_session() -> StatusCode {
    StatusCode::OK
}

async fn handle(State(state): State<McpState>, headers: HeaderMap, body: Bytes) -> Response {
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(e) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &error(&Value::Null, -32700, &format!("Parse error: {e}")),
                None,
            );
        }
    };
    if message.is_array() {
        return json_response(
            StatusCode::BAD_REQUEST,
            &error(&Value::Null, -32600, "batches are not supported"),
            None,
        );
    }
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        // A response to a request of ours (we send none) or junk: nothing to answer.
        return StatusCode::ACCEPTED.into_response();
    };
    let Some(id) = message.get("id").cloned() else {
        // A notification, such as notifications/initialized.
        return StatusCode::ACCEPTED.into_response();
    };
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let session = (method == "initialize").then(|| {
        format!(
            "shop-{}-{}",
            std::process::id(),
            state.sessions.fetch_add(1, Ordering::Relaxed)
        )
    });
    let answer = {
        let mut shop = state.shop.lock().await;
        answer(&mut shop, &id, method, &params)
    };
    if wants_sse(&headers, state.prefer_sse) {
        let mut response = (
            StatusCode::OK,
            format!("event: message\ndata: {answer}\n\n"),
        )
            .into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        add_session(&mut response, session.as_deref());
        response
    } else {
        json_response(StatusCode::OK, &answer, session.as_deref())
    }
}

/// SSE when the client accepts only that, or accepts it and the shop prefers it.
fn wants_sse(headers: &HeaderMap, prefer_sse: bool) -> bool {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let accepts = |media: &str| {
        accept
            .split(',')
            .any(|part| part.split(';').next().map(str::trim) == Some(media))
    };
    accepts("text/event-stream") && (prefer_sse || !accepts("application/json"))
}

/// The JSON-RPC response to one request.
pub fn answer(shop: &mut Shop, id: &Value, method: &str, params: &Value) -> Value {
    let result = match method {
        "initialize" => {
            let asked = params.get("protocolVersion").and_then(Value::as_str);
            let version = asked
                .filter(|v| VERSIONS.contains(v))
                .unwrap_or(VERSIONS[1]);
            json!({
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stormline-shop", "version": env!("CARGO_PKG_VERSION")},
            })
        }
        "ping" => json!({}),
        "tools/list" => json!({"tools": tools()}),
        "tools/call" => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or("");
            let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
            match call(shop, name, &arguments) {
                Some(result) => result,
                None => return error(id, -32602, &format!("Unknown tool: {name}")),
            }
        }
        other => return error(id, -32601, &format!("Method not found: {other}")),
    };
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn tools() -> Value {
    let string = json!({"type": "string"});
    json!([
        {
            "name": "exchange_item",
            "description": "Exchange an item on an order for another product (the price difference is charged or refunded to the order's card).",
            "inputSchema": {
                "type": "object",
                "properties": {"order_id": string, "item_id": string, "replacement_sku": string},
                "required": ["order_id", "item_id", "replacement_sku"],
            },
        },
        {
            "name": "cancel_order",
            "description": "Cancel an order.",
            "inputSchema": {
                "type": "object",
                "properties": {"order_id": string},
                "required": ["order_id"],
            },
        },
    ])
}

/// Perform a tool call; `None` for an unknown tool.
fn call(shop: &mut Shop, name: &str, arguments: &Value) -> Option<Value> {
    let argument = |key: &str| {
        arguments
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("missing string argument `{key}`"))
    };
    let outcome: Result<Value, String> = match name {
        "exchange_item" => (|| {
            let (order, item, sku) = (
                argument("order_id")?,
                argument("item_id")?,
                argument("replacement_sku")?,
            );
            let exchange = shop.exchange(order, item, sku).map_err(describe)?;
            eprintln!(
                "shop: performed exchange {} on {} via MCP: {} {} -> {}",
                exchange.exchange_id,
                exchange.order_id,
                exchange.item_id,
                exchange.from_sku,
                exchange.to_sku
            );
            serde_json::to_value(exchange).map_err(|e| e.to_string())
        })(),
        "cancel_order" => (|| {
            let order = argument("order_id")?;
            let order = shop.cancel(order).map_err(describe)?;
            eprintln!("shop: performed cancellation of {} via MCP", order.id);
            Ok(json!({"order_id": order.id, "status": order.status}))
        })(),
        _ => return None,
    };
    Some(match outcome {
        Ok(structured) => json!({
            "content": [{"type": "text", "text": structured.to_string()}],
            "structuredContent": structured,
        }),
        Err(text) => json!({"isError": true, "content": [{"type": "text", "text": text}]}),
    })
}

fn describe(error: ShopError) -> String {
    match error {
        ShopError::NotFound(detail) | ShopError::Conflict(detail) => detail,
    }
}

fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn json_response(status: StatusCode, body: &Value, session: Option<&str>) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    add_session(&mut response, session);
    response
}

fn add_session(response: &mut Response, session: Option<&str>) {
    if let Some(value) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
        response.headers_mut().insert("mcp-session-id", value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_listed_and_performed() {
        let mut shop = Shop::seeded();
        let listed = answer(&mut shop, &json!(1), "tools/list", &json!({}));
        assert_eq!(listed["result"]["tools"][0]["name"], "exchange_item");
        assert_eq!(listed["result"]["tools"][1]["name"], "cancel_order");

        let args = json!({"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"});
        let done = answer(
            &mut shop,
            &json!("a"),
            "tools/call",
            &json!({"name": "exchange_item", "arguments": args}),
        );
        assert_eq!(done["id"], "a");
        assert_eq!(done["result"]["structuredContent"]["exchange_id"], "exg_1");
        assert_eq!(
            done["result"]["structuredContent"]["price_difference"]["amount"],
            "70.00"
        );
        assert_eq!(shop.stats().exchanges, 1);

        let cancelled = answer(
            &mut shop,
            &json!(2),
            "tools/call",
            &json!({"name": "cancel_order", "arguments": {"order_id": "ord_3Lm9"}}),
        );
        assert_eq!(
            cancelled["result"]["structuredContent"]["status"],
            "cancelled"
        );
        let again = answer(
            &mut shop,
            &json!(3),
            "tools/call",
            &json!({"name": "cancel_order", "arguments": {"order_id": "ord_3Lm9"}}),
        );
        assert_eq!(again["result"]["isError"], true, "{again}");
        assert_eq!(shop.stats().cancellations, 1);
    }

    #[test]
    fn errors_are_json_rpc() {
        let mut shop = Shop::seeded();
        let unknown = answer(&mut shop, &json!(1), "tools/call", &json!({"name": "nope"}));
        assert_eq!(unknown["error"]["code"], -32602);
        let missing = answer(
            &mut shop,
            &json!(1),
            "tools/call",
            &json!({"name": "exchange_item", "arguments": {"order_id": "ord_7Hk2"}}),
        );
        assert_eq!(missing["result"]["isError"], true);
        assert_eq!(
            answer(&mut shop, &json!(1), "resources/list", &json!({}))["error"]["code"],
            -32601
        );
        let init = answer(
            &mut shop,
            &json!(0),
            "initialize",
            &json!({"protocolVersion": "1999-01-01"}),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    }

    #[test]
    fn sse_when_accepted_and_preferred() {
        let headers = |accept: &str| {
            let mut map = HeaderMap::new();
            map.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            map
        };
        let both = headers("application/json, text/event-stream");
        assert!(!wants_sse(&both, false));
        assert!(wants_sse(&both, true));
        assert!(wants_sse(&headers("text/event-stream"), false));
        assert!(!wants_sse(&headers("application/json"), true));
    }
}
