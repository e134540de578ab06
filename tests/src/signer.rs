//! A Personal Agent's signer, as docs/sessions.md describes it: a long-term key (test key
//! `es256-a` unless a Session says otherwise) signs a delegation (`typ` `poppy-dlg+jwt`) that
//! vouches for a short-lived delegated P-256 key (`cnf.jwk`), and the delegated key signs a
//! **new** Session JWT (`typ` `poppy-session+jwt`, the delegation in its `poppy_dlg` header)
//! for every request, bound to the request's origin and path (`htu`) and method (`htm`).
//!
//! The delegated key of a Session is made once per Session (its agent, user and `sid`, its
//! long-term key and [`Signer::generation`]) and kept for the whole test process, so two
//! `Session::signed_out("s1")` of one test are one Session, as before. A Session can also
//! take a new delegated key for every request, and each check the gateway makes has a
//! [`Fault`] that breaks exactly that check.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::{Value, json};

use crate::agent::{Session, unsigned_jwt};
use crate::identity::{self, now};

/// The public origin the test gateways are configured with (`[session] origins`): every
/// Session JWT's `htu` starts with it, whatever port the gateway listens on.
pub const PUBLIC_ORIGIN: &str = "https://api.shop.example";
/// `typ` of a Session JWT.
pub const SESSION_TYP: &str = "poppy-session+jwt";
/// `typ` of a delegation.
pub const DELEGATION_TYP: &str = "poppy-dlg+jwt";
/// The long-term key of an agent unless a test says otherwise.
pub const DEFAULT_LONG_TERM_KEY: &str = "es256-a";
/// `exp - iat` of a delegation.
pub const DELEGATION_LIFETIME: i64 = 3600;
/// `exp - iat` of a Session JWT (the gateway accepts at most 300 s).
pub const SESSION_LIFETIME: i64 = 120;
/// The gateway's cap on `exp - iat` of a Session JWT.
pub const MAX_SESSION_LIFETIME: i64 = 300;
/// `POPPY_E2E_SESSIONS=unsigned`: Sessions without a [`Fault`] send the unsigned legacy form
/// (the same bytes on every request), to run the suite against a gateway from before issue 23.
pub const SESSIONS_ENV: &str = "POPPY_E2E_SESSIONS";

/// When a Session takes a new delegated key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DelegatedKeys {
    /// One delegated key for the Session (an agent's usual way).
    #[default]
    PerSession,
    /// A new delegated key (and delegation) for every request.
    PerRequest,
    /// One delegated key for the Session, and its delegation signed once: the same bytes on
    /// every request, as a real agent sends them (the gateway remembers a delegation it
    /// verified by its bytes).
    SignedOnce,
}

/// One thing wrong with what a Session signs, to test the check that must catch it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The unsigned legacy form (`alg: none`, claims `sid`, `iss`, `sub` only), the same
    /// bytes every time: [`Session::header`].
    Unsigned,
    /// The delegation is signed by this test key, its `kid` still naming the agent's
    /// long-term key (a wrong long-term key).
    DelegationSignedBy(String),
    /// The delegation is signed by this test key and its `kid` names it (a key the agent
    /// does not publish: an unknown `kid`).
    DelegationKid(String),
    /// The delegation's header says this `alg` (signed with a key of that algorithm), its
    /// `kid` naming the long-term key of another type.
    DelegationAlg(String),
    /// The delegation expired 10 minutes ago (beyond any clock skew of a test).
    DelegationExpired,
    /// The delegation is valid from 10 minutes from now (`nbf` and `iat`).
    DelegationNotYetValid,
    /// The delegation reaches 25 hours ahead (the gateway allows 24 h).
    DelegationTooLong,
    /// The delegation's `iss` is this other agent.
    DelegationOfAgent(String),
    /// The Session JWT's header says this `alg`, its signature is ES256 with the delegated
    /// P-256 key.
    SessionAlg(String),
    /// The Session JWT expired 5 minutes ago (`exp - iat` 120 s).
    SessionExpired,
    /// The Session JWT is issued 5 minutes from now (`exp - iat` 120 s).
    SessionNotYetValid,
    /// `exp - iat` of the Session JWT is 600 s.
    SessionTooLong,
    /// `htu` starts with this origin instead of [`PUBLIC_ORIGIN`].
    Origin(String),
    /// `htu` names this path instead of the request's.
    Path(String),
    /// `htm` is this method instead of the request's.
    Method(String),
}

