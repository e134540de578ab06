//! Real signing keys (tests/fixtures/keys: two P-256 and two RSA-2048 test-only key pairs, each
//! with its JWKS) and signed Session JWTs, for `[session] verify = "required"`.

use std::path::PathBuf;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::agent::{AGENT, USER};

/// The folder of the test keys.
pub fn keys_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/keys")
}

/// The JWKS document (text) of test key `name` (`es256-a`, `es256-b`, `rs256-a`, `rs256-b`).
pub fn jwks_of(names: &[&str]) -> String {
    let keys: Vec<Value> = names
        .iter()
        .flat_map(|name| {
            let text = std::fs::read_to_string(keys_dir().join(format!("{name}.jwks.json")))
                .unwrap_or_else(|e| panic!("test key {name}: {e}"));
            let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            doc["keys"].as_array().cloned().unwrap_or_default()
        })
        .collect();
    json!({ "keys": keys }).to_string()
}

/// The algorithm of test key `name`.
pub fn alg_of(name: &str) -> Algorithm {
    if name.starts_with("es256") {
        Algorithm::ES256
    } else {
        Algorithm::RS256
    }
}

/// The private key of test key `name`, for signing.
pub fn encoding_key(name: &str) -> EncodingKey {
    let pem = std::fs::read(keys_dir().join(format!("{name}.pem")))
        .unwrap_or_else(|e| panic!("test key {name}: {e}"));
    match alg_of(name) {
        Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
        _ => EncodingKey::from_rsa_pem(&pem),
    }
    .unwrap_or_else(|e| panic!("test key {name}: {e}"))
}

/// `payload` signed with test key `name`, with `kid` = `name` and `typ` = `typ`.
pub fn sign(name: &str, typ: &str, payload: &Value) -> String {
    let alg = alg_of(name);
    let key = encoding_key(name);
    let mut header = Header::new(alg);
    header.kid = Some(name.to_owned());
    header.typ = Some(typ.to_owned());
    jsonwebtoken::encode(&header, payload, &key).unwrap_or_else(|e| panic!("signing: {e}"))
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Session claims of agent `issuer`, user [`USER`], valid for five minutes, for `audience`.
pub fn session_claims(issuer: &str, sid: &str, audience: &str) -> Value {
    let now = now();
    json!({
        "iss": issuer,
        "sid": sid,
        "sub": USER,
        "aud": audience,
        "iat": now,
        "exp": now + 300,
    })
}

/// The default agent's claims.
pub fn default_session_claims(sid: &str, audience: &str) -> Value {
    session_claims(AGENT, sid, audience)
}
