//! `[session] verify = "required"`: Poppy-Session JWTs signed with real keys (ES256, RS256)
//! are verified against a trusted agent's JWKS; everything else is refused with
//! `403 invalid_session` and nothing is forwarded (issue 15).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use poppy_e2e::agent::{AGENT, unsigned_jwt};
use poppy_e2e::identity::{jwks_of, now, session_claims, sign};
use poppy_e2e::{Request, Session, Stack, Store, store_tests, wait};
use serde_json::{Value, json};

const AUDIENCE: &str = "https://shop.test";
const SESSION_TYP: &str = "poppy-session+jwt";

/// A gateway verifying Sessions of agent [`AGENT`] against the JWKS in `jwks`.
fn stack_verifying(store: Store, jwks: &Path) -> Stack {
    let lines = format!(
        "verify = \"required\"\naudience = [\"{AUDIENCE}\"]\nclock_skew = \"30s\"\n\n[[session.agent]]\nissuer = \"{AGENT}\"\njwks_file = \"{}\"\n",
        jwks.display()
    );
    Stack::start_with(store, |b| b.session(&lines))
}

fn jwks_file(names: &[&str]) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), jwks_of(names)).unwrap();
    file
}

/// A request whose Poppy-Session is `payload` signed with test key `key`.
fn signed(request: Request, key: &str, payload: &Value) -> Request {
    request.header("Poppy-Session", &sign(key, SESSION_TYP, payload))
}

fn exchange() -> Request {
    Request::exchange(&Session::signed_out("unused"), "o1", "i1", "s1")
}

/// Signed Sessions approve and replay; a new JWT for every request (as agents sign them) still
/// gets the replay, since the verified claims decide.
async fn verified_sessions_approve_and_replay(store: Store) {
    let jwks = jwks_file(&["es256-a", "rs256-a"]);
    let stack = stack_verifying(store, jwks.path());
    for key in ["es256-a", "rs256-a"] {
        let sid = format!("ses_{key}");
        let claims = session_claims(AGENT, &sid, AUDIENCE);
        let request = signed(exchange(), key, &claims);
        let op = stack.gateway.send(&request).await.operation();
        let mut again = claims.clone();
        again["jti"] = json!("another-jwt");
        let approved = signed(exchange(), key, &again).approve(&op);
        let first = stack.gateway.send(&approved).await;
        first.assert_status(201, key);
        let mut third = claims.clone();
        third["jti"] = json!("a-third-jwt");
        stack
            .gateway
            .send(&signed(exchange(), key, &third).approve(&op))
            .await
            .assert_replay_of(&first, &format!("{key}: a new JWT of the same Session"));
    }
    stack.assert_executions(2, "one per key");
}