/// How a Session signs: its long-term key, its delegated keys and what is wrong, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The test key (`es256-a`, `es256-b`, `rs256-a`, `rs256-b`) that signs delegations.
    pub long_term: String,
    pub keys: DelegatedKeys,
    /// Bumped for a new delegated key of the same Session ([`Session::with_new_delegated_key`]).
    pub generation: u32,
    pub fault: Option<Fault>,
    /// `exp - iat` of its delegations ([`DELEGATION_LIFETIME`] unless a test says otherwise).
    pub delegation_lifetime: i64,
}

impl Default for Signer {
    fn default() -> Signer {
        Signer {
            long_term: DEFAULT_LONG_TERM_KEY.to_owned(),
            keys: DelegatedKeys::PerSession,
            generation: 0,
            fault: None,
            delegation_lifetime: DELEGATION_LIFETIME,
        }
    }
}

/// A delegated key: a P-256 key pair, its PKCS#8 form for signing and its public JWK.
pub struct DelegatedKey {
    pkcs8: Vec<u8>,
    jwk: Value,
}

impl std::fmt::Debug for DelegatedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegatedKey")
            .field("jwk", &self.jwk)
            .finish_non_exhaustive()
    }
}

impl DelegatedKey {
    /// A fresh P-256 key.
    pub fn generate() -> DelegatedKey {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .expect("generate a P-256 key");
        let point = pair.public_key_raw();
        assert_eq!(point.len(), 65, "an uncompressed P-256 point");
        DelegatedKey {
            pkcs8: pair.serialize_der(),
            jwk: json!({
                "kty": "EC",
                "crv": "P-256",
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
            }),
        }
    }

    /// The public key as a JWK (`kty`, `crv`, `x`, `y`).
    pub fn jwk(&self) -> &Value {
        &self.jwk
    }

    fn encoding_key(&self) -> EncodingKey {
        EncodingKey::from_ec_der(&self.pkcs8)
    }
}

type KeyId = (String, String, String, String, u32);

/// The delegated key of `session` (made on first use, then kept), or a new one for every call
/// with [`DelegatedKeys::PerRequest`].
pub fn delegated_key(session: &Session) -> Arc<DelegatedKey> {
    if session.signer.keys == DelegatedKeys::PerRequest {
        return Arc::new(DelegatedKey::generate());
    }
    static KEYS: OnceLock<Mutex<HashMap<KeyId, Arc<DelegatedKey>>>> = OnceLock::new();
    let id = key_id(session);
    let mut keys = KEYS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    keys.entry(id)
        .or_insert_with(|| Arc::new(DelegatedKey::generate()))
        .clone()
}

fn key_id(session: &Session) -> KeyId {
    (
        session.agent.clone(),
        session.user.clone(),
        session.sid.clone(),
        session.signer.long_term.clone(),
        session.signer.generation,
    )
}

/// The delegation of `session` for its delegated `key`, signed on first use and then the same
/// bytes ([`DelegatedKeys::SignedOnce`]).
fn delegation_signed_once(session: &Session, key: &DelegatedKey) -> String {
    static SIGNED: OnceLock<Mutex<HashMap<(KeyId, String), String>>> = OnceLock::new();
    // Everything the signer says (its fault, its lifetime) picks the delegation too.
    let id = (key_id(session), format!("{:?}", session.signer));
    let mut signed = SIGNED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    signed
        .entry(id)
        .or_insert_with(|| delegation(session, key))
        .clone()
}

