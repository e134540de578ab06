//! Bearer tokens (`[session.token]`): a JWT access token is verified against its issuer's
//! JWKS; an opaque one is resolved by RFC 7662 introspection, cached for its lifetime. Either
//! way the account is a verified subject, not a token string, so a refreshed token of the
//! same subject is the same account.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::http::HttpClient;
use super::source::TrustedIssuer;
use super::verify::{self, Expectations, VerifyError};

/// How long one introspection may take.
pub(crate) const INTROSPECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// An introspection answer is kept at most this long, even if the token lives longer (a
/// revoked token is noticed within it).
pub(crate) const MAX_CACHE: Duration = Duration::from_secs(300);
/// Cached introspections kept at most.
const CACHE_ENTRIES: usize = 10_000;

/// RFC 7662 introspection endpoint and the gateway's client credentials for it.
#[derive(Clone)]
pub(crate) struct Introspection {
    pub(crate) url: String,
    pub(crate) client_id: String,
    pub(crate) client_secret: String,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Introspection({}, client {:?})",
            self.url, self.client_id
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TokenError {
    #[error("the access token: {0}")]
    Jwt(VerifyError),
    #[error("the access token is not active (introspection)")]
    Inactive,
    #[error("the access token is opaque and no introspection endpoint is configured")]
    NoIntrospection,
    #[error("the access token could not be introspected: {0}")]
    IntrospectionFailed(String),
    #[error("the access token has no claim {0:?}")]
    NoAccount(String),
    #[error(
        "the access token is another agent's (its client_id, or azp, is not the Session's agent)"
    )]
    OtherAgent,
    #[error("the access token names no agent (neither client_id nor azp)")]
    NoAgent,
    #[error(
        "Authorization is not `Bearer <token>` (or `DPoP <token>`): one space, then the token, with no other white space"
    )]
    Unreadable,
}

/// The access token and the Session must belong to the same agent: the token's top-level
/// `client_id` (RFC 9068, RFC 7662), or else its `azp`, is the Session's agent.
/// (`act.client_id` is the identity provider's own ID and is not compared.)
pub(crate) fn check_agent(claims: &Map<String, Value>, agent: &str) -> Result<(), TokenError> {
    let named = match claims.get("client_id") {
        Some(client_id) => client_id,
        None => claims.get("azp").ok_or(TokenError::NoAgent)?,
    };
    if named.as_str() == Some(agent) {
        Ok(())
    } else {
        Err(TokenError::OtherAgent)
    }
}

/// An introspection answer, by the token's SHA-256, until this Unix second.
type Cached = (Map<String, Value>, u64);

/// Verifies bearer tokens.
pub(crate) struct TokenVerifier {
    /// JWT access tokens: their issuer and keys.
    pub(crate) issuer: Option<Arc<TrustedIssuer>>,
    pub(crate) expect: Expectations,
    pub(crate) introspection: Option<Introspection>,
    http: Arc<HttpClient>,
    cache: Mutex<HashMap<[u8; 32], Cached>>,
}

impl std::fmt::Debug for TokenVerifier {
    // Configuration only: reload compares it, and the cache holds subjects.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenVerifier")
            .field("issuer", &self.issuer)
            .field("expect", &self.expect)
            .field("introspection", &self.introspection)
            .finish()
    }
}

