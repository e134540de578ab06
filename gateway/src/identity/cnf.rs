//! The delegated key a delegation vouches for (`cnf.jwk`, RFC 7800) and its RFC 7638
//! thumbprint. Pure: the JWK comes from a delegation's payload.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::jwks::Family;

/// JWK members that only a private (or symmetric) key has (RFC 7518 6.2.2, 6.3.2, 6.4.1).
/// A delegation that publishes one leaked its key: refused rather than used.
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// A delegated public key, ready to verify the Session it signs.
pub(crate) struct DelegatedKey {
    pub(crate) key: DecodingKey,
    pub(crate) family: Family,
    /// EC and OKP keys: their curve (`P-256`, `P-384`, `Ed25519`), which fixes the algorithm.
    pub(crate) curve: Option<String>,
    /// The JWK's own `alg`, when it names one: then only that algorithm.
    pub(crate) alg: Option<Algorithm>,
    /// A P-256 key for ring (`0x04 ‖ x ‖ y`): an ES256 Session is verified with it, about 5×
    /// faster here than through jsonwebtoken's `rust_crypto` backend (BENCHMARKS.md, issue 41).
    pub(crate) p256: Option<ring::signature::UnparsedPublicKey<Vec<u8>>>,
}

impl DelegatedKey {
    /// Read `cnf.jwk`. The messages say what is wrong with the key, never its members.
    pub(crate) fn parse(jwk: &Value) -> Result<DelegatedKey, String> {
        let Value::Object(members) = jwk else {
            return Err("not a JSON object".into());
        };
        if PRIVATE_MEMBERS.iter().any(|m| members.contains_key(*m)) {
            return Err(
                "it has private or secret members; only a public key may be delegated".into(),
            );
        }
        let curve = members
            .get("crv")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let family = match members.get("kty").and_then(Value::as_str) {
            Some("RSA") => Family::Rsa,
            Some("EC") if matches!(curve.as_deref(), Some("P-256" | "P-384")) => Family::Ec,
            Some("OKP") if curve.as_deref() == Some("Ed25519") => Family::Ed,
            Some("oct") => return Err("a symmetric (oct) key cannot sign for an agent".into()),
            Some("EC" | "OKP") => return Err("unsupported curve".into()),
            _ => return Err("kty is not RSA, EC or OKP".into()),
        };
        if members
            .get("use")
            .is_some_and(|u| u.as_str() != Some("sig"))
        {
            return Err("its use is not \"sig\"".into());
        }
        let alg = match members.get("alg") {
            None => None,
            Some(Value::String(name)) => {
                let alg: Algorithm = name
                    .parse()
                    .map_err(|_| format!("alg {name:?} is not a signature algorithm"))?;
                if Family::of(alg) != Some(family) {
                    return Err(format!("alg {name:?} does not fit its kty"));
                }
                Some(alg)
            }
            Some(_) => return Err("alg is not a string".into()),
        };
        let parsed: Jwk =
            serde_json::from_value(jwk.clone()).map_err(|_| "not a valid public JWK".to_owned())?;
        let key =
            DecodingKey::from_jwk(&parsed).map_err(|_| "not a valid public JWK".to_owned())?;
        let p256 = match (family, curve.as_deref()) {
            (Family::Ec, Some("P-256")) => p256_point(members),
            _ => None,
        };
        Ok(DelegatedKey {
            key,
            family,
            curve,
            alg,
            p256,
        })
    }

    /// Whether this key may verify a signature made with `alg`: its type and curve, and its
    /// own `alg` when it names one.
    pub(crate) fn fits(&self, alg: Algorithm) -> bool {
        let curve_fits = match (alg, self.curve.as_deref()) {
            (Algorithm::ES256, Some(curve)) => curve == "P-256",
            (Algorithm::ES384, Some(curve)) => curve == "P-384",
            _ => true,
        };
        Family::of(alg) == Some(self.family) && curve_fits && self.alg.is_none_or(|a| a == alg)
    }
}

