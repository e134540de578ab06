//! `agent`: a terminal Personal Agent for trying poppy-gateway (operations extension v2).
//!
//! ```text
//! agent --gateway http://127.0.0.1:8080 POST /orders/ord_7Hk2/exchanges \
//!     --json '{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}'
//! ```
//!
//! Conversation mode talks to a Company Agent instead (`examples/company`), and approves
//! the operation in its message with a message of its own:
//!
//! ```text
//! agent --gateway http://127.0.0.1:8080 --conversation http://127.0.0.1:8083 \
//!     --say "Can I swap my Stormline jacket on order ord_2Cv6 for the insulated one?"
//! ```
//!
//! Every request carries a new `Poppy-Session` JWT, signed for its URL with a delegated key
//! (docs/sessions.md). The agent is `--agent-url`, its client metadata document, which
//! `agent identity` serves with its public key; `agent sign METHOD URL` prints one Session JWT
//! for scripts (docs/demo.md's curl walkthrough):
//!
//! ```text
//! agent identity --listen 127.0.0.1:8084
//! agent sign --sid ses_demo1 POST http://127.0.0.1:8080/orders/ord_7Hk2/exchanges
//! ```
//!
//! Without the operations extension (`--no-extension`, as most agents are today), a Company
//! that handles approval itself answers with a link to its own approval page; the agent
//! prints it and, with `--wait`, sends the same request again until the User approved there:
//!
//! ```text
//! agent --no-extension --wait --token "$(agent demo-token ada)" POST /orders/ord_9Pg4/exchanges \
//!     --json '{"item_id":"itm_3Hb","replacement_sku":"stormline-insulated-m"}'
//! ```
//!
//! Exit codes: 0 performed (the API's answer is on stdout), 1 declined or not performed,
//! 2 outcome unknown (check the order before trying again), 3 usage or other errors.

mod ask;
mod check;
mod conversation;
mod display;
mod flow;
mod http;
mod identity;
mod operation;
mod page;
mod serve;
mod session;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use check::Asked;
use flow::{Outcome, Settings};
use http::{Client, OPERATIONS_V2, Outgoing};
use session::{Signer, Who};

const EXIT_PERFORMED: u8 = 0;
const EXIT_NOT_PERFORMED: u8 = 1;
const EXIT_UNKNOWN: u8 = 2;
const EXIT_OTHER: u8 = 3;

#[derive(Debug, Parser)]
#[command(
    name = "agent",
    version,
    about = "A terminal Personal Agent: sends a request, shows the company's terms, asks you, and sends your approval",
    after_help = "Exit codes: 0 performed, 1 declined or not performed, 2 outcome unknown, 3 usage or other errors.",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The gateway (or any API with the operations extension).
    #[arg(
        long,
        default_value = "http://127.0.0.1:8080",
        env = "POPPY_AGENT_GATEWAY"
    )]
    gateway: String,
    /// HTTP method.
    #[arg(required_unless_present = "conversation")]
    method: Option<String>,
    /// Path and query, e.g. /orders/ord_7Hk2/exchanges.
    #[arg(required_unless_present = "conversation")]
    path: Option<String>,
    /// Conversation mode: the Company Agent's conversation endpoint (its name and its support
    /// of operations v2 come from --gateway's poppy.json).
    #[arg(long, value_name = "URL", conflicts_with_all = ["method", "json"])]
    conversation: Option<String>,
    /// Conversation mode: what to say to the Company Agent.
    #[arg(
        long,
        requires = "conversation",
        default_value = "Hello! I'd like to exchange the jacket on my order for the insulated one."
    )]
    say: String,
    /// Send no `Poppy-Extensions` (an agent without the operations extension): a Company
    /// that handles approval itself answers with a link to its approval page, printed here.
    #[arg(long, conflicts_with = "conversation")]
    no_extension: bool,
    /// With --no-extension: send the same request again every 2s until it is performed,
    /// declined, or its link expires, for at most this long (default 10m).
    #[arg(long, value_name = "DURATION", requires = "no_extension", num_args = 0..=1,
          default_missing_value = "10m", value_parser = parse_duration)]
    wait: Option<Duration>,
    /// JSON request body: the text, or @file.
    #[arg(long)]
    json: Option<String>,
    /// An access token: sends `Authorization: Bearer TOKEN` (signed in).
    #[arg(long)]
    token: Option<String>,
    /// Another request header, `Name: value` (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    #[command(flatten)]
    who: WhoArgs,
    /// Approve without asking, for scripts. Refuses when the terms disagree with the summary
    /// or with the request.
    #[arg(long)]
    yes: bool,
    /// Timeout of each HTTP request, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    timeout: Duration,
    /// How long to keep resending an approval that gets 503 or no answer, e.g. 60s.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    max_wait: Duration,
}

