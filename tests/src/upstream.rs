//! A real HTTP upstream that counts what it executes: the "legacy API" behind the gateway.
//!
//! Every request except `GET /.well-known/poppy.json` is an execution: it is recorded and
//! numbered (1-based, in arrival order) *before* the response is produced, so a request held at
//! the gate already counts. Responses are JSON `{"execution": N, "method": M, "path": P}`,
//! status 201 for POST and 200 otherwise (or `CODE` for a path `/status/CODE`), with header
//! `x-upstream: counting`; a path given an answer with [`Upstream::answer_json`] is answered
//! that JSON with 200 instead (a record or a quote a policy's lookup reads), and still counted;
//! a path given [`Upstream::answer_posts`] is answered `{"posts": N}`, the POSTs executed so
//! far (a record the action itself changes).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::served::Served;

/// How long the gate holds a request at most, so a forgotten `release` cannot hang a run.
const MAX_HOLD: Duration = Duration::from_secs(60);

/// One request the upstream executed.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// 1-based execution number.
    pub execution: usize,
    pub method: String,
    pub path: String,
    /// Path and query, as received.
    pub path_and_query: String,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn body_json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "upstream request body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

struct Shared {
    requests: Mutex<Vec<RecordedRequest>>,
    count: watch::Sender<usize>,
    /// `true` = open.
    gate: watch::Sender<bool>,
    delay: Mutex<Duration>,
    /// Answers by path, for any method: JSON text, as sent.
    answers: Mutex<HashMap<String, String>>,
    /// Paths answered with the count of POSTs executed so far.
    posts_at: Mutex<Vec<String>>,
    well_known_hits: AtomicUsize,
    /// Requests being answered now, and the most at once.
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
}

/// Counts a request in flight until dropped.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn new(shared: &Arc<Shared>) -> InFlight {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(Arc::clone(shared))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shared {
    fn requests(&self) -> MutexGuard<'_, Vec<RecordedRequest>> {
        self.requests
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// The counting upstream; stops on drop.
pub struct Upstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Stops the server when the upstream is dropped (after `release`).
    _served: Served,
}

/// The document served at `/.well-known/poppy.json`.
pub fn well_known_document() -> Value {
    json!({
        "name": "Counting Co",
        "version": "0.4",
        "extensions": { "other": [ { "version": "1" } ] }
    })
}

impl Upstream {
    /// Start on a free port, in a thread of its own (its own tokio runtime), so it serves
    /// whatever the test's runtime is doing.
    pub fn start() -> Upstream {
        Upstream::start_on("127.0.0.1:0".parse().expect("an address"))
    }

