//! Verified identities (`[session] verify = "required"`): `Poppy-Session` JWTs are verified
//! against the keys of trusted Personal Agents before their claims decide who may approve.
//!
//! `jwks` and `verify` are pure; `source` and `http` are the I/O (reading and fetching JWKS
//! documents). Follows RFC 7519 / RFC 7515: see docs/operations.md, "Verified identities".

mod approver;
mod http;
pub(crate) mod jwks;
pub(crate) mod source;
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

    /// The verified claims of a bearer token (`None` without `[session.token]`).
    pub(crate) async fn verify_token(
        &self,
        token: &[u8],
    ) -> Option<Result<Map<String, Value>, TokenError>> {
        let verifier = self.token.as_ref()?;
        let Ok(token) = std::str::from_utf8(token) else {
            return Some(Err(TokenError::Jwt(VerifyError::Malformed)));
        };
        Some(verifier.verify(token.trim(), now()).await)
    }

    /// Verify a `Poppy-Session` value; its claims when it is signed by a trusted agent's key
    /// and valid now. An unknown `kid` reads the agent's keys again (rate-limited) and retries
    /// once: that is how a rotated key is picked up.
    pub(crate) async fn verify(&self, token: &[u8]) -> Result<Map<String, Value>, VerifyError> {
        let token = std::str::from_utf8(token)
            .map_err(|_| VerifyError::Malformed)?
            .trim();
        let unverified = verify::peek(token)?;
        let agent = self
            .agents
            .get(&unverified.issuer)
            .ok_or_else(|| VerifyError::UntrustedIssuer(unverified.issuer.clone()))?;
        if agent.keys().is_some() && agent.stale() {
            let agent = Arc::clone(agent);
            tokio::spawn(async move { agent.reload().await });
        }
        let attempt = |keys: Option<Arc<KeySet>>| match keys {
            None => Err(VerifyError::NoKeys {
                issuer: unverified.issuer.clone(),
            }),
            Some(keys) => verify::verify(token, &unverified, &keys, &self.expect, now()),
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
