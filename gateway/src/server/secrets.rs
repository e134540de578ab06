//! The secrets a gateway starts with: its signing keys, and the refusal of any this repository
//! publishes; and store URLs without their password, for logs.

use super::StartError;
use crate::protocol::{Keys, KeysError, SigningKey};

/// Secrets this repository ships in its examples (deploy/kubernetes/examples/secret.yaml): published,
/// so never accepted as the real thing.
const SHIPPED_PLACEHOLDERS: [&str; 1] = ["replace-me-with-openssl-rand-hex-32"];
/// docker/compose.yaml's development signing key: fine for the demo's `memory://`, where keys
/// are bound to the process; with a shared store anyone who read the file can mint revisions.
const COMPOSE_DEVELOPMENT_KEY: &str = "dev-only-insecure-key-do-not-deploy";

/// Refuse a secret that is one of [`SHIPPED_PLACEHOLDERS`] (any comma-separated part of it).
pub(super) fn refuse_placeholder(variable: &'static str, value: &str) -> Result<(), StartError> {
    match value
        .split(',')
        .map(str::trim)
        .find_map(|part| SHIPPED_PLACEHOLDERS.iter().find(|p| **p == part))
    {
        Some(value) => Err(StartError::Placeholder { variable, value }),
        None => Ok(()),
    }
}

/// The signing keys from `POPPY_GATEWAY_KEYS`. Redis needs them, since every replica and every
/// restart must verify the same revisions. `memory://` forgets performed operations when the
/// process ends, so its keys are always bound to the process: a revision minted before a
/// restart is refused after it, never performed a second time.
pub fn signing_keys(env_value: Option<&str>, store_url: &str) -> Result<Keys, StartError> {
    let configured = match env_value.map(str::trim).filter(|v| !v.is_empty()) {
        Some(value) => {
            refuse_placeholder("POPPY_GATEWAY_KEYS", value)?;
            if store_url != "memory://"
                && value
                    .split(',')
                    .any(|k| k.trim() == COMPOSE_DEVELOPMENT_KEY)
            {
                tracing::warn!(
                    "POPPY_GATEWAY_KEYS holds docker/compose.yaml's development key, which anyone can read, and the store is shared: anyone can mint revisions this gateway accepts. Set your own (openssl rand -hex 32)"
                );
            }
            Some(Keys::from_env_value(value)?)
        }
        None => None,
    };
    match configured {
        Some(keys) if store_url == "memory://" => Ok(keys.for_this_process()),
        Some(keys) => Ok(keys),
        None if store_url == "memory://" => {
            tracing::warn!(
                "POPPY_GATEWAY_KEYS is not set: using a random key (fine with memory://, whose approvals end with the process)"
            );
            Ok(Keys::new(vec![SigningKey::random()]).ok_or(KeysError::Empty)?)
        }
        None => Err(KeysError::NotSet.into()),
    }
}

/// A store URL without its password, for logs and `check`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn store_urls_lose_their_password() {
        assert_eq!(
            redact("redis://user:secret@h:6379/0"),
            "redis://***@h:6379/0"
        );
        assert_eq!(redact("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(redact("memory://"), "memory://");
    }
}
