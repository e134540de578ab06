//! Delegations already verified, remembered by their exact bytes (issue 41). An agent signs
//! one delegation per delegated key (an hour by default) and a new Session per request: the
//! Session's signature is checked every time, the delegation's only the first time each key
//! set sees it. Pure: the caller brings the clock.
//!
//! A cache belongs to one reading of an agent's keys (`source::AgentKeys`, swapped as one):
//! reading the keys again starts an empty cache, so a long-term key the agent withdraws stops
//! vouching at the next read, as it would without a cache. What a hit skips is only what its
//! bytes and that key set fix (the header, the key, the signature, `cnf.jwk`); what depends on
//! the request and the clock (the Session's `iss`, `exp`, `nbf`) is checked again on every
//! hit, in the order and with the errors of a fresh verification (`format::vouched_key`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::cnf::DelegatedKey;

/// The most delegations one key set remembers. Only verified delegations are inserted, so
/// only the agent's own keys can fill it; when it is full, an insert evicts another entry
/// (memory stays bounded, a busy agent's delegations are verified again now and then).
pub(crate) const MAX_DELEGATIONS: usize = 4096;

/// What verifying a delegation established; `format::vouched_key` checks it again on each
/// hit.
pub(crate) struct Vouched {
    /// Its `cnf.jwk`: the key that signs the Sessions it vouches for.
    pub(crate) key: Arc<DelegatedKey>,
    /// Its `iss`.
    pub(crate) issuer: String,
    pub(crate) exp: u64,
    pub(crate) nbf: Option<u64>,
    /// The `kid` of the agent's key it was verified with.
    #[allow(dead_code)] // Read by tests; kept with what verification established.
    pub(crate) kid: Option<String>,
}

/// The verified delegations of one key set, by their compact JWS.
#[derive(Default)]
pub(crate) struct DelegationCache {
    entries: RwLock<HashMap<String, Arc<Vouched>>>,
    /// Delegations verified (signature checked) with this key set: the test hook that shows
    /// a hit skips the verification.
    verified: AtomicU64,
}

impl std::fmt::Debug for DelegationCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DelegationCache({})", self.len())
    }
}

impl DelegationCache {
    /// What `jws` was verified to say, if this key set verified exactly these bytes.
    pub(crate) fn get(&self, jws: &str) -> Option<Arc<Vouched>> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries.get(jws).cloned()
    }

    /// Remember a delegation just verified with this key set.
    pub(crate) fn insert(&self, jws: &str, vouched: Vouched) {
        let vouched = Arc::new(vouched);
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= MAX_DELEGATIONS && !entries.contains_key(jws) {
            // Any one entry: the map's order is its random hash's, so no sender picks it.
            if let Some(victim) = entries.keys().next().cloned() {
                entries.remove(&victim);
            }
        }
        entries.insert(jws.to_owned(), vouched);
    }

    /// Count one delegation whose signature was checked with this key set.
    pub(crate) fn count_verification(&self) {
        self.verified.fetch_add(1, Ordering::Relaxed);
    }

    /// How many delegations were verified with this key set (a hit is not one).
    #[cfg(test)]
    pub(crate) fn verifications(&self) -> u64 {
        self.verified.load(Ordering::Relaxed)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests;
