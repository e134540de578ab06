//! The admin listener: `/healthz`, `/readyz` and `/metrics`.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::metrics::Metrics;
use crate::store::OperationStore;

pub struct AdminApp {
    pub metrics: Arc<Metrics>,
    pub store: Arc<dyn OperationStore>,
}

#[async_trait]
impl ServeHttp for AdminApp {
    /// Route the few admin endpoints; everything else is 404.
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        let path = session.req_header().uri.path().to_owned();
        match path.as_str() {
            "/healthz" => text(200, "text/plain; charset=utf-8", b"ok\n".to_vec()),
            "/readyz" => match self.store.ping().await {
                Ok(()) => text(200, "text/plain; charset=utf-8", b"ready\n".to_vec()),
                Err(e) => text(
                    503,
                    "text/plain; charset=utf-8",
                    format!("not ready: {e}\n").into_bytes(),
                ),
            },
            "/metrics" => text(200, "text/plain; version=0.0.4", self.metrics.render()),
            _ => text(
                404,
                "text/plain; charset=utf-8",
                b"not found: try /healthz, /readyz or /metrics\n".to_vec(),
            ),
        }
    }
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
