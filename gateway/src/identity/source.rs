//! Where a trusted agent's keys come from, and when they are read again: the thin I/O layer
//! under [`super::jwks`]. A JWKS file is read at startup (a bad one is a config error); a JWKS
//! URL, or an agent's client metadata document (and its `jwks_uri`), is fetched at startup
//! (a failure is logged, and its Sessions are refused until a fetch succeeds). All are read
//! again when a token names an unknown `kid` (key rotation), at most once per [`MIN_RELOAD`],
//! and a fetched source also every `refresh` interval.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use super::delegations::DelegationCache;
use super::http::{GetError, HttpClient};
use super::jwks::{JwksError, KeySet};
use super::metadata::{self, MetadataError};

/// The least time between two reads of one agent's keys: an unknown `kid` in every request
/// must not turn into a fetch per request.
pub(crate) const MIN_RELOAD: Duration = Duration::from_secs(2);
/// How long one JWKS fetch may take.
pub(crate) const FETCH_TIMEOUT: Duration = metadata::FETCH_TIMEOUT;
/// The largest JWKS document read.
pub(crate) const MAX_JWKS_BYTES: usize = metadata::MAX_JWKS_BYTES;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeySource {
    File(PathBuf),
    Url(String),
    /// An agent's `client_id`: the URL of its client metadata document, which names its
    /// long-term keys. They sign delegations, never Sessions.
    #[allow(dead_code)] // Constructed by config/ for `[[session.agent]] client_id`.
    Metadata(String),
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::File(path) => write!(f, "jwks_file {}", path.display()),
            KeySource::Url(url) => write!(f, "jwks_url {url}"),
            KeySource::Metadata(url) => write!(f, "client_id {url}"),
        }
    }
}

/// One reading of an issuer's keys, and the delegations verified with them: stored and
/// replaced as one, so a delegation a withdrawn key vouched for is never found beside the
/// keys read after (docs/sessions.md, check 2).
pub(crate) struct AgentKeys {
    pub(crate) set: Arc<KeySet>,
    pub(crate) delegations: DelegationCache,
}

impl AgentKeys {
    fn new(set: Arc<KeySet>) -> AgentKeys {
        AgentKeys {
            set,
            delegations: DelegationCache::default(),
        }
    }
}

/// A Personal Agent (or token issuer) whose signatures the gateway accepts.
pub(crate) struct TrustedIssuer {
    pub(crate) issuer: String,
    pub(crate) source: KeySource,
    /// How often fetched keys are fetched again even without an unknown `kid`.
    pub(crate) refresh: Duration,
    http: Arc<HttpClient>,
    keys: ArcSwapOption<AgentKeys>,
    loaded_at: ArcSwapOption<Instant>,
    reloading: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for TrustedIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Sources only: key material never reaches a log.
        write!(f, "TrustedIssuer({:?}, {})", self.issuer, self.source)
    }
}

