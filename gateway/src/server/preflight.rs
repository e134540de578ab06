//! The checks before anything starts serving: no published secret as the admin token, every
//! listen address free, a store that keeps its claims, and connection caps that fit the
//! open-files limit.

use super::StartError;
use super::secrets::refuse_placeholder;
use crate::config::Config;
use crate::listener::REFUSING_AT_ONCE;
use crate::store::{DurabilityCheck, OperationStore};

/// What is checked before the store is opened: the admin token is no published placeholder,
/// and every listen address is free.
pub(super) fn check(config: &Config) -> Result<(), StartError> {
    if let Ok(token) = std::env::var("POPPY_GATEWAY_ADMIN_TOKEN") {
        refuse_placeholder("POPPY_GATEWAY_ADMIN_TOKEN", token.trim())?;
    }
    check_listen_addresses(config)
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
pub(super) fn check_store(
    check: &DurabilityCheck,
    store: &dyn OperationStore,
) -> Result<(), StartError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StartError::Store(format!("cannot check the store: {e}")))?;
    runtime
        .block_on(check.run(store))
        .map_err(|e| StartError::Store(e.to_string()))
}

/// `max_connections` and `max_upstream_connections` fitted under the open-files limit, raised
/// first to its hard limit (see fds.rs); a warning when they had to be lowered.
pub(super) fn connection_caps(config: &Config) -> crate::fds::Caps {
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