    /// Start on a given address (e.g. one a gateway was configured with while nothing
    /// listened there).
    pub fn start_on(addr: SocketAddr) -> Upstream {
        let listener =
            TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind the upstream on {addr}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("non-blocking upstream listener");
        let addr = listener.local_addr().expect("upstream address");
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
            gate: watch::Sender::new(true),
            delay: Mutex::new(Duration::ZERO),
            answers: Mutex::new(HashMap::new()),
            posts_at: Mutex::new(Vec::new()),
            well_known_hits: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared))
            .layer(DefaultBodyLimit::disable());
        let served = Served::app(format!("counting upstream {}", addr.port()), listener, app);
        Upstream {
            addr,
            shared,
            _served: served,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Executions so far (every request but `/.well-known/poppy.json`).
    pub fn count(&self) -> usize {
        self.shared.requests().len()
    }

    /// Executions of `method` on `path` (compared with the path alone, or with path and query
    /// when `path` has a `?`).
    pub fn count_for(&self, method: &str, path: &str) -> usize {
        self.shared
            .requests()
            .iter()
            .filter(|r| {
                r.method.eq_ignore_ascii_case(method)
                    && if path.contains('?') {
                        r.path_and_query == path
                    } else {
                        r.path == path
                    }
            })
            .count()
    }

    /// Every execution so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests().clone()
    }

    /// The value of header `name` in the last request that carried it (such as the
    /// `Poppy-Session` JWT a re-signing agent sent last).
    pub fn last_header(&self, name: &str) -> Option<String> {
        self.requests()
            .iter()
            .rev()
            .find_map(|r| r.header(name).map(str::to_owned))
    }

    /// How often `/.well-known/poppy.json` was fetched.
    pub fn well_known_hits(&self) -> usize {
        self.shared.well_known_hits.load(Ordering::SeqCst)
    }

    /// The most requests (but `/.well-known/poppy.json`) that were being answered at once.
    pub fn peak_in_flight(&self) -> usize {
        self.shared.peak_in_flight.load(Ordering::SeqCst)
    }

    /// Close the gate: from now on, requests are recorded (and counted) on arrival, then wait
    /// until [`Upstream::release`] (at most 60 s) before they are answered.
    pub fn hold(&self) {
        self.shared.gate.send_replace(false);
    }

    /// Open the gate: every held request is answered, and new ones are not held.
    pub fn release(&self) {
        self.shared.gate.send_replace(true);
    }

    /// Delay every answer by `delay` (after the gate).
    pub fn set_delay(&self, delay: Duration) {
        *self
            .shared
            .delay
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = delay;
    }

    /// From now on, answer every request to `path` (any method, any query) with `answer`
    /// (status 200); the requests are still recorded and counted.
    pub fn answer_json(&self, path: &str, answer: Value) {
        self.answer_json_text(path, &answer.to_string());
    }

    /// [`Upstream::answer_json`] with JSON text sent byte for byte (a member twice, say).
    pub fn answer_json_text(&self, path: &str, text: &str) {
        self.shared
            .answers
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .insert(path.to_owned(), text.to_owned());
    }

    /// From now on, answer every request to `path` with `{"posts": N}`, N the POSTs executed
    /// so far (status 200): a record that each performed action changes, for a policy's lookup
    /// to read. The requests are still recorded and counted.
    pub fn answer_posts(&self, path: &str) {
        self.shared
            .posts_at
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .push(path.to_owned());
    }

    /// Wait until at least `n` executions have arrived; panics after `timeout`.
    pub async fn wait_for_count(&self, n: usize, timeout: Duration) {
        let mut count = self.shared.count.subscribe();
        let reached = tokio::time::timeout(timeout, count.wait_for(|c| *c >= n)).await;
        if !matches!(reached, Ok(Ok(_))) {
            panic!(
                "the upstream saw {} executions, expected at least {n} within {timeout:?}",
                self.count()
            );
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        // Held requests go first; the server stops as `_served` drops.
        self.release();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if uri.path() == "/.well-known/poppy.json" {
        shared.well_known_hits.fetch_add(1, Ordering::SeqCst);
        let mut response = axum::Json(well_known_document()).into_response();
        response
            .headers_mut()
            .insert("x-upstream", HeaderValue::from_static("counting"));
        return response;
    }
    let _in_flight = InFlight::new(&shared);
    let execution = {
        let mut requests = shared.requests();
        let execution = requests.len() + 1;
        requests.push(RecordedRequest {
            execution,
            method: method.to_string(),
            path: uri.path().to_owned(),
            path_and_query: uri
                .path_and_query()
                .map(|pq| pq.as_str().to_owned())
                .unwrap_or_else(|| uri.path().to_owned()),
            headers: headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_owned(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: body.to_vec(),
        });
        // Under the lock, so the published count never goes backwards.
        shared.count.send_replace(execution);
        execution
    };

    let mut gate = shared.gate.subscribe();
    let _ = tokio::time::timeout(MAX_HOLD, gate.wait_for(|open| *open)).await;
    let delay = *shared
        .delay
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }

    let posts = shared
        .posts_at
        .lock()
        .unwrap_or_else(|poison| poison.into_inner())
        .iter()
        .any(|path| path == uri.path())
        .then(|| {
            let posts = shared
                .requests()
                .iter()
                .filter(|r| r.method == "POST")
                .count();
            json!({ "posts": posts }).to_string()
        });
    let canned = posts.or_else(|| {
        shared
            .answers
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .get(uri.path())
            .cloned()
    });
    if let Some(answer) = canned {
        let json = HeaderValue::from_static("application/json");
        let mut response = (StatusCode::OK, [(header::CONTENT_TYPE, json)], answer).into_response();
        response
            .headers_mut()
            .insert("x-upstream", HeaderValue::from_static("counting"));
        return response;
    }
    let status = uri
        .path()
        .strip_prefix("/status/")
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .unwrap_or(if method == Method::POST {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        });
    let mut body = json!({
        "execution": execution,
        "method": method.as_str(),
        "path": uri.path(),
    });
    // `x-answer-bytes: N` pads the answer with N bytes, for tests of what records cost.
    if let Some(n) = headers
        .get("x-answer-bytes")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        body["padding"] = Value::String("p".repeat(n.min(64 << 20)));
    }
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert("x-upstream", HeaderValue::from_static("counting"));
    response
}
