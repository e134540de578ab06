//! Build the pingora server from a validated config, and run it.

use std::sync::Arc;
use std::time::Duration;

use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::{RunArgs, Server};
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use crate::admin::AdminApp;
use crate::clock::SystemClock;
use crate::config::Config;
use crate::drain::{Drain, DrainOnSignal};
use crate::listener::{
    BodyLimits, Connections, HeldBodies, LimitedApp, REFUSING_AT_ONCE, Requests, UpstreamSlots,
};
use crate::metrics::Metrics;
use crate::policy::LivePolicies;
use crate::protocol::{Keys, KeysError, SigningKey};
use crate::proxy::{AccessLogger, Edge, RouteRuntime, Routes};
use crate::proxy::{GatewayProxy, McpEndpoint, Operations};
use crate::reload::PolicyReloader;
use crate::run::{Executor, ExecutorParts, Runner};
use crate::store::{self, DurabilityCheck, InstrumentedStore, OperationStore};
use crate::tls::{CertFiles, CertReloader, CertStore};
use crate::upstream::UpstreamClient;

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

/// Secrets this repository ships in its examples (deploy/kubernetes/examples/secret.yaml): published,
/// so never accepted as the real thing.
const SHIPPED_PLACEHOLDERS: [&str; 1] = ["replace-me-with-openssl-rand-hex-32"];
/// docker/compose.yaml's development signing key: fine for the demo's `memory://`, where keys
/// are bound to the process; with a shared store anyone who read the file can mint revisions.
const COMPOSE_DEVELOPMENT_KEY: &str = "dev-only-insecure-key-do-not-deploy";

/// Refuse a secret that is one of [`SHIPPED_PLACEHOLDERS`] (any comma-separated part of it).
fn refuse_placeholder(variable: &'static str, value: &str) -> Result<(), StartError> {
    match value
        .split(',')
        .map(str::trim)
        .find_map(|part| SHIPPED_PLACEHOLDERS.iter().find(|p| **p == part))
    {
        Some(value) => Err(StartError::Placeholder { variable, value }),
        None => Ok(()),
    }
}

/// The signing keys from `POPPY_GATEWAY_KEYS`. Redis needs them, since every replica and every
/// restart must verify the same revisions. `memory://` forgets performed operations when the
/// process ends, so its keys are always bound to the process: a revision minted before a
/// restart is refused after it, never performed a second time.
pub fn signing_keys(env_value: Option<&str>, store_url: &str) -> Result<Keys, StartError> {
    let configured = match env_value.map(str::trim).filter(|v| !v.is_empty()) {
        Some(value) => {
            refuse_placeholder("POPPY_GATEWAY_KEYS", value)?;
            if store_url != "memory://"
                && value
                    .split(',')
                    .any(|k| k.trim() == COMPOSE_DEVELOPMENT_KEY)
            {
                tracing::warn!(
                    "POPPY_GATEWAY_KEYS holds docker/compose.yaml's development key, which anyone can read, and the store is shared: anyone can mint revisions this gateway accepts. Set your own (openssl rand -hex 32)"
                );
            }
            Some(Keys::from_env_value(value)?)
        }
        None => None,
    };
    match configured {
        Some(keys) if store_url == "memory://" => Ok(keys.for_this_process()),
        Some(keys) => Ok(keys),
        None if store_url == "memory://" => {
            tracing::warn!(
                "POPPY_GATEWAY_KEYS is not set: using a random key (fine with memory://, whose approvals end with the process)"
            );
            Ok(Keys::new(vec![SigningKey::random()]).ok_or(KeysError::Empty)?)
        }
        None => Err(KeysError::NotSet.into()),
    }
}

/// Refuse to start when a listen address is taken. pingora would keep retrying the bind for
/// half a minute while the admin listener already reports healthy, so a second gateway on a
/// taken port would look up and serve nothing.
fn check_listen_addresses(config: &Config) -> Result<(), StartError> {
    let addresses = std::iter::once(("server.listen", &config.server.listen))
        .chain(config.admin_listen.as_ref().map(|a| ("admin.listen", a)))
        .chain(
            config
                .conversations
                .as_ref()
                .map(|c| ("conversations.listen", &c.listen)),
        )
        .chain(
            config
                .approval_page
                .as_ref()
                .map(|p| ("approval_page.listen", &p.listen)),
        );
    for (key, address) in addresses {
        std::net::TcpListener::bind(address.as_str()).map_err(|error| StartError::Listen {
            key,
            address: address.clone(),
            error,
        })?;
    }
    Ok(())
}

