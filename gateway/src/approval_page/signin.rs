//! Sign-in with the Company's OpenID provider: authorization code flow with PKCE (S256),
//! `state` and `nonce`, the provider found by discovery (`{issuer}/.well-known/openid-configuration`),
//! the code exchanged with the client secret (HTTP Basic), the ID token verified with the
//! provider's JWKS (signature, `iss`, `exp`, `nonce`; `aud` and `azp` as OpenID Connect Core
//! 1.0, 3.1.3.7 says: for this client alone). The gateway's own fetches go through
//! `identity::http` (bounded bodies, same-scheme redirects).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::identity::http::HttpClient;
use crate::identity::jwks::KeySet;
use crate::identity::verify::{self, Expectations};
use crate::protocol::page_session::{pkce_challenge, token_from};

/// Each fetch from the provider waits at most this long.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Its documents are at most this large.
const MAX_DOCUMENT: usize = 256 * 1024;
/// Discovery and keys are fetched again after this long (a key rotation shows up).
const REFRESH_AFTER: Duration = Duration::from_secs(300);
/// Allowance for clocks that disagree, on the ID token's `exp` and `nbf`.
const CLOCK_SKEW_SECS: u64 = 60;

/// What discovery says, and the provider's keys.
#[derive(Clone)]
struct Provider {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    keys: std::sync::Arc<KeySet>,
    fetched: Instant,
}

/// The page's client at the Company's OpenID provider.
pub(super) struct SignIn {
    issuer: String,
    client_id: String,
    client_secret: crate::config::ClientSecret,
    redirect_uri: String,
    http: HttpClient,
    provider: Mutex<Option<Provider>>,
}

/// What the sign-in cookie holds between the redirect and the callback.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Pending {
    /// The PKCE verifier.
    pub(super) v: String,
    /// `state`.
    pub(super) s: String,
    /// `nonce`.
    pub(super) n: String,
    /// The page to return to (a path on the page's own origin).
    pub(super) r: String,
}

/// Why a sign-in failed (shown to the User as plain text, logged).
#[derive(Debug, thiserror::Error)]
pub(super) enum SignInError {
    #[error("the sign-in service could not be reached: {0}")]
    Provider(String),
    #[error("the sign-in answer is not valid: {0}")]
    Answer(String),
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
}

impl SignIn {
    pub(super) fn new(settings: &crate::config::ApprovalPage) -> Result<SignIn, String> {
        Ok(SignIn {
            issuer: settings.issuer.clone(),
            client_id: settings.client_id.clone(),
            client_secret: settings.client_secret.clone(),
            redirect_uri: format!("{}/callback", settings.public_url),
            http: HttpClient::new(None)?,
            provider: Mutex::new(None),
        })
    }

    /// The provider's endpoints and keys, fetched again once stale (or `refresh`: a token
    /// signed by a key not seen yet).
    async fn provider(&self, refresh: bool) -> Result<Provider, SignInError> {
        let cached = self.provider.lock().ok().and_then(|p| p.clone());
        if let Some(provider) = cached
            && !refresh
            && provider.fetched.elapsed() < REFRESH_AFTER
        {
            return Ok(provider);
        }
        let url = format!("{}/.well-known/openid-configuration", self.issuer);
        let doc = self
            .http
            .get(&url, FETCH_TIMEOUT, MAX_DOCUMENT)
            .await
            .map_err(|e| SignInError::Provider(e.to_string()))?;
        let discovery: Discovery = crate::protocol::json::from_slice(&doc)
            .map_err(|e| SignInError::Provider(format!("discovery document: {e}")))?;
        if discovery.issuer.trim_end_matches('/') != self.issuer {
            return Err(SignInError::Provider(format!(
                "the discovery document names issuer {:?}, not {:?}",
                discovery.issuer, self.issuer
            )));
        }
        let jwks = self
            .http
            .get(&discovery.jwks_uri, FETCH_TIMEOUT, MAX_DOCUMENT)
            .await
            .map_err(|e| SignInError::Provider(e.to_string()))?;
        let keys = KeySet::parse(&jwks).map_err(|e| SignInError::Provider(e.to_string()))?;
        let provider = Provider {
            issuer: discovery.issuer,
            authorization_endpoint: discovery.authorization_endpoint,
            token_endpoint: discovery.token_endpoint,
            keys: std::sync::Arc::new(keys),
            fetched: Instant::now(),
        };
        if let Ok(mut slot) = self.provider.lock() {
            *slot = Some(provider.clone());
        }
        Ok(provider)
    }

