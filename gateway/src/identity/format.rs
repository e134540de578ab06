//! The `Poppy-Session` format: every name, type and limit in one place, and the checks of a
//! delegated Session (docs/sessions.md, "The checks, in order", 2 to 5). Pure: the caller
//! brings the agent's keys, the request's target and the clock.
//!
//! Where no public text fixes a detail, docs/sessions.md says what we chose and why; this
//! module is the one to change when the published text says otherwise.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::{Map, Value};

use std::sync::Arc;

use super::cnf::{self, DelegatedKey};
use super::delegations::{DelegationCache, Vouched};
use super::jwks::{KeySet, Lookup};
use super::verify::{self, Expectations, Unverified, VerifyError};

/// A Session's `typ`, when it has one (explicit typing, RFC 8725 3.11).
pub(crate) const SESSION_TYP: &str = "poppy-session+jwt";
/// A delegation's `typ`, when it has one: never read as a Session, nor the other way.
pub(crate) const DELEGATION_TYP: &str = "poppy-dlg+jwt";
/// The Session's protected header member that carries the delegation (a compact JWS).
pub(crate) const DELEGATION_HEADER: &str = "poppy_dlg";
/// The longest a Session may live: `exp - iat`.
pub(crate) const MAX_SESSION_LIFETIME_SECS: u64 = 300;
/// How far ahead a delegation's `exp` may reach ("short-lived").
pub(crate) const MAX_DELEGATION_AHEAD_SECS: u64 = 86_400;

/// The request's URL, without query or fragment (RFC 9449's claim).
pub(crate) const CLAIM_HTU: &str = "htu";
/// The request's method.
pub(crate) const CLAIM_HTM: &str = "htm";
/// The delegation's confirmation claim (RFC 7800) and its member, the delegated public key.
pub(crate) const CLAIM_CNF: &str = "cnf";
pub(crate) const CNF_JWK: &str = "jwk";
pub(crate) const CLAIM_IAT: &str = "iat";
pub(crate) const CLAIM_EXP: &str = "exp";
const CLAIM_NBF: &str = "nbf";
const CLAIM_AUD: &str = "aud";

/// The request a Session must name: its method, and its raw path as on the request line
/// (without the query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestTarget<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
}

/// A Session's protected header and issuer, read before any signature is checked.
pub(crate) struct SessionHeader {
    /// `alg`, `kid` and the payload's `iss`.
    pub(crate) jwt: Unverified,
    /// `poppy_dlg`: the delegation (a compact JWS), when the Session carries one.
    pub(crate) delegation: Option<String>,
}

/// Read a Session's header: `alg`, `kid`, `typ` (when present, [`SESSION_TYP`]) and
/// `poppy_dlg` (when present, a string).
pub(crate) fn peek_session(token: &str) -> Result<SessionHeader, VerifyError> {
    let (jwt, header) = verify::peek_header(token)?;
    // The delegation is the one extension a Session may mark critical.
    verify::check_crit(&header, &[DELEGATION_HEADER])?;
    match header.get("typ") {
        None => {}
        Some(Value::String(typ)) if typ.eq_ignore_ascii_case(SESSION_TYP) => {}
        Some(Value::String(typ)) => return Err(VerifyError::SessionType(clip(typ))),
        Some(_) => return Err(VerifyError::Malformed),
    }
    let delegation = match header.get(DELEGATION_HEADER) {
        None => None,
        Some(Value::String(jws)) => Some(jws.clone()),
        Some(_) => return Err(VerifyError::DelegationMalformed("not a compact JWS string")),
    };
    Ok(SessionHeader { jwt, delegation })
}

