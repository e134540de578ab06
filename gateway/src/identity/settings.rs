//! `[session]` as plain data, what `config::load` gives: the claim names, the trusted agents
//! and their key sources, the token and introspection settings. [`SessionSettings::build`]
//! makes the runtime verifier from it (HTTP client, key caches, introspection cache) once, at
//! startup (server.rs) or for one offline reading (`explain`): loading a config builds no
//! client and starts nothing.

use std::sync::Arc;
use std::time::Duration;

use super::SessionVerifier;
use super::address::PrivateHosts;
use super::approver::{SessionClaims, VerifyMode};
use super::http::HttpClient;
use super::jwks::KeySet;
use super::source::{KeySource, TrustedIssuer};
use super::token::TokenVerifier;
use super::token::introspection::{Introspection, IntrospectionLimits, Introspector};
use super::verify::Expectations;

/// `[session]`.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    pub verify: VerifySettings,
    pub session_claim: String,
    pub agent_claim: String,
    pub user_claim: String,
    pub account_claim: String,
}

/// `[session] verify`.
#[derive(Debug, Clone)]
pub enum VerifySettings {
    /// The upstream verifies (see [`VerifyMode::Off`]).
    Off,
    /// The gateway verifies Sessions and tokens as these settings say.
    Required(Box<VerifierSettings>),
}

impl VerifySettings {
    pub fn is_off(&self) -> bool {
        matches!(self, VerifySettings::Off)
    }
}

/// `verify = "required"`: the trusted agents, what every Session must satisfy, the tokens.
#[derive(Debug, Clone)]
pub struct VerifierSettings {
    pub(crate) agents: Vec<IssuerSettings>,
    pub(crate) expect: Expectations,
    pub(crate) token: Option<TokenSettings>,
    /// `ca_file`'s PEM bundle, read and parsed at load.
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// `allow_private_hosts`: where agents' documents may be fetched from besides global
    /// addresses.
    pub(crate) private_hosts: PrivateHosts,
}

/// One trusted issuer of Sessions or access tokens, and where its keys come from.
#[derive(Clone)]
pub(crate) struct IssuerSettings {
    pub(crate) issuer: String,
    pub(crate) source: KeySource,
    pub(crate) refresh: Duration,
    /// A `jwks_file`'s keys, read at load (a bad file is a config error).
    pub(crate) file_keys: Option<Arc<KeySet>>,
}

impl std::fmt::Debug for IssuerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Sources only: key material never reaches a log (reload compares this output).
        write!(f, "TrustedIssuer({:?}, {})", self.issuer, self.source)
    }
}

/// `[session.token]`.
#[derive(Debug, Clone)]
pub(crate) struct TokenSettings {
    /// JWT access tokens: their issuer and keys.
    pub(crate) issuer: Option<IssuerSettings>,
    pub(crate) expect: Expectations,
    /// Opaque access tokens: the endpoint and what introspection may cost.
    pub(crate) introspection: Option<(Introspection, IntrospectionLimits)>,
}

impl SessionSettings {
    /// The runtime form: with `verify = "required"`, one HTTP client (the `ca_file` roots
    /// added) shared by every key fetch and introspection call. Fails only when the TLS
    /// backend cannot make a client, which `load` already checked the roots for.
    pub(crate) fn build(&self) -> Result<SessionClaims, String> {
        let verify = match &self.verify {
            VerifySettings::Off => VerifyMode::Off,
            VerifySettings::Required(settings) => VerifyMode::Required(Arc::new(settings.build()?)),
        };
        Ok(SessionClaims {
            verify,
            session_claim: self.session_claim.clone(),
            agent_claim: self.agent_claim.clone(),
            user_claim: self.user_claim.clone(),
            account_claim: self.account_claim.clone(),
        })
    }
}

impl SessionSettings {
    /// The claim names only, reading claims as sent (`explain`, offline): no verifier built.
    pub(crate) fn unverified(&self) -> SessionClaims {
        SessionClaims {
            verify: VerifyMode::Off,
            session_claim: self.session_claim.clone(),
            agent_claim: self.agent_claim.clone(),
            user_claim: self.user_claim.clone(),
            account_claim: self.account_claim.clone(),
        }
    }
}

impl VerifierSettings {
    fn build(&self) -> Result<SessionVerifier, String> {
        // The operator's own URLs (jwks_url, introspection) are trusted as configured; an
        // agent's metadata document names URLs of the agent's choosing.
        let http = Arc::new(HttpClient::new(self.ca_pem.as_deref())?);
        let agents_http = Arc::new(HttpClient::for_agents(
            self.ca_pem.as_deref(),
            self.private_hosts.clone(),
        )?);
        let agents = self
            .agents
            .iter()
            .map(|agent| match agent.source {
                KeySource::Metadata(_) => agent.build(&agents_http),
                KeySource::File(_) | KeySource::Url(_) => agent.build(&http),
            })
            .collect();
        let token = self.token.as_ref().map(|token| {
            let introspector = token.introspection.as_ref().map(|(endpoint, limits)| {
                Introspector::new(endpoint.clone(), *limits, &token.expect, Arc::clone(&http))
            });
            TokenVerifier::new(
                token.issuer.as_ref().map(|issuer| issuer.build(&http)),
                token.expect.clone(),
                introspector,
            )
        });
        Ok(SessionVerifier::new(agents, self.expect.clone(), token))
    }
}

impl IssuerSettings {
    fn build(&self, http: &Arc<HttpClient>) -> TrustedIssuer {
        TrustedIssuer::new(
            self.issuer.clone(),
            self.source.clone(),
            self.refresh,
            self.file_keys.clone(),
            Arc::clone(http),
        )
    }
}
