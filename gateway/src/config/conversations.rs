//! `[conversations]`: the operations service for Company Agents (`crate::conversations`),
//! off unless the table is there. Its service token comes from an environment variable or a
//! file, never from gateway.toml itself, and only its SHA-256 is kept in memory.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::Spanned;

use super::error::ConfigError;
use super::secret::{SecretSource, check_listen, read_secret};

/// The shortest service token accepted, in bytes.
const MIN_TOKEN_BYTES: usize = 16;

/// `[conversations]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConversationsFile {
    /// Where the service listens (its own listener, apart from the proxy's).
    pub listen: Spanned<String>,
    /// The name of the environment variable that holds the service token.
    pub token_env: Option<Spanned<String>>,
    /// A file (relative to gateway.toml's folder) that holds the service token.
    pub token_file: Option<Spanned<String>>,
}

/// `[conversations]`, validated.
#[derive(Debug, Clone)]
pub struct Conversations {
    pub listen: String,
    pub token: ServiceToken,
    /// Where the token comes from, for `check` (never the token).
    pub token_source: String,
}

/// The service token, kept as its SHA-256 only: a memory dump or a `Debug` print shows
/// nothing a caller could use.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceToken(Arc<[u8; 32]>);

impl std::fmt::Debug for ServiceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceToken(..)")
    }
}

impl ServiceToken {
    pub fn new(token: &[u8]) -> ServiceToken {
        ServiceToken(Arc::new(Sha256::digest(token).into()))
    }

    /// Whether `given` is the token, in time that depends on neither (both are hashed first,
    /// so not even the length shows).
    pub fn matches(&self, given: &[u8]) -> bool {
        let given: [u8; 32] = Sha256::digest(given).into();
        crate::protocol::constant_time_eq(&given, self.0.as_ref())
    }
}

/// Validate `[conversations]`; `None` after pushing its errors. `taken`: the other listen
/// addresses of this config, which the service may not share.
pub(super) fn compile(
    table: &Spanned<ConversationsFile>,
    folder: &Path,
    taken: &[&str],
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<Conversations> {
    let before = errors.len();
    let file = table.get_ref();
    let listen = file.listen.get_ref();
    check_listen(
        "conversations",
        "127.0.0.1:8090",
        &file.listen,
        taken,
        at,
        errors,
    );
    let token = read_secret(
        &SecretSource {
            section: "conversations",
            key: "token",
            what: "the service token",
            env: file.token_env.as_ref(),
            file: file.token_file.as_ref(),
            table: table.span(),
        },
        folder,
        at,
        errors,
    );
    let (token, token_source) = token?;
    if token.len() < MIN_TOKEN_BYTES {
        let span = file
            .token_env
            .as_ref()
            .or(file.token_file.as_ref())
            .map_or_else(|| table.span(), Spanned::span);
        errors.push(at(
            span,
            format!("conversations: the service token ({token_source}) must be at least {MIN_TOKEN_BYTES} bytes, e.g. `openssl rand -hex 32`"),
        ));
    }
    (errors.len() == before).then(|| Conversations {
        listen: listen.clone(),
        token: ServiceToken::new(&token),
        token_source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_by_digest_and_never_print() {
        let token = ServiceToken::new(b"0123456789abcdef-secret");
        assert!(token.matches(b"0123456789abcdef-secret"));
        assert!(!token.matches(b"0123456789abcdef-secreT"));
        assert!(!token.matches(b""));
        assert_eq!(format!("{token:?}"), "ServiceToken(..)");
    }
}