    /// Where to send the browser, and what the sign-in cookie keeps, for a sign-in that
    /// returns to `return_to`.
    pub(super) async fn start(&self, return_to: &str) -> Result<(String, Pending), SignInError> {
        let provider = self.provider(false).await?;
        let pending = Pending {
            v: token_from(&rand::random()),
            s: token_from(&rand::random()),
            n: token_from(&rand::random()),
            r: return_to.to_owned(),
        };
        let mut url = reqwest::Url::parse(&provider.authorization_endpoint)
            .map_err(|e| SignInError::Provider(format!("authorization_endpoint: {e}")))?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.client_id)
            .append_pair("redirect_uri", &self.redirect_uri)
            .append_pair("scope", "openid")
            .append_pair("state", &pending.s)
            .append_pair("nonce", &pending.n)
            .append_pair("code_challenge", &pkce_challenge(&pending.v))
            .append_pair("code_challenge_method", "S256");
        Ok((url.to_string(), pending))
    }

    /// The callback: exchange `code` and verify the ID token; the signed-in subject.
    pub(super) async fn finish(
        &self,
        pending: &Pending,
        code: &str,
        now: u64,
    ) -> Result<String, SignInError> {
        let provider = self.provider(false).await?;
        let answer = self
            .http
            .post_form(
                &provider.token_endpoint,
                &[
                    ("grant_type", "authorization_code"),
                    ("code", code),
                    ("redirect_uri", &self.redirect_uri),
                    ("code_verifier", &pending.v),
                ],
                Some((&self.client_id, self.client_secret.expose())),
                FETCH_TIMEOUT,
                MAX_DOCUMENT,
            )
            .await
            .map_err(SignInError::Provider)?;
        let answer: Value = crate::protocol::json::from_slice(&answer)
            .map_err(|e| SignInError::Answer(format!("token answer: {e}")))?;
        let id_token = answer
            .get("id_token")
            .and_then(Value::as_str)
            .ok_or_else(|| SignInError::Answer("the token answer has no id_token".into()))?;
        let unverified =
            verify::peek(id_token).map_err(|e| SignInError::Answer(format!("ID token: {e}")))?;
        if unverified.issuer != provider.issuer {
            return Err(SignInError::Answer(format!(
                "the ID token's issuer is {:?}",
                unverified.issuer
            )));
        }
        let expect = Expectations {
            audience: vec![self.client_id.clone()],
            clock_skew_secs: CLOCK_SKEW_SECS,
            origins: Vec::new(),
        };
        let claims = match verify::verify(id_token, &unverified, &provider.keys, &expect, now) {
            Err(verify::VerifyError::UnknownKey { .. }) => {
                // Rotated since the keys were read: read them once more.
                let provider = self.provider(true).await?;
                verify::verify(id_token, &unverified, &provider.keys, &expect, now)
            }
            other => other,
        }
        .map_err(|e| SignInError::Answer(format!("ID token: {e}")))?;
        // The page trusts no audience but its own client_id.
        verify::check_id_token_audience(&claims, &self.client_id, &[])
            .map_err(|e| SignInError::Answer(format!("ID token: {e}")))?;
        if claims.get("nonce").and_then(Value::as_str) != Some(pending.n.as_str()) {
            return Err(SignInError::Answer(
                "the ID token's nonce is not this sign-in's".into(),
            ));
        }
        match claims.get("sub").and_then(Value::as_str) {
            Some(sub) if !sub.is_empty() => Ok(sub.to_owned()),
            _ => Err(SignInError::Answer("the ID token names no subject".into())),
        }
    }
}
