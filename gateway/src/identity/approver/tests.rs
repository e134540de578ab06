//! Who may approve: signed out, signed in, by token alone, and the credentials that bind
//! unverified claims.

use super::*;
use crate::protocol::SigningKey;
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
    let read =
        |value: &str| Approver::from_headers(session.as_bytes(), Some(value.as_bytes()), &claims());
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
