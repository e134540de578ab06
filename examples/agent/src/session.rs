//! The `Poppy-Session` header, as Personal Agents send it (docs/sessions.md): a new JWT for
//! every request, for that request's origin and path (`htu`) and method (`htm`), signed with
//! a short-lived delegated key. The JWT's `poppy_dlg` header carries the delegation: a JWS,
//! signed with the agent's long-term key, that vouches for the delegated key (`cnf.jwk`).

use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::Algorithm;
use serde_json::{Value, json};

use crate::identity::{DEMO_KID, KeyError, SigningKey};

/// A Session JWT's lifetime (docs/sessions.md caps `exp - iat` at 300 s).
const SESSION_SECONDS: i64 = 120;
/// A delegation's lifetime: short-lived, and long enough for one run of this agent.
const DELEGATION_SECONDS: i64 = 3600;

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("cannot sign: {0}")]
    Sign(#[from] jsonwebtoken::errors::Error),
    #[error("`{0}` is not an absolute http(s) URL")]
    Url(String),
}

/// Whose Sessions this agent signs: the agent (`iss`), the Session (`sid`), the User (`sub`).
#[derive(Debug, Clone)]
pub struct Who {
    /// The agent's `client_id`: its metadata document's URL.
    pub agent: String,
    pub sid: String,
    pub user: String,
}

/// A delegated key and the delegation that vouches for it.
struct Delegated {
    key: SigningKey,
    /// The compact JWS of `poppy_dlg`.
    delegation: String,
    expires: i64,
}

/// Signs a Session JWT for each request.
pub struct Signer {
    who: Who,
    long_term: SigningKey,
    /// One delegated key per run, replaced when its delegation would expire within a Session.
    delegated: Mutex<Option<Delegated>>,
}

impl Signer {
    /// With the agent's long-term key; checked now, so that signing later cannot fail on it.
    pub fn new(who: Who) -> Result<Signer, SignError> {
        let signer = Signer {
            who,
            long_term: SigningKey::long_term()?,
            delegated: Mutex::new(None),
        };
        signer.sign("GET", "http://127.0.0.1/")?;
        Ok(signer)
    }

    /// A new Session JWT for `method` on `url` (its query, if any, is not signed).
    pub fn sign(&self, method: &str, url: &str) -> Result<String, SignError> {
        let htu = htu(url)?;
        let now = now();
        // Nothing else is done under the lock, and every update is whole: usable after a panic.
        let mut current = self.delegated.lock().unwrap_or_else(|p| p.into_inner());
        let delegated = match current.take() {
            Some(d) if d.expires >= now + SESSION_SECONDS => current.insert(d),
            _ => current.insert(self.delegate(now)?),
        };
        let header = json!({
            "alg": "ES256",
            "typ": "poppy-session+jwt",
            "poppy_dlg": delegated.delegation,
        });
        let claims = json!({
            "iss": self.who.agent,
            "sid": self.who.sid,
            "sub": self.who.user,
            "iat": now,
            "exp": now + SESSION_SECONDS,
            "jti": jti(),
            "htu": htu,
            "htm": method.to_ascii_uppercase(),
        });
        jws(&header, &claims, &delegated.key)
    }

    /// A new delegated key, vouched for by the long-term key.
    fn delegate(&self, now: i64) -> Result<Delegated, SignError> {
        let key = SigningKey::generate()?;
        let expires = now + DELEGATION_SECONDS;
        let header = json!({"alg": "ES256", "kid": DEMO_KID, "typ": "poppy-dlg+jwt"});
        let claims = json!({
            "iss": self.who.agent,
            "cnf": {"jwk": key.jwk},
            "iat": now,
            "exp": expires,
        });
        Ok(Delegated {
            delegation: jws(&header, &claims, &self.long_term)?,
            key,
            expires,
        })
    }
}

/// A compact JWS. jsonwebtoken's `Header` has no member for `poppy_dlg`, so the signing input
/// is made here and only the signature is jsonwebtoken's.
fn jws(header: &Value, claims: &Value, key: &SigningKey) -> Result<String, SignError> {
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = jsonwebtoken::crypto::sign(input.as_bytes(), &key.encoding, Algorithm::ES256)?;
    Ok(format!("{input}.{signature}"))
}

/// `htu`: the URL's origin and path, without query or fragment (RFC 9449's claim).
pub fn htu(url: &str) -> Result<String, SignError> {
    let parsed = reqwest::Url::parse(url).map_err(|_| SignError::Url(url.to_owned()))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(SignError::Url(url.to_owned()));
    }
    Ok(format!(
        "{}{}",
        parsed.origin().ascii_serialization(),
        parsed.path()
    ))
}

/// A JWT ID: 128 random bits.
fn jti() -> String {
    let bytes: [u8; 16] = rand::random();
    URL_SAFE_NO_PAD.encode(bytes)
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A stand-in access token for `account`: an unsigned JWT (`alg` none) whose `sub` is the
/// account. A gateway that does not verify bearer tokens (the demo's: no `[session.token]`)
/// reads the account from it, as an API would after checking a real token; it proves nothing.
pub fn demo_token(account: &str) -> String {
    format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(json!({"alg": "none", "typ": "JWT"}).to_string()),
        URL_SAFE_NO_PAD.encode(json!({ "sub": account }).to_string())
    )
}

