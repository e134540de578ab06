//! The cache of verified delegations: a hit skips only the signature; every check that
//! depends on the clock or the Session is made again, with the error a fresh verification
//! gives; keys read again forget what the old ones vouched for.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::*;
use crate::identity::format::{
    DELEGATION_HEADER, DELEGATION_TYP, RequestTarget, SESSION_TYP, peek_session, verify_delegated,
};
use crate::identity::testkeys::{AGENT, NOW, ORIGIN, jwk, key_set, sign};
use crate::identity::{
    Expectations, HttpClient, KeySet, KeySource, SessionVerifier, TrustedIssuer, VerifyError,
};

/// The agent's keys (test keys `names`) and the delegations verified with them.
struct Keys {
    set: KeySet,
    verified: DelegationCache,
}

fn agent_keys(names: &[&str]) -> Keys {
    Keys {
        set: key_set(names),
        verified: DelegationCache::default(),
    }
}

const TARGET: RequestTarget<'static> = RequestTarget {
    method: "POST",
    path: "/billing/pay",
};
const SKEW: u64 = 60;

fn expect() -> Expectations {
    Expectations {
        audience: Vec::new(),
        clock_skew_secs: SKEW,
        origins: vec![ORIGIN.into()],
    }
}

/// A delegation of `AGENT` by `long` for `es256-b`, valid from `NOW` for `lifetime` seconds.
fn delegation(long: &str, lifetime: u64) -> String {
    sign(
        long,
        json!({"typ": DELEGATION_TYP, "kid": long}),
        &json!({"iss": AGENT, "iat": NOW, "exp": NOW + lifetime, "cnf": {"jwk": jwk("es256-b")}}),
    )
}

/// A new Session of `iss` (its own `jti`) signed by `es256-b`, carrying `dlg`, issued at `iat`.
fn session(dlg: &str, iss: &str, jti: &str, iat: u64) -> String {
    sign(
        "es256-b",
        json!({"typ": SESSION_TYP, DELEGATION_HEADER: dlg}),
        &json!({
            "iss": iss, "sid": "s1", "sub": "u1", "iat": iat, "exp": iat + 300, "jti": jti,
            "htu": format!("{ORIGIN}/billing/pay"), "htm": "POST",
        }),
    )
}

fn verify_at(token: &str, keys: &Keys, now: u64) -> Result<Map<String, Value>, VerifyError> {
    let header = peek_session(token)?;
    verify_delegated(
        token,
        &header,
        &keys.set,
        &keys.verified,
        &expect(),
        &TARGET,
        now,
    )
}

#[test]
fn a_hit_skips_the_delegations_signature_only() {
    let keys = agent_keys(&["es256-a"]);
    let dlg = delegation("es256-a", 3600);
    for jti in ["j1", "j2", "j3"] {
        let claims = verify_at(&session(&dlg, AGENT, jti, NOW), &keys, NOW).unwrap();
        assert_eq!(claims["jti"], jti);
    }
    assert_eq!(keys.verified.verifications(), 1, "verified once");
    assert_eq!(keys.verified.len(), 1);
    let cached = keys.verified.get(&dlg).unwrap();
    assert_eq!(
        (
            cached.issuer.as_str(),
            cached.exp,
            cached.nbf,
            cached.kid.as_deref()
        ),
        (AGENT, NOW + 3600, None, Some("es256-a"))
    );
    // The Session's own signature is still checked on a hit.
    let forged = {
        let token = session(&dlg, AGENT, "j4", NOW);
        let (rest, _) = token.rsplit_once('.').unwrap();
        let other = session(&dlg, AGENT, "j5", NOW);
        format!("{rest}.{}", other.rsplit_once('.').unwrap().1)
    };
    assert_eq!(
        verify_at(&forged, &keys, NOW).unwrap_err(),
        VerifyError::DelegatedSignature
    );
    // Another request's target too.
    let header = peek_session(&session(&dlg, AGENT, "j6", NOW)).unwrap();
    let elsewhere = RequestTarget {
        method: "POST",
        path: "/billing/refund",
    };
    assert!(matches!(
        verify_delegated(
            &session(&dlg, AGENT, "j6", NOW),
            &header,
            &keys.set,
            &keys.verified,
            &expect(),
            &elsewhere,
            NOW
        ),
        Err(VerifyError::WrongTarget { .. })
    ));
    assert_eq!(keys.verified.verifications(), 1);
}

#[test]
fn an_expired_cached_delegation_is_refused_as_an_uncached_one() {
    let cached = agent_keys(&["es256-a"]);
    let dlg = delegation("es256-a", 100);
    verify_at(&session(&dlg, AGENT, "j1", NOW), &cached, NOW).unwrap();
    // Within the skew, still valid; one second past it, expired: cached or not, one error.
    let last = NOW + 100 + SKEW;
    for (now, expired) in [(last, false), (last + 1, true)] {
        let token = session(&dlg, AGENT, "j2", now);
        let from_cache = verify_at(&token, &cached, now).map(|_| ());
        let fresh = verify_at(&token, &agent_keys(&["es256-a"]), now).map(|_| ());
        assert_eq!(from_cache, fresh, "at {now}");
        assert_eq!(from_cache.is_err(), expired, "at {now}");
        if expired {
            assert_eq!(from_cache, Err(VerifyError::DelegationExpired));
        }
    }
    assert_eq!(cached.verified.verifications(), 1, "both from the cache");
}