impl TokenVerifier {
    pub(crate) fn new(
        issuer: Option<TrustedIssuer>,
        expect: Expectations,
        introspection: Option<Introspection>,
        http: Arc<HttpClient>,
    ) -> TokenVerifier {
        TokenVerifier {
            issuer: issuer.map(Arc::new),
            expect,
            introspection,
            http,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The verified claims of a bearer token.
    pub(crate) async fn verify(
        &self,
        token: &str,
        now: u64,
    ) -> Result<Map<String, Value>, TokenError> {
        match verify::peek(token) {
            Ok(unverified) => self.verify_jwt(token, &unverified, now).await,
            // Not a JWT at all: an opaque token.
            Err(VerifyError::Malformed) => self.introspect(token, now).await,
            Err(e) => Err(TokenError::Jwt(e)),
        }
    }

    async fn verify_jwt(
        &self,
        token: &str,
        unverified: &verify::Unverified,
        now: u64,
    ) -> Result<Map<String, Value>, TokenError> {
        let Some(issuer) = &self.issuer else {
            return Err(TokenError::Jwt(VerifyError::UntrustedIssuer(
                unverified.issuer.clone(),
            )));
        };
        if unverified.issuer != issuer.issuer {
            return Err(TokenError::Jwt(VerifyError::UntrustedIssuer(
                unverified.issuer.clone(),
            )));
        }
        let attempt = |keys: Option<Arc<super::KeySet>>| match keys {
            None => Err(VerifyError::NoKeys {
                issuer: issuer.issuer.clone(),
            }),
            Some(keys) => verify::verify(token, unverified, &keys, &self.expect, now),
        };
        match attempt(issuer.keys()) {
            Err(VerifyError::UnknownKey { .. } | VerifyError::NoKeys { .. }) => {
                issuer.reload().await;
                attempt(issuer.keys())
            }
            other => other,
        }
        .map_err(TokenError::Jwt)
    }

    async fn introspect(&self, token: &str, now: u64) -> Result<Map<String, Value>, TokenError> {
        let Some(endpoint) = &self.introspection else {
            return Err(TokenError::NoIntrospection);
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Ok(cache) = self.cache.lock()
            && let Some((claims, until)) = cache.get(&key)
            && *until > now
        {
            return Ok(claims.clone());
        }
        let body = self
            .http
            .post_form(
                &endpoint.url,
                &[("token", token), ("token_type_hint", "access_token")],
                Some((&endpoint.client_id, &endpoint.client_secret)),
                INTROSPECTION_TIMEOUT,
                64 * 1024,
            )
            .await
            .map_err(TokenError::IntrospectionFailed)?;
        let claims = match serde_json::from_slice(&body) {
            Ok(Value::Object(map)) => map,
            _ => {
                return Err(TokenError::IntrospectionFailed(
                    "the answer is not a JSON object".into(),
                ));
            }
        };
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(TokenError::Inactive);
        }
        if let Some(exp) = claims.get("exp").and_then(Value::as_u64)
            && exp.saturating_add(self.expect.clock_skew_secs) < now
        {
            return Err(TokenError::Inactive);
        }
        let until = claims
            .get("exp")
            .and_then(Value::as_u64)
            .unwrap_or(now)
            .min(now + MAX_CACHE.as_secs());
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHE_ENTRIES {
                cache.retain(|_, (_, until)| *until > now);
                if cache.len() >= CACHE_ENTRIES {
                    cache.clear();
                }
            }
            cache.insert(key, (claims.clone(), until));
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claims(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn the_token_must_be_the_sessions_agents() {
        let agent = "https://agent.example/client.json";
        assert_eq!(
            check_agent(&claims(json!({"client_id": agent})), agent),
            Ok(())
        );
        assert_eq!(check_agent(&claims(json!({"azp": agent})), agent), Ok(()));
        // client_id first: an azp does not make another client's token this agent's.
        let other = json!({"client_id": "https://other.example/c.json", "azp": agent});
        assert_eq!(
            check_agent(&claims(other), agent),
            Err(TokenError::OtherAgent)
        );
        let other = json!({"azp": "https://other.example/c.json"});
        assert_eq!(
            check_agent(&claims(other), agent),
            Err(TokenError::OtherAgent)
        );
        let internal = json!({"sub": "u1", "act": {"client_id": agent}});
        assert_eq!(
            check_agent(&claims(internal), agent),
            Err(TokenError::NoAgent)
        );
        assert_eq!(
            check_agent(&claims(json!({"client_id": 7})), agent),
            Err(TokenError::OtherAgent)
        );
    }
}
