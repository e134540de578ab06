//! Build the pingora server from a validated config, and run it.
//!
//! [`run`] in named steps: the checks before anything starts (`preflight`), what every
//! listener shares ([`Shared`]) and what they count together ([`Limits`]), pingora's
//! settings, the routes and the conversations service (`routes`), then the other listeners
//! (`listeners`). The secrets it starts with are `secrets`'.

mod listeners;
mod preflight;
mod routes;
mod secrets;

use std::sync::Arc;
use std::time::Duration;

use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::{RunArgs, Server};
use pingora::services::background::background_service;

pub use self::secrets::{redact, signing_keys};
use crate::config::Config;
use crate::drain::{Drain, DrainOnSignal};
use crate::fds::Caps;
use crate::identity::SessionClaims;
use crate::listener::{Connections, HeldBodies, UpstreamSlots};
use crate::metrics::Metrics;
use crate::policy::LivePolicies;
use crate::protocol::{Keys, KeysError};
use crate::proxy::AccessLogger;
use crate::receipts::ReceiptSink;
use crate::store::{self, DurabilityCheck, InstrumentedStore, OperationStore};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{key} {address}: {error}")]
    Listen {
        key: &'static str,
        address: String,
        error: std::io::Error,
    },
    #[error("{0}")]
    Keys(#[from] KeysError),
    #[error(
        "{variable} is the placeholder this repository ships ({value:?}), which anyone can read: set your own, e.g. `openssl rand -hex 32`"
    )]
    Placeholder {
        variable: &'static str,
        value: &'static str,
    },
    #[error("store: {0}")]
    Store(String),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("{0}")]
    Receipts(#[from] crate::receipts::ReceiptError),
    #[error("server.tls: {0}")]
    Tls(#[from] crate::tls::TlsFileError),
    #[error("server.tls: {0}")]
    TlsSettings(Box<pingora::Error>),
    #[error("{0}")]
    AccessLog(#[from] crate::proxy::AccessLogError),
    #[error("session: {0}")]
    Session(String),
    #[error("approval_page: {0}")]
    ApprovalPage(String),
    #[error("webhook: {0}")]
    Webhook(String),
    #[error("{0}")]
    Tracing(#[from] crate::telemetry::TracingError),
}

/// What the listeners share, made once before any of them.
struct Shared {
    keys: Keys,
    /// `[session]`'s verifier (its HTTP client, key caches, introspection cache), shared by
    /// every route and the conversations service.
    session_claims: SessionClaims,
    metrics: Arc<Metrics>,
    store: Arc<dyn OperationStore>,
    durability: Arc<DurabilityCheck>,
    receipts: Option<Arc<ReceiptSink>>,
    /// Every route's policies together, for the admin API, the approval page and the
    /// reloader; each route matches its own.
    policies: LivePolicies,
    /// The drain (see drain.rs) waits for approved forwards before pingora's own shutdown
    /// starts; pingora's grace period is then only for writing the last responses.
    drain: Arc<Drain>,
}

impl Shared {
    /// The verifier, the metrics, tracing, and the store, checked (see
    /// [`preflight::check_store`]) before anything listens.
    fn open(config: &Config, keys: Keys) -> Result<Shared, StartError> {
        let session_claims = config.session.build().map_err(StartError::Session)?;
        let metrics = Arc::new(Metrics::new()?);
        if let Some(settings) = &config.tracing {
            crate::telemetry::start(settings)?;
        }
        let store = store::open_with(&config.store.url, &config.store.options())
            .map_err(|e| StartError::Store(e.to_string()))?;
        let store = InstrumentedStore::wrap(store, Arc::clone(&metrics));
        let durability = Arc::new(DurabilityCheck::new(
            config.store.require_durable,
            config.store.wait_replicas_set,
            Arc::clone(&metrics),
        ));
        preflight::check_store(&durability, store.as_ref())?;
        let receipts = match &config.receipts {
            Some(settings) => Some(Arc::new(ReceiptSink::open(settings)?)),
            None => None,
        };
        metrics.policies(config.policies.iter().map(|p| p.name.as_str()));
        Ok(Shared {
            keys,
            session_claims,
            metrics,
            store,
            durability,
            receipts,
            policies: LivePolicies::new(config.policies.clone()),
            drain: Arc::new(Drain::default()),
        })
    }
}

/// What the proxy and the other listeners count together.
struct Limits {
    /// Request bodies held in memory.
    held: Arc<HeldBodies>,
    /// Client connections open on the proxy's, the conversations service's and the approval
    /// page's listeners: one cap for all (see listener/connections.rs).
    connections: Arc<Connections>,
    /// `max_upstream_connections`: one count for the proxy and the conversations service.
    upstream_slots: Arc<UpstreamSlots>,
}

impl Limits {
    fn new(config: &Config, caps: &Caps, metrics: &Arc<Metrics>) -> Limits {
        Limits {
            held: HeldBodies::new(config.server.max_held_body_bytes),
            connections: Connections::new(
                caps.max_connections,
                config.server.header_read_timeout,
                Arc::clone(metrics),
            ),
            upstream_slots: UpstreamSlots::new(caps.max_upstream_connections, Arc::clone(metrics)),
        }
    }
}

/// Start listening and serve until a signal stops the process.
pub fn run(config: Config, keys: Keys) -> Result<(), StartError> {
    preflight::check(&config)?;
    let shared = Shared::open(&config, keys)?;
    let caps = preflight::connection_caps(&config);
    shared
        .metrics
        .connection_caps(caps.max_connections, caps.max_upstream_connections);
    let mut server = Server::new_with_opt_and_conf(Opt::default(), server_conf(&config, &caps));
    server.bootstrap();
    add_webhook(&mut server, &config, &shared.metrics)?;
    // Fetched trusted keys are read once now, so that a source out of reach is logged at start.
    let fetched_keys = shared.session_claims.fetched_issuers();
    if !fetched_keys.is_empty() {
        server.add_service(background_service(
            "trusted keys",
            crate::trusted_keys::FirstFetch(fetched_keys),
        ));
    }
    let limits = Limits::new(&config, &caps, &shared.metrics);
    let built = routes::build(&mut server, &config, &shared, &limits);
    let access_log = open_access_log(&mut server, &config)?;
    listeners::add_approval_page(&mut server, &config, &shared, &limits)?;
    listeners::add_proxy(
        &mut server,
        &config,
        &shared,
        limits,
        built.routes,
        access_log,
    )?;
    listeners::add_reload_and_admin(&mut server, &config, &shared, built.reloaded);
    log_start(&config);
    let limit = config.longest_execution() + Duration::from_secs(1);
    server.run(RunArgs {
        shutdown_signal: Box::new(DrainOnSignal {
            drain: shared.drain,
            limit,
        }),
    });
    // The spans of the last requests, before the process ends.
    crate::telemetry::flush();
    Ok(())
}

/// pingora's settings: threads, shutdown grace, trust anchors and the passthrough pool.
fn server_conf(config: &Config, caps: &Caps) -> ServerConf {
    ServerConf {
        threads: config.server.threads,
        // One single-threaded runtime per thread: work stealing cost passthrough CPU (BENCHMARKS.md).
        work_stealing: false,
        // The drain waits for approved forwards first (see [`Shared::drain`]).
        grace_period_seconds: Some(config.server.shutdown_grace.as_secs()),
        graceful_shutdown_timeout_seconds: Some(1),
        // Trust anchors for an https:// upstream on pingora's passthrough connector.
        // `load` makes every route's ca_file the same one.
        ca_file: config
            .routes
            .iter()
            .find_map(|r| r.upstream.passthrough.ca_file.as_ref())
            .map(|p| p.display().to_string()),
        // Idle passthrough connections count against the descriptors too (fds.rs).
        upstream_keepalive_pool_size: caps.upstream_pool,
        ..ServerConf::default()
    }
}

/// `[webhook]`: outcomes raise events into its queue (`events::sink`); one worker on its own
/// runtime sends them, and flushes within the shutdown grace.
fn add_webhook(server: &mut Server, config: &Config, metrics: &Metrics) -> Result<(), StartError> {
    let Some(settings) = &config.webhook else {
        return Ok(());
    };
    let (events, queued) = metrics.webhook_counters()?;
    let counters = crate::events::Counters { events, queued };
    let (queue, outbox) = crate::events::queue(settings, counters);
    let sender = crate::events::Sender::new(settings, outbox, config.server.shutdown_grace)
        .map_err(StartError::Webhook)?;
    crate::events::install(queue);
    server.add_service(background_service("webhook", sender));
    Ok(())
}

/// `[access_log]`, and the service that reopens its file when asked.
fn open_access_log(
    server: &mut Server,
    config: &Config,
) -> Result<Option<AccessLogger>, StartError> {
    let access_log = config
        .access_log
        .as_ref()
        .map(AccessLogger::open)
        .transpose()?;
    if let (Some(logger), Some(settings)) = (&access_log, &config.access_log)
        && let Some(reopener) = logger.reopener(settings)
    {
        server.add_service(background_service("access log reopen", reopener));
    }
    Ok(access_log)
}

/// What is starting, where: the listeners, the routes and their upstreams, the store (without
/// its password).
fn log_start(config: &Config) {
    tracing::info!(
        listen = %config.server.listen,
        admin = config.admin_listen.as_deref().unwrap_or("off"),
        conversations = config
            .conversations
            .as_ref()
            .map_or("off", |c| c.listen.as_str()),
        approval_page = config
            .approval_page
            .as_ref()
            .map_or("off", |p| p.listen.as_str()),
        routes = %config
            .routes
            .iter()
            .map(|r| format!("{} → {}", r.name, r.upstream.url))
            .collect::<Vec<_>>()
            .join(", "),
        store = %redact(&config.store.url),
        policies = config.policies.iter().count(),
        "poppy-gateway starting"
    );
}