/// Checks 2 to 5 of a Session that carries a delegation: the delegation with the agent's
/// long-term keys, the Session with the delegated key, its lifetime, and its target. An
/// unknown `kid` comes back as [`VerifyError::UnknownKey`], for the caller to read the keys
/// again. Returns the Session's claims. `verified`: the delegations verified with
/// `agent_keys` (and only with them).
pub(crate) fn verify_delegated(
    token: &str,
    unverified: &SessionHeader,
    agent_keys: &KeySet,
    verified: &DelegationCache,
    expect: &Expectations,
    target: &RequestTarget<'_>,
    now: u64,
) -> Result<Map<String, Value>, VerifyError> {
    let issuer = &unverified.jwt.issuer;
    let skew = expect.clock_skew_secs;
    let jws = unverified
        .delegation
        .as_deref()
        .ok_or(VerifyError::DelegationMissing)?;
    // Check 2: the delegation; its signature only the first time these keys see its bytes.
    let key = match verified.get(jws) {
        Some(vouched) => vouched_key(&vouched, issuer, skew, now)?,
        None => {
            verified.count_verification();
            let vouched = delegated_key(jws, issuer, agent_keys, skew, now)?;
            let key = Arc::clone(&vouched.key);
            verified.insert(jws, vouched);
            key
        }
    };
    // Check 3: the Session, with the key it vouches for.
    let alg = unverified.jwt.alg;
    if !key.fits(alg) {
        return Err(VerifyError::SessionAlgorithm(format!("{alg:?}")));
    }
    let claims = delegated_claims(token, &key, alg).map_err(|e| match e {
        Signature::Bad => VerifyError::DelegatedSignature,
        Signature::Malformed => VerifyError::Malformed,
    })?;
    // Check 4: its lifetime.
    let iat =
        verify::numeric(&claims, CLAIM_IAT)?.ok_or(VerifyError::MissingClaim(CLAIM_IAT.into()))?;
    let exp =
        verify::numeric(&claims, CLAIM_EXP)?.ok_or(VerifyError::MissingClaim(CLAIM_EXP.into()))?;
    if exp.saturating_add(skew) < now {
        return Err(VerifyError::Expired);
    }
    if iat > now.saturating_add(skew) {
        return Err(VerifyError::IssuedInFuture);
    }
    if verify::numeric(&claims, CLAIM_NBF)?.is_some_and(|nbf| nbf > now.saturating_add(skew)) {
        return Err(VerifyError::NotYetValid);
    }
    if exp.saturating_sub(iat) > MAX_SESSION_LIFETIME_SECS {
        return Err(VerifyError::LifetimeTooLong);
    }
    // Check 5: the request it was signed for.
    check_target(&claims, &expect.origins, target)?;
    check_audience(&claims, &expect.audience)?;
    Ok(claims)
}

/// Proof of possession, for `verify = "off"` (no trust in the agent needed): the RFC 7638
/// thumbprint of the key in the Session's own `poppy_dlg` `cnf.jwk`, when the Session's
/// signature verifies with it and its `exp` (if any) is not past. `None` otherwise.
#[allow(dead_code)] // Bound to replays by the approver (`verify = "off"`).
pub(crate) fn possession(token: &str, now: u64, skew: u64) -> Option<[u8; 32]> {
    let token = token.trim();
    let header = peek_session(token).ok()?;
    let jws = header.delegation.as_deref()?;
    let payload = jws.split('.').nth(1)?;
    let delegation = verify::decode_object(payload).ok()?;
    let Some(Value::Object(jwk)) = delegation.get(CLAIM_CNF)?.get(CNF_JWK) else {
        return None;
    };
    let key = DelegatedKey::parse(&Value::Object(jwk.clone())).ok()?;
    if !key.fits(header.jwt.alg) {
        return None;
    }
    let claims = delegated_claims(token, &key, header.jwt.alg).ok()?;
    match verify::numeric(&claims, CLAIM_EXP) {
        Ok(Some(exp)) if exp.saturating_add(skew) < now => return None,
        Ok(_) => {}
        Err(_) => return None,
    }
    cnf::thumbprint(jwk)
}

