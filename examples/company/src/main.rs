//! `company`: a scripted Company Agent for the poppy-gateway demo (no model: a fixed script).
//!
//! It holds conversations with Personal Agents over a minimal conversation endpoint and does
//! what a Company Agent does with operations (spec sections 4, 6 and 7, "Conversations"):
//! it proposes the jacket exchange, with the operation in its own message; when the
//! Personal Agent's message carries the approval, it performs the exchange through the
//! gateway's operations service (which checks the approval and performs it at most once)
//! and says how it went in a later message. It never treats a message's text as approval:
//! it hands every message to the service, which decides.
//!
//! ```text
//! company --listen 127.0.0.1:8083 --service http://127.0.0.1:8082 --token-file conversations.token
//! ```
//!
//! The conversation endpoint (minimal; the shapes of spec 8 as the extension quotes them):
//! - `POST /conversations` (`Poppy-Session`, `Poppy-Extensions`) → `201 {"conversation_id"}`
//! - `POST /conversations/{id}/messages` with a message `{id, text, extensions?}` →
//!   `202 {"accepted": id}`; the same message ID again gets the same answer, and is not
//!   handled twice
//! - `GET /conversations/{id}/events?after=EVENT&wait=SECONDS` → `{"events": [...]}`, the
//!   Company's messages after `EVENT`, waiting up to `wait` (at most 30) seconds for one.
//!
//! A conversation belongs to the Session that opened it (the JWT's `iss` and `sid`), not to
//! one JWT: a Personal Agent signs a new `Poppy-Session` for every request. The service is
//! given the latest one and the method and path of the request that carried it
//! (`session_request`), since that is what the JWT was signed for.
//!
//! The Company's messages carry `data.outcome` (`performed`, `already_performed`,
//! `not_performed`, `refused`, `in_progress`, `unknown`, `error`): this example Company's own
//! keys, so that a Personal Agent can tell how it went without reading the text.

mod agent;
mod conversation;
mod routes;
mod service;
mod session;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "company",
    version,
    about = "A scripted Company Agent: proposes an exchange in a conversation and performs it through poppy-gateway's operations service"
)]
struct Cli {
    /// Where the conversation endpoint listens. Port 0 picks a free port; the real address is
    /// printed.
    #[arg(long, default_value = "127.0.0.1:8083")]
    listen: SocketAddr,
    /// The gateway's operations service (`[conversations] listen`).
    #[arg(long, default_value = "http://127.0.0.1:8082")]
    service: String,
    /// A file holding the service token; without it, the environment variable
    /// POPPY_CONVERSATIONS_TOKEN.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// The exchange this Company Agent offers: the order, its item, and the replacement.
    #[arg(long, default_value = "ord_2Cv6")]
    order: String,
    #[arg(long, default_value = "itm_5Tz")]
    item: String,
    #[arg(long, default_value = "stormline-insulated-m")]
    sku: String,
    /// How long to keep asking the service while an exchange is in progress or its outcome
    /// is unknown, in seconds.
    #[arg(long, default_value_t = 120)]
    max_wait: u64,
    /// Tell the service the method and path of the Personal Agent's request whose Session it
    /// relays (`session_request`), for the check of the Session's `htu`. `false` for a gateway
    /// that does not know the member yet (it refuses unknown members).
    #[arg(
        long,
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set,
        env = "POPPY_COMPANY_RELAY_SESSION_REQUEST"
    )]
    relay_session_request: bool,
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("cannot read the service token from {0}: {1}")]
    TokenFile(String, std::io::Error),
    #[error("no service token: give --token-file or set POPPY_CONVERSATIONS_TOKEN")]
    NoToken,
    #[error("--service must be an http:// URL: `{0}`")]
    Service(String),
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("company: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), StartError> {
    let token = match &cli.token_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| StartError::TokenFile(path.display().to_string(), e))?
            .trim()
            .to_owned(),
        None => std::env::var("POPPY_CONVERSATIONS_TOKEN").unwrap_or_default(),
    };
    if token.is_empty() {
        return Err(StartError::NoToken);
    }
    if !cli.service.starts_with("http://") {
        return Err(StartError::Service(cli.service));
    }
    let service = service::Service::new(&cli.service, token, cli.relay_session_request)?;
    let offer = agent::Offer {
        order: cli.order,
        item: cli.item,
        sku: cli.sku,
    };
    let app = Arc::new(agent::Company {
        conversations: conversation::Conversations::default(),
        service,
        offer,
        max_wait: Duration::from_secs(cli.max_wait),
    });

    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .map_err(|e| StartError::Listen(cli.listen, e))?;
    let addr = listener.local_addr()?;
    // One line on stdout, flushed: tests and scripts read the port from it.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "company listening on http://{addr}")?;
    stdout.flush()?;
    drop(stdout);

    axum::serve(listener, routes::router(app))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
