//! The fast upstream: a hyper HTTP/1.1 server answering a fixed small JSON body, `201` for
//! POST and `200` otherwise, on one thread (the CPU plan pins it).
//!
//! Control paths under `/__bench/` are not counted (`agent.json` and `jwks.json` serve the
//! signed rows' agent: `crate::signer`): `GET /__bench/count` returns
//! `{"count": N, "held": H, "connections": C}` (C: connections accepted, so a proxy that does
//! not reuse its upstream connections shows), `POST /__bench/release` lets held requests go. A request whose
//! path contains `/hold-` is held until then (at most [`MAX_HOLD`]), so the orchestrator can
//! measure the gateway's memory with approved executions in flight.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// What every counted request gets: small, like a typical API answer.
pub const BODY: &str = r#"{"ok":true,"order_id":"ord_bench","status":"accepted"}"#;
/// How long a held request waits for a release at most, so no run can hang on it.
pub const MAX_HOLD: Duration = Duration::from_secs(30);

#[derive(Default)]
struct State {
    count: AtomicU64,
    held: AtomicU64,
    connections: AtomicU64,
    /// Control calls: one connection each (`Connection: close`), left out of `connections`.
    control: AtomicU64,
    /// The signed rows' agent: its metadata document (`/__bench/agent.json`).
    agent_document: String,
}

/// Serve on `listener` until the process ends.
pub async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    let base = format!("http://{}", listener.local_addr()?);
    let state = Arc::new(State {
        agent_document: crate::signer::document(&base),
        ..State::default()
    });
    let (release_tx, release_rx) = watch::channel(0u64);
    let release_tx = Arc::new(release_tx);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        state.connections.fetch_add(1, Ordering::SeqCst);
        let state = Arc::clone(&state);
        let release_tx = Arc::clone(&release_tx);
        let release_rx = release_rx.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                handle(
                    request,
                    Arc::clone(&state),
                    Arc::clone(&release_tx),
                    release_rx.clone(),
                )
            });
            // A connection error (a client gone mid-request) ends that connection only.
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(
    request: Request<Incoming>,
    state: Arc<State>,
    release_tx: Arc<watch::Sender<u64>>,
    mut release_rx: watch::Receiver<u64>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path();
    if let Some(control) = path.strip_prefix("/__bench/") {
        state.control.fetch_add(1, Ordering::SeqCst);
        return Ok(match control {
            "count" => json(
                StatusCode::OK,
                Bytes::from(format!(
                    r#"{{"count":{},"held":{},"connections":{}}}"#,
                    state.count.load(Ordering::SeqCst),
                    state.held.load(Ordering::SeqCst),
                    state
                        .connections
                        .load(Ordering::SeqCst)
                        .saturating_sub(state.control.load(Ordering::SeqCst))
                )),
            ),
            "agent.json" => json(StatusCode::OK, Bytes::from(state.agent_document.clone())),
            "jwks.json" => json(
                StatusCode::OK,
                Bytes::from_static(crate::signer::LONG_TERM_JWKS.as_bytes()),
            ),
            "release" => {
                release_tx.send_modify(|generation| *generation += 1);
                json(StatusCode::OK, Bytes::from_static(b"{}"))
            }
            _ => json(StatusCode::NOT_FOUND, Bytes::from_static(b"{}")),
        });
    }
    state.count.fetch_add(1, Ordering::SeqCst);
    let hold = path.contains("/hold-");
    let status = if request.method() == Method::POST {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    // A real API reads its body; so does this one (and the connection stays reusable).
    let _ = request.into_body().collect().await;
    if hold {
        state.held.fetch_add(1, Ordering::SeqCst);
        release_rx.mark_unchanged();
        let _ = tokio::time::timeout(MAX_HOLD, release_rx.changed()).await;
        state.held.fetch_sub(1, Ordering::SeqCst);
    }
    Ok(json(status, Bytes::from_static(BODY.as_bytes())))
}

fn json(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Bind `127.0.0.1:port` (0: any free port) and return the listener and its address.
pub async fn bind(port: u16) -> anyhow::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}
