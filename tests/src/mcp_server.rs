//! A real MCP server (Streamable HTTP, at `/mcp`) that counts the tool calls it executes: the
//! "existing MCP server" behind the gateway.
//!
//! - `initialize` answers with a new `Mcp-Session-Id`; every other POST must carry one it
//!   issued (400 without, 404 for an unknown one), so a test sees that the gateway passes it
//!   on. Notifications and responses get `202`. `GET /mcp` is `405` (no standalone stream);
//!   `DELETE /mcp` ends the session.
//! - Tools: `exchange_item`, `cancel_order` and `lookup_order`. Every `tools/call` of a known
//!   tool is an execution: recorded and numbered (1-based, arrival order) *before* the gate,
//!   so a call held at the gate already counts. Its result is
//!   `{"content": [{"type": "text", "text": "<tool> #N"}], "structuredContent": {"execution": N,
//!   "tool": …, "arguments": …}}`.
//! - Answers are `application/json`, or `text/event-stream` in [`AnswerMode::Sse`]: then a
//!   tools/call answer is a progress notification event (sent at once), then the result event
//!   (after the gate).
//! - A batch (JSON array) is answered with an array of the answers to its requests.

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::served::Served;

/// How long the gate holds a call at most, so a forgotten `release` cannot hang a run.
const MAX_HOLD: Duration = Duration::from_secs(60);

/// The tools this server has.
pub const TOOLS: [&str; 3] = ["exchange_item", "cancel_order", "lookup_order"];

/// How the server answers requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerMode {
    Json,
    Sse,
}

/// One POST the server received (any JSON-RPC message, executed or not).
#[derive(Debug, Clone)]
pub struct McpRequest {
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl McpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `method` of the message (or of the first message of a batch).
    pub fn method(&self) -> Option<&str> {
        let message = match &self.body {
            Value::Array(items) => items.first()?,
            other => other,
        };
        message.get("method")?.as_str()
    }
}

/// One tool call the server executed.
#[derive(Debug, Clone)]
pub struct Execution {
    pub execution: usize,
    pub tool: String,
    pub arguments: Value,
    /// The whole `params` as received (to check what `_meta` reached the server).
    pub params: Value,
}

struct Shared {
    mode: Mutex<AnswerMode>,
    posts: Mutex<Vec<McpRequest>>,
    executions: Mutex<Vec<Execution>>,
    count: watch::Sender<usize>,
    /// `true` = open.
    gate: watch::Sender<bool>,
    sessions: Mutex<Vec<String>>,
    next_session: AtomicUsize,
    other_requests: Mutex<Vec<(String, Option<String>)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// The MCP server; stops on drop.
pub struct McpServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Stops the server when this is dropped (after `release`).
    _served: Served,
}