#[test]
fn a_delegation_of_another_issuer_is_refused_from_the_cache() {
    let keys = agent_keys(&["es256-a"]);
    let dlg = delegation("es256-a", 3600);
    verify_at(&session(&dlg, AGENT, "j1", NOW), &keys, NOW).unwrap();
    let other = session(&dlg, "https://other.example/agent.json", "j2", NOW);
    assert_eq!(
        verify_at(&other, &keys, NOW).unwrap_err(),
        VerifyError::DelegationIssuer
    );
    assert_eq!(
        verify_at(&other, &agent_keys(&["es256-a"]), NOW).unwrap_err(),
        VerifyError::DelegationIssuer,
        "as uncached"
    );
}

#[test]
fn a_tampered_byte_misses() {
    let keys = agent_keys(&["es256-a"]);
    let dlg = delegation("es256-a", 3600);
    verify_at(&session(&dlg, AGENT, "j1", NOW), &keys, NOW).unwrap();
    // One character of the delegation's signature changed, in its middle.
    let signature_at = dlg.rfind('.').unwrap() + 20;
    let mut tampered = dlg.clone().into_bytes();
    tampered[signature_at] = if tampered[signature_at] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let tampered = String::from_utf8(tampered).unwrap();
    assert_eq!(
        verify_at(&session(&tampered, AGENT, "j2", NOW), &keys, NOW).unwrap_err(),
        VerifyError::DelegationBadSignature
    );
    assert_eq!(keys.verified.verifications(), 2, "verified, not found");
    assert!(keys.verified.get(&tampered).is_none(), "not remembered");
    assert_eq!(keys.verified.len(), 1);
}

#[test]
fn the_cache_is_bounded() {
    let cache = DelegationCache::default();
    let key = || Arc::new(DelegatedKey::parse(&jwk("es256-b")).unwrap());
    for n in 0..MAX_DELEGATIONS + 10 {
        cache.insert(
            &format!("dlg-{n}"),
            Vouched {
                key: key(),
                issuer: AGENT.into(),
                exp: NOW,
                nbf: None,
                kid: None,
            },
        );
    }
    assert_eq!(cache.len(), MAX_DELEGATIONS);
    assert!(
        cache.get(&format!("dlg-{}", MAX_DELEGATIONS + 9)).is_some(),
        "the newest kept"
    );
}

fn write_jwks(path: &Path, names: &[&str]) {
    let keys: Vec<Value> = names.iter().map(|n| jwk(n)).collect();
    std::fs::write(path, json!({ "keys": keys }).to_string()).unwrap();
}

/// The agent withdraws the long-term key that signed a cached delegation and publishes
/// another: once its keys are read again (here, for the new key's unknown `kid`), the cached
/// delegation vouches for nothing.
#[tokio::test]
async fn keys_read_again_forget_what_a_withdrawn_key_vouched_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.jwks.json");
    write_jwks(&path, &["es256-a"]);
    let source = KeySource::File(path.clone());
    let keys = Arc::new(crate::identity::read_jwks_file(&path).unwrap());
    let http = Arc::new(HttpClient::new(None).unwrap());
    let agent = TrustedIssuer::new(
        AGENT.into(),
        source,
        Duration::from_secs(3600),
        Some(keys),
        http,
    );
    let verifier = SessionVerifier::new(vec![agent], expect(), None);
    let now = crate::identity::now();
    let old = delegation_at("es256-a", now);
    for jti in ["j1", "j2"] {
        let token = session(&old, AGENT, jti, now);
        verifier.verify(token.as_bytes(), &TARGET).await.unwrap();
    }
    write_jwks(&path, &["rs256-a"]);
    let new = delegation_at("rs256-a", now);
    let token = session(&new, AGENT, "j3", now);
    verifier.verify(token.as_bytes(), &TARGET).await.unwrap();
    let token = session(&old, AGENT, "j4", now);
    assert_eq!(
        verifier
            .verify(token.as_bytes(), &TARGET)
            .await
            .unwrap_err(),
        VerifyError::UnknownKey {
            issuer: AGENT.into(),
            kid: "es256-a".into()
        }
    );
}

/// [`delegation`] issued at `now` (the verifier's own clock).
fn delegation_at(long: &str, now: u64) -> String {
    sign(
        long,
        json!({"typ": DELEGATION_TYP, "kid": long}),
        &json!({"iss": AGENT, "iat": now, "exp": now + 3600, "cnf": {"jwk": jwk("es256-b")}}),
    )
}
