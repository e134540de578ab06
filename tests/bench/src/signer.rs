//! A Personal Agent that signs its Sessions as real agents do (docs/sessions.md, the test
//! signer's format in tests/src/signer.rs): a long-term key (the test key `es256-a`) signs a
//! delegation (`typ` `poppy-dlg+jwt`) of a delegated P-256 key, once per row, and the
//! delegated key signs a new Session JWT (`typ` `poppy-session+jwt`, the delegation in its
//! `poppy_dlg` header, a new `jti`, `htu` and `htm` of the request) for every request.
//!
//! Written on ring directly rather than with the e2e crate's signer: that one re-parses the
//! key and re-signs the delegation for every Session (fine in a test, 3× the load generator's
//! CPU here); the bytes are of the same format, and the gateway verifies them in every signed
//! row (a row fails on `403 invalid_session`).

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, anyhow};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use serde_json::json;

/// The public origin the signed rows' gateways are configured with (`[session] origins`).
pub const PUBLIC_ORIGIN: &str = "https://api.shop.example";
/// The agent's long-term key: the e2e tests' `es256-a` (its JWKS is what the bench upstream
/// serves as the agent's `jwks_uri`).
const LONG_TERM_PEM: &str = include_str!("../../fixtures/keys/es256-a.pem");
pub const LONG_TERM_JWKS: &str = include_str!("../../fixtures/keys/es256-a.jwks.json");
const LONG_TERM_KID: &str = "es256-a";
/// Where the bench upstream serves the agent's metadata document and its JWKS.
pub const DOCUMENT_PATH: &str = "/__bench/agent.json";
pub const JWKS_PATH: &str = "/__bench/jwks.json";
/// `exp - iat` of a delegation and of a Session (the gateway's caps: 24 h and 300 s).
const DELEGATION_LIFETIME: u64 = 3600;
const SESSION_LIFETIME: u64 = 300;

/// The `[session]` table of a gateway that trusts the bench agent served at `client_id`.
pub fn session_table(verify_required: bool, client_id: &str) -> String {
    if verify_required {
        format!(
            "[session]\nverify = \"required\"\norigins = [\"{PUBLIC_ORIGIN}\"]\n\
             allow_private_hosts = [\"127.0.0.1\"]\n\n[[session.agent]]\nclient_id = \"{client_id}\"\n"
        )
    } else {
        "[session]\nverify = \"off\"\n".to_owned()
    }
}

/// The agent's metadata document as the upstream at `base` (`http://127.0.0.1:PORT`) serves it.
pub fn document(base: &str) -> String {
    json!({
        "client_id": format!("{base}{DOCUMENT_PATH}"),
        "client_name": "poppy-bench agent",
        "jwks_uri": format!("{base}{JWKS_PATH}"),
    })
    .to_string()
}

/// One agent's Session (`sid`, user) with its delegated key, signing Sessions for requests.
pub struct Signer {
    client_id: String,
    key: EcdsaKeyPair,
    rng: SystemRandom,
    /// `base64url` of the Session JWT's protected header (with the delegation): the same for
    /// every Session of this key.
    header: String,
    jti: AtomicU64,
}

impl Signer {
    /// A new delegated key for the agent `client_id`, vouched for by the long-term key.
    pub fn new(client_id: &str) -> anyhow::Result<Signer> {
        let rng = SystemRandom::new();
        let long_term = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &pem_der(LONG_TERM_PEM)?,
            &rng,
        )
        .map_err(|e| anyhow!("the long-term test key: {e}"))?;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|e| anyhow!("a delegated key: {e}"))?;
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|e| anyhow!("the delegated key: {e}"))?;
        let point = key.public_key().as_ref();
        let now = now();
        let delegation = sign(
            &long_term,
            &rng,
            &json!({"alg": "ES256", "kid": LONG_TERM_KID, "typ": "poppy-dlg+jwt"}),
            &json!({
                "iss": client_id,
                "cnf": {"jwk": {
                    "kty": "EC",
                    "crv": "P-256",
                    "x": URL_SAFE_NO_PAD.encode(point.get(1..33).context("P-256 point")?),
                    "y": URL_SAFE_NO_PAD.encode(point.get(33..65).context("P-256 point")?),
                }},
                "iat": now,
                "exp": now + DELEGATION_LIFETIME,
            }),
        )?;
        let header = URL_SAFE_NO_PAD.encode(
            json!({"alg": "ES256", "typ": "poppy-session+jwt", "poppy_dlg": delegation})
                .to_string(),
        );
        Ok(Signer {
            client_id: client_id.to_owned(),
            key,
            rng,
            header,
            jti: AtomicU64::new(0),
        })
    }

    /// A new Session JWT for `method` `path` (valid for 300 s from now).
    pub fn session(&self, method: &str, path: &str) -> anyhow::Result<String> {
        let now = now();
        let payload = json!({
            "iss": self.client_id,
            "sid": "sess_bench",
            "sub": "user_bench",
            "iat": now,
            "exp": now + SESSION_LIFETIME,
            "jti": format!("b{}-{}", std::process::id(), self.jti.fetch_add(1, Ordering::Relaxed)),
            "htu": format!("{PUBLIC_ORIGIN}{path}"),
            "htm": method,
        });
        let input = format!(
            "{}.{}",
            self.header,
            URL_SAFE_NO_PAD.encode(payload.to_string())
        );
        signed(&self.key, &self.rng, input)
    }
}

fn sign(
    key: &EcdsaKeyPair,
    rng: &SystemRandom,
    header: &serde_json::Value,
    payload: &serde_json::Value,
) -> anyhow::Result<String> {
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(payload.to_string())
    );
    signed(key, rng, input)
}

fn signed(key: &EcdsaKeyPair, rng: &SystemRandom, input: String) -> anyhow::Result<String> {
    let signature = key
        .sign(rng, input.as_bytes())
        .map_err(|e| anyhow!("ES256 signing: {e}"))?;
    Ok(format!(
        "{input}.{}",
        URL_SAFE_NO_PAD.encode(signature.as_ref())
    ))
}

/// The DER inside a PEM block.
fn pem_der(pem: &str) -> anyhow::Result<Vec<u8>> {
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    Ok(STANDARD.decode(body.trim())?)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_carry_the_delegation_and_bind_the_request() {
        let signer = Signer::new("http://127.0.0.1:1/__bench/agent.json").unwrap();
        let jwt = signer.session("POST", "/orders/o1/exchanges").unwrap();
        let part = |i: usize| -> serde_json::Value {
            let text = jwt.split('.').nth(i).unwrap();
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(text).unwrap()).unwrap()
        };
        assert_eq!(part(0)["typ"], "poppy-session+jwt");
        assert_eq!(part(0)["poppy_dlg"].as_str().unwrap().split('.').count(), 3);
        assert_eq!(
            part(1)["htu"],
            "https://api.shop.example/orders/o1/exchanges"
        );
        assert_eq!(part(1)["htm"], "POST");
        assert_ne!(jwt, signer.session("POST", "/orders/o1/exchanges").unwrap());
    }
}
