//! Opaque access tokens resolved by RFC 7662 introspection (`[session.token]
//! introspection_url`), against a real HTTP endpoint that counts its calls (issue 25): an
//! active token must be for this gateway's audience and the Session's agent; answers are
//! cached, refusals too, so one token costs one call; and calls are rate-limited, so a flood
//! of made-up tokens costs the authorization server at most the rate, the rest answered
//! `503 token_check_unavailable` with `Retry-After`, nothing forwarded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use futures_util::future::join_all;
use poppy_e2e::agent::AGENT;
use poppy_e2e::auth_server::AuthServer;
use poppy_e2e::identity::{jwks_of, now, session_claims, sign};
use poppy_e2e::{Request, Session, Stack, Store, store_tests};
use serde_json::{Value, json};

const AUDIENCE: &str = "https://shop.test";

/// A gateway verifying Sessions of [`AGENT`] (static key es256-a) and introspecting opaque
/// tokens at `server`, with `limits` lines in `[session.token]`.
fn stack(store: Store, server: &AuthServer, jwks: &tempfile::NamedTempFile, limits: &str) -> Stack {
    let lines = format!(
        "verify = \"required\"\naudience = [\"{AUDIENCE}\"]\n\n[[session.agent]]\nissuer = \"{AGENT}\"\njwks_file = \"{}\"\n{}",
        jwks.path().display(),
        server.token_table(limits)
    );
    Stack::start_with(store, |b| b.session(&lines))
}

fn jwks() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), jwks_of(&["es256-a"])).unwrap();
    file
}

/// An exchange in Session `sid` of [`AGENT`], signed in with `token`.
fn request(sid: &str, token: &str) -> Request {
    Request::exchange(&Session::signed_out("unused"), "o1", "i1", "s1")
        .header(
            "Poppy-Session",
            &sign(
                "es256-a",
                "poppy-session+jwt",
                &session_claims(AGENT, sid, AUDIENCE),
            ),
        )
        .header("Authorization", &format!("Bearer {token}"))
}

/// What the endpoint answers for an active token of `client_id` for `aud`.
fn active(client_id: &str, aud: Value) -> Value {
    json!({"active": true, "sub": "acct_1", "client_id": client_id, "aud": aud, "exp": now() + 600})
}

/// An active token issued for another audience (or for none), or to another client, is
/// refused with the JWT path's `401 invalid_token`; one for this audience (alone or among
/// others) approves and executes.
async fn introspected_tokens_must_be_for_this_gateway(store: Store) {
    let server = AuthServer::start();
    let keys = jwks();
    let stack = stack(store, &server, &keys, "");
    let cases = [
        (
            "tok-elsewhere",
            active(AGENT, json!("https://elsewhere.test")),
            "audience",
        ),
        (
            "tok-elsewheres",
            active(AGENT, json!(["https://a.test", "https://b.test"])),
            "audience",
        ),
        (
            "tok-no-aud",
            json!({"active": true, "sub": "acct_1", "client_id": AGENT, "exp": now() + 600}),
            "audience",
        ),
        (
            "tok-other-client",
            active("agent_2", json!(AUDIENCE)),
            "another agent",
        ),
        ("tok-inactive", json!({"active": false}), "not active"),
    ];
    for (token, answer, needle) in &cases {
        server.issue(token, answer.clone());
        let refused = stack.gateway.send(&request("ses_aud", token)).await;
        let body = refused.assert_error(401, "invalid_token", token);
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(needle), "{token}: {detail}");
        assert!(
            !detail.contains(token),
            "{token}: the detail repeats the token"
        );
    }
    stack.assert_executions(0, "tokens not for this gateway");
    assert_eq!(stack.upstream.count(), 0, "nothing forwarded");

    let token = "tok-ours";
    server.issue(
        token,
        active(AGENT, json!(["https://elsewhere.test", AUDIENCE])),
    );
    let op = stack
        .gateway
        .send(&request("ses_ok", token))
        .await
        .operation();
    stack
        .gateway
        .send(&request("ses_ok", token).approve(&op))
        .await
        .assert_status(201, "a token for this audience");
    stack.assert_executions(1, "the approved exchange");
}

