//! Who this agent is (docs/sessions.md): its `client_id`, the URL of its client metadata
//! document, which names a `jwks_uri` with its long-term public key; the long-term key
//! itself, which signs delegations of short-lived keys (session.rs).
//!
//! The long-term key is `keys/demo-agent.pem`, compiled in. It is a PUBLIC DEMO KEY: it is in
//! this repository for anyone to read, so anyone can sign as this agent. A gateway that trusts
//! `http://127.0.0.1:8084/agent.json` trusts everyone on that machine; a real agent keeps its
//! key secret and serves its document over https.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::EncodingKey;
use serde_json::{Value, json};

/// The public demo key (PKCS#8 PEM, P-256), generated once with
/// `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`.
const DEMO_KEY_PEM: &str = include_str!("../keys/demo-agent.pem");

/// The demo key's `kid`, in its JWKS (`keys/demo-agent.jwks.json` has the same document).
pub const DEMO_KID: &str = "demo-agent-2026-1";

/// Where `agent identity` serves the document by default: the agent's `client_id`.
pub const DEFAULT_AGENT_URL: &str = "http://127.0.0.1:8084/agent.json";

/// The name the metadata document gives.
const CLIENT_NAME: &str = "Example Personal Agent";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the demo key does not read as a P-256 PKCS#8 key: {0}")]
    Pem(String),
    #[error("cannot make a delegated key: {0}")]
    Generate(String),
}

/// An ES256 key pair: the key that signs, and its public JWK.
pub struct SigningKey {
    pub encoding: EncodingKey,
    /// `{"kty": "EC", "crv": "P-256", "x", "y"}`.
    pub jwk: Value,
}

impl SigningKey {
    /// The agent's long-term key (the public demo key).
    pub fn long_term() -> Result<SigningKey, KeyError> {
        let pair =
            rcgen::KeyPair::from_pem(DEMO_KEY_PEM).map_err(|e| KeyError::Pem(e.to_string()))?;
        if pair.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
            return Err(KeyError::Pem("not a P-256 key".into()));
        }
        Ok(SigningKey::of(&pair))
    }

    /// A new P-256 key, for a delegation.
    pub fn generate() -> Result<SigningKey, KeyError> {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| KeyError::Generate(e.to_string()))?;
        Ok(SigningKey::of(&pair))
    }

    fn of(pair: &rcgen::KeyPair) -> SigningKey {
        SigningKey {
            // rcgen's DER is PKCS#8, which is what jsonwebtoken (ring) signs with.
            encoding: EncodingKey::from_ec_der(&pair.serialize_der()),
            jwk: ec_jwk(pair.public_key_raw()),
        }
    }
}

/// The public JWK of an uncompressed P-256 point (`04 || x || y`, 65 bytes).
fn ec_jwk(point: &[u8]) -> Value {
    let coordinate = |range: std::ops::Range<usize>| {
        URL_SAFE_NO_PAD.encode(point.get(range).unwrap_or_default())
    };
    json!({"kty": "EC", "crv": "P-256", "x": coordinate(1..33), "y": coordinate(33..65)})
}

/// The JWKS at `jwks_uri`: the long-term public key, with its `kid`, `alg` and `use`.
pub fn jwks(long_term: &SigningKey) -> Value {
    let mut key = long_term.jwk.clone();
    key["kid"] = DEMO_KID.into();
    key["alg"] = "ES256".into();
    key["use"] = "sig".into();
    json!({ "keys": [key] })
}

/// The client metadata document at `client_id`.
pub fn metadata(client_id: &str, jwks_uri: &str) -> Value {
    json!({"client_id": client_id, "client_name": CLIENT_NAME, "jwks_uri": jwks_uri})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_committed_jwks_is_the_demo_key_s() {
        let committed: Value =
            serde_json::from_str(include_str!("../keys/demo-agent.jwks.json")).unwrap();
        assert_eq!(committed, jwks(&SigningKey::long_term().unwrap()));
    }

    #[test]
    fn generated_keys_differ_and_have_p256_coordinates() {
        let (a, b) = (
            SigningKey::generate().unwrap(),
            SigningKey::generate().unwrap(),
        );
        assert_ne!(a.jwk, b.jwk);
        for coordinate in ["x", "y"] {
            let bytes = URL_SAFE_NO_PAD
                .decode(a.jwk[coordinate].as_str().unwrap())
                .unwrap();
            assert_eq!(bytes.len(), 32);
        }
    }
}
