//! Verifying a signed JWT (RFC 7519, JWS compact serialization RFC 7515) against the keys of
//! its issuer. Pure: the caller brings the key sets and the clock allowance.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::jwks::{KeySet, Lookup};
use crate::protocol::json;

/// What every token must satisfy besides its signature.
#[derive(Debug, Clone)]
pub(crate) struct Expectations {
    /// One of these must be in `aud`.
    pub(crate) audience: Vec<String>,
    /// Allowance for clocks that disagree, on `exp` and `nbf`.
    pub(crate) clock_skew_secs: u64,
    /// The public origins (`https://api.shop.example`, no trailing slash) a delegated
    /// Session's `htu` may name: one of them followed by the request's path.
    pub(crate) origins: Vec<String>,
}

/// Why a token was refused. The messages name claims and the issuer, never a token or a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum VerifyError {
    #[error("not a JWT (three base64url parts with a JSON header and payload)")]
    Malformed,
    #[error("alg \"none\" is refused: the JWT must be signed")]
    AlgNone,
    #[error("alg {0:?} is not a supported signature algorithm")]
    UnsupportedAlgorithm(String),
    #[error("no \"iss\" claim")]
    NoIssuer,
    #[error("issuer {0:?} is not trusted")]
    UntrustedIssuer(String),
    #[error("issuer {issuer:?} has no key {kid:?}")]
    UnknownKey { issuer: String, kid: String },
    #[error("issuer {issuer:?} has no usable keys yet (its JWKS could not be read)")]
    NoKeys { issuer: String },
    #[error("key {kid:?} of issuer {issuer:?} may not verify alg {alg:?}")]
    WrongAlgorithm {
        issuer: String,
        kid: String,
        alg: String,
    },
    #[error("the signature does not verify")]
    BadSignature,
    #[error("expired (exp is past, beyond the allowed clock skew)")]
    Expired,
    #[error("not valid yet (nbf is in the future, beyond the allowed clock skew)")]
    NotYetValid,
    #[error("wrong audience: aud must include one of {0:?}")]
    WrongAudience(Vec<String>),
    #[error("aud also names {0:?}, an audience this client does not trust")]
    UntrustedAudience(String),
    #[error("aud names several audiences but there is no azp (authorized party)")]
    AuthorizedPartyMissing,
    #[error("azp {0:?} is not this client")]
    WrongAuthorizedParty(String),
    #[error("missing claim {0:?}")]
    MissingClaim(String),
    #[error("claims are not valid: {0}")]
    Invalid(String),
    // Delegated Sessions (docs/sessions.md, "The checks, in order").
    #[error("typ {0:?} is not a Poppy-Session's (poppy-session+jwt)")]
    SessionType(String),
    #[error("no poppy_dlg header: this agent signs its Sessions with delegated keys")]
    DelegationMissing,
    #[error("poppy_dlg is not a valid delegation: {0}")]
    DelegationMalformed(&'static str),
    #[error("the delegation's typ {0:?} is not poppy-dlg+jwt")]
    DelegationType(String),
    #[error("the delegation's iss is not the Session's iss (another agent's delegation)")]
    DelegationIssuer,
    #[error("the delegation's alg {alg:?} does not fit the agent's key {kid:?}")]
    DelegationAlgorithm { kid: String, alg: String },
    #[error("the delegation's signature does not verify with the agent's key")]
    DelegationBadSignature,
    #[error("the delegation has expired (exp is past, beyond the allowed clock skew)")]
    DelegationExpired,
    #[error(
        "the delegation is not valid yet (nbf is in the future, beyond the allowed clock skew)"
    )]
    DelegationNotYetValid,
    #[error("the delegation reaches too far ahead (exp more than 24 h from now)")]
    DelegationTooLong,
    #[error("the delegated key (cnf.jwk): {0}")]
    DelegatedKey(String),
    #[error("the Session's alg {0:?} does not fit the delegated key (cnf.jwk)")]
    SessionAlgorithm(String),
    #[error("the Session's signature does not verify with the delegated key (cnf.jwk)")]
    DelegatedSignature,
    #[error("the Session lives too long (exp - iat is more than 300 s)")]
    LifetimeTooLong,
    #[error("the Session is issued in the future (iat is ahead, beyond the allowed clock skew)")]
    IssuedInFuture,
    #[error("htu {htu:?} is not a configured origin followed by the request's path {path:?}")]
    WrongTarget { htu: String, path: String },
    #[error("htm {htm:?} is not the request's method {method:?}")]
    WrongMethod { htm: String, method: String },
}

/// The parts of a token read before its signature is checked, to pick the key.
pub(crate) struct Unverified {
    pub(crate) alg: Algorithm,
    pub(crate) kid: Option<String>,
    pub(crate) issuer: String,
}

/// Read the header and the issuer (unverified) of a compact JWS.
pub(crate) fn peek(token: &str) -> Result<Unverified, VerifyError> {
    let (unverified, header) = peek_header(token)?;
    check_crit(&header, &[])?;
    Ok(unverified)
}

