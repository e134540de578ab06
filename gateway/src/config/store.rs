//! `[store]`: where operations are remembered, each default named.

use std::time::Duration;

use super::duration::duration;
use super::error::{At, ConfigError};
use super::file::StoreFile;
use crate::store::{self, MAX_WAIT_TIMEOUT, MemoryLimits, ReplicaWait, StoreOptions};

pub(super) const DEFAULT_URL: &str = "memory://";
/// The prefix of every Redis key.
pub(super) const DEFAULT_NAMESPACE: &str = "poppy";
/// How long after a revision's `expires_at` a performed operation is still remembered.
pub(super) const DEFAULT_REMEMBER_GRACE: Duration = Duration::from_secs(3600);
/// How long Redis waits for replicas' acknowledgement.
pub(super) const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub url: String,
    pub namespace: String,
    /// How long after a revision's `expires_at` a performed operation is still remembered.
    pub remember_grace: Duration,
    /// Replicas that must acknowledge a claim before it is used; 0 = off.
    pub wait_replicas: u32,
    /// Whether `wait_replicas` was set at all: a Redis with replicas and no choice made is a
    /// startup error (see docs/redis.md).
    pub wait_replicas_set: bool,
    /// How long Redis waits for their acknowledgement.
    pub wait_timeout: Duration,
    /// Refuse to start (and `/readyz/store` answers 503) when Redis could forget a claim.
    pub require_durable: bool,
    /// What `memory://` may hold at once.
    pub memory_limits: MemoryLimits,
}

impl StoreSettings {
    /// The options [`crate::store::open_with`] takes.
    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            namespace: self.namespace.clone(),
            wait: (self.wait_replicas > 0).then_some(ReplicaWait {
                replicas: self.wait_replicas,
                timeout: self.wait_timeout,
            }),
            memory_limits: self.memory_limits,
        }
    }
}

/// `[store]`.
pub(super) fn compile_store(
    store: &StoreFile,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> StoreSettings {
    let store_url = store
        .url
        .as_ref()
        .map(|u| u.get_ref().clone())
        .unwrap_or_else(|| DEFAULT_URL.into());
    if let Some(u) = &store.url {
        let url = u.get_ref();
        if url.starts_with(store::CLUSTER_SCHEME) {
            if let Err(e) = store::cluster_seeds(url) {
                errors.push(at(u.span(), format!("store.url: {e}")));
            }
        } else if url != "memory://"
            && !url.starts_with("redis://")
            && !url.starts_with("rediss://")
        {
            errors.push(at(
                u.span(),
                format!("store.url: `{url}` is neither \"memory://\", a redis:// URL nor a redis+cluster:// one"),
            ));
        }
    }
    let namespace = store
        .namespace
        .as_ref()
        .map(|n| n.get_ref().clone())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    if let Some(n) = &store.namespace
        && (n.get_ref().is_empty() || n.get_ref().contains(['{', '}']))
    {
        errors.push(at(
            n.span(),
            "store.namespace: must be non-empty and contain no braces".into(),
        ));
    }
    let remember_grace = duration(
        &store.remember_grace,
        DEFAULT_REMEMBER_GRACE,
        "store.remember_grace",
        at,
        errors,
    );
    let wait_replicas = store.wait_replicas.as_ref().map_or(0, |n| *n.get_ref());
    let wait_timeout = duration(
        &store.wait_timeout,
        DEFAULT_WAIT_TIMEOUT,
        "store.wait_timeout",
        at,
        errors,
    );
    if let Some(n) = &store.wait_replicas
        && *n.get_ref() > 0
        && store_url == "memory://"
    {
        errors.push(at(
            n.span(),
            "store.wait_replicas: needs a Redis store (memory:// has no replicas)".into(),
        ));
    }
    if let Some(t) = &store.wait_timeout {
        if wait_replicas == 0 {
            errors.push(at(
                t.span(),
                "store.wait_timeout: has no effect without store.wait_replicas".into(),
            ));
        } else if wait_timeout.is_zero() || wait_timeout > MAX_WAIT_TIMEOUT {
            // Zero would make WAIT block forever.
            errors.push(at(
                t.span(),
                format!("store.wait_timeout: must be 1ms to {MAX_WAIT_TIMEOUT:?}"),
            ));
        }
    }

    let mut memory_limits = MemoryLimits::default();
    for (key, value, limit) in [
        (
            "memory_max_records",
            &store.memory_max_records,
            &mut memory_limits.max_records,
        ),
        (
            "memory_max_bytes",
            &store.memory_max_bytes,
            &mut memory_limits.max_bytes,
        ),
    ] {
        let Some(value) = value else { continue };
        if store_url != "memory://" {
            errors.push(at(
                value.span(),
                format!("store.{key}: only limits memory:// (Redis has maxmemory)"),
            ));
        } else if *value.get_ref() == 0 {
            errors.push(at(value.span(), format!("store.{key}: must be at least 1")));
        } else {
            *limit = *value.get_ref();
        }
    }
    let require_durable = store.require_durable.unwrap_or(false);
    StoreSettings {
        url: store_url,
        namespace,
        remember_grace,
        wait_replicas,
        wait_replicas_set: store.wait_replicas.is_some(),
        wait_timeout,
        require_durable,
        memory_limits,
    }
}
