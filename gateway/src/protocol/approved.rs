//! What was approved, for an upstream that wants to check (`[upstream.approval_header]`,
//! docs/upstream-check.md): every approved forward carries a compact JWS, signed with the
//! operator's Ed25519 key, of the operation, its revision, its terms (looked-up and computed
//! ones included), the policy and the request line it approved. A price that changed between
//! the lookup and the forward can't be stopped by the gateway alone; an upstream that compares
//! the approved terms with what it would charge can.
//!
//! EdDSA rather than a shared secret: the upstream holds only the public key, so it can't mint
//! approvals itself, and the key is the receipts' kind (`poppy-gateway audit public-key` prints
//! its JWK). jsonwebtoken signs, as it verifies Sessions.

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use serde_json::Value;

/// The JWS's `typ`: an upstream can tell it from any other token it accepts.
pub(crate) const TYP: &str = "poppy-approved+jwt";

/// The header's default name.
pub(crate) const DEFAULT_NAME: &str = "poppy-approved";

/// One approved forward: what its header says.
#[derive(Debug, Clone)]
pub(crate) struct ApprovedForward<'a> {
    pub(crate) operation_id: &'a str,
    pub(crate) revision: &'a str,
    /// The policy (or tool policy) that names the action.
    pub(crate) policy: &'a str,
    /// The approved terms, as the operation shows them.
    pub(crate) terms: &'a Value,
    /// Unix milliseconds: the claims' `iat`.
    pub(crate) now_ms: i64,
}

/// The claims, as the upstream reads them.
#[derive(Debug, Serialize)]
struct Claims<'a> {
    /// The operation ID: an upstream may refuse a `jti` it has seen (one execution).
    jti: &'a str,
    iat: i64,
    exp: i64,
    operation_id: &'a str,
    revision: &'a str,
    policy: &'a str,
    /// The method and the target (path and query) of the request forwarded with it.
    method: &'a str,
    path: &'a str,
    terms: &'a Value,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApprovedError {
    #[error("the approval header could not be signed: {0}")]
    Sign(#[from] jsonwebtoken::errors::Error),
}

/// The operator's key and how long a header is valid.
pub(crate) struct ApprovalSigner {
    /// The header it travels in.
    pub(crate) name: http::HeaderName,
    key: EncodingKey,
    kid: String,
    expires_in: Duration,
}

impl std::fmt::Debug for ApprovalSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApprovalSigner({}, kid {})", self.name, self.kid)
    }
}

impl ApprovalSigner {
    /// `pkcs8`: an Ed25519 private key's PKCS#8 DER (checked by the caller, which also names
    /// its `kid`, the RFC 7638 thumbprint of its public key).
    pub(crate) fn new(
        name: http::HeaderName,
        pkcs8: &[u8],
        kid: String,
        expires_in: Duration,
    ) -> ApprovalSigner {
        ApprovalSigner {
            name,
            key: EncodingKey::from_ed_der(pkcs8),
            kid,
            expires_in,
        }
    }

    /// The compact JWS for `forward`, sent as `method` `path`.
    pub(crate) fn sign(
        &self,
        forward: &ApprovedForward<'_>,
        method: &str,
        path: &str,
    ) -> Result<String, ApprovedError> {
        let iat = forward.now_ms.div_euclid(1000);
        let lifetime = i64::try_from(self.expires_in.as_secs()).unwrap_or(i64::MAX);
        let claims = Claims {
            jti: forward.operation_id,
            iat,
            exp: iat.saturating_add(lifetime),
            operation_id: forward.operation_id,
            revision: forward.revision,
            policy: forward.policy,
            method,
            path,
            terms: forward.terms,
        };
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = Some(TYP.into());
        header.kid = Some(self.kid.clone());
        Ok(jsonwebtoken::encode(&header, &claims, &self.key)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use jsonwebtoken::{DecodingKey, Validation, decode, decode_header};
    use ring::signature::{Ed25519KeyPair, KeyPair as _};
    use serde_json::json;

    #[test]
    fn the_header_is_an_eddsa_jws_of_what_was_approved() {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let signer = ApprovalSigner::new(
            http::HeaderName::from_static(DEFAULT_NAME),
            pkcs8.as_ref(),
            "kid-1".into(),
            Duration::from_secs(60),
        );
        let terms = json!({"price": "10.00", "sku": "s1"});
        let forward = ApprovedForward {
            operation_id: "exc_1",
            revision: "1900000000-abc",
            policy: "exchange",
            terms: &terms,
            now_ms: 1_800_000_000_999,
        };
        let jws = signer.sign(&forward, "POST", "/orders/o1?x=1").unwrap();
        let header = decode_header(&jws).unwrap();
        assert_eq!(header.alg, Algorithm::EdDSA);
        assert_eq!(header.typ.as_deref(), Some(TYP));
        assert_eq!(header.kid.as_deref(), Some("kid-1"));
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.validate_exp = false;
        let key = DecodingKey::from_ed_der(pair.public_key().as_ref());
        let claims = decode::<Value>(&jws, &key, &validation).unwrap().claims;
        assert_eq!(
            claims,
            json!({
                "jti": "exc_1", "iat": 1_800_000_000, "exp": 1_800_000_060,
                "operation_id": "exc_1", "revision": "1900000000-abc", "policy": "exchange",
                "method": "POST", "path": "/orders/o1?x=1", "terms": terms,
            })
        );
        let other = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
        let other = Ed25519KeyPair::from_pkcs8(other.as_ref()).unwrap();
        let forged = DecodingKey::from_ed_der(other.public_key().as_ref());
        assert!(decode::<Value>(&jws, &forged, &validation).is_err());
    }
}
