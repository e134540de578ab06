//! The gateway's secret keys: the first signs, all verify (rotation).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// One HMAC-SHA-256 key, held as the MAC state after the key is absorbed: every MAC starts
/// from a copy of it, which skips hashing the key's inner and outer pads each time.
#[derive(Clone)]
pub struct SigningKey {
    keyed: HmacSha256,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

impl SigningKey {
    pub fn new(secret: Vec<u8>) -> SigningKey {
        // A key of any length is valid for HMAC; this cannot fail.
        let keyed = match HmacSha256::new_from_slice(&secret) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC accepts keys of any length"),
        };
        SigningKey { keyed }
    }

    /// A random key, for `memory://` without configured keys.
    pub(crate) fn random() -> SigningKey {
        let secret: [u8; 32] = rand::random();
        SigningKey::new(secret.to_vec())
    }

    /// A key bound to this process: `memory://` forgets performed operations on restart, so
    /// revisions minted before a restart must not verify after it (they could be performed
    /// again). Mixing a random per-process nonce into every key guarantees that.
    pub(crate) fn for_this_process(&self, nonce: &[u8; 32]) -> SigningKey {
        SigningKey::new(self.mac(b"poppy-process-key-v1", &[nonce]).to_vec())
    }

    /// HMAC over a domain label and length-prefixed parts, so that no two different part lists
    /// ever feed the MAC the same bytes.
    pub(crate) fn mac(&self, domain: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        update_framed(&mut mac, domain);
        for part in parts {
            update_framed(&mut mac, part);
        }
        mac.finalize().into_bytes().into()
    }

    /// The MAC as `len` base64url characters (id-safe: `A-Z a-z 0-9 _ -`).
    pub(crate) fn tag(&self, domain: &[u8], parts: &[&[u8]], len: usize) -> String {
        let mut text = URL_SAFE_NO_PAD.encode(self.mac(domain, parts));
        text.truncate(len);
        text
    }
}

fn update_framed(mac: &mut HmacSha256, part: &[u8]) {
    mac.update(&(part.len() as u64).to_be_bytes());
    mac.update(part);
}

/// Why `POPPY_GATEWAY_KEYS` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeysError {
    #[error("POPPY_GATEWAY_KEYS: key {number} is {bytes} bytes; each key needs at least 16")]
    TooShort { number: usize, bytes: usize },
    #[error("POPPY_GATEWAY_KEYS is empty")]
    Empty,
    #[error(
        "POPPY_GATEWAY_KEYS is not set: with a shared store every gateway needs the same keys (comma-separated, 16+ bytes each; the first signs, all verify)"
    )]
    NotSet,
}

/// The configured keys. Never empty.
#[derive(Debug, Clone)]
pub struct Keys {
    keys: Vec<SigningKey>,
}

impl Keys {
    /// `None` when `keys` is empty.
    pub fn new(keys: Vec<SigningKey>) -> Option<Keys> {
        if keys.is_empty() {
            None
        } else {
            Some(Keys { keys })
        }
    }

    /// Parse `POPPY_GATEWAY_KEYS`: comma-separated secrets, each at least 16 bytes.
    pub(crate) fn from_env_value(value: &str) -> Result<Keys, KeysError> {
        let mut keys = Vec::new();
        for (index, secret) in value.split(',').map(str::trim).enumerate() {
            if secret.len() < 16 {
                return Err(KeysError::TooShort {
                    number: index + 1,
                    bytes: secret.len(),
                });
            }
            keys.push(SigningKey::new(secret.as_bytes().to_vec()));
        }
        Keys::new(keys).ok_or(KeysError::Empty)
    }

    /// Every key bound to this process (see [`SigningKey::for_this_process`]).
    pub(crate) fn for_this_process(&self) -> Keys {
        let nonce: [u8; 32] = rand::random();
        Keys {
            keys: self
                .keys
                .iter()
                .map(|k| k.for_this_process(&nonce))
                .collect(),
        }
    }

    /// The key that signs new revisions and operation IDs.
    pub fn current(&self) -> &SigningKey {
        &self.keys[0]
    }

    /// Every key that verifies, current first.
    pub fn all(&self) -> &[SigningKey] {
        &self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_and_order() {
        let keys = Keys::from_env_value("aaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb").unwrap();
        assert_eq!(keys.all().len(), 2);
        assert!(Keys::from_env_value("short").is_err());
        assert!(Keys::from_env_value("").is_err());
    }

    #[test]
    fn process_bound_keys_differ_per_process() {
        let keys = Keys::from_env_value("aaaaaaaaaaaaaaaa").unwrap();
        let one = keys.for_this_process();
        let two = keys.for_this_process();
        assert_ne!(
            one.current().mac(b"d", &[b"x"]),
            two.current().mac(b"d", &[b"x"])
        );
        assert_ne!(
            one.current().mac(b"d", &[b"x"]),
            keys.current().mac(b"d", &[b"x"])
        );
    }

    #[test]
    fn the_kept_key_state_gives_the_plain_hmac() {
        let secret = b"a key that is long enough".to_vec();
        let mut plain = HmacSha256::new_from_slice(&secret).unwrap();
        for part in [&b"domain"[..], b"one", b""] {
            plain.update(&(part.len() as u64).to_be_bytes());
            plain.update(part);
        }
        let expected: [u8; 32] = plain.finalize().into_bytes().into();
        let key = SigningKey::new(secret);
        // Twice: the kept state is copied, never consumed.
        assert_eq!(key.mac(b"domain", &[b"one", b""]), expected);
        assert_eq!(key.mac(b"domain", &[b"one", b""]), expected);
    }

    #[test]
    fn tags_use_id_characters() {
        let tag = SigningKey::random().tag(b"d", &[b"x"], 22);
        assert_eq!(tag.len(), 22);
        assert!(
            tag.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        );
    }
}
