//! Ed25519 signatures of receipt lines, pure (keys come in as bytes).
//!
//! A signed line is the receipt's JSON object with `kid` among its members and `sig` last:
//! `{…,"kid":"K","prev":"…",…,"sig":"S"}`. `S` is the Ed25519 signature (base64url, no padding)
//! of the line's bytes without that last member: everything before `,"sig":"`, then `}`. `K` is
//! the RFC 7638 thumbprint of the public key (its JWK `{"crv","kty","x"}`), so a verifier holding
//! several keys knows which one a line names, and `audit public-key` prints a JWK with that kid.
//!
//! ring signs and verifies (it is rustls's and jsonwebtoken's crypto here already); PEM is read
//! by rustls-pki-types (as for `[server.tls]`) and an SPKI public key's DER by simple_asn1 (what
//! jsonwebtoken reads its PEM keys with).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use rustls_pki_types::pem::{PemObject as _, SectionKind};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What stands between a signed line's message and its signature.
const SIG_MEMBER: &str = ",\"sig\":\"";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(
        "not an Ed25519 private key in PKCS#8 PEM (`openssl genpkey -algorithm ed25519 -out FILE` writes one): {0}"
    )]
    Private(String),
    #[error("{0}")]
    Public(String),
}

/// The operator's receipts signing key. Its Debug shows the kid only.
pub struct SigningKey {
    pair: Ed25519KeyPair,
    public: PublicKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey(kid {})", self.public.kid)
    }
}

impl SigningKey {
    /// A `PRIVATE KEY` PEM block (PKCS#8 v1 as openssl writes it, or v2).
    pub fn from_pem(pem: &[u8]) -> Result<SigningKey, KeyError> {
        SigningKey::from_pkcs8_der(&pkcs8_from_pem(pem)?)
    }

    pub(crate) fn from_pkcs8_der(der: &[u8]) -> Result<SigningKey, KeyError> {
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
            .map_err(|e| KeyError::Private(e.to_string()))?;
        let public = PublicKey::from_raw(pair.public_key().as_ref())
            .map_err(|e| KeyError::Private(e.to_string()))?;
        Ok(SigningKey { pair, public })
    }

    pub fn kid(&self) -> &str {
        &self.public.kid
    }

    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// Sign `body`, a compact JSON object that holds this key's `kid` and no `sig`: the line.
    pub(crate) fn sign_line(&self, body: &str) -> String {
        let signature = URL_SAFE_NO_PAD.encode(self.pair.sign(body.as_bytes()));
        let open = body.strip_suffix('}').unwrap_or(body);
        format!("{open}{SIG_MEMBER}{signature}\"}}")
    }
}

/// The DER of the one `PRIVATE KEY` PEM block in `pem` (not checked to be a key).
pub(crate) fn pkcs8_from_pem(pem: &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut private = None;
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem) {
        match section.map_err(|e| KeyError::Private(e.to_string()))? {
            (SectionKind::PrivateKey, der) if private.is_none() => private = Some(der),
            (SectionKind::PrivateKey, _) => {
                return Err(KeyError::Private("more than one PRIVATE KEY block".into()));
            }
            (kind, _) => {
                return Err(KeyError::Private(format!(
                    "a {kind:?} block, where a PRIVATE KEY block belongs"
                )));
            }
        }
    }
    let der = private.ok_or_else(|| KeyError::Private("no PRIVATE KEY block".into()))?;
    Ok(der)
}

/// An Ed25519 public key and its kid (RFC 7638 thumbprint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    raw: [u8; 32],
    kid: String,
}

impl PublicKey {
    fn from_raw(raw: &[u8]) -> Result<PublicKey, KeyError> {
        let raw: [u8; 32] = raw.try_into().map_err(|_| {
            KeyError::Public(format!(
                "an Ed25519 public key is 32 bytes, not {}",
                raw.len()
            ))
        })?;
        let x = URL_SAFE_NO_PAD.encode(raw);
        // RFC 7638: the required members, sorted, no whitespace.
        let members = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
        let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(members.as_bytes()));
        Ok(PublicKey { raw, kid })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// Its JWK (`kid` being the thumbprint).
    pub fn jwk(&self) -> Value {
        json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": URL_SAFE_NO_PAD.encode(self.raw),
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        })
    }

    fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, self.raw)
            .verify(message, signature)
            .is_ok()
    }

    /// The keys of a public key file: `PUBLIC KEY` PEM blocks (SPKI, as `openssl pkey -pubout`
    /// writes), a JWK, or a JWKS (`{"keys": [...]}`). A private key is refused: a verifier
    /// needs none, and should not be handed one.
    pub fn parse_file(bytes: &[u8]) -> Result<Vec<PublicKey>, KeyError> {
        let text = String::from_utf8_lossy(bytes);
        let keys = if text.trim_start().starts_with('{') {
            from_json(&text)?
        } else {
            from_pem(bytes)?
        };
        if keys.is_empty() {
            return Err(KeyError::Public("holds no key".into()));
        }
        Ok(keys)
    }
}

