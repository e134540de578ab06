//! The listeners besides the conversations service: the Company's approval page, the proxy
//! itself (its HTTP options, TLS and connection limits), and the admin listener with the
//! policy reloader it waits for.

use std::sync::Arc;

use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use super::{Limits, Shared, StartError};
use crate::admin::AdminApp;
use crate::config::Config;
use crate::listener::{LimitedApp, Requests};
use crate::policy::LivePolicies;
use crate::proxy::{AccessLogger, Edge, GatewayProxy, RouteRuntime, Routes};
use crate::reload::PolicyReloader;
use crate::tls::{CertFiles, CertReloader, CertStore};

/// `[approval_page]`: the Company's approval page, on its own listener, with the proxy's
/// connection cap and header deadline around it.
pub(super) fn add_approval_page(
    server: &mut Server,
    config: &Config,
    shared: &Shared,
    limits: &Limits,
) -> Result<(), StartError> {
    let Some(settings) = &config.approval_page else {
        return Ok(());
    };
    let app = crate::approval_page::ApprovalPageApp::new(
        settings,
        shared.keys.clone(),
        Arc::clone(&shared.store),
        crate::approval_page::Kept {
            grace: config.store.remember_grace,
            longest_execution: config.longest_execution(),
        },
        shared.policies.clone(),
    )
    .map_err(StartError::ApprovalPage)?;
    let mut service = Service::new(
        "poppy-gateway approval page".to_owned(),
        LimitedApp {
            inner: Arc::new(Requests {
                inner: Arc::new(HeadRead(app)),
            }),
            connections: Arc::clone(&limits.connections),
            tls: None,
            h2c: false,
        },
    );
    service.add_tcp(&settings.listen);
    server.add_service(service);
    Ok(())
}

/// The proxy: pingora's HTTP app over `routes`, inside the connection cap, TLS handshake and
/// header deadline (see listener/connections.rs); `[server.tls]`'s certificates reload on their
/// own.
pub(super) fn add_proxy(
    server: &mut Server,
    config: &Config,
    shared: &Shared,
    limits: Limits,
    routes: Vec<RouteRuntime>,
    access_log: Option<AccessLogger>,
) -> Result<(), StartError> {
    let gateway = GatewayProxy {
        routes: Routes::new(routes),
        metrics: Arc::clone(&shared.metrics),
        well_known: config.well_known.clone(),
        operations_versions: config.operations_versions.clone(),
        edge: Arc::new(Edge {
            proxy_headers: config.proxy_headers.clone(),
            access_log,
        }),
        upstream_slots: limits.upstream_slots,
    };
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
            connections: limits.connections,
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
    Ok(())
}

/// SIGHUP (and the admin listener's `POST /reload`) reloads the policies: every route's
/// (`reloaded`, by name) and the whole set. The admin listener waits for the reloader, so
/// once `/healthz` answers, a SIGHUP reloads instead of ending the process.
pub(super) fn add_reload_and_admin(
    server: &mut Server,
    config: &Config,
    shared: &Shared,
    reloaded: Vec<(String, LivePolicies)>,
) {
    let policy_reloader = Arc::new(
        PolicyReloader::new(config, shared.policies.clone(), Arc::clone(&shared.metrics))
            .with_routes(reloaded),
    );
    let reloader = server.add_service(background_service(
        "policy reload",
        policy_reloader.service(),
    ));
    if let Some(listen) = &config.admin_listen {
        let mut admin = Service::new(
            "poppy-gateway admin".to_owned(),
            AdminApp {
                metrics: Arc::clone(&shared.metrics),
                store: Arc::clone(&shared.store),
                token: std::env::var("POPPY_GATEWAY_ADMIN_TOKEN")
                    .ok()
                    .filter(|t| !t.is_empty()),
                policies: shared.policies.clone(),
                remember_grace: config.store.remember_grace,
                durability: Arc::clone(&shared.durability),
                receipts: shared.receipts.clone(),
                drain: Arc::clone(&shared.drain),
                reloader: policy_reloader,
            },
        );
        admin.add_tcp(listen);
        server.add_service(admin).add_dependency(&reloader);
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
