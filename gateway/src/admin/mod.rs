//! The admin listener: `/healthz`, `/readyz`, `/readyz/store`, `/metrics`, the operations
//! API, and `POST /reload` (the SIGHUP reload, for images without `kill`). What each probe
//! means, and which to use where: docs/operations.md, "Probes".

mod operations;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::json;

use crate::clock::now_millis;
use crate::drain::Drain;
use crate::metrics::{Format, Metrics};
use crate::policy::LivePolicies;
use crate::receipts::ReceiptSink;
use crate::reload::PolicyReloader;
use crate::store::{DurabilityCheck, OperationStore};

/// The largest request body the admin API reads (a resolve carries a recorded answer).
const MAX_ADMIN_BODY: usize = 16 * 1024 * 1024;

pub(crate) struct AdminApp {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) store: Arc<dyn OperationStore>,
    /// `POPPY_GATEWAY_ADMIN_TOKEN`; the operations API is off without it.
    pub(crate) token: Option<String>,
    /// The policies in force, for how long a resolved operation must be remembered.
    pub(crate) policies: LivePolicies,
    /// `[store] remember_grace`.
    pub(crate) remember_grace: Duration,
    /// Redis durability, checked again on every `/readyz/store`.
    pub(crate) durability: Arc<DurabilityCheck>,
    /// `[receipts]`: resolutions write one; `GET /operations/{id}/receipt` reads a file.
    pub(crate) receipts: Option<Arc<ReceiptSink>>,
    /// Says when a stop signal has arrived: `/readyz` is 503 from then on.
    pub(crate) drain: Arc<Drain>,
    /// What SIGHUP runs; `POST /reload` runs it too.
    pub(crate) reloader: Arc<PolicyReloader>,
}

#[async_trait]
impl ServeHttp for AdminApp {
    /// Route the admin endpoints; everything else is 404.
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        let header = session.req_header();
        let path = header.uri.path().to_owned();
        let query = header.uri.query().unwrap_or_default().to_owned();
        let method = header.method.clone();
        let authorization = header
            .headers
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes().to_vec());
        // Prometheus asks for OpenMetrics, which carries the exemplars.
        let format = Format::negotiate(
            header
                .headers
                .get(http::header::ACCEPT)
                .map(|v| v.as_bytes()),
        );
        match (method.as_str(), path.as_str()) {
            (_, "/healthz") => text(200, "text/plain; charset=utf-8", b"ok\n".to_vec()),
            // Readiness is this replica's own: draining takes it out of rotation; a store
            // outage does not, since every replica shares the store and passthrough traffic is
            // still served (the store's own signal is `/readyz/store`).
            (_, "/readyz") if self.drain.is_draining() => text(
                503,
                "text/plain; charset=utf-8",
                b"not ready: draining (a stop signal arrived)\n".to_vec(),
            ),
            (_, "/readyz") => text(200, "text/plain; charset=utf-8", b"ready\n".to_vec()),
            (_, "/readyz/store") => match self.store_ready().await {
                Ok(()) => text(200, "text/plain; charset=utf-8", b"store ready\n".to_vec()),
                Err(e) => text(
                    503,
                    "text/plain; charset=utf-8",
                    format!("store not ready: {e}\n").into_bytes(),
                ),
            },
            (_, "/metrics") => {
                // The gauge is the store's count, whichever gateway saw the operation: it
                // stays up until an operator resolves every unknown operation.
                match self.store.unknown_count(now_millis()).await {
                    Ok(count) => self.metrics.operations_unknown(count),
                    Err(e) => tracing::debug!(error = %e, "cannot count unknown operations"),
                }
                match self.metrics.encode(format) {
                    Ok(page) => text(200, format.content_type(), page),
                    // A collector refused to encode (none does for well-formed families).
                    Err(_) => text(
                        500,
                        "text/plain; charset=utf-8",
                        b"metrics could not be encoded\n".to_vec(),
                    ),
                }
            }
            (_, "/reload") => {
                let (status, body) =
                    match operations::authorized(self.token.as_deref(), authorization.as_deref()) {
                        Err(answer) => answer,
                        Ok(()) if method == http::Method::POST => self.reload().await,
                        Ok(()) => (
                            405,
                            json!({"error": "method_not_allowed", "detail": "POST /reload"}),
                        ),
                    };
                json_answer(status, &body)
            }
            (_, "/operations") => {
                let (status, body) =
                    match operations::authorized(self.token.as_deref(), authorization.as_deref()) {
                        Err(answer) => answer,
                        Ok(()) if method == http::Method::GET => {
                            operations::list(self.store.as_ref(), &query).await
                        }
                        Ok(()) => (
                            405,
                            json!({"error": "method_not_allowed", "detail": "GET /operations?state=unknown or ?state=in_flight"}),
                        ),
                    };
                json_answer(status, &body)
            }
            (_, operation) if operation.starts_with("/operations/") => {
                let (status, body) =
                    match operations::authorized(self.token.as_deref(), authorization.as_deref()) {
                        Err(answer) => answer,
                        Ok(()) => {
                            self.operations(session, &method, &path["/operations/".len()..])
                                .await
                        }
                    };
                json_answer(status, &body)
            }
            _ => text(
                404,
                "text/plain; charset=utf-8",
                b"not found: try /healthz, /readyz, /readyz/store, /metrics, /operations?state=unknown, /operations/{id} or POST /reload\n".to_vec(),
            ),
        }
    }
}