fn from_pem(bytes: &[u8]) -> Result<Vec<PublicKey>, KeyError> {
    let mut keys = Vec::new();
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(bytes) {
        match section.map_err(|e| KeyError::Public(format!("not PEM: {e}")))? {
            (SectionKind::PublicKey, der) => keys.push(from_spki(&der)?),
            (SectionKind::PrivateKey, _) => {
                return Err(KeyError::Public(
                    "holds a private key: give its public key (`openssl pkey -in KEY -pubout`, or `poppy-gateway audit public-key KEY`)".into(),
                ));
            }
            (kind, _) => {
                return Err(KeyError::Public(format!(
                    "a {kind:?} PEM block, where a PUBLIC KEY block belongs"
                )));
            }
        }
    }
    if keys.is_empty() {
        return Err(KeyError::Public(
            "neither a PUBLIC KEY PEM block nor a JWK or JWKS".into(),
        ));
    }
    Ok(keys)
}

/// SubjectPublicKeyInfo of an Ed25519 key (RFC 8410): algorithm 1.3.101.112, 32-byte key.
fn from_spki(der: &[u8]) -> Result<PublicKey, KeyError> {
    use simple_asn1::ASN1Block::{BitString, ObjectIdentifier, Sequence};
    let not_ed25519 = || KeyError::Public("a PUBLIC KEY that is not an Ed25519 key".into());
    let blocks = simple_asn1::from_der(der)
        .map_err(|e| KeyError::Public(format!("a PUBLIC KEY that is not DER: {e}")))?;
    let [Sequence(_, info)] = blocks.as_slice() else {
        return Err(not_ed25519());
    };
    let [Sequence(_, algorithm), BitString(_, bits, key)] = info.as_slice() else {
        return Err(not_ed25519());
    };
    match algorithm.as_slice() {
        [ObjectIdentifier(_, oid)] if *oid == simple_asn1::oid!(1, 3, 101, 112) => {}
        _ => return Err(not_ed25519()),
    }
    if *bits != 256 {
        return Err(not_ed25519());
    }
    PublicKey::from_raw(key)
}

fn from_json(text: &str) -> Result<Vec<PublicKey>, KeyError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| KeyError::Public(format!("not a JWK or JWKS: {e}")))?;
    match value.get("keys") {
        Some(Value::Array(keys)) => keys.iter().map(from_jwk).collect(),
        Some(_) => Err(KeyError::Public(
            "a JWKS whose \"keys\" is not an array".into(),
        )),
        None => Ok(vec![from_jwk(&value)?]),
    }
}

fn from_jwk(jwk: &Value) -> Result<PublicKey, KeyError> {
    let member = |name| jwk.get(name).and_then(Value::as_str);
    if member("kty") != Some("OKP") || member("crv") != Some("Ed25519") {
        return Err(KeyError::Public(
            "a JWK that is not an Ed25519 key (kty \"OKP\", crv \"Ed25519\")".into(),
        ));
    }
    if jwk.get("d").is_some() {
        return Err(KeyError::Public(
            "a JWK with a private part (\"d\"): give the public key only".into(),
        ));
    }
    let x = member("x")
        .and_then(|x| URL_SAFE_NO_PAD.decode(x).ok())
        .ok_or_else(|| KeyError::Public("a JWK without a base64url \"x\"".into()))?;
    let key = PublicKey::from_raw(&x)?;
    // A kid other than the thumbprint would never match a line's.
    match member("kid") {
        Some(kid) if kid != key.kid => Err(KeyError::Public(format!(
            "a JWK whose kid {kid:?} is not its thumbprint {:?} (receipts name keys by thumbprint)",
            key.kid
        ))),
        _ => Ok(key),
    }
}