/// `500ms`, `30s`, `2m`, or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 30s"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        _ => Err(format!("`{text}`: use ms, s or m")),
    }
}

/// Who signs: the agent, the Session and the User (for requests and for `agent sign`).
#[derive(Debug, Clone, clap::Args)]
struct WhoArgs {
    /// The agent's `client_id`, its metadata document's URL (the Session's `iss`); `agent
    /// identity` serves it.
    #[arg(long, value_name = "URL", default_value = identity::DEFAULT_AGENT_URL, env = "POPPY_AGENT_URL")]
    agent_url: String,
    /// The Session's `sid` claim (default: a new Session for this run).
    #[arg(long)]
    sid: Option<String>,
    /// The user's `sub` claim.
    #[arg(long, default_value = "user_ada")]
    sub: String,
}

impl WhoArgs {
    fn signer(&self) -> Result<Signer, session::SignError> {
        Signer::new(Who {
            agent: self.agent_url.clone(),
            sid: self.sid.clone().unwrap_or_else(session::new_sid),
            user: self.sub.clone(),
        })
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve this agent's client metadata document (/agent.json, its client_id) and its
    /// public keys (/jwks.json). The demo key is public: for local use only.
    Identity {
        /// Where to listen; the document's URLs follow it. Port 0 picks a free port; the
        /// client_id is printed.
        #[arg(long, default_value = "127.0.0.1:8084")]
        listen: SocketAddr,
    },
    /// Print a stand-in access token for ACCOUNT (an unsigned JWT whose `sub` is ACCOUNT), for
    /// --token against a gateway that does not verify tokens, like the demo's. It proves
    /// nothing: a real agent has the User's token from the Company's own sign-in.
    DemoToken {
        /// The account, e.g. ada.
        account: String,
    },
    /// Print one new Session JWT for METHOD on URL (for scripts: one per request).
    Sign {
        #[command(flatten)]
        who: WhoArgs,
        /// The request's method.
        method: String,
        /// The URL the request goes to (its origin and path are signed).
        url: String,
    },
}

#[derive(Debug, thiserror::Error)]
enum UsageError {
    #[error("`{0}` is not an HTTP method")]
    Method(String),
    #[error("the path must start with '/': `{0}`")]
    Path(String),
    #[error("--json: cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("--json is not JSON: {0}")]
    Json(serde_json::Error),
    #[error("--header `{0}`: write it `Name: value`")]
    Header(String),
    #[error("--gateway must be an http:// URL (this build has no TLS): `{0}`")]
    Gateway(String),
    #[error("--conversation must be an http:// URL (this build has no TLS): `{0}`")]
    Conversation(String),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are not errors; anything else is a usage error (3, not clap's 2,
            // which means "outcome unknown" here).
            return ExitCode::from(if e.use_stderr() { EXIT_OTHER } else { 0 });
        }
    };
    match &cli.command {
        Some(Command::Identity { listen }) => return ExitCode::from(identity(*listen)),
        Some(Command::Sign { who, method, url }) => return ExitCode::from(sign(who, method, url)),
        Some(Command::DemoToken { account }) => {
            println!("{}", session::demo_token(account));
            return ExitCode::from(0);
        }
        None => {}
    }
    if let Some(endpoint) = &cli.conversation {
        return ExitCode::from(converse(&cli, endpoint));
    }
    let (request, asked) = match build(&cli) {
        Ok(built) => built,
        Err(e) => {
            eprintln!("agent: {e}");
            return ExitCode::from(EXIT_OTHER);
        }
    };
    let signer = match cli.who.signer() {
        Ok(signer) => Arc::new(signer),
        Err(e) => {
            eprintln!("agent: {e}");
            return ExitCode::from(EXIT_OTHER);
        }
    };
    let client = match Client::new(&cli.gateway, cli.timeout, signer) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("agent: {e}");
            return ExitCode::from(EXIT_OTHER);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("agent: {e}");
            return ExitCode::from(EXIT_OTHER);
        }
    };
    let outcome = if cli.no_extension {
        let settings = page::Settings { wait: cli.wait };
        runtime.block_on(page::run(&client, &request, &settings))
    } else {
        let settings = Settings {
            yes: cli.yes,
            max_wait: cli.max_wait,
        };
        runtime.block_on(flow::run(&client, &request, &asked, &settings))
    };
    ExitCode::from(report(outcome))
}