/// The uncompressed point of a P-256 JWK (`x` and `y`, 32 bytes each), for ring; `None`
/// otherwise (then jsonwebtoken verifies, as for every other key).
fn p256_point(members: &Map<String, Value>) -> Option<ring::signature::UnparsedPublicKey<Vec<u8>>> {
    let coordinate = |name: &str| {
        let text = members.get(name)?.as_str()?;
        URL_SAFE_NO_PAD
            .decode(text)
            .ok()
            .filter(|bytes| bytes.len() == 32)
    };
    let (x, y) = (coordinate("x")?, coordinate("y")?);
    let mut point = Vec::with_capacity(65);
    point.push(0x04);
    point.extend_from_slice(&x);
    point.extend_from_slice(&y);
    Some(ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P256_SHA256_FIXED,
        point,
    ))
}

/// The RFC 7638 thumbprint (SHA-256) of a public JWK: its required members only, in
/// lexicographic order, without whitespace. `None` for a key type without one here.
pub(crate) fn thumbprint(jwk: &Map<String, Value>) -> Option<[u8; 32]> {
    let required: &[&str] = match jwk.get("kty").and_then(Value::as_str)? {
        "EC" => &["crv", "kty", "x", "y"],
        "RSA" => &["e", "kty", "n"],
        "OKP" => &["crv", "kty", "x"],
        _ => return None,
    };
    let mut canonical = String::from("{");
    for (i, name) in required.iter().enumerate() {
        let value = jwk.get(*name)?.as_str()?;
        if i > 0 {
            canonical.push(',');
        }
        canonical.push_str(&serde_json::to_string(name).ok()?);
        canonical.push(':');
        canonical.push_str(&serde_json::to_string(value).ok()?);
    }
    canonical.push('}');
    Some(Sha256::digest(canonical.as_bytes()).into())
}

/// A thumbprint as written in JOSE (base64url, no padding).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn encode_thumbprint(thumbprint: &[u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(thumbprint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// RFC 7638 section 3.1.
    const RFC_N: &str = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn thumbprint_is_rfc_7638s_example() {
        let jwk = object(
            json!({"kty": "RSA", "n": RFC_N, "e": "AQAB", "alg": "RS256", "kid": "2011-04-29"}),
        );
        let digest = thumbprint(&jwk).unwrap();
        assert_eq!(
            encode_thumbprint(&digest),
            "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
        );
        // Optional members do not change it; a missing required one gives none.
        let bare = object(json!({"e": "AQAB", "kty": "RSA", "n": RFC_N}));
        assert_eq!(thumbprint(&bare), Some(digest));
        assert_eq!(thumbprint(&object(json!({"kty": "RSA", "n": RFC_N}))), None);
        assert_eq!(
            thumbprint(&object(json!({"kty": "oct", "k": "c2VjcmV0"}))),
            None
        );
    }

    #[test]
    fn private_and_symmetric_keys_are_refused() {
        let ec = json!({"kty": "EC", "crv": "P-256", "x": "7xLsNQigHxfjzxtM6A36VVeEhCq_FBpuDaCRkEqcOvc", "y": "PT5gIcCuGUSu1yCJKltLz2ZpBUL7Q9mTONaGfwFyJEQ"});
        let key = DelegatedKey::parse(&ec).unwrap();
        assert!(key.fits(Algorithm::ES256));
        assert!(!key.fits(Algorithm::ES384));
        assert!(!key.fits(Algorithm::RS256));
        assert!(!key.fits(Algorithm::HS256));
        let mut private = ec.clone();
        private["d"] = json!("AAAA");
        let error = DelegatedKey::parse(&private).err().unwrap();
        assert!(error.contains("private"), "{error}");
        assert!(!error.contains("AAAA"));
        let oct = json!({"kty": "oct", "k": "c2VjcmV0"});
        assert!(DelegatedKey::parse(&oct).err().unwrap().contains("private"));
        let oct = json!({"kty": "oct"});
        assert!(DelegatedKey::parse(&oct).err().unwrap().contains("oct"));
        let mut labelled = ec.clone();
        labelled["alg"] = json!("ES384");
        assert!(
            !DelegatedKey::parse(&labelled)
                .unwrap()
                .fits(Algorithm::ES256)
        );
        labelled["alg"] = json!("RS256");
        assert!(DelegatedKey::parse(&labelled).is_err());
        let mut encryption = ec;
        encryption["use"] = json!("enc");
        assert!(DelegatedKey::parse(&encryption).is_err());
        assert!(DelegatedKey::parse(&json!("a string")).is_err());
    }
}
