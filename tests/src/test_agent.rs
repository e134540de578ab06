//! A Personal Agent's client metadata document, served on a free loopback port: what a
//! gateway with `[[session.agent]] client_id = "<its URL>"` fetches to verify the agent's
//! Sessions (docs/sessions.md). `GET /agent.json` answers `{"client_id", "client_name",
//! "jwks_uri"}`, `GET /jwks.json` the long-term key's JWKS (tests/fixtures/keys). Each fetch is
//! counted, and a test can make the document misbehave ([`Serving`]), be served over https
//! (a test CA the gateway is given with `[session] ca_file`) or not be served at all.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::agent::Session;
use crate::gateway::GatewayBuilder;
use crate::identity::jwks_of;
use crate::ports::refusing_port;
use crate::served::Served;
use crate::signer::{DEFAULT_LONG_TERM_KEY, PUBLIC_ORIGIN};
use crate::testtls::TestCa;

/// The `[session]` line that lets the gateway fetch agents' documents from 127.0.0.1, where
/// every test agent serves.
pub const ALLOW_LOOPBACK: &str = "allow_private_hosts = [\"127.0.0.1\"]\n";

/// The gateway's limit on a metadata document (docs/sessions.md).
pub const DOCUMENT_LIMIT: usize = 64 * 1024;
/// How long a [`Serving::Slow`] answer waits at most when its test forgets to end (the
/// gateway gives up after 5 s).
const MAX_HOLD: Duration = Duration::from_secs(60);
/// The TLS handshake of one connection, at most.
const HANDSHAKE: Duration = Duration::from_secs(5);

/// What `GET /agent.json` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serving {
    /// The document.
    Document,
    /// The document padded past [`DOCUMENT_LIMIT`] (still valid JSON with the right members).
    TooLarge,
    /// The document, once the test ends (longer than the gateway's 5 s fetch timeout).
    Slow,
    /// `302 Found` to this URL.
    Redirect(String),
}

struct Shared {
    serving: Mutex<Serving>,
    /// `client_id` in the document (the document's own URL unless a test says otherwise).
    client_id: Mutex<String>,
    /// `jwks_uri` in the document.
    jwks_uri: Mutex<String>,
    jwks: Mutex<String>,
    document_fetches: AtomicUsize,
    jwks_fetches: AtomicUsize,
    released: watch::Sender<bool>,
}

/// A running metadata server (or, [`TestAgent::unreachable`], a URL nobody answers).
pub struct TestAgent {
    base: String,
    long_term: String,
    shared: Arc<Shared>,
    ca: Option<TestCa>,
    /// The metadata server, stopped when this is dropped (after `release`); none for an
    /// unreachable agent.
    served: Option<Served>,
    /// The port of an unreachable agent, kept taken and refusing.
    _refusing: Option<tokio::net::TcpSocket>,
    /// The http server a redirecting agent points to.
    _target: Option<Box<TestAgent>>,
}

impl TestAgent {
    /// Over http on a free loopback port, long-term key `es256-a`, serving the document.
    pub fn start() -> TestAgent {
        TestAgent::start_with(DEFAULT_LONG_TERM_KEY, Serving::Document)
    }

    /// Over http, publishing test key `long_term`, answering as `serving` says.
    pub fn start_with(long_term: &str, serving: Serving) -> TestAgent {
        TestAgent::serve(long_term, serving, None)
    }

    /// Over https, with a certificate of a new test CA ([`TestAgent::ca_file`]).
    pub fn start_https(long_term: &str, serving: Serving) -> TestAgent {
        TestAgent::serve(long_term, serving, Some(TestCa::new()))
    }

    /// Over https, `GET /agent.json` redirecting to an http document (on another port) that
    /// would verify the agent's Sessions if the gateway followed it: its `client_id` is this
    /// agent's https URL, its `jwks_uri` the http server's JWKS.
    pub fn redirecting_to_http() -> TestAgent {
        let mut agent = TestAgent::start_https(DEFAULT_LONG_TERM_KEY, Serving::Document);
        let target = TestAgent::start();
        *lock(&target.shared.client_id) = agent.client_id();
        *lock(&agent.shared.serving) = Serving::Redirect(target.document_url());
        agent._target = Some(Box::new(target));
        agent
    }

    /// An agent whose document URL is a loopback port that refuses every connection.
    pub fn unreachable() -> TestAgent {
        let (port, socket) = refusing_port();
        let base = format!("http://127.0.0.1:{port}");
        TestAgent {
            shared: shared(&base, DEFAULT_LONG_TERM_KEY, Serving::Document),
            base,
            long_term: DEFAULT_LONG_TERM_KEY.to_owned(),
            ca: None,
            served: None,
            _refusing: Some(socket),
            _target: None,
        }
    }

    fn serve(long_term: &str, serving: Serving, ca: Option<TestCa>) -> TestAgent {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the agent's server");
        listener
            .set_nonblocking(true)
            .expect("non-blocking agent listener");
        let addr = listener.local_addr().expect("the agent's address");
        let scheme = if ca.is_some() { "https" } else { "http" };
        let base = format!("{scheme}://{addr}");
        let shared = shared(&base, long_term, serving);
        let acceptor = ca.as_ref().map(|ca| {
            let (cert, key) = ca.leaf_der("agent");
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![rustls::pki_types::CertificateDer::from(cert)],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.into()),
            )
            .expect("the agent's certificate");
            TlsAcceptor::from(Arc::new(config))
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let served = Served::start(
            format!("test agent {}", addr.port()),
            1,
            listener,
            move |listener| async move {
                match acceptor {
                    Some(acceptor) => axum::serve(TlsListener { listener, acceptor }, app).await,
                    None => axum::serve(listener, app).await,
                }
            },
        );
        TestAgent {
            base,
            long_term: long_term.to_owned(),
            shared,
            ca,
            served: Some(served),
            _refusing: None,
            _target: None,
        }
    }

