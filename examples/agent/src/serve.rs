//! `agent identity`: serves this agent's client metadata document (`GET /agent.json`, whose URL
//! is the agent's `client_id`) and its long-term public keys (`GET /jwks.json`), which a
//! gateway with `[session] verify = "required"` reads to verify the agent's Sessions. The
//! URLs follow the address it listens on.

use std::io::Write;
use std::net::SocketAddr;

use axum::Json;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::Value;

use crate::identity::{self, SigningKey};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Key(#[from] identity::KeyError),
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Serve until Ctrl-C. The first line on stdout is the `client_id` (tests and scripts read
/// the port from it when `listen` has port 0).
pub async fn run(listen: SocketAddr) -> Result<(), ServeError> {
    let jwks = identity::jwks(&SigningKey::long_term()?);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| ServeError::Listen(listen, e))?;
    let addr = listener.local_addr()?;
    let client_id = format!("http://{addr}/agent.json");
    let metadata = identity::metadata(&client_id, &format!("http://{addr}/jwks.json"));

    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "agent identity: {client_id}")?;
    stdout.flush()?;
    drop(stdout);

    axum::serve(listener, router(metadata, jwks))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

fn router(metadata: Value, jwks: Value) -> Router {
    Router::new()
        .route(
            "/agent.json",
            get(move || std::future::ready(Json(metadata.clone()))),
        )
        .route(
            "/jwks.json",
            get(move || std::future::ready(Json(jwks.clone()))),
        )
        .fallback(|| async { StatusCode::NOT_FOUND })
}