impl McpServer {
    /// Start on a free port, in a thread with its own runtime.
    pub fn start(mode: AnswerMode) -> McpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the MCP server");
        listener
            .set_nonblocking(true)
            .expect("non-blocking MCP listener");
        let addr = listener.local_addr().expect("MCP server address");
        let shared = Arc::new(Shared {
            mode: Mutex::new(mode),
            posts: Mutex::new(Vec::new()),
            executions: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
            gate: watch::Sender::new(true),
            sessions: Mutex::new(Vec::new()),
            next_session: AtomicUsize::new(1),
            other_requests: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared))
            .layer(DefaultBodyLimit::disable());
        let served = Served::app(format!("MCP server {}", addr.port()), listener, app);
        McpServer {
            addr,
            shared,
            _served: served,
        }
    }

    /// `http://127.0.0.1:PORT` (the endpoint is `/mcp`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_mode(&self, mode: AnswerMode) {
        *lock(&self.shared.mode) = mode;
    }

    /// Tool calls executed so far, in order.
    pub fn executions(&self) -> Vec<Execution> {
        lock(&self.shared.executions).clone()
    }

    /// Executions of `tool`.
    pub fn executions_of(&self, tool: &str) -> usize {
        lock(&self.shared.executions)
            .iter()
            .filter(|e| e.tool == tool)
            .count()
    }

    /// Every POST received, in order.
    pub fn posts(&self) -> Vec<McpRequest> {
        lock(&self.shared.posts).clone()
    }

    /// Non-POST requests to `/mcp`: method and `Mcp-Session-Id`.
    pub fn other_requests(&self) -> Vec<(String, Option<String>)> {
        lock(&self.shared.other_requests).clone()
    }

    /// Assert exactly `n` tool executions so far.
    pub fn assert_executions(&self, n: usize, context: &str) {
        let executions = self.executions();
        assert_eq!(
            executions.len(),
            n,
            "{context}: the MCP server should have executed {n} tool call(s), it executed {}: {:?}",
            executions.len(),
            executions
                .iter()
                .map(|e| format!("#{} {} {}", e.execution, e.tool, e.arguments))
                .collect::<Vec<_>>()
        );
    }

    /// Close the gate: tool calls are recorded on arrival, then wait for [`McpServer::release`]
    /// (at most 60 s) before they are answered.
    pub fn hold(&self) {
        self.shared.gate.send_replace(false);
    }

    pub fn release(&self) {
        self.shared.gate.send_replace(true);
    }

    /// Wait until at least `n` tool calls have arrived; panics after `timeout`.
    pub async fn wait_for_executions(&self, n: usize, timeout: Duration) {
        let mut count = self.shared.count.subscribe();
        let reached = tokio::time::timeout(timeout, count.wait_for(|c| *c >= n)).await;
        if !matches!(reached, Ok(Ok(_))) {
            panic!(
                "the MCP server executed {} tool calls, expected at least {n} within {timeout:?}",
                self.executions().len()
            );
        }
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        // Held calls go first; the server stops as `_served` drops.
        self.release();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if uri.path() != "/mcp" {
        return (StatusCode::NOT_FOUND, "no such endpoint").into_response();
    }
    let session = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if method != Method::POST {
        lock(&shared.other_requests).push((method.to_string(), session.clone()));
        return match method {
            Method::DELETE => {
                lock(&shared.sessions).retain(|s| Some(s) != session.as_ref());
                StatusCode::OK.into_response()
            }
            _ => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        };
    }
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return json_answer(
            StatusCode::BAD_REQUEST,
            &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}),
            None,
        );
    };
    lock(&shared.posts).push(McpRequest {
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: message.clone(),
    });
    let initializing = message.get("method").and_then(Value::as_str) == Some("initialize");
    if !initializing {
        match &session {
            None => {
                return (StatusCode::BAD_REQUEST, "Mcp-Session-Id is required").into_response();
            }
            Some(id) if !lock(&shared.sessions).contains(id) => {
                return (StatusCode::NOT_FOUND, "unknown session").into_response();
            }
            Some(_) => {}
        }
    }
    let mode = *lock(&shared.mode);
    match message {
        Value::Array(items) => {
            let mut answers = Vec::new();
            for item in &items {
                if item.get("id").is_some() && item.get("method").is_some() {
                    answers.push(answer(&shared, item).await.1);
                }
            }
            if answers.is_empty() {
                return StatusCode::ACCEPTED.into_response();
            }
            json_answer(StatusCode::OK, &Value::Array(answers), None)
        }
        message if message.get("id").is_none() || message.get("method").is_none() => {
            // A notification, or a response to a request of ours.
            StatusCode::ACCEPTED.into_response()
        }
        message => {
            let new_session = initializing.then(|| {
                let id = format!(
                    "mcp-session-{}",
                    shared.next_session.fetch_add(1, Ordering::SeqCst)
                );
                lock(&shared.sessions).push(id.clone());
                id
            });
            match mode {
                AnswerMode::Json => {
                    let (_, response) = answer(&shared, &message).await;
                    json_answer(StatusCode::OK, &response, new_session.as_deref())
                }
                AnswerMode::Sse => sse_answer(Arc::clone(&shared), message, new_session),
            }
        }
    }
}

/// Execute one request; `(was a tool execution, the JSON-RPC response)`.
async fn answer(shared: &Shared, message: &Value) -> (bool, Value) {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let result = match message.get("method").and_then(Value::as_str) {
        Some("initialize") => json!({
            "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!("2025-06-18")),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "counting-mcp", "version": "1.0.0"},
        }),
        Some("ping") => json!({}),
        Some("tools/list") => json!({"tools": TOOLS.iter().map(|name| json!({
            "name": name,
            "description": format!("The {name} tool"),
            "inputSchema": {"type": "object"},
        })).collect::<Vec<_>>()}),
        Some("tools/call") => {
            let tool = params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if !TOOLS.contains(&tool.as_str()) {
                return (
                    false,
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": format!("no tool {tool}")}}),
                );
            }
            let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
            let execution = {
                let mut executions = lock(&shared.executions);
                let execution = executions.len() + 1;
                executions.push(Execution {
                    execution,
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                    params: params.clone(),
                });
                shared.count.send_replace(execution);
                execution
            };
            let mut gate = shared.gate.subscribe();
            let _ = tokio::time::timeout(MAX_HOLD, gate.wait_for(|open| *open)).await;
            return (
                true,
                json!({"jsonrpc": "2.0", "id": id, "result": {
                    "content": [{"type": "text", "text": format!("{tool} #{execution}")}],
                    "structuredContent": {"execution": execution, "tool": tool, "arguments": arguments},
                }}),
            );
        }
        other => {
            return (
                false,
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no method {other:?}")}}),
            );
        }
    };
    (false, json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn json_answer(status: StatusCode, body: &Value, session: Option<&str>) -> Response {
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(session) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
        headers.insert("mcp-session-id", session);
    }
    response
}

/// A progress notification at once (for tool calls), then the answer once it is ready.
fn sse_answer(shared: Arc<Shared>, message: Value, session: Option<String>) -> Response {
    let is_call = message.get("method").and_then(Value::as_str) == Some("tools/call");
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(4);
    tokio::spawn(async move {
        if is_call {
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                  "params": {"progressToken": "p", "progress": 0}});
            let _ = tx
                .send(Ok(Bytes::from(format!(
                    "event: message\ndata: {progress}\n\n"
                ))))
                .await;
        }
        let (_, response) = answer(&shared, &message).await;
        let _ = tx
            .send(Ok(Bytes::from(format!(
                "event: message\nid: ev-1\ndata: {response}\n\n"
            ))))
            .await;
    });
    let stream = tokio_stream_from(rx);
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Some(session) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        headers.insert("mcp-session-id", session);
    }
    response
}

/// A receiver as a stream, without another dependency.
fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, Infallible>>,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
