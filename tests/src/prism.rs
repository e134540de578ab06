//! Stoplight Prism (`tests/deps/node/prism`) as the upstream: a mock generated from an OpenAPI
//! description that validates every request against it (`--errors`: an invalid one gets a
//! 4xx naming the violation, never a 2xx). In front of it, a relay that records each request
//! Prism receives and its answer, so a test counts what reached the API; it also mounts Prism
//! at the description's server path (`/v1`), as the real API is called.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::response::Response;

use crate::ports::free_port;
use crate::served::Served;
use crate::thirdparty;

/// How long Prism may take to read a description and listen.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// The most a request body may be, relayed.
const MAX_BODY: usize = 1024 * 1024;

/// One request Prism received, and its answer.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    /// The path and query as the gateway sent them (before the mount is taken off).
    pub path: String,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    pub status: u16,
    pub answer: String,
}

impl Exchange {
    pub fn describe(&self) -> String {
        format!(
            "{} {} {:?} -> {} {}",
            self.method,
            self.path,
            String::from_utf8_lossy(&self.body),
            self.status,
            self.answer
        )
    }
}

#[derive(Clone)]
struct Relay {
    prism: String,
    mount: String,
    client: reqwest::Client,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
}

/// Prism serving one description, behind the recording relay; both stop on drop.
pub struct PrismMock {
    child: Child,
    /// Stops with the mock.
    _relay: Served,
    url: String,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl PrismMock {
    /// `prism mock --errors DESCRIPTION` on a free port, served under `mount` (the
    /// description's server path, `""` for none) by the relay.
    pub fn start(description: &Path, mount: &str) -> PrismMock {
        let dir = thirdparty::node_project("prism");
        let (child, port, log) = match spawn(&dir, description) {
            Ok(started) => started,
            // The free port was taken meanwhile: once more, on another.
            Err(first) => spawn(&dir, description)
                .unwrap_or_else(|e| panic!("prism did not start: {first}; then {e}")),
        };
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let relay = Relay {
            prism: format!("http://127.0.0.1:{port}"),
            mount: mount.trim_end_matches('/').to_owned(),
            client: crate::gateway::http_client(Duration::from_secs(30)),
            exchanges: Arc::clone(&exchanges),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking relay");
        let url = format!(
            "http://{}",
            listener.local_addr().expect("the relay's address")
        );
        let app = Router::new().fallback(relay_one).with_state(relay);
        PrismMock {
            child,
            _relay: Served::app("prism-relay".to_owned(), listener, app),
            url,
            exchanges,
            log,
        }
    }

    /// The relay's URL: the gateway's upstream.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Every request Prism received so far, in order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Prism's own log (its validation messages), for a failure message.
    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }
}

impl Drop for PrismMock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Started = (Child, u16, Arc<Mutex<Vec<String>>>);

/// Start Prism and wait (bounded) for its "listening" line; its later lines go to the log.
fn spawn(dir: &Path, description: &Path) -> Result<Started, String> {
    let port = free_port();
    let mut child = Command::new(dir.join("node_modules/.bin/prism"))
        .args([
            "mock",
            "--errors",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .arg(description)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn prism: {e}"))?;
    let stdout = child.stdout.take().ok_or("prism's stdout")?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let lines_log = Arc::clone(&log);
    let (ready, listening) = mpsc::channel();
    std::thread::spawn(move || {
        let mut ready = Some(ready);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("Prism is listening")
                && let Some(ready) = ready.take()
            {
                let _ = ready.send(());
            }
            if let Ok(mut log) = lines_log.lock() {
                log.push(line);
            }
        }
    });
    match listening.recv_timeout(READY_TIMEOUT) {
        Ok(()) => Ok((child, port, log)),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            let said = log.lock().map(|l| l.join("\n")).unwrap_or_default();
            Err(format!(
                "prism did not listen on {port} within {READY_TIMEOUT:?}:\n{said}"
            ))
        }
    }
}

/// Relay one request to Prism (the mount taken off its path) and record both sides.
async fn relay_one(State(relay): State<Relay>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = to_bytes(body, MAX_BODY).await.unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let inner = path.strip_prefix(&relay.mount).unwrap_or(&path);
    let mut forward = relay
        .client
        .request(parts.method.clone(), format!("{}{}", relay.prism, inner));
    for (name, value) in &parts.headers {
        if !matches!(name.as_str(), "host" | "content-length" | "connection") {
            forward = forward.header(name, value);
        }
    }
    let (status, answer) = match forward.body(body.to_vec()).send().await {
        Ok(answer) => {
            let status = answer.status().as_u16();
            (status, answer.text().await.unwrap_or_default())
        }
        Err(e) => (502, format!("the relay could not reach prism: {e}")),
    };
    if let Ok(mut exchanges) = relay.exchanges.lock() {
        exchanges.push(Exchange {
            method: parts.method.to_string(),
            path,
            content_type: parts
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: body.to_vec(),
            status,
            answer: answer.clone(),
        });
    }
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("x-upstream", "prism")
        .body(Body::from(answer))
        .unwrap_or_default()
}
