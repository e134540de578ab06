//! What proves who sent credentials the gateway did not verify: a digest of them, kept with a
//! record so that its answer is replayed only to the same proof.

use sha2::{Digest, Sha256};

use crate::protocol::SigningKey;

/// SHA-256 of the `Poppy-Session` and `Authorization` values, length-prefixed. Never stored
/// as is: the flow keys it with the gateway's signing key first (see
/// [`Credentials::digest`]), so the store holds nothing a token could be guessed from.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials([u8; 32]);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(..)")
    }
}

impl Credentials {
    pub(crate) fn of(session: &[u8], authorization: Option<&[u8]>) -> Credentials {
        Credentials::hashed(&[Some(session), authorization])
    }

    /// A Session signed by the delegated key of this RFC 7638 thumbprint, with this
    /// `Authorization` value: every re-signed Session of that key gives the same digest.
    pub(crate) fn of_key(thumbprint: &[u8; 32], authorization: Option<&[u8]>) -> Credentials {
        // The tag keeps a key's digest apart from any exact Session's.
        Credentials::hashed(&[
            Some(b"poppy-delegated-key-v1".as_slice()),
            Some(thumbprint.as_slice()),
            authorization,
        ])
    }

    fn hashed(parts: &[Option<&[u8]>]) -> Credentials {
        // Each part framed (absent, or length and bytes): no two part lists hash alike, and
        // an exact Session's digest is the one gateways before delegated keys kept.
        let mut hash = Sha256::new();
        for part in parts.iter().copied() {
            match part {
                // Absent and empty differ.
                None => hash.update([0u8]),
                Some(bytes) => {
                    hash.update([1u8]);
                    hash.update((bytes.len() as u64).to_be_bytes());
                    hash.update(bytes);
                }
            }
        }
        Credentials(hash.finalize().into())
    }

    /// The digest kept with a record: keyed, so that a store dump gives no way to test
    /// guesses of a token.
    pub(crate) fn digest(&self, key: &SigningKey) -> String {
        key.tag(b"poppy-credentials-v1", &[&self.0], 43)
    }
}