/// `agent identity`: serve the metadata document and keys until Ctrl-C.
fn identity(listen: SocketAddr) -> u8 {
    let served = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(serve::ServeError::from)
        .and_then(|runtime| runtime.block_on(serve::run(listen)));
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agent identity: {e}");
            EXIT_OTHER
        }
    }
}

/// `agent sign`: one Session JWT on stdout.
fn sign(who: &WhoArgs, method: &str, url: &str) -> u8 {
    if reqwest::Method::from_bytes(method.as_bytes()).is_err() {
        eprintln!("agent sign: {}", UsageError::Method(method.to_owned()));
        return EXIT_OTHER;
    }
    match who.signer().and_then(|signer| signer.sign(method, url)) {
        Ok(jwt) => {
            println!("{jwt}");
            0
        }
        Err(e) => {
            eprintln!("agent sign: {e}");
            EXIT_OTHER
        }
    }
}

/// Conversation mode: the Company's name and support from `--gateway`'s poppy.json, then
/// the conversation.
fn converse(cli: &Cli, endpoint: &str) -> u8 {
    let setup = || -> Result<_, String> {
        if !cli.gateway.starts_with("http://") {
            return Err(UsageError::Gateway(cli.gateway.clone()).to_string());
        }
        if !endpoint.starts_with("http://") {
            return Err(UsageError::Conversation(endpoint.to_owned()).to_string());
        }
        let headers = agent_headers(cli).map_err(|e| e.to_string())?;
        let signer = Arc::new(cli.who.signer().map_err(|e| e.to_string())?);
        let discovery = Client::new(&cli.gateway, cli.timeout, Arc::clone(&signer))
            .map_err(|e| e.to_string())?;
        let chat = conversation::Chat {
            client: Client::new(endpoint, cli.timeout, signer).map_err(|e| e.to_string())?,
            headers,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Ok((discovery, chat, runtime))
    };
    let (discovery, chat, runtime) = match setup() {
        Ok(ready) => ready,
        Err(e) => {
            eprintln!("agent: {e}");
            return EXIT_OTHER;
        }
    };
    let settings = Settings {
        yes: cli.yes,
        max_wait: cli.max_wait,
    };
    let outcome = runtime.block_on(async {
        // Spec 2: the extension is used only when the Company lists operations v2.
        let listed = discovery.discovery().await.is_some_and(|doc| {
            doc.pointer("/extensions/operations")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|versions| versions.iter().any(|v| v["version"] == "2"))
        });
        if !listed {
            return Outcome::Failed(format!(
                "{}/.well-known/poppy.json does not list operations version 2: this agent can't approve operations in its conversations",
                discovery.base()
            ));
        }
        let company = flow::company_name(&discovery).await;
        conversation::run(&chat, &company, &cli.say, &settings).await
    });
    report(outcome)
}