/// The store's durability check, before serving (see `store::DurabilityCheck`): warns about a
/// Redis that could forget claims, and refuses to start when `require_durable` says so or
/// when the store has replicas and `wait_replicas` was not chosen.
fn check_store(check: &DurabilityCheck, store: &dyn OperationStore) -> Result<(), StartError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StartError::Store(format!("cannot check the store: {e}")))?;
    runtime
        .block_on(check.run(store))
        .map_err(|e| StartError::Store(e.to_string()))
}

/// Start listening and serve until a signal stops the process.
pub fn run(config: Config, keys: Keys) -> Result<(), StartError> {
    if let Ok(token) = std::env::var("POPPY_GATEWAY_ADMIN_TOKEN") {
        refuse_placeholder("POPPY_GATEWAY_ADMIN_TOKEN", token.trim())?;
    }
    check_listen_addresses(&config)?;
    // `[session]`'s verifier (its HTTP client, key caches, introspection cache), made once
    // and shared by every route and the conversations service.
    let session_claims = config.session.build().map_err(StartError::Session)?;
    let fetched_keys = session_claims.fetched_issuers();
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
    check_store(&durability, store.as_ref())?;
    let receipts = match &config.receipts {
        Some(settings) => Some(Arc::new(crate::receipts::ReceiptSink::open(settings)?)),
        None => None,
    };
    metrics.policies(config.policies.iter().map(|p| p.name.as_str()));
    // Every route's policies together, for the admin API; each route matches its own.
    let policies = LivePolicies::new(config.policies.clone());
    let admin_policies = policies.clone();

    let caps = connection_caps(&config);
    metrics.connection_caps(caps.max_connections, caps.max_upstream_connections);
    // The drain (see drain.rs) waits for approved forwards before pingora's own shutdown
    // starts; pingora's grace period is then only for writing the last responses.
    let grace = config.server.shutdown_grace.as_secs();
    let conf = ServerConf {
        threads: config.server.threads,
        // One single-threaded runtime per thread: work stealing cost passthrough CPU (BENCHMARKS.md).
        work_stealing: false,
        grace_period_seconds: Some(grace),
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
    };
    let drain = Arc::new(Drain::default());
    let mut server = Server::new_with_opt_and_conf(Opt::default(), conf);
    server.bootstrap();

    // `[webhook]`: outcomes raise events into its queue (`events::sink`); one worker on its
    // own runtime sends them, and flushes within the shutdown grace.
    if let Some(settings) = &config.webhook {
        let (events, queued) = metrics.webhook_counters()?;
        let counters = crate::events::Counters { events, queued };
        let (queue, outbox) = crate::events::queue(settings, counters);
        let sender = crate::events::Sender::new(settings, outbox, config.server.shutdown_grace)
            .map_err(StartError::Webhook)?;
        crate::events::install(queue);
        server.add_service(background_service("webhook", sender));
    }

    // Fetched trusted keys are read once now, so that a source out of reach is logged at start.
    if !fetched_keys.is_empty() {
        server.add_service(background_service(
            "trusted keys",
            crate::trusted_keys::FirstFetch(fetched_keys),
        ));
    }

    let held = HeldBodies::new(config.server.max_held_body_bytes);
    // Client connections open on the proxy's and the conversations service's listeners: one
    // cap for both (see listener/connections.rs).
    let connections = Connections::new(
        caps.max_connections,
        config.server.header_read_timeout,
        Arc::clone(&metrics),
    );
    // `max_upstream_connections`: one count for the proxy and the conversations service.
    let upstream_slots = UpstreamSlots::new(caps.max_upstream_connections, Arc::clone(&metrics));
    metrics.set_routes(config.routes.iter().map(|route| route.name.as_str()));
    let mut routes = Vec::new();
    let mut reloaded_routes = Vec::new();
    for route in &config.routes {
        let upstream = Arc::new(UpstreamClient::new(&route.upstream));
        let route_policies = LivePolicies::new(route.policies.clone());
        reloaded_routes.push((route.name.clone(), route_policies.clone()));
        let executor = Arc::new(Executor::new(ExecutorParts {
            keys: keys.clone(),
            store: Arc::clone(&store),
            upstream: Arc::clone(&upstream),
            settings: route.upstream.clone(),
            route: (!route.is_default()).then(|| route.name.clone()),
            remember_grace: config.store.remember_grace,
            page_url: config.approval_page.as_ref().map(|p| p.public_url.clone()),
            agents: config.approval_page.as_ref().and_then(|p| p.agents.clone()),
            policies: route_policies.clone(),
            metrics: Arc::clone(&metrics),
            drain: Arc::clone(&drain),
            receipts: receipts.clone(),
            clock: Arc::new(SystemClock),
        }));
        // `[conversations]`: the operations service for Company Agents, on its own listener;
        // it runs the default route (`load` requires one).
        if let Some(settings) = &config.conversations
            && route.is_default()
        {
            // The proxy's limits around it: the same connection cap (one count for both
            // listeners), header deadline and held-bodies budget.
            let app = crate::conversations::ConversationsApp::new(
                settings,
                &config,
                crate::conversations::Shared {
                    executor: Arc::clone(&executor),
                    policies: route_policies.clone(),
                    metrics: Arc::clone(&metrics),
                    held: Arc::clone(&held),
                    upstream_slots: Arc::clone(&upstream_slots),
                    claims: session_claims.clone(),
                },
            );
            let mut service = Service::new(
                "poppy-gateway conversations".to_owned(),
                LimitedApp {
                    inner: Arc::new(Requests {
                        inner: Arc::new(app),
                    }),
                    connections: Arc::clone(&connections),
                    tls: None,
                    h2c: false,
                },
            );
            service.add_tcp(&settings.listen);
            server.add_service(service);
        }
        routes.push(RouteRuntime {
            name: route.name.clone(),
            host: route.host.clone(),
            path_prefix: route.path_prefix.clone(),
            mcp: route.mcp.as_ref().map(|mcp| {
                McpEndpoint::new(
                    mcp,
                    &upstream,
                    &route.upstream,
                    &route.name,
                    executor.store(),
                    keys.clone(),
                )
            }),
            operations: Operations {
                policies: route_policies,
                runner: Runner {
                    executor,
                    session_claims: session_claims.clone(),
                    metrics: Arc::clone(&metrics),
                },
                body_limits: BodyLimits {
                    max_body_bytes: config.server.max_body_bytes,
                    read_timeout: config.server.body_read_timeout,
                    held: Arc::clone(&held),
                },
            },
            upstream,
            passthrough: route.upstream.passthrough.clone(),
        });
    }
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
    // `[approval_page]`: the Company's approval page, on its own listener, with the proxy's
    // connection cap and header deadline around it.
    if let Some(settings) = &config.approval_page {
        let app = crate::approval_page::ApprovalPageApp::new(
            settings,
            keys.clone(),
            Arc::clone(&store),
            crate::approval_page::Kept {
                grace: config.store.remember_grace,
                longest_execution: config.longest_execution(),
            },
            policies.clone(),
        )
        .map_err(StartError::ApprovalPage)?;
        let mut service = Service::new(
            "poppy-gateway approval page".to_owned(),
            LimitedApp {
                inner: Arc::new(Requests {
                    inner: Arc::new(HeadRead(app)),
                }),
                connections: Arc::clone(&connections),
                tls: None,
                h2c: false,
            },
        );
        service.add_tcp(&settings.listen);
        server.add_service(service);
    }
    let gateway = GatewayProxy {
        routes: Routes::new(routes),
        metrics: Arc::clone(&metrics),
        well_known: config.well_known.clone(),
        operations_versions: config.operations_versions.clone(),
        edge: Arc::new(Edge {
            proxy_headers: config.proxy_headers.clone(),
            access_log,
        }),
        upstream_slots,
    };
    // The connection cap, TLS handshake and header deadline sit around pingora's HTTP app (see
    // listener/connections.rs).
    let mut http = pingora::proxy::http_proxy(&server.configuration, gateway);
    let mut options = pingora::apps::HttpServerOptions::default();
    options.h2c = config.server.h2c;
    // CONNECT reaches the gateway's first hook, which refuses it with its JSON error: pingora's
    // own refusal of it over HTTP/2 had an empty body (proxy/service.rs).
    options.allow_connect_method_proxying = true;
    // An idle HTTP/2 connection has the deadline an idle HTTP/1.1 one has (see h2.rs).
    options.h2_idle_timeout = Some(config.server.header_read_timeout);
    http.server_options = Some(options);
    http.h2_options = Some(crate::listener::h2_server_options(
        config.server.max_streams_per_connection,
    ));
    let tls = match &config.server.tls {
        Some(tls) => {
            let certs = CertStore::open(CertFiles {
                cert_file: tls.cert_file.clone(),
                key_file: tls.key_file.clone(),
                http2: tls.http2,
            })?;
            let handshake = certs
                .handshake()
                .map_err(|e| StartError::TlsSettings(Box::new(*e)))?;
            server.add_service(background_service("TLS reload", CertReloader(certs)));
            Some(handshake)
        }
        None => None,
    };
    let mut proxy = Service::new(
        "poppy-gateway".to_owned(),
        LimitedApp {
            inner: Arc::new(Requests {
                inner: Arc::new(http),
            }),
            connections,
            tls,
            h2c: config.server.h2c,
        },
    );
    // No 64 KiB read buffer per connection (TLS or not): request bodies are read whole in
    // pingora's own body buffer, and each held body or idle connection would carry one more
    // (RELIABILITY.md). The listener is plain TCP even with `[server.tls]`: the handshake is
    // the connection limits' to do.
    proxy.add_listener(
        ListenerConfig::tcp(&config.server.listen).l4_buffer(L4BufferSettings::default().read(0)),
    );
    server.add_service(proxy);

    // SIGHUP (and the admin listener's `POST /reload`) reloads the policies. The admin
    // listener waits for the reloader, so once `/healthz` answers, a SIGHUP reloads instead of
    // ending the process.
    let policy_reloader = Arc::new(
        PolicyReloader::new(&config, policies, Arc::clone(&metrics)).with_routes(reloaded_routes),
    );
    let reloader = server.add_service(background_service(
        "policy reload",
        policy_reloader.service(),
    ));
    if let Some(listen) = &config.admin_listen {
        let mut admin = Service::new(
            "poppy-gateway admin".to_owned(),
            AdminApp {
                metrics,
                store,
                token: std::env::var("POPPY_GATEWAY_ADMIN_TOKEN")
                    .ok()
                    .filter(|t| !t.is_empty()),
                policies: admin_policies,
                remember_grace: config.store.remember_grace,
                durability,
                receipts,
                drain: Arc::clone(&drain),
                reloader: policy_reloader,
            },
        );
        admin.add_tcp(listen);
        server.add_service(admin).add_dependency(&reloader);
    }

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
    let limit = config.longest_execution() + Duration::from_secs(1);
    server.run(RunArgs {
        shutdown_signal: Box::new(DrainOnSignal { drain, limit }),
    });
    // The spans of the last requests, before the process ends.
    crate::telemetry::flush();
    Ok(())
}

