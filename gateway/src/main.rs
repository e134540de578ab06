//! `poppy-gateway`: thin CLI over the library. `--config F` runs; `check --config F` validates.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use poppy_gateway::config;

use poppy_gateway::explain;
use poppy_gateway::server;

/// glibc's malloc was 10-24% of the CPU of a proxied request (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Exit 0 when the admin listener the config names answers `GET /healthz` with 200 (a
    /// container health check).
    Health,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let loaded = config::load(&cli.config);
    match cli.command {
        Some(Command::Check) => check(loaded),
        Some(Command::Explain(args)) => explain::cli::run(loaded, &args),
        Some(Command::Health) => health(loaded),
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
            println!("{}: ok", config.path.display());
            println!(
                "upstream {}  store {}",
                config.upstream.url,
                server::redact(&config.store.url)
            );
            if let Some(mcp) = &config.mcp {
                println!("mcp endpoint {}", mcp.path);
            }
            for policy in config.policies.iter() {
                if let Some(tool) = &policy.tool {
                    println!(
                        "  {:<7} {:<40} {:<16} {}_…  expires in {:?}  ({})",
                        "TOOL",
                        tool,
                        policy.name,
                        policy.id_prefix,
                        policy.expires_in,
                        policy.source
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
                    if let Some(lookup) = &policy.lookup {
                        println!("          lookup GET {lookup}");
                    }
                }
                println!("          {}", policy.accepted_parts());
            }
            ExitCode::SUCCESS
        }
    }
}

fn health(loaded: Result<config::Config, config::ConfigErrors>) -> ExitCode {
    let config = match loaded {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    match poppy_gateway::health::check(&config, std::time::Duration::from_secs(2)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("unhealthy: {e}");
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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
