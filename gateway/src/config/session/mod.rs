//! `[session]`: who verifies `Poppy-Session` JWTs and bearer tokens, the trusted Personal
//! Agents (by the URL of their metadata document, or a static key set), the public origins
//! Sessions are signed for, and the claim names. docs/sessions.md is the format.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::duration::parse_duration;
use super::error::{At, ConfigError};
use super::file::{AgentFile, SessionFile};
use super::named_file::read_ca_file;
use crate::identity::address::PrivateHosts;
use crate::identity::{
    Expectations, IssuerSettings, KeySource, SessionSettings, VerifierSettings, VerifySettings,
};

mod token;
use token::token_settings;

/// What `check` says when `[session] verify` is missing: the migration for older configs.
pub(crate) const VERIFY_MISSING: &str = "session.verify: not set; every gateway must choose who verifies Poppy-Session JWTs and bearer tokens. Add to gateway.toml either\n  [session]\n  verify = \"required\"   # the gateway verifies Sessions against trusted agents' keys ([[session.agent]])\nor\n  [session]\n  verify = \"off\"        # the upstream verifies; replays go only to the key or credentials that approved\n(see docs/operations.md, \"Verified identities\")";

/// `[session] clock_skew` unless set, and its bound.
const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);
const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);
/// How often a JWKS URL (or an agent's metadata) is fetched again unless `jwks_refresh` says
/// otherwise.
const DEFAULT_JWKS_REFRESH: Duration = Duration::from_secs(300);

