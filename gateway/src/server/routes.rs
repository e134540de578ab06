//! Each route's runtime (its upstream, policies, executor and MCP endpoint), and the
//! conversations service, which runs the default route's executor on its own listener.

use std::sync::Arc;

use pingora::server::Server;
use pingora::services::listening::Service;

use super::{Limits, Shared};
use crate::clock::SystemClock;
use crate::config::{Config, Conversations};
use crate::listener::{BodyLimits, LimitedApp, Requests};
use crate::policy::LivePolicies;
use crate::proxy::{McpEndpoint, Operations, RouteRuntime};
use crate::run::{Executor, ExecutorParts, Runner};
use crate::upstream::UpstreamClient;

/// The routes, in the config's order, and each route's policies by name for the reloader.
pub(super) struct Built {
    pub(super) routes: Vec<RouteRuntime>,
    pub(super) reloaded: Vec<(String, LivePolicies)>,
}

/// Every route's runtime; the conversations service is added to `server` with the default
/// route's executor.
pub(super) fn build(
    server: &mut Server,
    config: &Config,
    shared: &Shared,
    limits: &Limits,
) -> Built {
    shared
        .metrics
        .set_routes(config.routes.iter().map(|route| route.name.as_str()));
    let mut routes = Vec::new();
    let mut reloaded = Vec::new();
    for route in &config.routes {
        let upstream = Arc::new(UpstreamClient::new(&route.upstream));
        let route_policies = LivePolicies::new(route.policies.clone());
        reloaded.push((route.name.clone(), route_policies.clone()));
        let executor = Arc::new(Executor::new(ExecutorParts {
            keys: shared.keys.clone(),
            store: Arc::clone(&shared.store),
            upstream: Arc::clone(&upstream),
            settings: route.upstream.clone(),
            route: (!route.is_default()).then(|| route.name.clone()),
            remember_grace: config.store.remember_grace,
            page_url: config.approval_page.as_ref().map(|p| p.public_url.clone()),
            agents: config.approval_page.as_ref().and_then(|p| p.agents.clone()),
            policies: route_policies.clone(),
            metrics: Arc::clone(&shared.metrics),
            drain: Arc::clone(&shared.drain),
            receipts: shared.receipts.clone(),
            clock: Arc::new(SystemClock),
        }));
        // `[conversations]`: the operations service for Company Agents, on its own listener;
        // it runs the default route (`load` requires one).
        if let Some(settings) = &config.conversations
            && route.is_default()
        {
            add_conversations(
                server,
                settings,
                config,
                &executor,
                &route_policies,
                shared,
                limits,
            );
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
                    shared.keys.clone(),
                )
            }),
            operations: Operations {
                policies: route_policies,
                runner: Runner {
                    executor,
                    session_claims: shared.session_claims.clone(),
                    metrics: Arc::clone(&shared.metrics),
                },
                body_limits: BodyLimits {
                    max_body_bytes: config.server.max_body_bytes,
                    read_timeout: config.server.body_read_timeout,
                    held: Arc::clone(&limits.held),
                },
            },
            upstream,
            passthrough: route.upstream.passthrough.clone(),
        });
    }
    Built { routes, reloaded }
}

/// The conversations service on its listener, with the proxy's limits around it: the same
/// connection cap (one count for both listeners), header deadline and held-bodies budget.
fn add_conversations(
    server: &mut Server,
    settings: &Conversations,
    config: &Config,
    executor: &Arc<Executor>,
    policies: &LivePolicies,
    shared: &Shared,
    limits: &Limits,
) {
    let app = crate::conversations::ConversationsApp::new(
        settings,
        config,
        crate::conversations::Shared {
            executor: Arc::clone(executor),
            policies: policies.clone(),
            metrics: Arc::clone(&shared.metrics),
            held: Arc::clone(&limits.held),
            upstream_slots: Arc::clone(&limits.upstream_slots),
            claims: shared.session_claims.clone(),
        },
    );
    let mut service = Service::new(
        "poppy-gateway conversations".to_owned(),
        LimitedApp {
            inner: Arc::new(Requests {
                inner: Arc::new(app),
            }),
            connections: Arc::clone(&limits.connections),
            tls: None,
            h2c: false,
        },
    );
    service.add_tcp(&settings.listen);
    server.add_service(service);
}
