//! The minimal conversation endpoint (see main.rs). Every error is JSON
//! `{"error", "detail"}`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::agent::Company;
use crate::conversation::{Credentials, Received, SessionRequest};
use crate::session::{self, Binding};

/// The longest a `GET …/events` waits for a message.
const MAX_WAIT: Duration = Duration::from_secs(30);

type App = Arc<Company>;

pub fn router(app: App) -> Router {
    Router::new()
        .route("/conversations", post(open))
        .route("/conversations/{id}/messages", post(message))
        .route("/conversations/{id}/events", get(events))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .with_state(app)
}

fn error(status: StatusCode, code: &str, detail: &str) -> Response {
    (status, Json(json!({"error": code, "detail": detail}))).into_response()
}

/// A refused request: status, `error`, `detail`.
struct Refused(StatusCode, &'static str, &'static str);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        error(self.0, self.1, self.2)
    }
}

/// The Personal Agent's credentials and declaration, from its request's headers, and the
/// Session they name.
fn credentials(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(Binding, Credentials), Refused> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let Some(poppy_session) = header("poppy-session").filter(|s| !s.is_empty()) else {
        return Err(Refused(
            StatusCode::UNAUTHORIZED,
            "invalid_session",
            "send the Poppy-Session header",
        ));
    };
    let Some(binding) = session::binding(&poppy_session) else {
        return Err(Refused(
            StatusCode::UNAUTHORIZED,
            "invalid_session",
            "the Poppy-Session is not a JWT with `iss` and `sid` claims",
        ));
    };
    let poppy_extensions = header("poppy-extensions").unwrap_or_default();
    // This Company handles approvals only through the extension (spec 2): a Personal Agent
    // that doesn't declare it gets no operations, so it is refused here.
    let declared = poppy_extensions.split(',').any(|member| {
        let member: String = member.chars().filter(|c| !c.is_whitespace()).collect();
        member.starts_with("\"operations\"") && member.contains(";v=\"2\"")
    });
    if !declared {
        return Err(Refused(
            StatusCode::BAD_REQUEST,
            "extension_required",
            "this Company asks for approvals with the operations extension: declare Poppy-Extensions: \"operations\";v=\"2\"",
        ));
    }
    let credentials = Credentials {
        poppy_session,
        authorization: header("authorization"),
        poppy_extensions,
        // The path as it came on the request line: the one the Session JWT was signed for.
        session_request: SessionRequest {
            method: method.as_str().to_owned(),
            path: uri.path().to_owned(),
        },
    };
    Ok((binding, credentials))
}

async fn open(State(app): State<App>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let (binding, credentials) = match credentials(&method, &uri, &headers) {
        Ok(read) => read,
        Err(refused) => return refused.into_response(),
    };
    let id = app.conversations.open(binding, credentials);
    eprintln!("company: opened {id}");
    (StatusCode::CREATED, Json(json!({ "conversation_id": id }))).into_response()
}

/// The characters of spec 8.2's IDs.
fn is_id(text: &str) -> bool {
    (1..=128).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

async fn message(
    State(app): State<App>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (binding, credentials) = match credentials(&method, &uri, &headers) {
        Ok(read) => read,
        Err(refused) => return refused.into_response(),
    };
    // The Session, not the JWT: the Personal Agent signs a new one for every message.
    match app.conversations.binding_of(&id) {
        None => return error(StatusCode::NOT_FOUND, "not_found", "no such conversation"),
        Some(owner) if owner != binding => {
            return error(
                StatusCode::FORBIDDEN,
                "not_your_conversation",
                "this conversation belongs to another Session",
            );
        }
        Some(_) => {}
    }
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_message",
            "the body is not JSON",
        );
    };
    let Some(message_id) = message["id"].as_str().filter(|id| is_id(id)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_message",
            "a message needs an `id` of A-Z a-z 0-9 _ -",
        );
    };
    match app.conversations.receive(&id, message_id, credentials) {
        None => error(StatusCode::NOT_FOUND, "not_found", "no such conversation"),
        Some(Received::Again(answer)) => (StatusCode::ACCEPTED, Json(answer)).into_response(),
        Some(Received::New(answer)) => {
            tokio::spawn(Arc::clone(&app).handle(id, message));
            (StatusCode::ACCEPTED, Json(answer)).into_response()
        }
    }
}

#[derive(Deserialize)]
struct EventsQuery {
    after: Option<String>,
    wait: Option<u64>,
}

async fn events(
    State(app): State<App>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<EventsQuery>,
) -> Response {
    let (binding, credentials) = match credentials(&method, &uri, &headers) {
        Ok(read) => read,
        Err(refused) => return refused.into_response(),
    };
    if app.conversations.binding_of(&id).as_ref() != Some(&binding) {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such conversation for this Session",
        );
    }
    // The Personal Agent polls while an exchange is performed: its latest Session is the
    // one that is still valid when the service is asked again.
    app.conversations.refresh(&id, credentials);
    let wait = Duration::from_secs(query.wait.unwrap_or(0)).min(MAX_WAIT);
    match app
        .conversations
        .events_after(&id, query.after.as_deref(), wait)
        .await
    {
        Some(events) => Json(json!({ "events": events })).into_response(),
        None => error(StatusCode::NOT_FOUND, "not_found", "no such conversation"),
    }
}
