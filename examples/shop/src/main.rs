//! `shop`: a small "legacy" shop API for the poppy-gateway demo.
//!
//! It knows nothing of Personal Agents, approvals or retries: every request that
//! reaches it is performed, every time. That is the point: it stands in for the
//! existing API a company already has, and the gateway in front of it adds
//! approval of exact terms and at-most-once execution without changing it.
//!
//! ```text
//! shop --listen 127.0.0.1:9000 [--mcp-sse]
//! ```
//!
//! The same actions are MCP tools at `POST /mcp` (Streamable HTTP), for the MCP demo.

mod mcp;
mod money;
mod routes;
mod state;

use std::error::Error;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use tokio::net::TcpListener;

#[derive(Debug, Parser)]
#[command(
    name = "shop",
    version,
    about = "A small legacy shop API (knows nothing of approvals)"
)]
struct Cli {
    /// Address to listen on. Port 0 picks a free port; the real address is printed.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// Answer MCP requests (POST /mcp) as `text/event-stream` when the client accepts it,
    /// instead of `application/json`.
    #[arg(long)]
    mcp_sse: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Display, not Debug: `shop: cannot listen on ...`, not a quoted string.
            eprintln!("shop: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Box<dyn Error>> {
    let listener = TcpListener::bind(cli.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", cli.listen))?;
    let addr = listener.local_addr()?;

    // Exactly one line on stdout: tests and scripts read it to learn the port
    // (with `--listen 127.0.0.1:0`), so flush it before serving anything.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "shop listening on http://{addr}")?;
    stdout.flush()?;
    drop(stdout);

    let app = routes::router(state::Shop::seeded(), cli.mcp_sse);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

/// Resolves on Ctrl-C, or on SIGTERM (what `docker stop` sends), so the
/// process exits promptly and cleanly in a terminal and in a container.
async fn shutdown_signal() {
    let ctrl_c = async {
        // If the handler cannot be installed, never resolve rather than exit at once.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };

    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();

    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