/// The compact JWS `base64url(header).base64url(payload).base64url(signature)`, signed with
/// `key` as `alg` (whatever `header` says).
pub fn jws(header: &Value, payload: &Value, key: &EncodingKey, alg: Algorithm) -> String {
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(payload.to_string())
    );
    let signature = jsonwebtoken::crypto::sign(input.as_bytes(), key, alg)
        .unwrap_or_else(|e| panic!("signing a JWS with {alg:?}: {e}"));
    format!("{input}.{signature}")
}

/// The JSON of part `index` (0 the header, 1 the payload) of a compact JWS.
pub fn part(jws: &str, index: usize) -> Option<Value> {
    let part = jws.split('.').nth(index)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
}

/// A random-enough, never repeated `jti`.
fn new_jti() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("jti-{}-{nanos:x}-{count}", std::process::id())
}

/// The `kid`, `alg` and key that sign the delegation of `signer`.
fn delegation_signing(signer: &Signer) -> (String, String, EncodingKey, Algorithm) {
    let long_term = signer.long_term.as_str();
    let (kid, key_name, header_alg) = match &signer.fault {
        Some(Fault::DelegationSignedBy(other)) => {
            (long_term, other.as_str(), alg_name(identity::alg_of(other)))
        }
        Some(Fault::DelegationKid(other)) => (
            other.as_str(),
            other.as_str(),
            alg_name(identity::alg_of(other)),
        ),
        Some(Fault::DelegationAlg(alg)) => {
            // A key of the algorithm the header names, the kid of the long-term key.
            let key = if alg.starts_with("RS") {
                "rs256-a"
            } else {
                "es256-a"
            };
            (long_term, key, alg.clone())
        }
        _ => (long_term, long_term, alg_name(identity::alg_of(long_term))),
    };
    let alg = identity::alg_of(key_name);
    (
        kid.to_owned(),
        header_alg,
        identity::encoding_key(key_name),
        alg,
    )
}

fn alg_name(alg: Algorithm) -> String {
    format!("{alg:?}")
}

/// The delegation of `session` for `key`: signed by the long-term key, `iss` the agent,
/// `cnf.jwk` the delegated key, valid for [`DELEGATION_LIFETIME`] from now.
pub fn delegation(session: &Session, key: &DelegatedKey) -> String {
    let signer = &session.signer;
    let (kid, header_alg, signing_key, alg) = delegation_signing(signer);
    let now = now();
    let (iat, exp) = match signer.fault {
        Some(Fault::DelegationExpired) => (now - 600 - DELEGATION_LIFETIME, now - 600),
        Some(Fault::DelegationNotYetValid) => (now + 600, now + 600 + DELEGATION_LIFETIME),
        Some(Fault::DelegationTooLong) => (now, now + 25 * 3600),
        _ => (now, now + signer.delegation_lifetime),
    };
    let issuer = match &signer.fault {
        Some(Fault::DelegationOfAgent(other)) => other.clone(),
        _ => session.agent.clone(),
    };
    let mut claims = json!({
        "iss": issuer,
        "cnf": {"jwk": key.jwk()},
        "iat": iat,
        "exp": exp,
    });
    if signer.fault == Some(Fault::DelegationNotYetValid) {
        claims["nbf"] = json!(iat);
    }
    jws(
        &json!({"alg": header_alg, "kid": kid, "typ": DELEGATION_TYP}),
        &claims,
        &signing_key,
        alg,
    )
}

/// The path of `path_and_query` without its query or fragment.
pub fn path_only(path_and_query: &str) -> &str {
    let end = path_and_query
        .find(['?', '#'])
        .unwrap_or(path_and_query.len());
    &path_and_query[..end]
}

/// Whether Sessions without a fault send the unsigned legacy form ([`SESSIONS_ENV`]).
pub fn legacy_by_environment() -> bool {
    std::env::var(SESSIONS_ENV).is_ok_and(|v| v == "unsigned")
}