impl AdminApp {
    /// How long a resolution is remembered: a day at least, and as long as any revision minted
    /// under the policies in force could still be approved, plus the grace (check 3 refuses
    /// revisions longer-lived than their policy allows now, see operation/remember.rs).
    fn remember_for(&self) -> Duration {
        let longest = self
            .policies
            .snapshot()
            .iter()
            .map(|policy| policy.expires_in)
            .max()
            .unwrap_or_default();
        (longest + Duration::from_secs(1) + self.remember_grace).max(Duration::from_secs(86_400))
    }

    /// `POST /reload`: 200 with the policies now in force, or 422 with every problem (the
    /// running policies are kept).
    async fn reload(&self) -> operations::Answer {
        match self.reloader.reload_and_log("POST /reload").await {
            Ok(reloaded) => (
                200,
                json!({
                    "reloaded": true,
                    "policies": reloaded.policies,
                    "restart_needed_for": reloaded.restart_needed_for,
                }),
            ),
            Err(problems) => (
                422,
                json!({
                    "error": "reload_failed",
                    "detail": format!("{} problem(s); the running policies are kept", problems.len()),
                    "problems": problems,
                }),
            ),
        }
    }

    /// The store answers, and (Redis) is as durable as the configuration requires.
    async fn store_ready(&self) -> Result<(), String> {
        self.store.ping().await.map_err(|e| e.to_string())?;
        self.durability
            .run(self.store.as_ref())
            .await
            .map_err(|e| e.to_string())
    }

    async fn operations(
        &self,
        session: &mut ServerSession,
        method: &http::Method,
        rest: &str,
    ) -> operations::Answer {
        match (method.as_str(), rest.split_once('/')) {
            ("GET", None) => operations::show(self.store.as_ref(), rest).await,
            ("POST", Some((id, "resolve"))) => match read_body(session).await {
                Ok(body) => {
                    operations::resolve(
                        self.store.as_ref(),
                        id,
                        &body,
                        self.remember_for(),
                        self.receipts.as_deref(),
                    )
                    .await
                }
                Err(answer) => answer,
            },
            ("GET", Some((id, "receipt"))) => operations::receipt(self.receipts.as_deref(), id),
            _ => (
                405,
                json!({"error": "method_not_allowed", "detail": "GET /operations/{id}, GET /operations/{id}/receipt or POST /operations/{id}/resolve"}),
            ),
        }
    }
}

async fn read_body(session: &mut ServerSession) -> Result<Vec<u8>, operations::Answer> {
    let mut body = Vec::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_ADMIN_BODY {
                    return Err((
                        413,
                        json!({"error": "body_too_large", "detail": format!("at most {MAX_ADMIN_BODY} bytes")}),
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => {
                return Err((
                    400,
                    json!({"error": "bad_request", "detail": format!("cannot read the body: {e}")}),
                ));
            }
        }
    }
}

/// A JSON answer of the operations API or `/reload`, one line.
fn json_answer(status: u16, body: &serde_json::Value) -> http::Response<Vec<u8>> {
    let mut bytes = body.to_string().into_bytes();
    bytes.push(b'\n');
    text(status, "application/json", bytes)
}

fn text(status: u16, content_type: &str, body: Vec<u8>) -> http::Response<Vec<u8>> {
    let mut response = http::Response::new(body);
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(value) = http::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    let length = response.body().len();
    response.headers_mut().insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(length),
    );
    response
}