/// One call per token while its answer is remembered: the same active token many times,
/// one after another and all at once, and the same refused token many times.
async fn a_token_costs_one_call(store: Store) {
    let server = AuthServer::start();
    let keys = jwks();
    let stack = stack(store, &server, &keys, "");
    let token = "tok-cached";
    server.issue(token, active(AGENT, json!(AUDIENCE)));
    for _ in 0..10 {
        stack
            .gateway
            .send(&request("ses_cache", token))
            .await
            .operation();
    }
    assert_eq!(
        server.calls_for(token),
        1,
        "ten requests, one after another"
    );

    let together = "tok-together";
    server.issue(together, active(AGENT, json!(AUDIENCE)));
    let client = stack.gateway.client();
    let answers = join_all((0..20).map(|_| {
        let client = client.clone();
        async move { client.send(&request("ses_together", together)).await }
    }))
    .await;
    for answer in &answers {
        answer.operation();
    }
    assert_eq!(server.calls_for(together), 1, "twenty requests at once");

    for _ in 0..10 {
        stack
            .gateway
            .send(&request("ses_refused", "tok-unknown"))
            .await
            .assert_error(401, "invalid_token", "an unknown token");
    }
    assert_eq!(
        server.calls_for("tok-unknown"),
        1,
        "a refusal is remembered"
    );
    stack.assert_executions(0, "held or refused");
}

/// 200 made-up tokens: at most `burst` + `rate` × the seconds they took reach the
/// endpoint (each answered `401`); the rest are `503 token_check_unavailable` with
/// `Retry-After`; nothing is forwarded; and a token already known still works meanwhile.
async fn made_up_tokens_are_rate_limited(store: Store) {
    const BURST: usize = 5;
    const RATE: usize = 1;
    const TOKENS: usize = 200;
    let server = AuthServer::start();
    let keys = jwks();
    let limits = format!("introspection_rate = {RATE}\nintrospection_burst = {BURST}\n");
    let stack = stack(store, &server, &keys, &limits);
    let known = "tok-known";
    server.issue(known, active(AGENT, json!(AUDIENCE)));
    stack
        .gateway
        .send(&request("ses_known", known))
        .await
        .operation();

    let client = stack.gateway.client();
    let started = Instant::now();
    let answers = join_all((0..TOKENS).map(|i| {
        let client = client.clone();
        async move {
            let token = format!("made-up-{i}-{}", now());
            client.send(&request("ses_flood", &token)).await
        }
    }))
    .await;
    let took = started.elapsed();
    let (mut refused, mut unavailable) = (0, 0);
    for answer in &answers {
        if answer.error_code().as_deref() == Some("token_check_unavailable") {
            answer.assert_unavailable("token_check_unavailable", "over the rate limit");
            let retry: u64 = answer
                .header("retry-after")
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!((1..=2).contains(&retry), "Retry-After {retry}");
            unavailable += 1;
        } else {
            answer.assert_error(401, "invalid_token", "a made-up token");
            refused += 1;
        }
    }
    let calls = server.calls() - 1;
    let allowed = BURST + RATE * (took.as_secs() as usize + 1);
    eprintln!(
        "{TOKENS} made-up tokens in {took:?}: {calls} introspection calls (at most {allowed}), {refused} × 401, {unavailable} × 503"
    );
    assert!(calls <= allowed, "{calls} calls, at most {allowed}");
    assert_eq!(refused, calls, "each call answered a 401");
    assert_eq!(refused + unavailable, TOKENS);
    assert_eq!(stack.upstream.count(), 0, "nothing forwarded");

    // The cached token is no call: it still works with the bucket empty.
    stack
        .gateway
        .send(&request("ses_known", known))
        .await
        .operation();
    assert_eq!(server.calls_for(known), 1);
    let metrics = stack.gateway.metrics().await;
    let count = |result: &str| {
        metrics.value("poppy_token_introspections_total", &[("result", result)]) as usize
    };
    assert_eq!(count("rate_limited"), unavailable);
    assert_eq!(count("refused"), refused);
    assert_eq!(count("active"), 1);
    assert!(count("cached") >= 1);
}

store_tests!(
    introspected_tokens_must_be_for_this_gateway,
    a_token_costs_one_call,
    made_up_tokens_are_rate_limited,
);
