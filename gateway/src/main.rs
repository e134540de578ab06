//! `poppy-gateway`: thin CLI over the library. `--config F` runs; `check --config F` validates.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use poppy_gateway::config;

use poppy_gateway::explain;
use poppy_gateway::init;
use poppy_gateway::receipts;
use poppy_gateway::server;
use poppy_gateway::trusted_keys;

/// glibc's malloc was 10-24% of the CPU of a proxied request (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc asks for transparent huge pages on its arena, so the resident set grows in 2 MiB
/// steps: a held 1 MiB request body cost 1.31 MiB of RSS instead of 1.21 (release build, 100
/// held; see RELIABILITY.md). Turned off for the process before it allocates much.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!(
            "poppy-gateway: transparent huge pages stay on ({e}): memory grows in 2 MiB steps"
        );
    }
}

#[derive(Parser)]
#[command(
    name = "poppy-gateway",
    version,
    about = "Approval of exact terms and at-most-once execution in front of existing APIs"
)]
struct Cli {
    /// gateway.toml (a container sets POPPY_GATEWAY_CONFIG, so that `health` reads the same file)
    #[arg(
        long,
        global = true,
        env = "POPPY_GATEWAY_CONFIG",
        default_value = "gateway.toml"
    )]
    config: PathBuf,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the config and its policies, print the routes, and exit non-zero on any problem.
    Check,
    /// Show what the gateway would do with one Personal Agent request: the matching policy,
    /// its terms, the summary and the operation (or why nothing matches).
    Explain(explain::cli::ExplainArgs),
    /// Draft a policy file from an OpenAPI description (`--openapi FILE`) or a running MCP
    /// server's tools (`--mcp URL`), for review; needs no config.
    Init(init::cli::InitArgs),
    /// Exit 0 when the admin listener the config names answers `GET /healthz` with 200 (a
    /// container health check). Reads only `[admin] listen`: a bad edit elsewhere, which the
    /// running gateway ignores until a reload succeeds, does not fail it.
    Health,
    /// Reload the policies of the running gateway: `POST /reload` to the admin listener the
    /// config names, with `POPPY_GATEWAY_ADMIN_TOKEN` from the environment (what SIGHUP does,
    /// for an image without `kill`). Exits non-zero, printing the problems, when it failed.
    Reload,
    /// Approval receipts: `audit verify FILE --public-key PEM` checks a receipts chain offline;
    /// `audit public-key KEY` prints the public key of a signing key (needs no config).
    Audit {
        #[command(subcommand)]
        action: AuditCommand,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Check every link (and with --public-key every signature) of a receipts file; name the
    /// first bad line and exit 1.
    Verify {
        file: PathBuf,
        /// The receipts signing key's public half: a PEM `PUBLIC KEY` (`openssl pkey -in KEY
        /// -pubout`), a JWK or a JWKS; repeat it for a chain signed by several keys.
        #[arg(long = "public-key", value_name = "FILE")]
        public_keys: Vec<PathBuf>,
    },
    /// Print the public key of a receipts signing key, as a JWKS (its kid is the one the
    /// receipts carry), for verifiers.
    PublicKey { key: PathBuf },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    no_transparent_huge_pages();
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match &cli.command {
        Some(Command::Audit {
            action: AuditCommand::Verify { file, public_keys },
        }) => return receipts::audit::verify(file, public_keys),
        Some(Command::Audit {
            action: AuditCommand::PublicKey { key },
        }) => return receipts::audit::public_key(key),
        Some(Command::Init(args)) => return init::cli::run(args),
        Some(Command::Health) => return health(&cli.config),
        Some(Command::Reload) => return reload(&cli.config),
        _ => {}
    }
    // A mistyped variable would otherwise be ignored without a word.
    for name in config::unknown_variables() {
        tracing::warn!(
            "{name} is set but the gateway reads no such variable (it reads POPPY_GATEWAY_CONFIG, POPPY_GATEWAY_KEYS, POPPY_GATEWAY_ADMIN_TOKEN, and POPPY_GATEWAY__SECTION__KEY for config keys): ignored"
        );
    }
    let loaded = config::load(&cli.config);
    match cli.command {
        Some(Command::Check) => check(loaded),
        Some(Command::Explain(args)) => explain::cli::run(loaded, &args),
        Some(Command::Audit { .. } | Command::Init(_) | Command::Health | Command::Reload) => {
            ExitCode::FAILURE
        }
        None => {
            let config = match loaded {
                Ok(config) => config,
                Err(errors) => {
                    eprintln!("{errors}");
                    return ExitCode::FAILURE;
                }
            };
            let keys = match server::signing_keys(
                std::env::var("POPPY_GATEWAY_KEYS").ok().as_deref(),
                &config.store.url,
            ) {
                Ok(keys) => keys,
                Err(e) => {
                    eprintln!("poppy-gateway: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match server::run(config, keys) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("poppy-gateway: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn check(loaded: Result<config::Config, config::ConfigErrors>) -> ExitCode {
    match loaded {
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("check failed: {} problem(s)", errors.0.len());
            ExitCode::FAILURE
        }
        Ok(config) => {
            // A key source that answers with something other than keys is a wrong URL: a
            // problem like any in the files. One out of reach may only be so from here.
            let findings = match trusted_keys::check(&config) {
                Ok(findings) => findings,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            let wrong: Vec<String> = findings
                .iter()
                .filter_map(|f| match &f.outcome {
                    trusted_keys::Outcome::Wrong(why) => Some(format!(
                        "{} (issuer {:?}): not a usable JWK set: {why}",
                        f.source, f.issuer
                    )),
                    _ => None,
                })
                .collect();
            if !wrong.is_empty() {
                for problem in &wrong {
                    eprintln!("{problem}");
                }
                eprintln!("check failed: {} problem(s)", wrong.len());
                return ExitCode::FAILURE;
            }
            println!("{}: ok", config.path.display());
            for finding in &findings {
                match &finding.outcome {
                    trusted_keys::Outcome::Keys(keys) => println!(
                        "trusted keys of {:?} from {}: {keys} key(s)",
                        finding.issuer, finding.source
                    ),
                    trusted_keys::Outcome::Unreachable(why) => eprintln!(
                        "warning: {} (issuer {:?}) cannot be fetched from here: {why}; the gateway would start and refuse this issuer's Sessions and tokens until a fetch succeeds",
                        finding.source, finding.issuer
                    ),
                    trusted_keys::Outcome::Wrong(_) => {}
                }
            }
            // What the start would refuse or do silently, though the files are right.
            // (memory:// starts with a random key, and says so at start.)
            if config.store.url != "memory://"
                && let Err(e) = server::signing_keys(
                    std::env::var("POPPY_GATEWAY_KEYS").ok().as_deref(),
                    &config.store.url,
                )
            {
                eprintln!("warning: with this environment the gateway would not start: {e}");
            }
            let has_policies = config
                .routes
                .iter()
                .any(|r| r.policies.iter().next().is_some());
            let agents_rule = config
                .approval_page
                .as_ref()
                .is_some_and(|page| page.agents_rule().is_some());
            if has_policies && !agents_rule {
                println!(
                    "note: only requests with a Poppy-Session are held; any other request to a policy route passes through unapproved (add [approval_page.agents] to hold agents without Poppy support: docs/approval-page.md)"
                );
            }
            let store = server::redact(&config.store.url);
            let only_default = config.routes.len() == 1 && config.default_route().is_some();
            if only_default {
                let route = &config.routes[0];
                println!("upstream {}  store {store}", route.upstream.url);
            } else {
                println!("store {store}");
            }
            if let Some(conversations) = &config.conversations {
                println!(
                    "conversations service {} (token from {})",
                    conversations.listen, conversations.token_source
                );
            }
            if let Some(page) = &config.approval_page {
                println!(
                    "approval page {} at {} for {} (OpenID {} client {}, secret from {}; sign-in, approve and decline)",
                    page.listen,
                    page.public_url,
                    page.company_name,
                    page.issuer,
                    page.client_id,
                    page.client_secret_source
                );
                if let Some(rule) = page.agents_rule() {
                    println!("agents without Poppy support held for the page: {rule}");
                }
            }
            if let Some(webhook) = &config.webhook {
                // A query may carry the receiver's own token: not printed.
                let url = webhook.url.split('?').next().unwrap_or_default();
                println!(
                    "webhook {url} ({}; secret from {}; queue {})",
                    webhook
                        .events
                        .iter()
                        .map(|e| e.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    webhook.secret_source,
                    webhook.queue
                );
            }
            if let Some(receipts) = &config.receipts {
                let target = match &receipts.target {
                    receipts::ReceiptTarget::File { path, .. } => path.display().to_string(),
                    receipts::ReceiptTarget::Stdout => "stdout".to_owned(),
                };
                match &receipts.signing_key {
                    Some(key) => println!("receipts {target}  signed (key {})", key.kid()),
                    None => println!(
                        "receipts {target}  NOT signed: set [receipts] signing_key (see docs/operations.md)"
                    ),
                }
            }
            for route in &config.routes {
                if !only_default {
                    println!(
                        "route {}  host {}  path_prefix {}  → {}",
                        route.name,
                        route.host.as_deref().unwrap_or("*"),
                        route.path_prefix.as_deref().unwrap_or("*"),
                        route.upstream.url
                    );
                }
                if let Some(mcp) = &route.mcp {
                    println!("mcp endpoint {}", mcp.path);
                }
                print_policies(&route.policies);
                print_empty_files(route);
            }
            ExitCode::SUCCESS
        }
    }
}

/// The route's policy files that hold no policy (they say `nothing_to_approve`, or they would
/// not load): named, so an operator sees that they hold nothing.
fn print_empty_files(route: &config::RouteConfig) {
    for file in &route.policy_files {
        let prefix = format!("{}:", file.display());
        if !route.policies.iter().any(|p| p.source.starts_with(&prefix)) {
            println!(
                "  warning: {} holds no policy (nothing_to_approve): it holds no request",
                file.display()
            );
        }
    }
}

/// `check`'s lines for one route's policies.
fn print_policies(policies: &poppy_gateway::policy::PolicySet) {
    for policy in policies.iter() {
        if let Some(tool) = &policy.tool {
            println!(
                "  {:<7} {:<40} {:<16} {}_…  expires in {:?}  ({})",
                "TOOL", tool, policy.name, policy.id_prefix, policy.expires_in, policy.source
            );
        }
        if let Some(route) = &policy.route {
            println!(
                "  {:<7} {:<40} {:<16} {}_…  expires in {:?}  ({})",
                route.method,
                route.path.to_string(),
                policy.name,
                policy.id_prefix,
                policy.expires_in,
                policy.source
            );
            for lookup in &policy.lookups {
                let method = if lookup.quote { "POST" } else { "GET" };
                let name = if lookup.name.is_empty() {
                    String::new()
                } else {
                    format!(" {}", lookup.name)
                };
                println!("          lookup{name} {method} {}", lookup.url);
            }
            if !policy.overrides.is_empty() {
                println!(
                    "          overrides {} where both match",
                    policy.overrides.join(", ")
                );
            }
            if policy.approval.page {
                println!(
                    "          approval on the page: without the extension, the approval page's link"
                );
            }
            if policy.approval.page_proof {
                println!(
                    "          proof company_page: a Poppy approval counts once approved on the page"
                );
            }
        }
        if let Some(condition) = &policy.condition {
            println!("          needs approval when: {condition} (else passes through unheld)");
        }
        println!("          {}", policy.accepted_parts());
    }
}

/// `[admin] listen` alone, for `health` and `reload`; its problems printed.
fn admin_listen(config_path: &std::path::Path) -> Result<Option<String>, ExitCode> {
    config::admin_listen(config_path).map_err(|errors| {
        eprintln!("{errors}");
        ExitCode::FAILURE
    })
}

fn health(config_path: &std::path::Path) -> ExitCode {
    let listen = match admin_listen(config_path) {
        Ok(listen) => listen,
        Err(code) => return code,
    };
    match poppy_gateway::health::check(listen.as_deref(), std::time::Duration::from_secs(2)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("unhealthy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn reload(config_path: &std::path::Path) -> ExitCode {
    let listen = match admin_listen(config_path) {
        Ok(listen) => listen,
        Err(code) => return code,
    };
    let token = std::env::var("POPPY_GATEWAY_ADMIN_TOKEN").unwrap_or_default();
    if token.is_empty() {
        eprintln!("reload: set POPPY_GATEWAY_ADMIN_TOKEN (the admin token of the running gateway)");
        return ExitCode::FAILURE;
    }
    match poppy_gateway::health::reload(
        listen.as_deref(),
        &token,
        std::time::Duration::from_secs(30),
    ) {
        Ok(body) => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("reload failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // pingora's own debug and trace lines print whole request headers (Authorization,
    // Poppy-Session): keep them out unless RUST_LOG asks for pingora by name.
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("pingora")) {
        for directive in ["pingora_core=info", "pingora_proxy=info"] {
            if let Ok(directive) = directive.parse() {
                filter = filter.add_directive(directive);
            }
        }
    }
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::{Layer as _, fmt};
    let layer = fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    let quiet = poppy_gateway::quiet_log::QuietRedisClient::default;
    // The install can only fail when a subscriber is set already (not in this binary).
    let _ = match format {
        LogFormat::Text => {
            tracing::subscriber::set_global_default(registry.with(layer.with_filter(quiet())))
        }
        LogFormat::Json => tracing::subscriber::set_global_default(
            registry.with(
                layer
                    .with_ansi(false)
                    .event_format(poppy_gateway::log_format::FlatJson)
                    .with_filter(quiet()),
            ),
        ),
    };
    // `log` records (pingora's, the Redis client's) reach the subscriber through the bridge,
    // pingora's at the level they deserve (see quiet_log.rs).
    use tracing_log::AsLog as _;
    let bridge = poppy_gateway::quiet_log::Relevel::new(tracing_log::LogTracer::new());
    if log::set_boxed_logger(Box::new(bridge)).is_ok() {
        log::set_max_level(tracing::level_filters::LevelFilter::current().as_log());
    }
}
