//! An OAuth authorization server's RFC 7662 introspection endpoint on a free loopback port,
//! counting every call: what a gateway with `[session.token] introspection_url` asks about
//! opaque access tokens. `POST /introspect` (HTTP Basic `gateway` / `secret`, form `token`)
//! answers what the test issued for that token, and `{"active": false}` for any other.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use crate::served::Served;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine as _;
use serde_json::{Value, json};

/// The gateway's client at the endpoint.
pub const CLIENT_ID: &str = "gateway";
pub const CLIENT_SECRET: &str = "secret";

#[derive(Default)]
struct Shared {
    /// Each token's introspection answer.
    issued: Mutex<HashMap<String, Value>>,
    /// Calls, by the token asked about.
    calls: Mutex<HashMap<String, usize>>,
}

/// A running introspection endpoint.
pub struct AuthServer {
    base: String,
    shared: Arc<Shared>,
    /// Stops the server when this is dropped.
    _served: Served,
}

impl AuthServer {
    pub fn start() -> AuthServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the auth server");
        listener
            .set_nonblocking(true)
            .expect("non-blocking auth server listener");
        let addr = listener.local_addr().expect("the auth server's address");
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/introspect", post(introspect))
            .with_state(Arc::clone(&shared));
        let served = Served::start(
            format!("auth server {}", addr.port()),
            2,
            listener,
            move |listener| axum::serve(listener, app).into_future(),
        );
        AuthServer {
            base: format!("http://{addr}"),
            shared,
            _served: served,
        }
    }

    pub fn introspection_url(&self) -> String {
        format!("{}/introspect", self.base)
    }

    /// Answer `answer` to introspection of `token` from now on.
    pub fn issue(&self, token: &str, answer: Value) {
        lock(&self.shared.issued).insert(token.to_owned(), answer);
    }

    /// Calls so far, for any token.
    pub fn calls(&self) -> usize {
        lock(&self.shared.calls).values().sum()
    }

    /// Calls so far about `token`.
    pub fn calls_for(&self, token: &str) -> usize {
        lock(&self.shared.calls).get(token).copied().unwrap_or(0)
    }

    /// The `[session.token]` table of a gateway introspecting here, with `extra` lines.
    pub fn token_table(&self, extra: &str) -> String {
        format!(
            "\n[session.token]\nintrospection_url = \"{}\"\nclient_id = \"{CLIENT_ID}\"\nclient_secret = \"{CLIENT_SECRET}\"\n{extra}",
            self.introspection_url()
        )
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

async fn introspect(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}"))
    );
    if headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        != Some(&expected)
    {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    let Some(token) = form.get("token") else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_request"})),
        )
            .into_response();
    };
    *lock(&shared.calls).entry(token.clone()).or_default() += 1;
    let answer = lock(&shared.issued)
        .get(token)
        .cloned()
        .unwrap_or_else(|| json!({"active": false}));
    Json(answer).into_response()
}
