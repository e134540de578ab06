//! Who may approve (spec 3, "Who can approve it"), from the `Poppy-Session` JWT claims and
//! the bearer token. With `[session] verify = "required"` the Session (its delegation, its
//! signature, its time window and the request it was signed for) is verified first
//! ([`crate::identity`]); with `"off"` the claims are read unverified (the upstream verifies
//! what it receives) and the approver carries a hash of what proves who sent them: the
//! delegated key that signed the Session (checked against the Session's own delegation: proof
//! of possession, no trust in the agent), or else the exact credentials. A recorded answer is
//! replayed only to that proof (docs/sessions.md, "With verify = off").

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use sha2::{Digest, Sha256};

use std::sync::Arc;

use super::format::{self, RequestTarget};
use super::{SessionVerifier, TokenError, VerifyError};
use crate::protocol::authorization::bearer_token;
use crate::protocol::{ScopeKind, SigningKey};

/// Which claims identify the Session, the agent, the user and the account, and who verifies
/// the credentials they come from (`[session]`).
#[derive(Debug, Clone)]
pub(crate) struct SessionClaims {
    pub(crate) verify: VerifyMode,
    pub(crate) session_claim: String,
    pub(crate) agent_claim: String,
    pub(crate) user_claim: String,
    pub(crate) account_claim: String,
}

/// `[session] verify`.
#[derive(Debug, Clone)]
pub(crate) enum VerifyMode {
    /// The gateway verifies the Poppy-Session signature against trusted agents' keys.
    Required(Arc<SessionVerifier>),
    /// The upstream verifies; the gateway reads claims unverified, so a recorded answer is
    /// replayed only to the exact credentials that approved it.
    Off,
}

/// The approver scope of a request: operations are bound to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Approver {
    pub(crate) kind: ScopeKind,
    /// `s:<agent>:<session>` or `a:<agent>:<user>:<account>`, each part length-prefixed.
    pub(crate) scope: String,
    /// The Session's own scope, signed in or not.
    pub(crate) session_scope: String,
    /// A hash of what proves who sent credentials the gateway did not verify (with `verify =
    /// "off"`, the delegated key that signed the Session, or the exact `Poppy-Session`, and the
    /// `Authorization` value; verified, an unverified bearer token): a recorded answer goes
    /// only to the same proof. `None` when everything was verified.
    pub(crate) credentials: Option<Credentials>,
    /// Who, for receipts: the claims as read (verified or not, as `credentials` says).
    pub(crate) who: Who,
}

/// The approver of a request without a `Poppy-Session` ([`Approver::for_token`]), and the
/// client its verified token was issued to (`None`: not verified, or naming none).
#[derive(Debug)]
pub(crate) struct ByToken {
    pub(crate) approver: Approver,
    pub(crate) client: Option<String>,
}

/// The parties of an approval, for receipts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Who {
    pub(crate) agent: String,
    pub(crate) user: Option<String>,
    pub(crate) session: String,
    /// The account the bearer token is for (`token:<hash>` for an unverified opaque token).
    pub(crate) account: Option<String>,
}

/// SHA-256 of the `Poppy-Session` and `Authorization` values, length-prefixed. Never stored
/// as is: the flow keys it with the gateway's signing key first (see
/// [`Credentials::digest`]), so the store holds nothing a token could be guessed from.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials([u8; 32]);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(..)")
    }
}

impl Credentials {
    pub(crate) fn of(session: &[u8], authorization: Option<&[u8]>) -> Credentials {
        Credentials::hashed(&[Some(session), authorization])
    }

    /// A Session signed by the delegated key of this RFC 7638 thumbprint, with this
    /// `Authorization` value: every re-signed Session of that key gives the same digest.
    pub(crate) fn of_key(thumbprint: &[u8; 32], authorization: Option<&[u8]>) -> Credentials {
        // The tag keeps a key's digest apart from any exact Session's.
        Credentials::hashed(&[
            Some(b"poppy-delegated-key-v1".as_slice()),
            Some(thumbprint.as_slice()),
            authorization,
        ])
    }

