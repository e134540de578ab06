//! The trusted issuers' fetched keys (`jwks_url`, an agent's metadata document), read before
//! they are needed: `check` fetches each one and says what it found, and the running gateway
//! fetches each at start so that a source it cannot read is logged then (see
//! docs/operations.md, "Verified identities").

use std::sync::Arc;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use crate::config::Config;
use crate::identity::{self, TrustedIssuer};

/// What `check` found at one fetched key source.
#[derive(Debug)]
pub struct Finding {
    /// The issuer (`iss`) the keys verify.
    pub issuer: String,
    /// Where the keys are: `jwks_url URL` or `client_id URL`.
    pub source: String,
    pub outcome: Outcome,
}

#[derive(Debug)]
pub enum Outcome {
    /// A JWK set with this many usable signature keys.
    Keys(usize),
    /// No answer (or a 5xx): out of reach from here, which may not be where the gateway runs.
    /// The gateway would start, and refuse this issuer's Sessions until a fetch succeeds.
    Unreachable(String),
    /// An answer that can never give keys: a 4xx, or a document that is not a usable JWK set.
    Wrong(String),
}

/// Fetch every configured source once (each within the fetch timeout, all together). Fails
/// only when no HTTP client can be made, which `load` already checked.
pub fn check(config: &Config) -> Result<Vec<Finding>, String> {
    let claims = config.session.build()?;
    let issuers = claims.fetched_issuers();
    if issuers.is_empty() {
        return Ok(Vec::new());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot fetch the trusted keys: {e}"))?;
    let found = runtime.block_on(identity::probe(&issuers));
    Ok(found
        .into_iter()
        .map(|(issuer, read)| Finding {
            issuer: issuer.issuer.clone(),
            source: issuer.source.to_string(),
            outcome: match read {
                Ok(keys) => Outcome::Keys(keys),
                Err(e) if e.unreachable() => Outcome::Unreachable(e.to_string()),
                Err(e) => Outcome::Wrong(e.to_string()),
            },
        })
        .collect())
}

/// The first fetch of every fetched source, at start, on its own runtime; a failure is logged
/// by [`TrustedIssuer::reload`] (an error: the issuer's Sessions are refused meanwhile).
pub(crate) struct FirstFetch(pub(crate) Vec<Arc<TrustedIssuer>>);

#[async_trait]
impl BackgroundService for FirstFetch {
    async fn start(&self, _shutdown: ShutdownWatch) {
        identity::first_fetch(&self.0).await;
    }
}
