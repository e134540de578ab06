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
    if listen.parse::<std::net::SocketAddr>().is_err() {
        errors.push(at(
            file.listen.span(),
            format!("conversations.listen: `{listen}` is not an address like 127.0.0.1:8090"),
        ));
    } else if taken.contains(&listen.as_str()) {
        errors.push(at(
            file.listen.span(),
            format!("conversations.listen: `{listen}` is already the proxy's or the admin listener's address"),
        ));
    }
    let token = match (&file.token_env, &file.token_file) {
        (Some(name), None) => from_env(name, at, errors),
        (None, Some(file)) => from_file(file, folder, at, errors),
        _ => {
            errors.push(at(
                table.span(),
                "conversations: set exactly one of token_env (an environment variable's name) and token_file (a file holding the service token); the token itself never goes in gateway.toml".into(),
            ));
            None
        }
    };
    let (token, token_source) = token?;
    if token.trim_ascii().len() < MIN_TOKEN_BYTES {
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
        // A file's trailing newline is not part of the token.
        token: ServiceToken::new(token.trim_ascii()),
        token_source,
    })
}

fn from_env(
    name: &Spanned<String>,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<(Vec<u8>, String)> {
    let var = name.get_ref();
    match std::env::var_os(var) {
        Some(value) if !value.is_empty() => Some((
            value.into_encoded_bytes(),
            format!("environment variable {var}"),
        )),
        _ => {
            errors.push(at(
                name.span(),
                format!("conversations.token_env: the environment variable `{var}` is not set (or empty); it must hold the service token"),
            ));
            None
        }
    }
}

fn from_file(
    file: &Spanned<String>,
    folder: &Path,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<(Vec<u8>, String)> {
    let path = folder.join(file.get_ref());
    match std::fs::read(&path) {
        Ok(bytes) => Some((bytes, format!("file {}", path.display()))),
        Err(e) => {
            errors.push(at(
                file.span(),
                format!(
                    "conversations.token_file: cannot read {}: {e}",
                    path.display()
                ),
            ));
            None
        }
    }
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
