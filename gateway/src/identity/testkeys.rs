//! Test-only signing: the fixture keys of tests/fixtures/keys (two P-256 and two RSA-2048
//! key pairs and their JWKS), and compact JWS with any header members (`poppy_dlg`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::{Value, json};

use super::jwks::KeySet;

/// The agent: its client metadata URL.
pub(crate) const AGENT: &str = "https://agent.example/client.json";
/// The gateway's public origin.
pub(crate) const ORIGIN: &str = "https://api.shop.example";
/// A fixed clock.
pub(crate) const NOW: u64 = 1_800_000_000;

fn pem(name: &str) -> &'static [u8] {
    match name {
        "es256-a" => include_bytes!("../../../tests/fixtures/keys/es256-a.pem"),
        "es256-b" => include_bytes!("../../../tests/fixtures/keys/es256-b.pem"),
        "rs256-a" => include_bytes!("../../../tests/fixtures/keys/rs256-a.pem"),
        "rs256-b" => include_bytes!("../../../tests/fixtures/keys/rs256-b.pem"),
        _ => panic!("no test key {name}"),
    }
}

fn jwks(name: &str) -> &'static str {
    match name {
        "es256-a" => include_str!("../../../tests/fixtures/keys/es256-a.jwks.json"),
        "es256-b" => include_str!("../../../tests/fixtures/keys/es256-b.jwks.json"),
        "rs256-a" => include_str!("../../../tests/fixtures/keys/rs256-a.jwks.json"),
        "rs256-b" => include_str!("../../../tests/fixtures/keys/rs256-b.jwks.json"),
        _ => panic!("no test key {name}"),
    }
}

pub(crate) fn alg_of(name: &str) -> Algorithm {
    if name.starts_with("es256") {
        Algorithm::ES256
    } else {
        Algorithm::RS256
    }
}

/// The public JWK of test key `name` (with its `kid`, `alg` and `use`).
pub(crate) fn jwk(name: &str) -> Value {
    let doc: Value = serde_json::from_str(jwks(name)).unwrap();
    doc["keys"][0].clone()
}

/// The key set of the given test keys.
pub(crate) fn key_set(names: &[&str]) -> KeySet {
    let keys: Vec<Value> = names.iter().map(|n| jwk(n)).collect();
    KeySet::parse(json!({ "keys": keys }).to_string().as_bytes()).unwrap()
}

/// `claims` signed with test key `name`; `header` is the whole protected header except
/// `alg` (the key's algorithm).
pub(crate) fn sign(name: &str, header: Value, claims: &Value) -> String {
    let alg = alg_of(name);
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem(name)),
        _ => EncodingKey::from_rsa_pem(pem(name)),
    }
    .unwrap();
    let mut header = header;
    header["alg"] = json!(format!("{alg:?}"));
    let message = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, alg).unwrap();
    format!("{message}.{signature}")
}