/// A Session ID for this run: distinct per process and time.
pub fn new_sid() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("ses_{:x}{:x}", nanos & 0xffff_ffff_ffff, std::process::id())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use jsonwebtoken::{DecodingKey, Validation};

    fn who() -> Who {
        Who {
            agent: "http://127.0.0.1:8084/agent.json".into(),
            sid: "ses_1".into(),
            user: "user_ada".into(),
        }
    }

    fn part(jwt: &str, n: usize) -> Value {
        let text = jwt.split('.').nth(n).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(text).unwrap()).unwrap()
    }

    /// Verify `jwt` with `key`, as ES256, checking `exp` only.
    fn verify(jwt: &str, key: &DecodingKey) -> Value {
        let mut validation = Validation::new(Algorithm::ES256);
        validation.required_spec_claims = ["exp".to_owned()].into();
        jsonwebtoken::decode::<Value>(jwt, key, &validation)
            .unwrap()
            .claims
    }

    fn ec_key(jwk: &Value) -> DecodingKey {
        DecodingKey::from_ec_components(jwk["x"].as_str().unwrap(), jwk["y"].as_str().unwrap())
            .unwrap()
    }

    #[test]
    fn the_session_and_its_delegation_have_the_format_and_verify() {
        let signer = Signer::new(who()).unwrap();
        let url = "http://127.0.0.1:8080/orders/ord_7Hk2/exchanges?dry=1";
        let jwt = signer.sign("post", url).unwrap();

        let header = part(&jwt, 0);
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["typ"], "poppy-session+jwt");
        let delegation = header["poppy_dlg"].as_str().unwrap();
        assert_eq!(
            part(delegation, 0),
            json!({"alg": "ES256", "kid": DEMO_KID, "typ": "poppy-dlg+jwt"})
        );

        // The delegation verifies with the long-term public key of the JWKS.
        let jwks = crate::identity::jwks(&SigningKey::long_term().unwrap());
        let dlg = verify(delegation, &ec_key(&jwks["keys"][0]));
        assert_eq!(dlg["iss"], who().agent);
        assert_eq!(
            dlg["exp"].as_i64().unwrap() - dlg["iat"].as_i64().unwrap(),
            3600
        );
        let cnf = &dlg["cnf"]["jwk"];
        assert_eq!((&cnf["kty"], &cnf["crv"]), (&json!("EC"), &json!("P-256")));

        // The Session verifies with the delegated key, and not with the long-term one.
        let claims = verify(&jwt, &ec_key(cnf));
        assert!(
            jsonwebtoken::decode::<Value>(
                &jwt,
                &ec_key(&jwks["keys"][0]),
                &Validation::new(Algorithm::ES256)
            )
            .is_err()
        );
        assert_eq!(claims["iss"], who().agent);
        assert_eq!(claims["sid"], "ses_1");
        assert_eq!(claims["sub"], "user_ada");
        assert_eq!(
            claims["htu"],
            "http://127.0.0.1:8080/orders/ord_7Hk2/exchanges"
        );
        assert_eq!(claims["htm"], "POST");
        assert_eq!(
            claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
            120
        );
        assert!(claims["jti"].as_str().is_some_and(|j| !j.is_empty()));
    }

    #[test]
    fn every_request_gets_a_new_session_with_the_same_identity() {
        let signer = Signer::new(who()).unwrap();
        let (a, b) = (
            signer.sign("GET", "http://127.0.0.1:8080/x").unwrap(),
            signer.sign("GET", "http://127.0.0.1:8080/x").unwrap(),
        );
        assert_ne!(a, b);
        let (a, b) = (part(&a, 1), part(&b, 1));
        assert_ne!(a["jti"], b["jti"]);
        assert_eq!((&a["sid"], &a["iss"]), (&b["sid"], &b["iss"]));
        // Another run: another delegated key.
        let other = Signer::new(who()).unwrap();
        let dlg = |jwt: &str| part(part(jwt, 0)["poppy_dlg"].as_str().unwrap(), 1);
        let c = other.sign("GET", "http://127.0.0.1:8080/x").unwrap();
        let d = signer.sign("GET", "http://127.0.0.1:8080/x").unwrap();
        assert_ne!(dlg(&c)["cnf"], dlg(&d)["cnf"]);
    }

    #[test]
    fn htu_is_the_origin_and_path() {
        assert_eq!(
            htu("http://127.0.0.1:80/a/b?c=d#e").unwrap(),
            "http://127.0.0.1/a/b"
        );
        assert_eq!(
            htu("https://shop.example/mcp").unwrap(),
            "https://shop.example/mcp"
        );
        assert!(htu("/relative").is_err());
        assert!(htu("file:///etc/passwd").is_err());
        assert!(new_sid().starts_with("ses_"));
    }
}