/// The headers of every request this agent makes (its Session is signed for each request, in
/// http.rs): version and extensions, the access token, and `--header`s.
fn agent_headers(cli: &Cli) -> Result<Vec<(String, String)>, UsageError> {
    let mut headers = vec![("Poppy-Version".to_owned(), "0.4".to_owned())];
    if !cli.no_extension {
        headers.push(("Poppy-Extensions".to_owned(), OPERATIONS_V2.to_owned()));
    }
    if let Some(token) = &cli.token {
        headers.push(("Authorization".to_owned(), format!("Bearer {token}")));
    }
    for raw in &cli.headers {
        let (name, value) = raw
            .split_once(':')
            .ok_or_else(|| UsageError::Header(raw.clone()))?;
        let name = name.trim();
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
            || reqwest::header::HeaderValue::from_str(value.trim()).is_err()
        {
            return Err(UsageError::Header(raw.clone()));
        }
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    Ok(headers)
}

/// The request and what it asks for, from the command line.
fn build(cli: &Cli) -> Result<(Outgoing, Asked), UsageError> {
    if !cli.gateway.starts_with("http://") {
        return Err(UsageError::Gateway(cli.gateway.clone()));
    }
    let (Some(method_arg), Some(path_arg)) = (&cli.method, &cli.path) else {
        return Err(UsageError::Path(String::new()));
    };
    let method = reqwest::Method::from_bytes(method_arg.to_ascii_uppercase().as_bytes())
        .map_err(|_| UsageError::Method(method_arg.clone()))?;
    if !path_arg.starts_with('/') {
        return Err(UsageError::Path(path_arg.clone()));
    }
    let body = match &cli.json {
        None => None,
        Some(arg) => Some(match arg.strip_prefix('@') {
            Some(file) => std::fs::read(file).map_err(|e| UsageError::Read(file.to_owned(), e))?,
            None => arg.as_bytes().to_vec(),
        }),
    };
    let json = body
        .as_deref()
        .map(serde_json::from_slice::<serde_json::Value>)
        .transpose()
        .map_err(UsageError::Json)?;

    let mut headers = agent_headers(cli)?;
    if body.is_some() {
        headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
    }
    let (path, query) = match path_arg.split_once('?') {
        Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
        None => (path_arg.clone(), None),
    };
    Ok((
        Outgoing {
            method,
            path_and_query: path_arg.clone(),
            headers,
            body,
        },
        Asked {
            body: json,
            path,
            query,
        },
    ))
}

/// Tell the User how it ended; the API's answer goes to stdout.
fn report(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Performed(answer) => {
            println!("{}", printable(&answer.body));
            eprintln!("Done: the API answered {}.", answer.status);
            EXIT_PERFORMED
        }
        Outcome::NotPerformed { why, answer } => {
            if let Some(answer) = answer {
                println!("{}", printable(&answer.body));
            }
            eprintln!("Not performed: {why}.");
            EXIT_NOT_PERFORMED
        }
        Outcome::Unknown(why) => {
            eprintln!(
                "The outcome is UNKNOWN: {why}.\nIt may or may not have been performed. Do not approve this action again until you know: check the order with the company (for example, GET it with this agent) first."
            );
            EXIT_UNKNOWN
        }
        Outcome::Failed(why) => {
            eprintln!("agent: {why}");
            EXIT_OTHER
        }
    }
}

/// An answer body for the terminal: pretty JSON, or text without control characters.
fn printable(body: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(json) => display::clean(&serde_json::to_string_pretty(&json).unwrap_or_default()),
        Err(_) => display::clean(&String::from_utf8_lossy(body)),
    }
}