/// [`peek`], and the whole protected header (for the members a caller reads itself).
pub(crate) fn peek_header(token: &str) -> Result<(Unverified, Map<String, Value>), VerifyError> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(VerifyError::Malformed);
    };
    let header = decode_object(header)?;
    let alg = match header.get("alg").and_then(Value::as_str) {
        None => return Err(VerifyError::Malformed),
        Some(name) if name.eq_ignore_ascii_case("none") => return Err(VerifyError::AlgNone),
        Some(name) => name
            .parse::<Algorithm>()
            .map_err(|_| VerifyError::UnsupportedAlgorithm(name.to_owned()))?,
    };
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(VerifyError::Malformed),
    };
    let issuer = match decode_object(payload)?.get("iss") {
        Some(Value::String(iss)) => iss.clone(),
        _ => return Err(VerifyError::NoIssuer),
    };
    Ok((Unverified { alg, kid, issuer }, header))
}

/// `crit` (RFC 7515 4.1.11): the header parameters a verifier must understand. A token whose
/// `crit` names one not in `understood` (or not in its header), or is malformed or empty, is
/// refused rather than read without it. The caller of [`peek_header`] checks it.
pub(crate) fn check_crit(
    header: &Map<String, Value>,
    understood: &[&str],
) -> Result<(), VerifyError> {
    let Some(crit) = header.get("crit") else {
        return Ok(());
    };
    let names = crit
        .as_array()
        .filter(|names| !names.is_empty())
        .ok_or_else(|| VerifyError::Invalid("crit is not a non-empty list".into()))?;
    for name in names {
        match name.as_str() {
            Some(name) if understood.contains(&name) && header.contains_key(name) => {}
            Some(name) => {
                return Err(VerifyError::Invalid(format!(
                    "crit names {name:?}, which this gateway does not understand"
                )));
            }
            None => return Err(VerifyError::Invalid("crit is not a list of names".into())),
        }
    }
    Ok(())
}

/// Verify `token` with `keys`, the key set of `unverified.issuer`: signature, `iss`, `aud`,
/// `exp` (required) and `nbf`. Returns the payload's claims.
pub(crate) fn verify(
    token: &str,
    unverified: &Unverified,
    keys: &KeySet,
    expect: &Expectations,
    now: u64,
) -> Result<Map<String, Value>, VerifyError> {
    let issuer = &unverified.issuer;
    let kid = unverified.kid.clone().unwrap_or_default();
    let key = match keys.find(unverified.kid.as_deref(), unverified.alg) {
        Lookup::Found(key) => key,
        Lookup::UnknownKey => {
            return Err(VerifyError::UnknownKey {
                issuer: issuer.clone(),
                kid,
            });
        }
        Lookup::WrongAlgorithm => {
            return Err(VerifyError::WrongAlgorithm {
                issuer: issuer.clone(),
                kid,
                alg: format!("{:?}", unverified.alg),
            });
        }
    };
    let mut validation = Validation::new(unverified.alg);
    validation.leeway = expect.clock_skew_secs;
    validation.validate_nbf = true;
    validation.set_issuer(&[issuer]);
    validation.set_audience(&expect.audience);
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
        .map_err(|e| match e.into_kind() {
            ErrorKind::InvalidSignature => VerifyError::BadSignature,
            ErrorKind::ExpiredSignature => VerifyError::Expired,
            ErrorKind::ImmatureSignature => VerifyError::NotYetValid,
            ErrorKind::InvalidAudience => VerifyError::WrongAudience(expect.audience.clone()),
            ErrorKind::InvalidIssuer => VerifyError::UntrustedIssuer(issuer.clone()),
            ErrorKind::MissingRequiredClaim(claim) => VerifyError::MissingClaim(claim),
            // jsonwebtoken (12) checks the registered claims' types itself: said as before.
            ErrorKind::InvalidClaimFormat(claim) => match claim.as_str() {
                "exp" | "nbf" | "iat" => {
                    VerifyError::Invalid(format!("{claim} is not a NumericDate"))
                }
                "aud" => VerifyError::WrongAudience(expect.audience.clone()),
                "iss" => VerifyError::UntrustedIssuer(issuer.clone()),
                _ => VerifyError::Invalid(format!("{claim} is not of its registered type")),
            },
            ErrorKind::InvalidAlgorithm => VerifyError::WrongAlgorithm {
                issuer: issuer.clone(),
                kid: kid.clone(),
                alg: format!("{:?}", unverified.alg),
            },
            ErrorKind::InvalidToken | ErrorKind::Base64(_) | ErrorKind::Utf8(_) => {
                VerifyError::Malformed
            }
            other => VerifyError::Invalid(format!("{other:?}")),
        })?
        .claims;
    // jsonwebtoken reads the clock itself; `now` re-checks with the caller's clock so tests
    // and the gateway agree on one reading.
    // A time claim that is not a number is refused, not skipped (a string `nbf` would
    // otherwise make a not-yet-valid token valid now).
    let skew = expect.clock_skew_secs;
    if numeric(&claims, "exp")?.is_some_and(|exp| exp.saturating_add(skew) < now) {
        return Err(VerifyError::Expired);
    }
    if numeric(&claims, "nbf")?.is_some_and(|nbf| nbf > now.saturating_add(skew)) {
        return Err(VerifyError::NotYetValid);
    }
    numeric(&claims, "iat")?;
    Ok(claims)
}

