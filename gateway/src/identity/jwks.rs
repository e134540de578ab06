//! A trusted agent's public keys, read from a JWKS document (RFC 7517). Pure: the bytes come
//! from [`super::source`].

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use crate::protocol::json;

/// The signature algorithms a key of each type may verify: an RS256 key never verifies an
/// ES256 signature, and no key verifies `none` or an HMAC (whoever has a public JWKS would hold
/// the secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Rsa,
    Ec,
    Ed,
}

impl Family {
    pub(crate) fn of(alg: Algorithm) -> Option<Family> {
        match alg {
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => Some(Family::Rsa),
            Algorithm::ES256 | Algorithm::ES384 => Some(Family::Ec),
            Algorithm::EdDSA => Some(Family::Ed),
            // HMACs, and any algorithm a later jsonwebtoken adds, verify nothing here.
            _ => None,
        }
    }
}

pub(crate) struct VerifyKey {
    pub(crate) kid: Option<String>,
    pub(crate) key: DecodingKey,
    pub(crate) family: Family,
    /// The key's own `alg`, when the JWK names one: then only that algorithm.
    pub(crate) alg: Option<Algorithm>,
}

/// The usable keys of one JWKS.
pub(crate) struct KeySet {
    keys: Vec<VerifyKey>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<&str> = self
            .keys
            .iter()
            .map(|k| k.kid.as_deref().unwrap_or("(no kid)"))
            .collect();
        write!(f, "KeySet{kids:?}")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum JwksError {
    #[error("not a JWKS: {0}")]
    NotAJwks(String),
    #[error("no usable signature key (RSA, EC or OKP public keys, use \"sig\")")]
    NoUsableKey,
}

/// What a token's header finds in a key set.
pub(crate) enum Lookup<'a> {
    Found(&'a VerifyKey),
    /// No key with this `kid` (or, without a `kid`, none of the algorithm's type): the set may
    /// be stale.
    UnknownKey,
    /// The key exists but may not verify this algorithm.
    WrongAlgorithm,
}

impl KeySet {
    /// Keys that cannot verify signatures (symmetric `oct` keys, encryption keys, unknown key
    /// types) are left out; a set with none left is an error.
    pub(crate) fn parse(json: &[u8]) -> Result<KeySet, JwksError> {
        let doc: Value = json::from_slice(json).map_err(|e| JwksError::NotAJwks(e.to_string()))?;
        let Some(Value::Array(entries)) = doc.get("keys") else {
            return Err(JwksError::NotAJwks("no \"keys\" array".into()));
        };
        let keys: Vec<VerifyKey> = entries.iter().filter_map(usable_key).collect();
        if keys.is_empty() {
            return Err(JwksError::NoUsableKey);
        }
        Ok(KeySet { keys })
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(crate) fn find(&self, kid: Option<&str>, alg: Algorithm) -> Lookup<'_> {
        let Some(family) = Family::of(alg) else {
            return Lookup::WrongAlgorithm;
        };
        let candidates: Vec<&VerifyKey> = match kid {
            Some(kid) => self
                .keys
                .iter()
                .filter(|k| k.kid.as_deref() == Some(kid))
                .collect(),
            // Without a kid, only an unambiguous key of the algorithm's type.
            None => self.keys.iter().filter(|k| k.family == family).collect(),
        };
        match candidates.as_slice() {
            [] => Lookup::UnknownKey,
            [key] if key.family == family && key.alg.is_none_or(|a| a == alg) => Lookup::Found(key),
            [_] => Lookup::WrongAlgorithm,
            // Two keys with one kid (or several without): refuse rather than guess.
            _ => Lookup::WrongAlgorithm,
        }
    }
}

fn usable_key(entry: &Value) -> Option<VerifyKey> {
    let jwk: Jwk = serde_json::from_value(entry.clone()).ok()?;
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption) | Some(PublicKeyUse::Other(_))
    ) {
        return None;
    }
    let family = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Family::Rsa,
        AlgorithmParameters::EllipticCurve(_) => Family::Ec,
        AlgorithmParameters::OctetKeyPair(_) => Family::Ed,
        // Symmetric keys, and key types jsonwebtoken reads but cannot verify with.
        _ => return None,
    };
    // `alg` as written ("ES256"), read as a signature algorithm; an HMAC or encryption
    // algorithm on a public key makes the key unusable.
    let alg = match entry.get("alg").and_then(Value::as_str) {
        None => None,
        Some(name) => {
            let alg: Algorithm = name.parse().ok()?;
            if Family::of(alg) != Some(family) {
                return None;
            }
            Some(alg)
        }
    };
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some(VerifyKey {
        kid: jwk.common.key_id.clone(),
        key,
        family,
        alg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EC: &str = r#"{"kty":"EC","crv":"P-256","x":"7xLsNQigHxfjzxtM6A36VVeEhCq_FBpuDaCRkEqcOvc","y":"PT5gIcCuGUSu1yCJKltLz2ZpBUL7Q9mTONaGfwFyJEQ","kid":"ec1","alg":"ES256"}"#;

    #[test]
    fn keys_are_found_by_kid_and_family() {
        let set = KeySet::parse(format!(r#"{{"keys":[{EC}]}}"#).as_bytes()).unwrap();
        assert_eq!(set.len(), 1);
        assert!(matches!(
            set.find(Some("ec1"), Algorithm::ES256),
            Lookup::Found(_)
        ));
        assert!(matches!(set.find(None, Algorithm::ES256), Lookup::Found(_)));
        assert!(matches!(
            set.find(Some("ec1"), Algorithm::RS256),
            Lookup::WrongAlgorithm
        ));
        assert!(matches!(
            set.find(Some("ec1"), Algorithm::HS256),
            Lookup::WrongAlgorithm
        ));
        assert!(matches!(
            set.find(Some("other"), Algorithm::ES256),
            Lookup::UnknownKey
        ));
        assert!(matches!(
            set.find(None, Algorithm::RS256),
            Lookup::UnknownKey
        ));
    }

    /// jsonwebtoken picks its crypto backend from its features: exactly one must be on (both,
    /// through another crate, would leave none, and every verification would fail).
    #[test]
    fn one_crypto_backend_is_built_in() {
        assert!(jsonwebtoken::crypto::CryptoProvider::try_get_default().is_some());
        assert!("none".parse::<Algorithm>().is_err());
    }

    #[test]
    fn unusable_keys_are_left_out() {
        let oct = r#"{"kty":"oct","k":"c2VjcmV0","kid":"h"}"#;
        assert_eq!(
            KeySet::parse(format!(r#"{{"keys":[{oct}]}}"#).as_bytes()).unwrap_err(),
            JwksError::NoUsableKey
        );
        let mislabelled = EC.replace("ES256", "RS256");
        assert_eq!(
            KeySet::parse(format!(r#"{{"keys":[{mislabelled}]}}"#).as_bytes()).unwrap_err(),
            JwksError::NoUsableKey
        );
        let set = KeySet::parse(format!(r#"{{"keys":[{oct},{EC}]}}"#).as_bytes()).unwrap();
        assert_eq!(set.len(), 1);
        assert!(matches!(KeySet::parse(b"[]"), Err(JwksError::NotAJwks(_))));
        assert!(matches!(KeySet::parse(b"{"), Err(JwksError::NotAJwks(_))));
    }
}