/// The `[session]` table, compiled. Errors are pushed; the result is then only a placeholder.
pub(super) fn compile(
    session: &SessionFile,
    path: &Path,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> SessionSettings {
    let verify = match &session.verify {
        None => {
            errors.push(ConfigError::whole_file(path, VERIFY_MISSING));
            VerifySettings::Off
        }
        Some(v) => match v.get_ref().as_str() {
            "off" => {
                if !session.agent.is_empty()
                    || session.audience.is_some()
                    || session.token.is_some()
                    || session.origins.is_some()
                    || session.ca_file.is_some()
                    || session.allow_private_hosts.is_some()
                {
                    errors.push(at(
                        v.span(),
                        "session.verify: \"off\" verifies nothing, yet [[session.agent]], audience, origins, ca_file, allow_private_hosts or [session.token] is set: use \"required\", or remove them".into(),
                    ));
                }
                VerifySettings::Off
            }
            "required" => verifier(session, v.span(), folder, at, errors)
                .map_or(VerifySettings::Off, |v| {
                    VerifySettings::Required(Box::new(v))
                }),
            other => {
                errors.push(at(
                    v.span(),
                    format!("session.verify: {other:?} is neither \"required\" nor \"off\""),
                ));
                VerifySettings::Off
            }
        },
    };
    let claim =
        |name: &Option<String>, default: &str| name.clone().unwrap_or_else(|| default.to_owned());
    SessionSettings {
        verify,
        session_claim: claim(&session.session_claim, "sid"),
        agent_claim: claim(&session.agent_claim, "iss"),
        user_claim: claim(&session.user_claim, "sub"),
        account_claim: claim(&session.account_claim, "sub"),
    }
}

/// `verify = "required"`: the trusted agents, their keys and what every Session must
/// satisfy. `None` after pushing errors.
fn verifier(
    session: &SessionFile,
    verify_span: Range<usize>,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<VerifierSettings> {
    let before = errors.len();
    // Extra certificate authorities for the gateway's own fetches (agents' metadata and keys,
    // token keys, introspection).
    let ca_pem = match &session.ca_file {
        None => None,
        Some(file) => Some(read_ca_file(file, "session.ca_file", folder, at, errors)?),
    };
    if session.agent.is_empty() {
        errors.push(at(
            verify_span.clone(),
            "session.verify = \"required\" needs at least one [[session.agent]] (client_id: the URL of its metadata document; or issuer with jwks_file or jwks_url)".into(),
        ));
    }
    let delegated = session
        .agent
        .iter()
        .any(|a| a.get_ref().client_id.is_some());
    let statically_keyed = session.agent.iter().any(|a| a.get_ref().issuer.is_some());
    let origins = origins(session, delegated, &verify_span, at, errors);
    let audience = audience(session, statically_keyed, &verify_span, at, errors);
    let clock_skew = clock_skew(session, at, errors);
    let private_hosts = private_hosts(session, at, errors);

    let mut agents = Vec::new();
    let mut names = std::collections::HashSet::new();
    for agent in &session.agent {
        let span = agent.span();
        let here = |m: String| at(span.clone(), format!("session.agent: {m}"));
        let Some((name, source, refresh)) = agent_source(agent.get_ref(), folder, &here, errors)
        else {
            continue;
        };
        if !names.insert(name.clone()) {
            errors.push(here(format!("{name:?} is listed twice")));
            continue;
        }
        if let KeySource::Metadata(url) = &source
            && let Err(why) = reqwest::Url::parse(url)
                .map_err(|e| e.to_string())
                .and_then(|url| private_hosts.check_url(&url))
        {
            errors.push(here(format!("client_id {url:?}: {why}")));
            continue;
        }
        match issuer_settings(name, source, refresh) {
            Ok(trusted) => agents.push(trusted),
            Err(e) => errors.push(here(format!("jwks_file: {e}"))),
        }
    }
    let expect = Expectations {
        audience,
        origins,
        clock_skew_secs: clock_skew.as_secs(),
    };
    let token = session
        .token
        .as_ref()
        .and_then(|t| token_settings(t, &expect, folder, at, errors));
    (errors.len() == before).then_some(VerifierSettings {
        agents,
        expect,
        token,
        ca_pem,
        private_hosts,
    })
}

/// `allow_private_hosts`: the hosts agents' documents may be fetched from on non-global
/// addresses (identity/address.rs); none unless listed.
fn private_hosts(session: &SessionFile, at: At<'_>, errors: &mut Vec<ConfigError>) -> PrivateHosts {
    let Some(hosts) = &session.allow_private_hosts else {
        return PrivateHosts::default();
    };
    PrivateHosts::parse(hosts.get_ref()).unwrap_or_else(|why| {
        errors.push(at(
            hosts.span(),
            format!("session.allow_private_hosts: {why}"),
        ));
        PrivateHosts::default()
    })
}

/// A trusted issuer's settings; a `jwks_file` is read now, so that a bad one is a config error.
pub(super) fn issuer_settings(
    issuer: String,
    source: KeySource,
    refresh: Duration,
) -> Result<IssuerSettings, crate::identity::KeysReadError> {
    let file_keys = match &source {
        KeySource::File(path) => Some(Arc::new(crate::identity::read_jwks_file(path)?)),
        KeySource::Url(_) | KeySource::Metadata(_) => None,
    };
    Ok(IssuerSettings {
        issuer,
        source,
        refresh,
        file_keys,
    })
}

/// `origins`: the public origins Sessions are signed for (`htu`), required with an agent
/// known by its metadata document. Each is `scheme://host[:port]`, nothing more.
fn origins(
    session: &SessionFile,
    delegated: bool,
    verify_span: &Range<usize>,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Vec<String> {
    let Some(origins) = &session.origins else {
        if delegated {
            errors.push(at(
                verify_span.clone(),
                "session.verify = \"required\" with a [[session.agent]] client_id needs session.origins: the public origins agents sign their requests for (e.g. [\"https://api.shop.example\"])".into(),
            ));
        }
        return Vec::new();
    };
    if origins.get_ref().is_empty() {
        errors.push(at(
            origins.span(),
            "session.origins: list at least one origin".into(),
        ));
    }
    for origin in origins.get_ref() {
        if let Err(why) = check_origin(origin) {
            errors.push(at(
                origins.span(),
                format!("session.origins: {origin:?} {why}"),
            ));
        }
    }
    origins.get_ref().clone()
}

/// An origin as a browser or an agent writes it: `http(s)://host[:port]`, lowercase scheme
/// and host, no path (not even `/`), query, fragment or credentials.
fn check_origin(origin: &str) -> Result<(), &'static str> {
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or("is not an http(s) origin")?;
    if rest.is_empty() {
        return Err("has no host");
    }
    if rest.contains(['/', '?', '#', '@']) || rest.chars().any(char::is_whitespace) {
        return Err("must be scheme://host[:port] only (no path, not even a trailing /)");
    }
    if origin.chars().any(|c| c.is_ascii_uppercase()) {
        return Err("must be lowercase, as agents sign it");
    }
    Ok(())
}

/// `audience`: the `aud` a Session signed directly by a static key set must carry (and a
/// delegated one, when it has `aud`).
fn audience(
    session: &SessionFile,
    statically_keyed: bool,
    verify_span: &Range<usize>,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Vec<String> {
    match &session.audience {
        Some(a) if !a.get_ref().is_empty() && a.get_ref().iter().all(|x| !x.is_empty()) => {
            a.get_ref().clone()
        }
        Some(a) => {
            errors.push(at(
                a.span(),
                "session.audience: list at least one non-empty audience".into(),
            ));
            Vec::new()
        }
        None if statically_keyed => {
            errors.push(at(
                verify_span.clone(),
                "session.verify = \"required\" with a [[session.agent]] issuer (a static key set) needs session.audience: the `aud` values this gateway accepts in its Sessions (e.g. [\"https://shop.example\"])".into(),
            ));
            Vec::new()
        }
        None => Vec::new(),
    }
}

fn clock_skew(session: &SessionFile, at: At<'_>, errors: &mut Vec<ConfigError>) -> Duration {
    match &session.clock_skew {
        None => DEFAULT_CLOCK_SKEW,
        Some(v) => match parse_duration(v.get_ref()) {
            Ok(d) if d <= MAX_CLOCK_SKEW => d,
            Ok(_) => {
                errors.push(at(
                    v.span(),
                    format!("session.clock_skew: at most {MAX_CLOCK_SKEW:?}"),
                ));
                DEFAULT_CLOCK_SKEW
            }
            Err(e) => {
                errors.push(at(v.span(), format!("session.clock_skew: {e}")));
                DEFAULT_CLOCK_SKEW
            }
        },
    }
}

/// One `[[session.agent]]`: by `client_id` (its metadata document names its keys), or by
/// `issuer` with a static key set. Its name (what its Sessions' `iss` says) and key source.
fn agent_source(
    agent: &AgentFile,
    folder: &Path,
    here: &dyn Fn(String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<(String, KeySource, Duration)> {
    match (&agent.client_id, &agent.issuer) {
        (Some(client_id), None) => {
            if agent.jwks_file.is_some() || agent.jwks_url.is_some() {
                errors.push(here(format!(
                    "{client_id:?}: an agent known by client_id publishes its keys in its metadata document (jwks_uri); jwks_file and jwks_url go with issuer"
                )));
                return None;
            }
            if !(client_id.starts_with("https://") || client_id.starts_with("http://")) {
                errors.push(here(format!(
                    "client_id {client_id:?} is not the URL of a metadata document"
                )));
                return None;
            }
            let refresh = refresh(agent.jwks_refresh.as_deref(), here, errors)?;
            Some((
                client_id.clone(),
                KeySource::Metadata(client_id.clone()),
                refresh,
            ))
        }
        (None, Some(issuer)) if !issuer.is_empty() => {
            let (source, refresh) = key_source(
                issuer,
                agent.jwks_file.as_deref(),
                agent.jwks_url.as_deref(),
                agent.jwks_refresh.as_deref(),
                folder,
                here,
                errors,
            )?;
            Some((issuer.clone(), source, refresh))
        }
        _ => {
            errors.push(here(
                "give exactly one of client_id (the URL of the agent's metadata document) and issuer (with jwks_file or jwks_url)".into(),
            ));
            None
        }
    }
}

fn refresh(
    text: Option<&str>,
    here: &dyn Fn(String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<Duration> {
    match text {
        None => Some(DEFAULT_JWKS_REFRESH),
        Some(text) => match parse_duration(text) {
            Ok(d) if d >= crate::identity::source::MIN_RELOAD => Some(d),
            _ => {
                errors.push(here(format!(
                    "jwks_refresh: {text:?} is not a duration of at least 2s"
                )));
                None
            }
        },
    }
}

/// Exactly one of a JWKS file and URL, and the URL's refresh interval.
pub(super) fn key_source(
    issuer: &str,
    file: Option<&str>,
    url: Option<&str>,
    refresh_text: Option<&str>,
    folder: &Path,
    here: &dyn Fn(String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<(KeySource, Duration)> {
    let refresh = refresh(refresh_text, here, errors)?;
    let source = match (file, url) {
        (Some(file), None) => KeySource::File(folder.join(file)),
        (None, Some(url)) if url.starts_with("https://") || url.starts_with("http://") => {
            KeySource::Url(url.to_owned())
        }
        (None, Some(url)) => {
            errors.push(here(format!("jwks_url: {url:?} is not an http(s) URL")));
            return None;
        }
        _ => {
            errors.push(here(format!(
                "{issuer:?}: give exactly one of jwks_file and jwks_url"
            )));
            return None;
        }
    };
    Some((source, refresh))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_host_and_port_only() {
        for good in [
            "https://api.shop.example",
            "http://127.0.0.1:8080",
            "https://[::1]:8443",
        ] {
            assert_eq!(check_origin(good), Ok(()), "{good}");
        }
        for bad in [
            "api.shop.example",
            "https://",
            "https://api.shop.example/",
            "https://api.shop.example/v1",
            "https://api.shop.example?x",
            "https://u@api.shop.example",
            "https://API.shop.example",
            "ftp://api.shop.example",
        ] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
    }
}
