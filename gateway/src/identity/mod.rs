//! Verified identities (`[session] verify = "required"`): `Poppy-Session` JWTs are verified
//! against the keys of trusted Personal Agents before their claims decide who may approve.
//!
//! A Session carries a delegation (`poppy_dlg`) signed with the agent's long-term keys, which
//! vouches for the short-lived key that signs the Session (docs/sessions.md); a Session of an
//! agent with a static key set may instead be signed with that set directly.
//!
//! `format`, `cnf`, `delegations`, `jwks`, `verify` and `metadata::parse` are pure; `source`, `http` and
//! `metadata::fetch_keys` are the I/O (reading and fetching metadata and JWKS documents).
//! Follows RFC 7519 / RFC 7515: see docs/operations.md, "Verified identities".

pub(crate) mod address;
mod approver;
pub(crate) mod cnf;
pub(crate) mod delegations;
pub(crate) mod format;
pub(crate) mod http;
pub(crate) mod jwks;
pub(crate) mod metadata;
mod settings;
pub(crate) mod source;
#[cfg(test)]
pub(crate) mod testkeys;
pub(crate) mod token;
pub(crate) mod verify;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

pub(crate) use approver::SessionClaims;
pub(crate) use approver::VerifyMode;
pub(crate) use approver::{Approver, ApproverError, ByToken};
#[cfg(test)]
pub(crate) use approver::{Credentials, Who};
pub(crate) use format::RequestTarget;
pub(crate) use http::HttpClient;
pub(crate) use jwks::KeySet;
pub(crate) use settings::{IssuerSettings, TokenSettings, VerifierSettings};
#[allow(unreachable_pub)]
pub use settings::{SessionSettings, VerifySettings};
pub(crate) use source::{
    AgentKeys, KeySource, KeysReadError, TrustedIssuer, read_file as read_jwks_file,
};
pub(crate) use token::introspection::{Introspection, IntrospectionLimits};
pub(crate) use token::{TokenError, TokenVerifier};
pub(crate) use verify::{Expectations, VerifyError};

/// The trusted agents of one deployment, by issuer (`iss`).
#[derive(Debug)]
pub(crate) struct SessionVerifier {
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
        let verified = self.verify_any_token(token).await?.and_then(|claims| {
            token::check_agent(&claims, agent)?;
            Ok(claims)
        });
        Some(verified)
    }

    /// The verified claims of a bearer token, whichever client it was issued to (`None`
    /// without `[session.token]`): for a request without a Session (`Approver::for_token`).
    pub(crate) async fn verify_any_token(
        &self,
        token: &[u8],
    ) -> Option<Result<Map<String, Value>, TokenError>> {
        let verifier = self.token.as_ref()?;
        let Ok(token) = std::str::from_utf8(token) else {
            return Some(Err(TokenError::Jwt(VerifyError::Malformed)));
        };
        Some(verifier.verify(token.trim(), now()).await)
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
        let attempt = |keys: Option<Arc<AgentKeys>>| match (keys, &session.delegation) {
            (None, _) => Err(VerifyError::NoKeys {
                issuer: issuer.clone(),
            }),
            (Some(keys), Some(_)) => format::verify_delegated(
                token,
                &session,
                &keys.set,
                &keys.delegations,
                &self.expect,
                target,
                now(),
            ),
            (Some(keys), None) => {
                verify::verify(token, &session.jwt, &keys.set, &self.expect, now())
            }
        };
        match attempt(agent.agent_keys()) {
            Err(VerifyError::UnknownKey { .. } | VerifyError::NoKeys { .. }) => {
                // Whether this call or a concurrent one read them, try the newest keys.
                agent.reload().await;
                attempt(agent.agent_keys())
            }
            other => other,
        }
    }
}

impl SessionVerifier {
    /// Every trusted issuer whose keys are fetched (a `jwks_url` or an agent's metadata
    /// document), the Sessions' agents and the access tokens' issuer alike.
    fn fetched_issuers(&self) -> Vec<Arc<TrustedIssuer>> {
        let token = self.token.as_ref().and_then(|t| t.issuer.as_ref());
        let mut issuers: Vec<Arc<TrustedIssuer>> =
            self.agents.values().chain(token).cloned().collect();
        issuers.retain(|issuer| issuer.fetched());
        // One order for `check`'s output and the start's log.
        issuers.sort_by(|a, b| a.issuer.cmp(&b.issuer));
        issuers
    }
}

impl SessionClaims {
    /// The issuers whose keys are fetched: none unless the gateway verifies.
    pub(crate) fn fetched_issuers(&self) -> Vec<Arc<TrustedIssuer>> {
        match &self.verify {
            VerifyMode::Required(verifier) => verifier.fetched_issuers(),
            VerifyMode::Off => Vec::new(),
        }
    }
}