/// Every kind of bad Session is refused, `403 invalid_session` with a readable detail that
/// never repeats the token; nothing reaches the upstream.
async fn bad_sessions_are_refused(store: Store) {
    let jwks = jwks_file(&["es256-a", "rs256-a"]);
    let stack = stack_verifying(store, jwks.path());
    let good = session_claims(AGENT, "ses_bad", AUDIENCE);
    let with = |change: &dyn Fn(&mut Value)| {
        let mut claims = good.clone();
        change(&mut claims);
        claims
    };
    let mut other_kid = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    other_kid.kid = Some("rs256-a".into());
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "alg none",
            unsigned_jwt(&json!({"alg": "none", "typ": SESSION_TYP}), &good),
            "none",
        ),
        (
            "expired",
            sign(
                "es256-a",
                SESSION_TYP,
                &with(&|c| c["exp"] = json!(now() - 3600)),
            ),
            "expired",
        ),
        (
            "not yet valid",
            sign(
                "es256-a",
                SESSION_TYP,
                &with(&|c| c["nbf"] = json!(now() + 3600)),
            ),
            "not valid yet",
        ),
        (
            "nbf as a string (never skipped)",
            sign(
                "es256-a",
                SESSION_TYP,
                &with(&|c| c["nbf"] = json!((now() + 3600).to_string())),
            ),
            "NumericDate",
        ),
        (
            "wrong audience",
            sign(
                "rs256-a",
                SESSION_TYP,
                &with(&|c| c["aud"] = json!("https://other.test")),
            ),
            "audience",
        ),
        (
            "untrusted issuer",
            sign(
                "es256-a",
                SESSION_TYP,
                &with(&|c| c["iss"] = json!("agent_evil")),
            ),
            "not trusted",
        ),
        (
            "forged: signed by a key not in the JWKS, naming a trusted kid",
            {
                let token = sign("es256-b", SESSION_TYP, &good);
                let forged_header = poppy_e2e::identity::sign("es256-a", SESSION_TYP, &good);
                // es256-a's header (kid es256-a), es256-b's payload and signature.
                let header = forged_header.split('.').next().unwrap().to_owned();
                let rest: Vec<&str> = token.split('.').skip(1).collect();
                format!("{header}.{}", rest.join("."))
            },
            "signature",
        ),
        (
            "tampered payload",
            {
                let token = sign("rs256-a", SESSION_TYP, &good);
                let parts: Vec<&str> = token.split('.').collect();
                let payload = base64_url(&with(&|c| c["sid"] = json!("ses_victim")).to_string());
                format!("{}.{payload}.{}", parts[0], parts[2])
            },
            "signature",
        ),
        (
            "an RSA key's kid on an ES256 signature",
            {
                let token = sign("es256-a", SESSION_TYP, &good);
                let header = base64_url(
                    &json!({"alg": "ES256", "kid": "rs256-a", "typ": SESSION_TYP}).to_string(),
                );
                let rest: Vec<&str> = token.split('.').skip(1).collect();
                format!("{header}.{}", rest.join("."))
            },
            "may not verify",
        ),
        (
            "HS256 with the public key as secret",
            {
                let header = base64_url(&json!({"alg": "HS256", "kid": "es256-a"}).to_string());
                let payload = base64_url(&good.to_string());
                format!("{header}.{payload}.c2ln")
            },
            "may not verify",
        ),
        ("not a JWT", "hello".to_owned(), "not a JWT"),
        (
            "no exp",
            sign(
                "es256-a",
                SESSION_TYP,
                &with(&|c| {
                    c.as_object_mut().unwrap().remove("exp");
                }),
            ),
            "exp",
        ),
    ];
    for (what, token, needle) in &cases {
        let answer = stack
            .gateway
            .send(&exchange().header("Poppy-Session", token))
            .await;
        let body = answer.assert_error(403, "invalid_session", what);
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(needle),
            "{what}: the detail should say {needle:?}: {detail}"
        );
        assert!(
            !detail.contains(token.as_str()),
            "{what}: the detail repeats the token"
        );
    }
    // An approval with a bad Session is refused the same way, before anything else.
    let op = stack
        .gateway
        .send(&signed(exchange(), "es256-a", &good))
        .await
        .operation();
    let expired = with(&|c| c["exp"] = json!(now() - 3600));
    stack
        .gateway
        .send(&signed(exchange(), "es256-a", &expired).approve(&op))
        .await
        .assert_error(403, "invalid_session", "an approval in an expired Session");
    stack.assert_executions(0, "bad Sessions");
    let log = stack.gateway.log();
    for (what, token, _) in &cases {
        if token.len() > 20 {
            assert!(
                !log.contains(token.as_str()),
                "{what}: the log holds the token"
            );
        }
    }
}

/// A key added to the agent's JWKS while the gateway runs is picked up on its first unknown
/// `kid` (rate-limited reloads): no restart.
async fn key_rotation_while_running(store: Store) {
    let jwks = jwks_file(&["rs256-a"]);
    let stack = stack_verifying(store, jwks.path());
    let claims = session_claims(AGENT, "ses_rotate", AUDIENCE);
    stack
        .gateway
        .send(&signed(exchange(), "rs256-a", &claims))
        .await
        .operation();
    let answer = stack
        .gateway
        .send(&signed(exchange(), "es256-b", &claims))
        .await;
    let body = answer.assert_error(403, "invalid_session", "a key not published yet");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("no key \"es256-b\"")),
        "{body}"
    );

    // The agent publishes its new key (and drops the old one).
    std::fs::write(jwks.path(), jwks_of(&["es256-b"])).unwrap();
    let gateway = &stack.gateway;
    let accepted = wait::until_some(Duration::from_secs(10), || async {
        let answer = gateway.send(&signed(exchange(), "es256-b", &claims)).await;
        (answer.json()["error"] == "approval_required").then_some(answer)
    })
    .await;
    accepted
        .expect("the rotated key is accepted within the reload interval")
        .operation();
    // The dropped key, once the set was read again, is no longer accepted.
    let old = wait::until_some(Duration::from_secs(10), || async {
        let answer = gateway.send(&signed(exchange(), "rs256-a", &claims)).await;
        (answer.json()["error"] == "invalid_session").then_some(answer)
    })
    .await;
    old.expect("the removed key is refused")
        .assert_error(403, "invalid_session", "a removed key");
    stack.assert_executions(0, "no approval sent");
}