impl TrustedIssuer {
    /// `file_keys`: a `jwks_file`'s keys, read at load ([`read_file`]); a URL or a metadata
    /// document is fetched with `http` by [`TrustedIssuer::reload`] once a runtime runs.
    pub(crate) fn new(
        issuer: String,
        source: KeySource,
        refresh: Duration,
        file_keys: Option<Arc<KeySet>>,
        http: Arc<HttpClient>,
    ) -> Self {
        let loaded_at = file_keys.as_ref().map(|_| Arc::new(Instant::now()));
        TrustedIssuer {
            issuer,
            source,
            refresh,
            http,
            keys: ArcSwapOption::new(file_keys.map(|set| Arc::new(AgentKeys::new(set)))),
            loaded_at: ArcSwapOption::new(loaded_at),
            reloading: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) fn keys(&self) -> Option<Arc<KeySet>> {
        self.keys.load().as_ref().map(|keys| Arc::clone(&keys.set))
    }

    /// The keys and the delegations verified with them.
    pub(crate) fn agent_keys(&self) -> Option<Arc<AgentKeys>> {
        self.keys.load_full()
    }

    /// Whether the agent's keys sign delegations only (a metadata document's agent): then a
    /// Session without `poppy_dlg` is refused.
    pub(crate) fn delegates_only(&self) -> bool {
        matches!(self.source, KeySource::Metadata(_))
    }

    /// Fetched keys are older than `refresh` (or were never fetched).
    pub(crate) fn stale(&self) -> bool {
        match &self.source {
            KeySource::File(_) => false,
            KeySource::Url(_) | KeySource::Metadata(_) => self
                .loaded_at
                .load()
                .as_deref()
                .is_none_or(|at| at.elapsed() >= self.refresh),
        }
    }

    /// Read the keys again, unless that was tried less than [`MIN_RELOAD`] ago. Returns true
    /// when new keys were read. A failed read keeps the keys there were.
    pub(crate) async fn reload(&self) -> bool {
        let mut last = self.reloading.lock().await;
        if last.is_some_and(|at| at.elapsed() < MIN_RELOAD) {
            return false;
        }
        *last = Some(Instant::now());
        match self.read().await {
            Ok(keys) => {
                tracing::info!(issuer = %self.issuer, source = %self.source, keys = keys.len(), "trusted keys read");
                // A new reading remembers no delegation of the old one.
                self.keys
                    .store(Some(Arc::new(AgentKeys::new(Arc::new(keys)))));
                self.loaded_at.store(Some(Arc::new(Instant::now())));
                true
            }
            Err(e) if self.keys().is_none() => {
                // No keys at all: every Session (or token) of this issuer is refused.
                tracing::error!(issuer = %self.issuer, source = %self.source, error = %e, "cannot read trusted keys; this issuer's Sessions and tokens are refused until a read succeeds");
                false
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, source = %self.source, error = %e, "cannot read trusted keys; keeping the previous ones");
                false
            }
        }
    }

    /// Read the keys from their source, storing nothing (`check`, and [`Self::reload`]).
    pub(crate) async fn read(&self) -> Result<KeySet, KeysReadError> {
        match &self.source {
            KeySource::File(path) => read_file(path),
            KeySource::Url(url) => fetch(&self.http, url).await,
            KeySource::Metadata(url) => metadata::fetch_keys(&self.http, url)
                .await
                .map_err(KeysReadError::Metadata),
        }
    }

    /// Whether the keys are fetched (a URL or a metadata document) rather than read from a file.
    pub(crate) fn fetched(&self) -> bool {
        !matches!(self.source, KeySource::File(_))
    }
}

/// Why a JWKS source gave no keys.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeysReadError {
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {error}", path.display())]
    Parse { path: PathBuf, error: JwksError },
    #[error("{0}")]
    Fetch(GetError),
    #[error("{0}")]
    FetchedParse(JwksError),
    #[error("{0}")]
    Metadata(MetadataError),
}

impl KeysReadError {
    /// The source did not answer (or failed with a 5xx): it may later, or from elsewhere. Any
    /// other error is an answer that can never give keys (a wrong URL, not a JWK set).
    pub(crate) fn unreachable(&self) -> bool {
        match self {
            KeysReadError::Fetch(e) => e.unreachable(),
            KeysReadError::Metadata(e) => e.unreachable(),
            KeysReadError::Read { .. }
            | KeysReadError::Parse { .. }
            | KeysReadError::FetchedParse(_) => false,
        }
    }
}

/// A `jwks_file`'s keys: read at load, and again on an unknown `kid`.
pub(crate) fn read_file(path: &PathBuf) -> Result<KeySet, KeysReadError> {
    let bytes = std::fs::read(path).map_err(|error| KeysReadError::Read {
        path: path.clone(),
        error,
    })?;
    KeySet::parse(&bytes).map_err(|error| KeysReadError::Parse {
        path: path.clone(),
        error,
    })
}

async fn fetch(http: &HttpClient, url: &str) -> Result<KeySet, KeysReadError> {
    let bytes = http
        .get(url, FETCH_TIMEOUT, MAX_JWKS_BYTES)
        .await
        .map_err(KeysReadError::Fetch)?;
    KeySet::parse(&bytes).map_err(KeysReadError::FetchedParse)
}
