//! Bearer tokens (`[session.token]`): a JWT access token is verified against its issuer's
//! JWKS; an opaque one is resolved by RFC 7662 introspection ([`introspection`]).
//! Either way the account is a verified subject, not a token string, so a refreshed token of
//! the same subject is the same account.

use std::sync::Arc;

use serde_json::{Map, Value};

pub(crate) mod introspection;

use super::source::TrustedIssuer;
use super::verify::{self, Expectations, VerifyError};
use introspection::Introspector;

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
    #[error(
        "the access token could not be introspected now: the calls to the authorization server are at their rate limit"
    )]
    IntrospectionBusy { retry_after: u32 },
    #[error(
        "the access token is for another audience (introspection): aud must include one of {0:?}"
    )]
    WrongAudience(Vec<String>),
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
    if client_of(claims)?.as_str() == Some(agent) {
        Ok(())
    } else {
        Err(TokenError::OtherAgent)
    }
}

/// The client a token was issued to: its top-level `client_id`, or else its `azp` (a value
/// that is not a string names no client the gateway knows).
pub(crate) fn client_of(claims: &Map<String, Value>) -> Result<&Value, TokenError> {
    match claims.get("client_id") {
        Some(client_id) => Ok(client_id),
        None => claims.get("azp").ok_or(TokenError::NoAgent),
    }
}

/// Verifies bearer tokens.
pub(crate) struct TokenVerifier {
    /// JWT access tokens: their issuer and keys.
    pub(crate) issuer: Option<Arc<TrustedIssuer>>,
    pub(crate) expect: Expectations,
    /// Opaque access tokens.
    pub(crate) introspection: Option<Introspector>,
}

impl std::fmt::Debug for TokenVerifier {
    // Configuration only: reload compares it.
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
        introspection: Option<Introspector>,
    ) -> TokenVerifier {
        TokenVerifier {
            issuer: issuer.map(Arc::new),
            expect,
            introspection,
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
            Err(VerifyError::Malformed) => match &self.introspection {
                Some(introspection) => introspection.claims(token, now).await,
                None => Err(TokenError::NoIntrospection),
            },
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