/// A forged Session (the victim's claims, signed with a key the agent never published, naming
/// the agent's `kid`) approving the victim's operation is refused and records nothing: the
/// victim's own approval is then performed, once, and its receipt says `verified`.
async fn a_forged_approval_records_nothing(store: Store) {
    let jwks = jwks_file(&["es256-a"]);
    let dir = tempfile::tempdir().unwrap();
    let receipts = dir.path().join("receipts.jsonl");
    let lines = format!(
        "verify = \"required\"\naudience = [\"{AUDIENCE}\"]\n\n[[session.agent]]\nissuer = \"{AGENT}\"\njwks_file = \"{}\"\n",
        jwks.path().display()
    );
    let table = format!("[receipts]\npath = \"{}\"", receipts.display());
    let stack = Stack::start_with(store, |b| b.session(&lines).extra_config(&table));
    let claims = session_claims(AGENT, "ses_victim", AUDIENCE);
    let op = stack
        .gateway
        .send(&signed(exchange(), "es256-a", &claims))
        .await
        .operation();

    let genuine = sign("es256-a", SESSION_TYP, &claims);
    let forged_signature = sign("es256-b", SESSION_TYP, &claims);
    let forged = format!(
        "{}.{}",
        genuine.split('.').next().unwrap(),
        forged_signature
            .split('.')
            .skip(1)
            .collect::<Vec<_>>()
            .join(".")
    );
    stack
        .gateway
        .send(&exchange().header("Poppy-Session", &forged).approve(&op))
        .await
        .assert_error(403, "invalid_session", "a forged approval");
    stack.assert_executions(0, "a forged approval");
    assert!(
        !receipts.exists() || std::fs::read_to_string(&receipts).unwrap().is_empty(),
        "no receipt for a refused approval"
    );

    let first = stack
        .gateway
        .send(&signed(exchange(), "es256-a", &claims).approve(&op))
        .await;
    first.assert_status(201, "the victim's own approval, after the forgery");
    stack.assert_executions(1, "performed once");
    let text = std::fs::read_to_string(&receipts).unwrap();
    let receipt: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(receipt["identity"], "verified", "{receipt}");
    assert_eq!(receipt["session"], "ses_victim");
    assert_eq!(receipt["agent"], AGENT);
}

fn base64_url(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

/// An identity provider that can't be asked (its introspection endpoint refuses connections)
/// is no verdict on the token: `503 token_check_unavailable` with `Retry-After`, never
/// `401 invalid_token`, and nothing is forwarded.
async fn an_unreachable_identity_provider_is_no_verdict(store: Store) {
    let jwks = jwks_file(&["es256-a"]);
    let nobody = poppy_e2e::ports::free_port();
    let lines = format!(
        "verify = \"required\"\naudience = [\"{AUDIENCE}\"]\n\n[[session.agent]]\nissuer = \"{AGENT}\"\njwks_file = \"{}\"\n\n[session.token]\nintrospection_url = \"http://127.0.0.1:{nobody}/introspect\"\nclient_id = \"gateway\"\nclient_secret = \"secret\"\n",
        jwks.path().display()
    );
    let stack = Stack::start_with(store, |b| b.session(&lines));
    let claims = session_claims(AGENT, "ses_idp", AUDIENCE);
    let request =
        signed(exchange(), "es256-a", &claims).header("Authorization", "Bearer opaque-token");
    let answer = stack.gateway.send(&request).await;
    answer.assert_unavailable("token_check_unavailable", "introspection unreachable");
    stack.assert_executions(0, "a token nobody could check");
}

store_tests!(
    an_unreachable_identity_provider_is_no_verdict,
    verified_sessions_approve_and_replay,
    bad_sessions_are_refused,
    key_rotation_while_running,
    a_forged_approval_records_nothing,
);
