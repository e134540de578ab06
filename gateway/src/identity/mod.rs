//! Verified identities (`[session] verify = "required"`): `Poppy-Session` JWTs are verified
//! against the keys of trusted Personal Agents before their claims decide who may approve.
//!
//! A Session carries a delegation (`poppy_dlg`) signed with the agent's long-term keys, which
//! vouches for the short-lived key that signs the Session (docs/sessions.md); a Session of an
//! agent with a static key set may instead be signed with that set directly.
//!
//! `format`, `cnf`, `jwks`, `verify` and `metadata::parse` are pure; `source`, `http` and
//! `metadata::fetch_keys` are the I/O (reading and fetching metadata and JWKS documents).
//! Follows RFC 7519 / RFC 7515: see docs/operations.md, "Verified identities".

mod approver;
pub(crate) mod cnf;
pub(crate) mod format;
pub(crate) mod http;
pub(crate) mod jwks;
pub(crate) mod metadata;
pub(crate) mod source;
#[cfg(test)]
pub(crate) mod testkeys;
pub(crate) mod token;
pub(crate) mod verify;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

pub(crate) use approver::{Approver, ApproverError};
#[cfg(test)]
pub(crate) use approver::{Credentials, Who};
pub use approver::{SessionClaims, VerifyMode};
pub(crate) use format::RequestTarget;
pub(crate) use http::HttpClient;
pub(crate) use jwks::KeySet;
pub(crate) use source::{KeySource, TrustedIssuer};
pub(crate) use token::{Introspection, TokenError, TokenVerifier};
pub(crate) use verify::{Expectations, VerifyError};

/// The trusted agents of one deployment, by issuer (`iss`).
#[derive(Debug)]
pub struct SessionVerifier {
    agents: HashMap<String, Arc<TrustedIssuer>>,
    expect: Expectations,
    /// `[session.token]`: how bearer tokens are verified; `None` leaves them unverified (and
    /// a signed-in replay bound to the exact token).
    pub(crate) token: Option<TokenVerifier>,
}

impl SessionVerifier {
    pub(crate) fn new(
        agents: Vec<TrustedIssuer>,
        expect: Expectations,
        token: Option<TokenVerifier>,
    ) -> SessionVerifier {
        SessionVerifier {
            agents: agents
                .into_iter()
                .map(|a| (a.issuer.clone(), Arc::new(a)))
                .collect(),
            expect,
            token,
        }
    }

    /// The verified claims of a bearer token (`None` without `[session.token]`), when it is
    /// `agent`'s: its `client_id`, or else `azp`, must be the Session's agent (check 6).
    pub(crate) async fn verify_token(
        &self,
        token: &[u8],
        agent: &str,
    ) -> Option<Result<Map<String, Value>, TokenError>> {
        let verifier = self.token.as_ref()?;
        let Ok(token) = std::str::from_utf8(token) else {
            return Some(Err(TokenError::Jwt(VerifyError::Malformed)));
        };
        let verified = verifier
            .verify(token.trim(), now())
            .await
            .and_then(|claims| {
                token::check_agent(&claims, agent)?;
                Ok(claims)
            });
        Some(verified)
    }

    /// Verify a `Poppy-Session` value for the request `target`; its claims when it is signed
    /// as docs/sessions.md says (checks 1 to 5) and valid now. With `poppy_dlg`, the
    /// delegation is verified with the agent's keys and the Session with the delegated key;
    /// without, the Session is verified with the agent's static key set (`aud` required),
    /// unless the agent's keys sign delegations only (a client metadata document's).
    /// An unknown `kid` reads the agent's keys again (rate-limited) and retries once: that is
    /// how a rotated key is picked up.
    pub(crate) async fn verify(
        &self,
        token: &[u8],
        target: &RequestTarget<'_>,
    ) -> Result<Map<String, Value>, VerifyError> {
        let token = std::str::from_utf8(token)
            .map_err(|_| VerifyError::Malformed)?
            .trim();
        let session = format::peek_session(token)?;
        let issuer = &session.jwt.issuer;
        let agent = self
            .agents
            .get(issuer)
            .ok_or_else(|| VerifyError::UntrustedIssuer(issuer.clone()))?;
        if session.delegation.is_none() && agent.delegates_only() {
            return Err(VerifyError::DelegationMissing);
        }
        if agent.keys().is_some() && agent.stale() {
            let agent = Arc::clone(agent);
            tokio::spawn(async move { agent.reload().await });
        }
        let attempt = |keys: Option<Arc<KeySet>>| match (keys, &session.delegation) {
            (None, _) => Err(VerifyError::NoKeys {
                issuer: issuer.clone(),
            }),
            (Some(keys), Some(_)) => {
                format::verify_delegated(token, &session, &keys, &self.expect, target, now())
            }
            (Some(keys), None) => verify::verify(token, &session.jwt, &keys, &self.expect, now()),
        };
        match attempt(agent.keys()) {
            Err(VerifyError::UnknownKey { .. } | VerifyError::NoKeys { .. }) => {
                // Whether this call or a concurrent one read them, try the newest keys.
                agent.reload().await;
                attempt(agent.keys())
            }
            other => other,
        }
    }
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