    /// `http(s)://127.0.0.1:PORT/agent.json`: the agent's `client_id`.
    pub fn client_id(&self) -> String {
        self.document_url()
    }

    pub fn document_url(&self) -> String {
        format!("{}/agent.json", self.base)
    }

    /// The test key whose public half the JWKS holds.
    pub fn long_term_key(&self) -> &str {
        &self.long_term
    }

    /// The test CA of an https agent (for `[session] ca_file`).
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.ca.as_ref().map(TestCa::ca_file)
    }

    /// How often `GET /agent.json` was asked for.
    pub fn document_fetches(&self) -> usize {
        self.shared.document_fetches.load(Ordering::SeqCst)
    }

    /// How often `GET /jwks.json` was asked for.
    pub fn jwks_fetches(&self) -> usize {
        self.shared.jwks_fetches.load(Ordering::SeqCst)
    }

    /// Name `uri` as the document's `jwks_uri` from now on.
    pub fn set_jwks_uri(&self, uri: &str) {
        *lock(&self.shared.jwks_uri) = uri.to_owned();
    }

    /// Publish the JWKS of test keys `keys` from now on (a rotation, or a withdrawn key).
    pub fn publish(&self, keys: &[&str]) {
        *lock(&self.shared.jwks) = jwks_of(keys);
    }

    /// Answer `GET /agent.json` as `serving` says from now on.
    pub fn set_serving(&self, serving: Serving) {
        *lock(&self.shared.serving) = serving;
    }

    /// A signed-out Session of this agent (user `user_1`), its delegations signed with the
    /// key the agent publishes.
    pub fn signed_out(&self, sid: &str) -> Session {
        Session::signed_out(sid)
            .with_agent(&self.client_id())
            .with_long_term_key(&self.long_term)
    }

    /// A Session of this agent signed in to `account`.
    pub fn signed_in(&self, sid: &str, account: &str) -> Session {
        Session::signed_in(sid, account)
            .with_agent(&self.client_id())
            .with_long_term_key(&self.long_term)
    }

    /// The `[session]` lines of a gateway verifying this agent's Sessions:
    /// `verify = "required"`, `origins = [PUBLIC_ORIGIN]`, `clock_skew = "60s"`, the CA of an
    /// https agent, [`ALLOW_LOOPBACK`] (the agent serves on 127.0.0.1, a loopback address
    /// the gateway fetches agents' documents from only when allowed), and one
    /// `[[session.agent]]` naming this agent.
    pub fn session_lines(&self) -> String {
        let ca = self.ca_file().map_or_else(String::new, |ca| {
            format!("ca_file = \"{}\"\n", ca.display())
        });
        format!(
            "verify = \"required\"\norigins = [\"{PUBLIC_ORIGIN}\"]\nclock_skew = \"60s\"\n{ca}{ALLOW_LOOPBACK}\n\
             [[session.agent]]\nclient_id = \"{}\"\n",
            self.client_id()
        )
    }

    /// `builder` verifying this agent's Sessions ([`TestAgent::session_lines`]).
    pub fn configure(&self, builder: GatewayBuilder) -> GatewayBuilder {
        builder.session(&self.session_lines())
    }

    /// Answer every held [`Serving::Slow`] request now.
    pub fn release(&self) {
        self.shared.released.send_replace(true);
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        // Held fetches go first; then the server stops.
        self.release();
        self.served.take();
    }
}

fn shared(base: &str, long_term: &str, serving: Serving) -> Arc<Shared> {
    Arc::new(Shared {
        serving: Mutex::new(serving),
        client_id: Mutex::new(format!("{base}/agent.json")),
        jwks_uri: Mutex::new(format!("{base}/jwks.json")),
        jwks: Mutex::new(jwks_of(&[long_term])),
        document_fetches: AtomicUsize::new(0),
        jwks_fetches: AtomicUsize::new(0),
        released: watch::Sender::new(false),
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

fn json_response(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn handle(State(shared): State<Arc<Shared>>, uri: Uri) -> Response {
    match uri.path() {
        "/agent.json" => {
            shared.document_fetches.fetch_add(1, Ordering::SeqCst);
            let serving = lock(&shared.serving).clone();
            let mut document = json!({
                "client_id": *lock(&shared.client_id),
                "client_name": "Test agent",
                "jwks_uri": *lock(&shared.jwks_uri),
            });
            match serving {
                Serving::Document => json_response(document.to_string()),
                Serving::TooLarge => {
                    document["padding"] = json!("x".repeat(DOCUMENT_LIMIT + 1024));
                    json_response(document.to_string())
                }
                Serving::Slow => {
                    let mut released = shared.released.subscribe();
                    let _ = tokio::time::timeout(MAX_HOLD, released.wait_for(|r| *r)).await;
                    json_response(document.to_string())
                }
                Serving::Redirect(location) => {
                    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
                }
            }
        }
        "/jwks.json" => {
            shared.jwks_fetches.fetch_add(1, Ordering::SeqCst);
            json_response(lock(&shared.jwks).clone())
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// TLS connections for axum: a TCP listener and a rustls acceptor.
struct TlsListener {
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.listener.accept().await else {
                continue;
            };
            // A failed handshake (a client that does not trust the CA) is that client's.
            if let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE, self.acceptor.accept(tcp)).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}
