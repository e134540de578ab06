//! `[session.token]`: JWT access tokens of one issuer (its keys), opaque ones by RFC 7662
//! introspection, the audience both must be for, and what introspection may cost.

use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::super::duration::parse_duration;
use super::super::error::{At, ConfigError};
use super::super::file::TokenFile;
use super::issuer_settings;
use super::key_source;
use crate::identity::{Expectations, Introspection, IntrospectionLimits, TokenSettings};

/// The longest an introspection answer may be remembered (`introspection_cache`,
/// `introspection_cache_refused`): a revoked token must be noticed within it.
const MAX_CACHE: Duration = Duration::from_secs(3600);
/// Bounds of `introspection_cache_entries`, `introspection_rate` and `introspection_burst`.
const MAX_ENTRIES: u64 = 1_000_000;
const MAX_RATE: u64 = 100_000;

/// `[session.token]`, compiled; `None` after pushing errors.
pub(super) fn token_settings(
    token: &Spanned<TokenFile>,
    session_expect: &Expectations,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<TokenSettings> {
    let span = token.span();
    let t = token.get_ref();
    let here = |m: String| at(span.clone(), format!("session.token: {m}"));
    let before = errors.len();
    let issuer = match (&t.issuer, t.jwks_file.is_some() || t.jwks_url.is_some()) {
        (None, false) => None,
        (Some(issuer), true) if !issuer.is_empty() => key_source(
            issuer,
            t.jwks_file.as_deref(),
            t.jwks_url.as_deref(),
            t.jwks_refresh.as_deref(),
            folder,
            &here,
            errors,
        )
        .and_then(|(source, refresh)| {
            match issuer_settings(issuer.clone(), source, refresh) {
                Ok(trusted) => Some(trusted),
                Err(e) => {
                    errors.push(here(e.to_string()));
                    None
                }
            }
        }),
        _ => {
            errors.push(here(
                "issuer and one of jwks_file / jwks_url go together (JWT access tokens)".into(),
            ));
            None
        }
    };
    let introspection = match (&t.introspection_url, &t.client_id, &t.client_secret) {
        (None, None, None) => None,
        (Some(url), Some(id), Some(secret))
            if url.starts_with("https://") || url.starts_with("http://") =>
        {
            Some(Introspection {
                url: url.clone(),
                client_id: id.clone(),
                client_secret: secret.clone(),
            })
        }
        _ => {
            errors.push(here(
                "introspection_url (http or https), client_id and client_secret go together (opaque tokens, RFC 7662)".into(),
            ));
            None
        }
    };
    let limits = limits(t, &here, errors);
    if t.issuer.is_none() && t.introspection_url.is_none() && errors.len() == before {
        errors.push(here(
            "set issuer with jwks_file or jwks_url (JWT access tokens), introspection_url (opaque tokens), or both".into(),
        ));
    }
    let audience = t
        .audience
        .clone()
        .unwrap_or_else(|| session_expect.audience.clone());
    // Introspected tokens are held to it as JWTs are: a token another resource server was
    // given is not this gateway's.
    if (t.issuer.is_some() || t.introspection_url.is_some()) && audience.is_empty() {
        errors.push(here(
            "audience: the `aud` values accepted in access tokens, JWT or introspected (session.audience is not set to default to)".into(),
        ));
    }
    let expect = Expectations {
        audience,
        origins: Vec::new(),
        clock_skew_secs: session_expect.clock_skew_secs,
    };
    (errors.len() == before).then(|| TokenSettings {
        issuer,
        expect,
        introspection: introspection.map(|endpoint| (endpoint, limits)),
    })
}

/// `introspection_cache`, `introspection_cache_refused`, `introspection_cache_entries`,
/// `introspection_rate` and `introspection_burst`: only with `introspection_url`.
fn limits(
    t: &TokenFile,
    here: &dyn Fn(String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> IntrospectionLimits {
    let mut limits = IntrospectionLimits::default();
    let set = [
        ("introspection_cache", t.introspection_cache.is_some()),
        (
            "introspection_cache_refused",
            t.introspection_cache_refused.is_some(),
        ),
        (
            "introspection_cache_entries",
            t.introspection_cache_entries.is_some(),
        ),
        ("introspection_rate", t.introspection_rate.is_some()),
        ("introspection_burst", t.introspection_burst.is_some()),
    ];
    if t.introspection_url.is_none() {
        for (key, _) in set.iter().filter(|(_, set)| *set) {
            errors.push(here(format!(
                "{key}: has no effect without introspection_url"
            )));
        }
        return limits;
    }
    let mut duration = |value: &Option<String>, key: &str, into: &mut Duration| {
        let Some(text) = value else { return };
        match parse_duration(text) {
            Ok(d) if d <= MAX_CACHE => *into = d,
            Ok(_) => errors.push(here(format!(
                "{key}: at most {}s (a revoked token must be noticed within it)",
                MAX_CACHE.as_secs()
            ))),
            Err(e) => errors.push(here(format!("{key}: {e}"))),
        }
    };
    duration(
        &t.introspection_cache,
        "introspection_cache",
        &mut limits.cache_max,
    );
    duration(
        &t.introspection_cache_refused,
        "introspection_cache_refused",
        &mut limits.cache_refused,
    );
    let mut count = |value: Option<u64>, key: &str, max: u64| -> Option<u64> {
        let n = value?;
        if (1..=max).contains(&n) {
            Some(n)
        } else {
            errors.push(here(format!("{key}: must be 1 to {max}")));
            None
        }
    };
    if let Some(n) = count(
        t.introspection_cache_entries,
        "introspection_cache_entries",
        MAX_ENTRIES,
    ) {
        limits.cache_entries = usize::try_from(n)
            .ok()
            .and_then(NonZeroUsize::new)
            .unwrap_or(limits.cache_entries);
    }
    if let Some(n) = count(t.introspection_rate, "introspection_rate", MAX_RATE) {
        limits.rate = u32::try_from(n).unwrap_or(u32::MAX);
    }
    if let Some(n) = count(t.introspection_burst, "introspection_burst", MAX_RATE) {
        limits.burst = u32::try_from(n).unwrap_or(u32::MAX);
    }
    limits
}
