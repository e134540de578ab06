//! HTTP routes of the shop. Handlers are thin: parse, lock the state, call one
//! method of [`Shop`], turn the result into JSON.
//!
//! Errors are always JSON, `{"error": "<code>", "detail": "<text>"}`, so the
//! gateway's recorded responses and the demo's output stay readable.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::money::Amount;
use crate::state::{Shop, ShopError};

/// tokio's Mutex: handlers never hold it across I/O, and it cannot be poisoned,
/// so no handler has to decide what a panicked lock means.
type AppState = Arc<Mutex<Shop>>;

/// The HTTP routes, and the same actions as MCP tools at `/mcp` (`mcp_sse`: answer those
/// with `text/event-stream` when the client accepts it).
pub fn router(shop: Shop, mcp_sse: bool) -> Router {
    let state: AppState = Arc::new(Mutex::new(shop));
    Router::new()
        .route("/orders/{order_id}", get(get_order))
        .route("/orders/{order_id}/items/{item_id}", get(get_item))
        .route("/orders/{order_id}/exchanges", post(create_exchange))
        .route("/orders/{order_id}/cancel", post(cancel_order))
        .route("/catalog/{sku}", get(get_product))
        .route("/stats", get(get_stats))
        .route("/.well-known/poppy.json", get(well_known))
        .with_state(Arc::clone(&state))
        .merge(crate::mcp::router(state, mcp_sse))
        .fallback(not_found)
        .layer(middleware::from_fn(log_request))
}

/// An error answer: status plus the JSON body every endpoint uses.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    error: &'static str,
    detail: String,
}

impl ApiError {
    fn bad_request(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            error: "bad_request",
            detail: detail.into(),
        }
    }
}

impl From<ShopError> for ApiError {
    fn from(err: ShopError) -> Self {
        match err {
            ShopError::NotFound(detail) => Self {
                status: StatusCode::NOT_FOUND,
                error: "not_found",
                detail,
            },
            ShopError::Conflict(detail) => Self {
                status: StatusCode::CONFLICT,
                error: "conflict",
                detail,
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.error, "detail": self.detail }));
        (self.status, body).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// Parses a JSON body by hand rather than with axum's `Json` extractor, whose
/// rejections are plain text; a legacy API also rarely insists on Content-Type.
fn parse_json<T: DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

async fn get_order(
    State(shop): State<AppState>,
    Path(order_id): Path<String>,
) -> ApiResult<Response> {
    let shop = shop.lock().await;
    let order = shop.order(&order_id)?;
    Ok(Json(order).into_response())
}

/// What the customer paid for one item: the gateway's exchange policy reads it to state the
/// price difference an exchange charges (new price minus this one, as `Shop::exchange` does).
async fn get_item(
    State(shop): State<AppState>,
    Path((order_id, item_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let shop = shop.lock().await;
    let item = shop.item(&order_id, &item_id)?;
    let body = json!({
        "order_id": order_id,
        "item_id": item.item_id,
        "sku": item.sku,
        "name": item.name,
        "price": Amount::from_cents(item.price_cents),
    });
    Ok(Json(body).into_response())
}

#[derive(Debug, Deserialize)]
struct ExchangeRequest {
    item_id: String,
    replacement_sku: String,
}

async fn create_exchange(
    State(shop): State<AppState>,
    Path(order_id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let req: ExchangeRequest = parse_json(&body)?;
    let exchange = shop
        .lock()
        .await
        .exchange(&order_id, &req.item_id, &req.replacement_sku)?;
    // On stderr, so the demo shows each time the legacy API really acted.
    eprintln!(
        "shop: performed exchange {} on {}: {} {} -> {} ({} {})",
        exchange.exchange_id,
        exchange.order_id,
        exchange.item_id,
        exchange.from_sku,
        exchange.to_sku,
        exchange.price_difference.amount,
        exchange.price_difference.currency,
    );
    Ok((StatusCode::CREATED, Json(exchange)).into_response())
}

#[derive(Debug, Deserialize)]
struct CancelRequest {
    reason: Option<String>,
}

async fn cancel_order(
    State(shop): State<AppState>,
    Path(order_id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    // The body is optional: an empty one means "no reason given".
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        parse_json::<CancelRequest>(&body)?.reason
    };
    let mut shop = shop.lock().await;
    let order = shop.cancel(&order_id)?;
    eprintln!(
        "shop: performed cancellation of {} (reason: {})",
        order.id,
        reason.as_deref().unwrap_or("none given"),
    );
    Ok(Json(json!({ "order_id": order.id, "status": order.status })).into_response())
}

async fn get_product(State(shop): State<AppState>, Path(sku): Path<String>) -> ApiResult<Response> {
    let shop = shop.lock().await;
    let product = shop.product(&sku)?;
    let body = json!({
        "sku": sku,
        "name": product.name,
        "price": Amount::from_cents(product.price_cents),
    });
    Ok(Json(body).into_response())
}

async fn get_stats(State(shop): State<AppState>) -> Json<Value> {
    Json(json!(shop.lock().await.stats()))
}

/// The shop's own discovery document. It lists no extensions: the gateway
/// merges `extensions.operations` into it on the way out.
async fn well_known() -> Json<Value> {
    Json(json!({
        "name": "Stormline Outfitters",
        "version": "0.4",
        "extensions": {},
    }))
}

async fn not_found(req: Request) -> ApiError {
    ShopError::NotFound(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
    .into()
}

/// One stderr line per request, so it is plain in the demo what reached the
/// legacy API and what the gateway answered by itself.
async fn log_request(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let response = next.run(req).await;
    eprintln!("shop: {method} {path} -> {}", response.status().as_u16());
    response
}