/// Fetch the keys of every fetched issuer once, together (each within its fetch timeout):
/// at start, so that a source that cannot be read is logged then (an error, since its
/// Sessions are refused) and not first met by a User's Session.
pub(crate) async fn first_fetch(issuers: &[Arc<TrustedIssuer>]) {
    let mut fetches = tokio::task::JoinSet::new();
    for issuer in issuers {
        let issuer = Arc::clone(issuer);
        fetches.spawn(async move { issuer.reload().await });
    }
    fetches.join_all().await;
}

/// What `check` found at each fetched source: the number of usable keys, or why none.
pub(crate) async fn probe(
    issuers: &[Arc<TrustedIssuer>],
) -> Vec<(Arc<TrustedIssuer>, Result<usize, KeysReadError>)> {
    let mut reads = tokio::task::JoinSet::new();
    for issuer in issuers {
        let issuer = Arc::clone(issuer);
        reads.spawn(async move {
            let read = issuer.read().await.map(|keys| keys.len());
            (issuer, read)
        });
    }
    let mut found = reads.join_all().await;
    found.sort_by(|a, b| a.0.issuer.cmp(&b.0.issuer));
    found
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::identity::format::{DELEGATION_HEADER, DELEGATION_TYP, SESSION_TYP};
    use crate::identity::testkeys::{AGENT, ORIGIN, jwk, sign};

    const TARGET: RequestTarget<'static> = RequestTarget {
        method: "POST",
        path: "/billing/pay",
    };

    fn verifier(source: KeySource) -> SessionVerifier {
        let http = Arc::new(HttpClient::new(None).unwrap());
        let keys = match &source {
            KeySource::File(path) => Some(Arc::new(source::read_file(path).unwrap())),
            _ => None,
        };
        let agent = TrustedIssuer::new(AGENT.into(), source, Duration::from_secs(3600), keys, http);
        let expect = Expectations {
            audience: vec!["https://shop.example".into()],
            clock_skew_secs: 60,
            origins: vec![ORIGIN.into()],
        };
        SessionVerifier::new(vec![agent], expect, None)
    }

    fn fixture(name: &str) -> KeySource {
        let keys = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/keys");
        KeySource::File(keys.join(format!("{name}.jwks.json")))
    }

    fn claims() -> Value {
        let now = now();
        json!({"iss": AGENT, "sid": "s1", "sub": "u1", "iat": now, "exp": now + 300,
               "htu": format!("{ORIGIN}/billing/pay"), "aud": "https://shop.example"})
    }

    fn delegated(long: &str, delegated: &str) -> String {
        let dlg = json!({"iss": AGENT, "exp": now() + 3600, "cnf": {"jwk": jwk(delegated)}});
        let dlg = sign(long, json!({"typ": DELEGATION_TYP, "kid": long}), &dlg);
        sign(
            delegated,
            json!({"typ": SESSION_TYP, DELEGATION_HEADER: dlg}),
            &claims(),
        )
    }

    #[tokio::test]
    async fn sessions_with_and_without_a_delegation() {
        let verifier = verifier(fixture("es256-a"));
        let session = delegated("es256-a", "es256-b");
        let verified = verifier.verify(session.as_bytes(), &TARGET).await.unwrap();
        assert_eq!(verified["sid"], "s1");
        let elsewhere = RequestTarget {
            method: "POST",
            path: "/billing/refund",
        };
        assert!(matches!(
            verifier.verify(session.as_bytes(), &elsewhere).await,
            Err(VerifyError::WrongTarget { .. })
        ));
        // A static key set still verifies a Session it signs itself, as before.
        let direct = sign(
            "es256-a",
            json!({"typ": SESSION_TYP, "kid": "es256-a"}),
            &claims(),
        );
        assert!(verifier.verify(direct.as_bytes(), &TARGET).await.is_ok());
        // An unknown kid reads the file again, then is refused.
        let unknown = delegated("es256-b", "es256-b");
        assert!(matches!(
            verifier.verify(unknown.as_bytes(), &TARGET).await,
            Err(VerifyError::UnknownKey { .. })
        ));
    }

    #[tokio::test]
    async fn a_metadata_agents_sessions_need_a_delegation() {
        // Its keys sign delegations only: refused before any fetch.
        let verifier = verifier(KeySource::Metadata(AGENT.into()));
        let direct = sign("es256-a", json!({"kid": "es256-a"}), &claims());
        assert_eq!(
            verifier
                .verify(direct.as_bytes(), &TARGET)
                .await
                .unwrap_err(),
            VerifyError::DelegationMissing
        );
        assert_eq!(
            KeySource::Metadata(AGENT.into()).to_string(),
            format!("client_id {AGENT}")
        );
    }
}
