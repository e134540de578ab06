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
use super::{SessionVerifier, TokenError};
use crate::protocol::ScopeKind;
use crate::protocol::authorization::bearer_token;

mod credentials;
mod error;

pub(crate) use credentials::Credentials;
pub(crate) use error::ApproverError;

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
mod tests;