/// Check 2: the delegation verifies with one of the agent's keys, is the agent's, is valid
/// now and short-lived. What it vouches for: its `cnf.jwk`, and what a remembered one is
/// checked against again ([`vouched_key`], in this order and with these errors).
fn delegated_key(
    jws: &str,
    issuer: &str,
    agent_keys: &KeySet,
    skew: u64,
    now: u64,
) -> Result<Vouched, VerifyError> {
    let (delegation, header) = verify::peek_header(jws).map_err(|e| match e {
        VerifyError::AlgNone => VerifyError::DelegationMalformed("alg \"none\""),
        VerifyError::UnsupportedAlgorithm(_) => {
            VerifyError::DelegationMalformed("not a supported signature alg")
        }
        VerifyError::NoIssuer => VerifyError::DelegationMalformed("no \"iss\" claim"),
        _ => VerifyError::DelegationMalformed("not a compact JWS with a JSON header and payload"),
    })?;
    verify::check_crit(&header, &[])?;
    match header.get("typ") {
        None => {}
        Some(Value::String(typ)) if typ.eq_ignore_ascii_case(DELEGATION_TYP) => {}
        Some(Value::String(typ)) => return Err(VerifyError::DelegationType(clip(typ))),
        Some(_) => return Err(VerifyError::DelegationMalformed("typ is not a string")),
    }
    // Compared before the signature: another agent's delegation is named as such, and does not
    // make this agent's keys be read again.
    if delegation.issuer != issuer {
        return Err(VerifyError::DelegationIssuer);
    }
    let kid = delegation.kid.clone().unwrap_or_default();
    let key = match agent_keys.find(delegation.kid.as_deref(), delegation.alg) {
        Lookup::Found(key) => key,
        Lookup::UnknownKey => {
            return Err(VerifyError::UnknownKey {
                issuer: issuer.to_owned(),
                kid,
            });
        }
        Lookup::WrongAlgorithm => {
            return Err(VerifyError::DelegationAlgorithm {
                kid,
                alg: format!("{:?}", delegation.alg),
            });
        }
    };
    let claims = signed_claims(jws, &key.key, delegation.alg).map_err(|e| match e {
        Signature::Bad => VerifyError::DelegationBadSignature,
        Signature::Malformed => VerifyError::DelegationMalformed("its payload is not JSON claims"),
    })?;
    let malformed = |_| VerifyError::DelegationMalformed("a time claim is not a NumericDate");
    let exp = verify::numeric(&claims, CLAIM_EXP)
        .map_err(malformed)?
        .ok_or(VerifyError::DelegationMalformed("no \"exp\" claim"))?;
    let nbf = match verify::numeric(&claims, CLAIM_NBF) {
        Ok(nbf) => nbf,
        // `exp` is judged first, as it always was.
        Err(e) => {
            check_window(exp, None, skew, now)?;
            return Err(malformed(e));
        }
    };
    check_window(exp, nbf, skew, now)?;
    // Optional, but a number when present (a string would be skipped by a lenient reader).
    verify::numeric(&claims, CLAIM_IAT).map_err(malformed)?;
    let jwk = claims
        .get(CLAIM_CNF)
        .and_then(|cnf| cnf.get(CNF_JWK))
        .ok_or_else(|| VerifyError::DelegatedKey("the delegation has no cnf.jwk".into()))?;
    let key = DelegatedKey::parse(jwk).map_err(VerifyError::DelegatedKey)?;
    Ok(Vouched {
        key: Arc::new(key),
        issuer: delegation.issuer,
        exp,
        nbf,
        kid: delegation.kid,
    })
}

/// Check 2 of a delegation verified before with the same keys: what depends on the Session
/// and the clock, as [`delegated_key`] checks it (its `iss` is the Session's, then its time
/// window), with the same errors. Its `cnf.jwk`.
fn vouched_key(
    vouched: &Vouched,
    issuer: &str,
    skew: u64,
    now: u64,
) -> Result<Arc<DelegatedKey>, VerifyError> {
    if vouched.issuer != issuer {
        return Err(VerifyError::DelegationIssuer);
    }
    check_window(vouched.exp, vouched.nbf, skew, now)?;
    Ok(Arc::clone(&vouched.key))
}

/// A delegation's time window: `exp` not past, not more than a day ahead, `nbf` not ahead
/// (each with `skew`).
fn check_window(exp: u64, nbf: Option<u64>, skew: u64, now: u64) -> Result<(), VerifyError> {
    if exp.saturating_add(skew) < now {
        return Err(VerifyError::DelegationExpired);
    }
    if exp
        > now
            .saturating_add(MAX_DELEGATION_AHEAD_SECS)
            .saturating_add(skew)
    {
        return Err(VerifyError::DelegationTooLong);
    }
    if nbf.is_some_and(|nbf| nbf > now.saturating_add(skew)) {
        return Err(VerifyError::DelegationNotYetValid);
    }
    Ok(())
}

enum Signature {
    Bad,
    Malformed,
}