    fn hashed(parts: &[Option<&[u8]>]) -> Credentials {
        // Each part framed (absent, or length and bytes): no two part lists hash alike, and
        // an exact Session's digest is the one gateways before delegated keys kept.
        let mut hash = Sha256::new();
        for part in parts.iter().copied() {
            match part {
                // Absent and empty differ.
                None => hash.update([0u8]),
                Some(bytes) => {
                    hash.update([1u8]);
                    hash.update((bytes.len() as u64).to_be_bytes());
                    hash.update(bytes);
                }
            }
        }
        Credentials(hash.finalize().into())
    }

    /// The digest kept with a record: keyed, so that a store dump gives no way to test
    /// guesses of a token.
    pub(crate) fn digest(&self, key: &SigningKey) -> String {
        key.tag(b"poppy-credentials-v1", &[&self.0], 43)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApproverError {
    #[error("Poppy-Session is not a JWT (three base64url parts with a JSON object payload)")]
    NotAJwt,
    #[error("Poppy-Session has no string claim `{0}`")]
    MissingClaim(String),
    #[error("Poppy-Session: {0}")]
    InvalidSession(#[from] VerifyError),
    #[error("{0}")]
    InvalidToken(#[from] TokenError),
}

impl ApproverError {
    /// The `error` code of the answer that refuses the request.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            _ if self.unavailable() => "token_check_unavailable",
            ApproverError::InvalidToken(_) => "invalid_token",
            _ => "invalid_session",
        }
    }

    /// Its status: a bad access token is an authorization error (`401`); a bad Session is a
    /// `403` with a JSON body, as the extension describes `invalid_session` (docs/sessions.md);
    /// an identity provider that could not be asked is no verdict on the token: `503`.
    pub(crate) fn status(&self) -> u16 {
        match self {
            _ if self.unavailable() => 503,
            ApproverError::InvalidToken(_) => 401,
            _ => 403,
        }
    }

    /// Seconds to wait before the same request, when the refusal is no verdict (`503`):
    /// until the rate limit of introspection allows a call, or 1.
    pub(crate) fn retry_after(&self) -> Option<u32> {
        match self {
            ApproverError::InvalidToken(TokenError::IntrospectionBusy { retry_after }) => {
                Some((*retry_after).max(1))
            }
            _ => self.unavailable().then_some(1),
        }
    }

    /// The token could not be checked (introspection failed or is at its rate limit, or the
    /// issuer's keys could not be read): nothing is known about it yet.
    fn unavailable(&self) -> bool {
        matches!(
            self,
            ApproverError::InvalidToken(
                TokenError::IntrospectionFailed(_)
                    | TokenError::IntrospectionBusy { .. }
                    | TokenError::Jwt(VerifyError::NoKeys { .. })
            )
        )
    }
}

/// The clock allowance on a Session's `exp` when `verify = "off"` checks only which key
/// signed it.
const OFF_CLOCK_SKEW_SECS: u64 = 60;

impl Approver {
    /// The approver of a request, as `[session] verify` says: verified claims, or unverified
    /// ones bound to the exact credentials.
    /// `target`: the request the Session must have been signed for.
    pub(crate) async fn for_request(
        session: &[u8],
        authorization: Option<&[u8]>,
        claims: &SessionClaims,
        target: &RequestTarget<'_>,
    ) -> Result<Approver, ApproverError> {
        check_authorization(authorization)?;
        match &claims.verify {
            VerifyMode::Off => {
                let mut approver = Approver::from_headers(session, authorization, claims)?;
                let possessed = std::str::from_utf8(session).ok().and_then(|jwt| {
                    format::possession(jwt.trim(), super::now(), OFF_CLOCK_SKEW_SECS)
                });
                if let Some(thumbprint) = possessed {
                    approver.credentials = Some(Credentials::of_key(&thumbprint, authorization));
                }
                Ok(approver)
            }
            VerifyMode::Required(verifier) => {
                let payload = verifier.verify(session, target).await?;
                let Some(token) = authorization.and_then(bearer_token) else {
                    return Approver::from_payload(&payload, None, claims, None, None);
                };
                // The token must be the same agent's as the Session (docs/sessions.md).
                let agent = payload
                    .get(&claims.agent_claim)
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match verifier.verify_token(token, agent).await {
                    Some(verified) => {
                        let token_claims = verified?;
                        let account = token_claims
                            .get(&claims.account_claim)
                            .and_then(Value::as_str)
                            .ok_or_else(|| TokenError::NoAccount(claims.account_claim.clone()))?;
                        // A verified subject: a refreshed token of it is the same account.
                        Approver::from_payload(
                            &payload,
                            authorization,
                            claims,
                            None,
                            Some(format!("verified:{account}")),
                        )
                    }
                    // Tokens are not verified here: the exact token binds replays, as in "off".
                    None => Approver::from_payload(
                        &payload,
                        authorization,
                        claims,
                        Some(Credentials::of(b"", authorization)),
                        None,
                    ),
                }
            }
        }
    }

    /// The approver of a request without a `Poppy-Session` that `[approval_page.agents]`
    /// makes an agent's: from its bearer token alone, with the Session's claim names
    /// (`account_claim`, `user_claim`). Verified (`[session.token]`): the account
    /// `verified:<account>`, the agent the token's client, nothing else bound; else read
    /// unverified (`claim:<account>` or `token:<hash>`, as for a Session's token) and bound
    /// to the exact `Authorization` value, as with `verify = "off"`. Without a token: no
    /// account, which the page refuses (`sign_in_required`) before the store is asked.
    /// `who.session` is empty: there is no Session, and nothing keys on it for such a
    /// request (the page needs no Session scope; `session_scope` is the account scope).
    pub(crate) async fn for_token(
        authorization: Option<&[u8]>,
        claims: &SessionClaims,
    ) -> Result<ByToken, ApproverError> {
        check_authorization(authorization)?;
        let Some(token) = authorization.and_then(bearer_token) else {
            return Ok(ByToken {
                approver: Approver {
                    kind: ScopeKind::Session,
                    scope: frame("n", &[]),
                    session_scope: frame("n", &[]),
                    credentials: None,
                    who: Who::default(),
                },
                client: None,
            });
        };
        let verified = match &claims.verify {
            VerifyMode::Required(verifier) => verifier.verify_any_token(token).await,
            VerifyMode::Off => None,
        };
        let claim = |payload: &serde_json::Map<String, Value>, name: &str| {
            payload.get(name).and_then(Value::as_str).map(str::to_owned)
        };
        let client_of = |payload: &serde_json::Map<String, Value>| {
            super::token::client_of(payload)
                .ok()
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let (agent, user, account, credentials, client) = match verified {
            Some(payload) => {
                let payload = payload?;
                let account = claim(&payload, &claims.account_claim)
                    .ok_or_else(|| TokenError::NoAccount(claims.account_claim.clone()))?;
                let client = client_of(&payload);
                (
                    client.clone().unwrap_or_default(),
                    claim(&payload, &claims.user_claim).unwrap_or_else(|| account.clone()),
                    format!("verified:{account}"),
                    None,
                    client,
                )
            }
            None => {
                let payload = jwt_payload(token).unwrap_or_default();
                (
                    client_of(&payload).unwrap_or_default(),
                    claim(&payload, &claims.user_claim).unwrap_or_default(),
                    account_of(token, &claims.account_claim),
                    Some(Credentials::of(b"", authorization)),
                    None,
                )
            }
        };
        let scope = frame("a", &[&agent, &user, &account]);
        Ok(ByToken {
            approver: Approver {
                kind: ScopeKind::Account,
                session_scope: scope.clone(),
                scope,
                credentials,
                who: Who {
                    agent,
                    user: Some(user),
                    session: String::new(),
                    account: Some(account),
                },
            },
            client,
        })
    }

    /// Unverified claims (`verify = "off"`, and `explain`). `authorization` is the raw
    /// `Authorization` header, if any: a bearer token means the Session is signed in.
    pub(crate) fn from_headers(
        session: &[u8],
        authorization: Option<&[u8]>,
        claims: &SessionClaims,
    ) -> Result<Approver, ApproverError> {
        check_authorization(authorization)?;
        let payload = jwt_payload(session).ok_or(ApproverError::NotAJwt)?;
        let credentials = Some(Credentials::of(session, authorization));
        Approver::from_payload(&payload, authorization, claims, credentials, None)
    }

    fn from_payload(
        payload: &serde_json::Map<String, Value>,
        authorization: Option<&[u8]>,
        claims: &SessionClaims,
        credentials: Option<Credentials>,
        verified_account: Option<String>,
    ) -> Result<Approver, ApproverError> {
        let claim = |name: &str| payload.get(name).and_then(Value::as_str).map(str::to_owned);
        let session_id = claim(&claims.session_claim)
            .ok_or_else(|| ApproverError::MissingClaim(claims.session_claim.clone()))?;
        let agent = claim(&claims.agent_claim).unwrap_or_default();
        // Session IDs are the agent's own: another agent's Session with the same ID is another.
        let session_scope = frame("s", &[&agent, &session_id]);
        let bearer = authorization.and_then(bearer_token);
        match bearer {
            None => Ok(Approver {
                kind: ScopeKind::Session,
                scope: session_scope.clone(),
                session_scope,
                credentials,
                who: Who {
                    user: claim(&claims.user_claim),
                    agent,
                    session: session_id,
                    account: None,
                },
            }),
            Some(token) => {
                let user = claim(&claims.user_claim).unwrap_or_default();
                let account =
                    verified_account.unwrap_or_else(|| account_of(token, &claims.account_claim));
                Ok(Approver {
                    kind: ScopeKind::Account,
                    scope: frame("a", &[&agent, &user, &account]),
                    session_scope,
                    credentials,
                    who: Who {
                        agent,
                        user: Some(user),
                        session: session_id,
                        account: Some(account),
                    },
                })
            }
        }
    }

    /// The Session on its own: an operation returned while it was signed out can be approved
    /// only in that Session, even once it has signed in.
    pub(crate) fn session_only(&self) -> Approver {
        Approver {
            kind: ScopeKind::Session,
            scope: self.session_scope.clone(),
            session_scope: self.session_scope.clone(),
            credentials: self.credentials.clone(),
            who: self.who.clone(),
        }
    }
}

/// The account a bearer token is for: its `account_claim` when it is a JWT, else a hash of the
/// opaque token (so only requests with that same token share the account).
fn account_of(token: &[u8], account_claim: &str) -> String {
    if let Some(sub) = jwt_payload(token).and_then(|p| {
        p.get(account_claim)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }) {
        return format!("claim:{sub}");
    }
    let digest = Sha256::digest(token);
    format!("token:{}", URL_SAFE_NO_PAD.encode(digest))
}

/// An `Authorization` value that is there must be a token the gateway reads as the upstream
/// would: `Bearer\ttoken` read as signed out here and signed in there is refused instead.
fn check_authorization(authorization: Option<&[u8]>) -> Result<(), ApproverError> {
    match authorization {
        Some(value) if bearer_token(value).is_none() => {
            Err(ApproverError::InvalidToken(TokenError::Unreadable))
        }
        _ => Ok(()),
    }
}

/// Decode a JWT's payload (no signature check). `None` unless it is three dot-separated
/// base64url parts with a JSON object in the middle.
fn jwt_payload(token: &[u8]) -> Option<serde_json::Map<String, Value>> {
    let text = std::str::from_utf8(token).ok()?.trim();
    let mut parts = text.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    match crate::protocol::json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// Length-prefixed parts, so no two different claim sets give the same scope.
fn frame(kind: &str, parts: &[&str]) -> String {
    let mut out = kind.to_owned();
    for part in parts {
        use std::fmt::Write as _;
        let _ = write!(out, ":{}:{part}", part.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{claims_off as claims, unsigned_jwt};

    fn jwt(payload: &str) -> String {
        unsigned_jwt(&serde_json::from_str(payload).unwrap())
    }

    #[test]
    fn signed_out_is_bound_to_the_session() {
        let a = Approver::from_headers(
            jwt(r#"{"sid":"s1","iss":"agent"}"#).as_bytes(),
            None,
            &claims(),
        )
        .unwrap();
        let b = Approver::from_headers(
            jwt(r#"{"sid":"s2","iss":"agent"}"#).as_bytes(),
            None,
            &claims(),
        )
        .unwrap();
        let other_agent = Approver::from_headers(
            jwt(r#"{"sid":"s1","iss":"other"}"#).as_bytes(),
            None,
            &claims(),
        )
        .unwrap();
        assert_eq!(a.kind, ScopeKind::Session);
        assert_ne!(a.scope, b.scope);
        assert_ne!(a.scope, other_agent.scope);
    }

    #[test]
    fn signed_in_is_bound_to_agent_user_and_account() {
        let token = format!("Bearer {}", jwt(r#"{"sub":"acct_1"}"#));
        let a = Approver::from_headers(
            jwt(r#"{"sid":"s1","iss":"agent","sub":"u"}"#).as_bytes(),
            Some(token.as_bytes()),
            &claims(),
        )
        .unwrap();
        let b = Approver::from_headers(
            jwt(r#"{"sid":"s2","iss":"agent","sub":"u"}"#).as_bytes(),
            Some(token.as_bytes()),
            &claims(),
        )
        .unwrap();
        let other_agent = Approver::from_headers(
            jwt(r#"{"sid":"s2","iss":"other","sub":"u"}"#).as_bytes(),
            Some(token.as_bytes()),
            &claims(),
        )
        .unwrap();
        assert_eq!(a.kind, ScopeKind::Account);
        assert_eq!(a.scope, b.scope);
        assert_ne!(a.scope, other_agent.scope);
        let opaque = Approver::from_headers(
            jwt(r#"{"sid":"s1","iss":"agent","sub":"u"}"#).as_bytes(),
            Some(b"Bearer opaque"),
            &claims(),
        )
        .unwrap();
        assert_ne!(a.scope, opaque.scope);
        let signed_out = Approver::from_headers(
            jwt(r#"{"sid":"s1","iss":"agent","sub":"u"}"#).as_bytes(),
            None,
            &claims(),
        )
        .unwrap();
        assert_eq!(a.session_only().scope, signed_out.scope);
        assert_eq!(a.session_only().kind, signed_out.kind);
        // The credentials stay those sent: the bearer token is part of them.
        assert_ne!(a.session_only().credentials, signed_out.credentials);
        assert!(a.credentials.is_some(), "unverified claims are bound");
    }

    #[test]
    fn credentials_tell_every_difference_apart() {
        let key = SigningKey::new(b"k".to_vec());
        let digests = [
            Credentials::of(b"s", None),
            Credentials::of(b"s", Some(b"")),
            Credentials::of(b"s", Some(b"Bearer t")),
            Credentials::of(b"s2", None),
            Credentials::of(b"", Some(b"s")),
        ]
        .map(|c| c.digest(&key));
        for (i, a) in digests.iter().enumerate() {
            for b in &digests[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(
            Credentials::of(b"s", None).digest(&key),
            Credentials::of(b"s", None).digest(&key)
        );
        assert_ne!(
            Credentials::of(b"s", None).digest(&key),
            Credentials::of(b"s", None).digest(&SigningKey::new(b"other".to_vec()))
        );
    }

    /// `verify = "off"`: a Session re-signed by the delegated key that its own delegation
    /// carries is bound to that key, whatever else changes; a forged one to its exact bytes.
    #[tokio::test]
    async fn off_binds_re_signed_sessions_to_their_delegated_key() {
        use crate::identity::testkeys::{AGENT, NOW, jwk, sign};
        let session = |delegated: &str, signer: &str, jti: &str| {
            let delegation = sign(
                "es256-a",
                serde_json::json!({"typ": "poppy-dlg+jwt", "kid": "es256-a"}),
                &serde_json::json!({"iss": AGENT, "exp": NOW + 3600, "cnf": {"jwk": jwk(delegated)}}),
            );
            sign(
                signer,
                serde_json::json!({"typ": "poppy-session+jwt", "poppy_dlg": delegation}),
                &serde_json::json!({"iss": AGENT, "sid": "s1", "sub": "u", "iat": NOW, "exp": NOW + 120, "jti": jti}),
            )
        };
        let target = RequestTarget {
            method: "POST",
            path: "/x",
        };
        let approver = |jwt: String| async move {
            Approver::for_request(jwt.as_bytes(), None, &claims(), &target)
                .await
                .unwrap()
        };
        let first = approver(session("es256-b", "es256-b", "j1")).await;
        let again = approver(session("es256-b", "es256-b", "j2")).await;
        assert_eq!(first.scope, again.scope);
        assert_eq!(
            first.credentials, again.credentials,
            "the same delegated key"
        );
        let rekeyed = approver(session("rs256-b", "rs256-b", "j3")).await;
        assert_eq!(first.scope, rekeyed.scope, "the same claims");
        assert_ne!(
            first.credentials, rekeyed.credentials,
            "another delegated key"
        );
        // Signed by another key than its delegation names: bound to its exact bytes only.
        let forged_jwt = session("es256-b", "rs256-b", "j4");
        let forged = approver(forged_jwt.clone()).await;
        assert_ne!(first.credentials, forged.credentials);
        assert_eq!(
            forged.credentials,
            Some(Credentials::of(forged_jwt.as_bytes(), None))
        );
    }

    /// `Authorization` is read one way or refused: a value a framework could read as another
    /// token, or as none, is `invalid_token` (401), never taken as signed out.
    #[test]
    fn authorization_is_read_one_way() {
        let session = jwt(r#"{"sid":"s1","iss":"agent","sub":"u"}"#);
        let read = |value: &str| {
            Approver::from_headers(session.as_bytes(), Some(value.as_bytes()), &claims())
        };
        for good in ["Bearer tok", "bearer tok", "DPoP tok"] {
            assert_eq!(read(good).unwrap().kind, ScopeKind::Account, "{good:?}");
        }
        for bad in [
            "Bearer\ttok",
            "bearer  tok",
            "Bearer tok ",
            "Bearer tok en",
            "Bearer tok\tx",
            "Basic dXNlcjpwdw==",
            "Bearer",
            "Bearer ",
            "tok",
        ] {
            let refused = read(bad).unwrap_err();
            assert_eq!(
                (refused.code(), refused.status()),
                ("invalid_token", 401),
                "{bad:?}"
            );
        }
    }

    /// Without a Session, the bearer token alone: unverified, its account bound to the
    /// exact token; a refreshed token of the same subject is the same scope, another
    /// subject's is another; no token, no account.
    #[tokio::test]
    async fn without_a_session_the_token_is_the_approver() {
        let by = |token: Option<String>| async move {
            Approver::for_token(token.as_deref().map(str::as_bytes), &claims()).await
        };
        let token = |payload: &str| Some(format!("Bearer {}", jwt(payload)));
        let first = by(token(r#"{"sub":"acct_1","client_id":"agent","jti":"1"}"#))
            .await
            .unwrap();
        let refreshed = by(token(r#"{"sub":"acct_1","client_id":"agent","jti":"2"}"#))
            .await
            .unwrap();
        let other = by(token(r#"{"sub":"acct_2","client_id":"agent"}"#))
            .await
            .unwrap();
        assert_eq!(first.approver.kind, ScopeKind::Account);
        assert_eq!(first.approver.scope, refreshed.approver.scope);
        assert_ne!(first.approver.scope, other.approver.scope);
        assert_ne!(
            first.approver.credentials, refreshed.approver.credentials,
            "unverified: bound to the exact token"
        );
        assert_eq!(first.approver.who.account.as_deref(), Some("claim:acct_1"));
        assert_eq!(first.approver.who.agent, "agent");
        assert_eq!(first.approver.who.session, "");
        assert_eq!(first.client, None, "an unverified client lists nothing");
        let none = by(None).await.unwrap();
        assert_eq!(none.approver.who.account, None);
        let refused = by(Some("Bearer\tt".into())).await.unwrap_err();
        assert_eq!((refused.code(), refused.status()), ("invalid_token", 401));
    }

    #[test]
    fn malformed_sessions() {
        assert_eq!(
            Approver::from_headers(b"nope", None, &claims()),
            Err(ApproverError::NotAJwt)
        );
        assert_eq!(
            Approver::from_headers(jwt("[1]").as_bytes(), None, &claims()),
            Err(ApproverError::NotAJwt)
        );
        assert_eq!(
            Approver::from_headers(jwt(r#"{"iss":"a"}"#).as_bytes(), None, &claims()),
            Err(ApproverError::MissingClaim("sid".into()))
        );
        assert_eq!(
            Approver::from_headers(jwt(r#"{"sid":5}"#).as_bytes(), None, &claims()),
            Err(ApproverError::MissingClaim("sid".into()))
        );
    }
}
