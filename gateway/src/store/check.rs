//! The durability check of a Redis store, at startup and on every `/readyz/store`: warn loudly
//! when a restart or an eviction could forget a claim, refuse when configured to, and make
//! the operator choose about replica acknowledgement when the store has replicas.

use std::sync::{Arc, Mutex};

use super::{Durability, OperationStore, StoreError};
use crate::metrics::Metrics;

/// What the check found wrong, when the gateway must not serve (or start) with it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    #[error("store.require_durable: {0}")]
    NotDurable(String),
    #[error(
        "the Redis store has {0} replica(s) per primary: set [store] wait_replicas = 1 so a failover cannot lose a claim (recommended, see docs/redis.md), or wait_replicas = 0 to accept that it can"
    )]
    ReplicasWithoutChoice(u64),
    #[error("store.require_durable: cannot check the store: {0}")]
    Unchecked(StoreError),
}

/// The settings the check applies, and what it last logged.
pub(crate) struct DurabilityCheck {
    pub require_durable: bool,
    /// Whether `[store] wait_replicas` was set (to anything, 0 included).
    pub wait_replicas_set: bool,
    metrics: Arc<Metrics>,
    /// The findings last logged: each new set is logged once, not on every probe.
    logged: Mutex<Option<Vec<String>>>,
}

impl DurabilityCheck {
    pub(crate) fn new(
        require_durable: bool,
        wait_replicas_set: bool,
        metrics: Arc<Metrics>,
    ) -> Self {
        DurabilityCheck {
            require_durable,
            wait_replicas_set,
            metrics,
            logged: Mutex::new(None),
        }
    }

    /// Read the store's durability, log what changed, and say whether the gateway may serve.
    pub(crate) async fn run(&self, store: &dyn OperationStore) -> Result<(), CheckError> {
        let durability = match store.durability().await {
            Ok(Some(durability)) => durability,
            Ok(None) => return Ok(()),
            Err(e) if self.require_durable => return Err(CheckError::Unchecked(e)),
            Err(e) => {
                self.log_once(vec![format!("cannot check the Redis store's durability now ({e}); it is checked again on /readyz/store")]);
                return Ok(());
            }
        };
        self.judge(&durability)
    }

    fn judge(&self, durability: &Durability) -> Result<(), CheckError> {
        let problems = durability.problems();
        self.metrics.store_durability_problems(problems.len());
        self.log_once(problems.clone());
        if let Some(replicas) = durability.replicas()
            && replicas > 0
            && !self.wait_replicas_set
        {
            return Err(CheckError::ReplicasWithoutChoice(replicas));
        }
        if self.require_durable && !problems.is_empty() {
            return Err(CheckError::NotDurable(problems.join("; ")));
        }
        Ok(())
    }

    fn log_once(&self, problems: Vec<String>) {
        let mut logged = self
            .logged
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if logged.as_ref() == Some(&problems) {
            return;
        }
        if problems.is_empty() && logged.is_some() {
            tracing::info!("the Redis store is durable now");
        }
        for problem in &problems {
            tracing::warn!(durability = "at risk", "REDIS CAN FORGET CLAIMS: {problem}");
        }
        *logged = Some(problems);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::redis::NodeDurability;

    fn durability(appendonly: &str, replicas: u64) -> Durability {
        Durability {
            nodes: vec![NodeDurability {
                address: String::new(),
                appendonly: Some(appendonly.into()),
                save: Some(String::new()),
                maxmemory_policy: Some("noeviction".into()),
                connected_replicas: Some(replicas),
            }],
        }
    }

    #[test]
    fn require_durable_and_replicas_decide() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let lax = DurabilityCheck::new(false, false, Arc::clone(&metrics));
        assert!(lax.judge(&durability("no", 0)).is_ok());
        assert!(matches!(
            lax.judge(&durability("yes", 1)),
            Err(CheckError::ReplicasWithoutChoice(1))
        ));
        let strict = DurabilityCheck::new(true, true, metrics);
        assert!(matches!(
            strict.judge(&durability("no", 1)),
            Err(CheckError::NotDurable(_))
        ));
        assert!(strict.judge(&durability("yes", 1)).is_ok());
    }
}