/// A signed line split: the message the signature covers, and the signature.
pub(crate) fn split_signed(line: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let open = line.strip_suffix(b"\"}")?;
    let at = open
        .windows(SIG_MEMBER.len())
        .rposition(|w| w == SIG_MEMBER.as_bytes())?;
    let signature = &open[at + SIG_MEMBER.len()..];
    let mut message = open[..at].to_vec();
    message.push(b'}');
    Some((message, signature))
}

/// Why a line's signature does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unverified {
    /// No `sig` member.
    Unsigned,
    /// A `sig` that is not the last member in the compact form, a message that is not a JSON
    /// object, a second `sig` inside it, or no `kid`.
    Malformed(String),
    /// Signed by a key not given.
    UnknownKey(String),
    /// The given key with that kid does not verify it: the line changed after it was signed.
    Bad(String),
}

/// Check a line's signature against `keys`; the kid on success.
pub(crate) fn verify_line(line: &[u8], keys: &[PublicKey]) -> Result<String, Unverified> {
    let full: serde_json::Map<String, Value> = serde_json::from_slice(line)
        .map_err(|e| Unverified::Malformed(format!("not a JSON object ({e})")))?;
    if !full.contains_key("sig") {
        return Err(Unverified::Unsigned);
    }
    let malformed = |why: &str| Unverified::Malformed(why.to_owned());
    let (message, signature) = split_signed(line)
        .ok_or_else(|| malformed("\"sig\" is not the last member, written ,\"sig\":\"…\"}"))?;
    let signed: serde_json::Map<String, Value> = serde_json::from_slice(&message)
        .map_err(|_| malformed("what \"sig\" signs is not a JSON object"))?;
    if signed.contains_key("sig") {
        return Err(malformed("a second \"sig\" member"));
    }
    let kid = signed
        .get("kid")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("signed, with no \"kid\" member"))?;
    let key = keys
        .iter()
        .find(|k| k.kid == kid)
        .ok_or_else(|| Unverified::UnknownKey(kid.to_owned()))?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| malformed("\"sig\" is not base64url"))?;
    if key.verifies(&message, &signature) {
        Ok(kid.to_owned())
    } else {
        Err(Unverified::Bad(kid.to_owned()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// RFC 8037 appendix A: its Ed25519 key (public test vector) and thumbprint.
    const RFC_SEED: &str = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A";
    const RFC_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
    const RFC_KID: &str = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k";

    /// PKCS#8 v1 as `openssl genpkey -algorithm ed25519` writes it, around a seed.
    pub(crate) fn pkcs8_v1_pem(seed: &[u8]) -> String {
        let mut der = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        der.extend_from_slice(seed);
        pem("PRIVATE KEY", &der)
    }

    fn spki_pem(raw: &[u8]) -> String {
        let mut der = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        der.extend_from_slice(raw);
        pem("PUBLIC KEY", &der)
    }

    fn pem(label: &str, der: &[u8]) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN {label}-----\n{b64}\n-----END {label}-----\n")
    }

    pub(crate) fn rfc_key() -> SigningKey {
        let seed = URL_SAFE_NO_PAD.decode(RFC_SEED).unwrap();
        SigningKey::from_pem(pkcs8_v1_pem(&seed).as_bytes()).unwrap()
    }

    #[test]
    fn the_kid_is_the_rfc_7638_thumbprint() {
        let key = rfc_key();
        assert_eq!(key.kid(), RFC_KID);
        assert_eq!(key.public().jwk()["x"], RFC_X);
        let x = URL_SAFE_NO_PAD.decode(RFC_X).unwrap();
        let from_pem = PublicKey::parse_file(spki_pem(&x).as_bytes()).unwrap();
        let from_jwk = PublicKey::parse_file(key.public().jwk().to_string().as_bytes()).unwrap();
        let jwks = json!({"keys": [key.public().jwk()]}).to_string();
        let from_jwks = PublicKey::parse_file(jwks.as_bytes()).unwrap();
        assert_eq!(from_pem, [key.public().clone()]);
        assert_eq!(from_jwk, from_pem);
        assert_eq!(from_jwks, from_pem);
    }

    #[test]
    fn a_pkcs8_v2_key_from_ring_loads_too() {
        let rng = ring::rand::SystemRandom::new();
        let der = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let key = SigningKey::from_pem(pem("PRIVATE KEY", der.as_ref()).as_bytes()).unwrap();
        assert_eq!(key.kid().len(), 43);
    }

    #[test]
    fn a_signed_line_is_json_and_verifies_and_any_change_is_caught() {
        let key = rfc_key();
        let keys = [key.public().clone()];
        let body = format!(r#"{{"kid":"{}","prev":"00","terms":{{"n":1}}}}"#, key.kid());
        let line = key.sign_line(&body);
        let parsed: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["terms"]["n"], 1);
        assert_eq!(parsed["sig"].as_str().map(str::len), Some(86));
        assert_eq!(split_signed(line.as_bytes()).unwrap().0, body.as_bytes());
        assert_eq!(
            verify_line(line.as_bytes(), &keys),
            Ok(key.kid().to_owned())
        );

        let edited = line.replace(r#""n":1"#, r#""n":2"#);
        assert_eq!(
            verify_line(edited.as_bytes(), &keys),
            Err(Unverified::Bad(key.kid().to_owned()))
        );
        let other = SigningKey::from_pem(pkcs8_v1_pem(&[7; 32]).as_bytes()).unwrap();
        assert_eq!(
            verify_line(line.as_bytes(), &[other.public().clone()]),
            Err(Unverified::UnknownKey(key.kid().to_owned()))
        );
        // The other key under this key's kid: the signature does not verify.
        let mut impostor = other.public().clone();
        impostor.kid = key.kid().to_owned();
        assert!(matches!(
            verify_line(line.as_bytes(), &[impostor]),
            Err(Unverified::Bad(_))
        ));
        assert_eq!(
            verify_line(br#"{"prev":"00"}"#, &keys),
            Err(Unverified::Unsigned)
        );
        // A "sig" that is not last, a second "sig", a signature that is not base64url.
        let sig = parsed["sig"].as_str().unwrap();
        for bad in [
            format!(r#"{{"sig":"{sig}","kid":"{}","prev":"00"}}"#, key.kid()),
            format!(
                r#"{{"kid":"{}","sig":"x","prev":"00","sig":"{sig}"}}"#,
                key.kid()
            ),
            format!(r#"{{"kid":"{}","prev":"00","sig":"!!"}}"#, key.kid()),
            format!(r#"{{"prev":"00","sig":"{sig}"}}"#),
        ] {
            assert!(
                matches!(
                    verify_line(bad.as_bytes(), &keys),
                    Err(Unverified::Malformed(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn signatures_match_rfc_8037() {
        // RFC 8037 A.4: the key above signs this JWS input into this signature.
        let key = rfc_key();
        let input = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc";
        let expected = "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg";
        assert_eq!(
            URL_SAFE_NO_PAD.encode(key.pair.sign(input.as_bytes())),
            expected
        );
    }

    #[test]
    fn bad_key_files_are_named() {
        let seed = [1u8; 32];
        let private = pkcs8_v1_pem(&seed);
        let err = PublicKey::parse_file(private.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("private key"), "{err}");
        let err = SigningKey::from_pem(spki_pem(&[0; 32]).as_bytes()).unwrap_err();
        assert!(err.to_string().contains("PRIVATE KEY"), "{err}");
        let err = SigningKey::from_pem(b"not a key").unwrap_err();
        assert!(err.to_string().contains("no PRIVATE KEY"), "{err}");
        // An X25519 key (RFC 8410, OID 1.3.101.110) is not an Ed25519 key.
        let mut x25519 = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x03, 0x21, 0x00,
        ];
        x25519.extend_from_slice(&[9; 32]);
        let x25519 = pem("PUBLIC KEY", &x25519);
        let err = PublicKey::parse_file(x25519.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("not an Ed25519"), "{err}");
        for (jwk, why) in [
            (r#"{"kty":"EC","crv":"P-256","x":"AA"}"#, "not an Ed25519"),
            (
                r#"{"kty":"OKP","crv":"Ed25519","x":"AA","d":"AA"}"#,
                "private",
            ),
            (r#"{"kty":"OKP","crv":"Ed25519","x":"AA"}"#, "32 bytes"),
            (
                &format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{RFC_X}","kid":"k1"}}"#),
                "thumbprint",
            ),
            (r#"{"keys":[]}"#, "no key"),
            ("{", "not a JWK"),
        ] {
            let err = PublicKey::parse_file(jwk.as_bytes()).unwrap_err();
            assert!(err.to_string().contains(why), "{jwk}: {err}");
        }
    }
}