/// A new `Poppy-Session` value of `session` for `method` `path_and_query` (at
/// [`PUBLIC_ORIGIN`]): a new JWT on every call (`jti`), signed as `session.signer` says.
pub fn sign_session(session: &Session, method: &str, path_and_query: &str) -> String {
    let signer = &session.signer;
    if signer.fault == Some(Fault::Unsigned) || (signer.fault.is_none() && legacy_by_environment())
    {
        return session.header();
    }
    let key = delegated_key(session);
    let dlg = match signer.keys {
        DelegatedKeys::SignedOnce => delegation_signed_once(session, &key),
        DelegatedKeys::PerSession | DelegatedKeys::PerRequest => delegation(session, &key),
    };
    let now = now();
    let (iat, exp) = match signer.fault {
        Some(Fault::SessionExpired) => (now - 300 - SESSION_LIFETIME, now - 300),
        Some(Fault::SessionNotYetValid) => (now + 300, now + 300 + SESSION_LIFETIME),
        Some(Fault::SessionTooLong) => (now, now + 2 * MAX_SESSION_LIFETIME),
        _ => (now, now + SESSION_LIFETIME),
    };
    let origin = match &signer.fault {
        Some(Fault::Origin(origin)) => origin.as_str(),
        _ => PUBLIC_ORIGIN,
    };
    let path = match &signer.fault {
        Some(Fault::Path(path)) => path.as_str(),
        _ => path_only(path_and_query),
    };
    let htm = match &signer.fault {
        Some(Fault::Method(other)) => other.as_str(),
        _ => method,
    };
    let header_alg = match &signer.fault {
        Some(Fault::SessionAlg(alg)) => alg.clone(),
        _ => "ES256".to_owned(),
    };
    jws(
        &json!({"alg": header_alg, "typ": SESSION_TYP, "poppy_dlg": dlg}),
        &json!({
            "iss": session.agent,
            "sid": session.sid,
            "sub": session.user,
            "iat": iat,
            "exp": exp,
            "jti": new_jti(),
            "htu": format!("{origin}{path}"),
            "htm": htm,
        }),
        &key.encoding_key(),
        Algorithm::ES256,
    )
}

/// Assert `jwt` is a Session JWT of `session` (its `iss`, `sid`, `sub`) signed for `method`
/// `path_and_query` at [`PUBLIC_ORIGIN`] (or, for the unsigned form, the legacy claims).
pub fn assert_session_of(session: &Session, jwt: &str, method: &str, path_and_query: &str) {
    let claims = part(jwt, 1).unwrap_or_else(|| panic!("not a JWT: {jwt:?}"));
    for (claim, value) in [
        ("iss", &session.agent),
        ("sid", &session.sid),
        ("sub", &session.user),
    ] {
        assert_eq!(
            claims[claim].as_str(),
            Some(value.as_str()),
            "{claim} of the Session JWT {claims}"
        );
    }
    let header = part(jwt, 0).unwrap_or_else(|| panic!("not a JWT: {jwt:?}"));
    if header["alg"] == "none" {
        return;
    }
    assert_eq!(
        claims["htu"].as_str(),
        Some(format!("{PUBLIC_ORIGIN}{}", path_only(path_and_query)).as_str()),
        "htu of {claims}"
    );
    assert_eq!(claims["htm"].as_str(), Some(method), "htm of {claims}");
    assert!(
        header["poppy_dlg"].is_string(),
        "a delegation in the header: {header}"
    );
}

/// The legacy unsigned Session JWT (`alg: none`) of `session`: the same bytes every time.
pub fn unsigned_header(session: &Session) -> String {
    unsigned_jwt(
        &json!({"alg": "none", "typ": SESSION_TYP}),
        &json!({"sid": session.sid, "iss": session.agent, "sub": session.user}),
    )
}