/// An ID token's audience, as OpenID Connect Core 1.0, section 3.1.3.7 ("ID Token
/// Validation"), items 3 to 5 say (after [`verify`], which found `client_id` in `aud`):
/// 3. `aud` contains `client_id`, and no audience the client does not trust (`trusted`, the
///    client's own ID besides): a token also for another client is that client's too;
/// 4. with several audiences, `azp` is present;
/// 5. a present `azp` is `client_id`: the token was issued to this client, not to another.
pub(crate) fn check_id_token_audience(
    claims: &Map<String, Value>,
    client_id: &str,
    trusted: &[String],
) -> Result<(), VerifyError> {
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(aud)) => vec![aud.as_str()],
        Some(Value::Array(list)) => list
            .iter()
            .map(|aud| aud.as_str().ok_or(VerifyError::Malformed))
            .collect::<Result<_, _>>()?,
        _ => return Err(VerifyError::MissingClaim("aud".into())),
    };
    if !audiences.contains(&client_id) {
        return Err(VerifyError::WrongAudience(vec![client_id.to_owned()]));
    }
    if let Some(other) = audiences
        .iter()
        .find(|aud| **aud != client_id && !trusted.iter().any(|t| t == *aud))
    {
        return Err(VerifyError::UntrustedAudience((*other).to_owned()));
    }
    match claims.get("azp") {
        None if audiences.len() > 1 => Err(VerifyError::AuthorizedPartyMissing),
        None => Ok(()),
        Some(Value::String(azp)) if azp == client_id => Ok(()),
        Some(Value::String(azp)) => Err(VerifyError::WrongAuthorizedParty(azp.clone())),
        Some(_) => Err(VerifyError::WrongAuthorizedParty("(not a string)".into())),
    }
}

/// A NumericDate claim (RFC 7519 2): `None` when absent, the seconds (fractions dropped) of
/// a non-negative number, an error for anything else.
pub(crate) fn numeric(claims: &Map<String, Value>, name: &str) -> Result<Option<u64>, VerifyError> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => match (n.as_u64(), n.as_f64()) {
            (Some(secs), _) => Ok(Some(secs)),
            (None, Some(secs)) if secs.is_finite() && secs >= 0.0 => Ok(Some(secs as u64)),
            _ => Err(VerifyError::Invalid(format!("{name} is not a NumericDate"))),
        },
        Some(_) => Err(VerifyError::Invalid(format!("{name} is not a NumericDate"))),
    }
}

/// A base64url-encoded JSON object (a JWS header or payload). A member twice is malformed
/// (RFC 7515 4: reject or take the last; libraries differ): every token is read here before
/// its signature is checked, so the claims jsonwebtoken reads later are these.
pub(crate) fn decode_object(part: &str) -> Result<Map<String, Value>, VerifyError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|_| VerifyError::Malformed)?;
    match json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(VerifyError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claims(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn an_id_token_is_for_this_client_alone() {
        let ours = |value: Value| check_id_token_audience(&claims(value), "page", &[]);
        assert_eq!(ours(json!({"aud": "page"})), Ok(()));
        assert_eq!(ours(json!({"aud": ["page"]})), Ok(()));
        assert_eq!(ours(json!({"aud": "page", "azp": "page"})), Ok(()));
        assert_eq!(
            ours(json!({"aud": ["page", "page"], "azp": "page"})),
            Ok(())
        );
        assert_eq!(
            ours(json!({"aud": ["page", "other"], "azp": "page"})),
            Err(VerifyError::UntrustedAudience("other".into()))
        );
        assert_eq!(
            ours(json!({"aud": ["page", "page"]})),
            Err(VerifyError::AuthorizedPartyMissing)
        );
        assert_eq!(
            ours(json!({"aud": "page", "azp": "other"})),
            Err(VerifyError::WrongAuthorizedParty("other".into()))
        );
        assert!(ours(json!({"aud": "page", "azp": 1})).is_err());
        assert!(ours(json!({"aud": "other"})).is_err());
        assert!(ours(json!({"aud": ["page", 1]})).is_err());
        assert!(ours(json!({})).is_err());
        let trusted = ["api".to_owned()];
        let with = |value: Value| check_id_token_audience(&claims(value), "page", &trusted);
        assert_eq!(with(json!({"aud": ["page", "api"], "azp": "page"})), Ok(()));
        assert_eq!(
            with(json!({"aud": ["page", "api"]})),
            Err(VerifyError::AuthorizedPartyMissing)
        );
        assert_eq!(
            with(json!({"aud": ["page", "api"], "azp": "api"})),
            Err(VerifyError::WrongAuthorizedParty("api".into()))
        );
    }
}