/// The claims of `token` when its signature verifies with `key` under `alg`. Claims are
/// checked by the callers, against their clock. The signature is checked with
/// `jsonwebtoken::crypto::verify`, not `decode`: `decode` refuses every `crit` but `b64`
/// (jsonwebtoken 12), and a Session marks its delegation critical; `crit` is checked by
/// `peek_session` first, and the payload read as every token is ([`verify::decode_object`]).
fn signed_claims(
    token: &str,
    key: &DecodingKey,
    alg: Algorithm,
) -> Result<Map<String, Value>, Signature> {
    let (message, payload, signature) = jws_parts(token)?;
    match jsonwebtoken::crypto::verify(signature, message.as_bytes(), key, alg) {
        Ok(true) => verify::decode_object(payload).map_err(|_| Signature::Malformed),
        Ok(false) => Err(Signature::Bad),
        Err(e) => match e.into_kind() {
            ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm => Err(Signature::Bad),
            _ => Err(Signature::Malformed),
        },
    }
}

/// A compact JWS's signed message (`header.payload`), its payload and its signature; anything
/// but three parts is malformed.
fn jws_parts(token: &str) -> Result<(&str, &str, &str), Signature> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Signature::Malformed);
    };
    Ok((
        &token[..header.len() + 1 + payload.len()],
        payload,
        signature,
    ))
}

/// [`signed_claims`] with a delegated key: an ES256 signature by a P-256 key is checked with
/// ring (the JWS's raw `r ‖ s`, as RFC 7518 3.4 writes it), the others with jsonwebtoken.
/// The same answers: a signature that is not base64url is malformed, one that does not verify
/// is bad.
fn delegated_claims(
    token: &str,
    key: &DelegatedKey,
    alg: Algorithm,
) -> Result<Map<String, Value>, Signature> {
    let Some(p256) = key.p256.as_ref().filter(|_| alg == Algorithm::ES256) else {
        return signed_claims(token, &key.key, alg);
    };
    let (message, payload, signature) = jws_parts(token)?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| Signature::Malformed)?;
    p256.verify(message.as_bytes(), &signature)
        .map_err(|_| Signature::Bad)?;
    verify::decode_object(payload).map_err(|_| Signature::Malformed)
}

/// Check 5: `htu` is a configured origin (scheme and host ASCII-case-insensitively) followed
/// by the request's path (byte for byte); `htm`, when present, is the request's method.
fn check_target(
    claims: &Map<String, Value>,
    origins: &[String],
    target: &RequestTarget<'_>,
) -> Result<(), VerifyError> {
    let htu = match claims.get(CLAIM_HTU) {
        Some(Value::String(htu)) => htu.as_bytes(),
        _ => return Err(VerifyError::MissingClaim(CLAIM_HTU.into())),
    };
    let path = target.path.as_bytes();
    let names_target = origins.iter().any(|origin| {
        let origin = origin.as_bytes();
        htu.len() == origin.len() + path.len()
            && htu
                .get(..origin.len())
                .is_some_and(|o| o.eq_ignore_ascii_case(origin))
            && htu.get(origin.len()..) == Some(path)
    });
    if !names_target {
        return Err(VerifyError::WrongTarget {
            htu: clip(&String::from_utf8_lossy(htu)),
            path: clip(target.path),
        });
    }
    match claims.get(CLAIM_HTM) {
        None => Ok(()),
        Some(Value::String(htm)) if htm == target.method => Ok(()),
        Some(htm) => Err(VerifyError::WrongMethod {
            htm: clip(htm.as_str().unwrap_or("(not a string)")),
            method: clip(target.method),
        }),
    }
}

/// `aud` is not required of a delegated Session; when the gateway names audiences and the
/// Session has `aud`, it must include one of them.
fn check_audience(claims: &Map<String, Value>, audience: &[String]) -> Result<(), VerifyError> {
    if audience.is_empty() {
        return Ok(());
    }
    let included = match claims.get(CLAIM_AUD) {
        None => return Ok(()),
        Some(Value::String(aud)) => audience.contains(aud),
        Some(Value::Array(auds)) => auds.iter().any(|aud| {
            aud.as_str()
                .is_some_and(|a| audience.iter().any(|x| x == a))
        }),
        Some(_) => false,
    };
    if included {
        Ok(())
    } else {
        Err(VerifyError::WrongAudience(audience.to_vec()))
    }
}

/// A value from a token, shortened for an error message (and a log line).
fn clip(text: &str) -> String {
    const MAX_CHARS: usize = 200;
    if text.chars().count() <= MAX_CHARS {
        text.to_owned()
    } else {
        text.chars().take(MAX_CHARS).chain("…".chars()).collect()
    }
}

#[cfg(test)]
mod es256_tests;
#[cfg(test)]
mod tests;