/// `max_connections` and `max_upstream_connections` fitted under the open-files limit, raised
/// first to its hard limit (see fds.rs); a warning when they had to be lowered.
fn connection_caps(config: &Config) -> crate::fds::Caps {
    let server = &config.server;
    let configured = crate::fds::Caps {
        max_connections: server.max_connections,
        max_upstream_connections: server.max_upstream_connections,
        upstream_pool: server
            .max_upstream_connections
            .min(crate::fds::UPSTREAM_POOL),
    };
    let Some(limit) = crate::fds::raise_limit() else {
        return configured;
    };
    let caps = crate::fds::fit(
        limit,
        server.threads,
        server.max_connections,
        server.max_upstream_connections,
        REFUSING_AT_ONCE,
    );
    if caps != configured {
        tracing::warn!(
            open_files_limit = limit,
            max_connections = caps.max_connections,
            max_upstream_connections = caps.max_upstream_connections,
            configured_max_connections = server.max_connections,
            configured_max_upstream_connections = server.max_upstream_connections,
            "the open-files limit (ulimit -n) is too low for server.max_connections and server.max_upstream_connections: both are lowered to fit; raise the limit to use them"
        );
    }
    caps
}

/// A store URL without its password, for logs and `check`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// A service of its own listener (the approval page) under the proxy's header deadline: the
/// deadline ends once a request's head has arrived (listener/connections.rs).
struct HeadRead<A>(A);

#[async_trait::async_trait]
impl<A: pingora::apps::http_app::ServeHttp + Send + Sync> pingora::apps::http_app::ServeHttp
    for HeadRead<A>
{
    async fn response(
        &self,
        session: &mut pingora::protocols::http::ServerSession,
    ) -> http::Response<Vec<u8>> {
        crate::listener::head_read();
        self.0.response(session).await
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn store_urls_lose_their_password() {
        assert_eq!(
            redact("redis://user:secret@h:6379/0"),
            "redis://***@h:6379/0"
        );
        assert_eq!(redact("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(redact("memory://"), "memory://");
    }
}
