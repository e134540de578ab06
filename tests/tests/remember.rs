//! At most once over time: a performed operation is remembered while any revision of it can
//! still be approved, and an operation whose outcome is unknown is never forgotten, never
//! given out again, listed for operators and counted until one resolves it (issue 11).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::wait::until_clock_passes;
use poppy_e2e::{Gateway, GatewayBuilder, Request, Session, Stack, Store, store_tests};
use serde_json::{Value, json};

const TOKEN: &str = "test-admin-token-0123456789";

/// One policy with a short life, so the test waits seconds, not an hour.
const SHORT_POLICY: &str = r#"
[[operation]]
name = "refund"
method = "POST"
path = "/orders/{order_id}/refunds"
id_prefix = "ref"
expires_in = "6s"
same_action = ["order_id"]
summary = "Refund {amount} on order {order_id}."

[operation.terms]
order_id = { path = "order_id" }
amount = { body = "$.amount" }
"#;

fn short_lived(builder: GatewayBuilder) -> GatewayBuilder {
    with_policy(builder, SHORT_POLICY)
}

fn with_policy(builder: GatewayBuilder, policy: &str) -> GatewayBuilder {
    builder
        .policy("refund.toml", policy)
        .extra_config("remember_grace = \"1s\"")
        .env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN)
        // A lease of 200 ms + 500 ms + 1 s.
        .upstream_connect_timeout("200ms")
        .upstream_timeout("500ms")
}

async fn admin(gateway: &Gateway, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("{}{path}", gateway.admin_url());
    let request = match method {
        "GET" => client.get(url),
        _ => client.post(url),
    };
    let mut request = request.bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("admin request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("admin answers JSON"))
}

fn listed(body: &Value) -> Vec<String> {
    body["operations"]
        .as_array()
        .expect("a list of operations")
        .iter()
        .map(|op| op["operation_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Two revisions of one operation, the second minted later so it expires later. The first is
/// approved and performed; once its own `expires_at + remember_grace` has passed (all the old
/// gateway remembered), the second is approved: it gets the replay, never a second execution.
async fn a_later_revision_never_executes_again(store: Store) {
    let stack = Stack::start_with(store, short_lived);
    let request = Request::refund(&Session::signed_out("ses_two_rev"), "o1", "10.00");
    let first = stack.gateway.send(&request).await.operation();
    // Re-mint until a revision expires at least 3 s after the first (bounded: about 3 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let second = loop {
        let op = stack.gateway.send(&request).await.operation();
        assert_eq!(op.operation_id, first.operation_id, "the same operation");
        if op.expires_at_unix >= first.expires_at_unix + 3.0 {
            break op;
        }
        assert!(std::time::Instant::now() < deadline, "no later revision");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let performed = stack.gateway.send(&request.clone().approve(&first)).await;
    performed.assert_status(201, "the first revision performs");
    stack.assert_executions(1, "performed once");

    // Past what the gateway used to remember (the approved revision's expires_at + 1 s).
    until_clock_passes(first.expires_at_unix + 1.2, Duration::from_secs(10)).await;
    assert!(
        second.expires_at_unix > poppy_e2e::wait::unix_now() + 0.5,
        "the second revision must still be valid"
    );
    let again = stack.gateway.send(&request.clone().approve(&second)).await;
    again.assert_replay_of(&performed, "the later revision replays");
    stack.assert_executions(1, "never twice");
}

/// An upstream timeout leaves the outcome unknown. Past its revision's expiry and the grace,
/// the approval and a new request for the same action both still get 503
/// `operation_outcome_unknown` (no new operation_id), the operation is listed and counted,
/// and once an operator resolves it the action is approvable again, as a new operation.
async fn an_unknown_operation_is_never_forgotten(store: Store) {
    let stack = Stack::start_with(store, short_lived);
    let request = Request::refund(&Session::signed_out("ses_unknown"), "o2", "20.00");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.clone().approve(&op);

    stack.upstream.hold();
    stack
        .gateway
        .send(&approved)
        .await
        .assert_unavailable("operation_outcome_unknown", "the upstream timed out");
    stack.upstream.release();
    stack.assert_executions(1, "sent once");

    // Past the revision's expiry and the grace: everything the old gateway remembered.
    until_clock_passes(op.expires_at_unix + 1.5, Duration::from_secs(15)).await;
    let retry = stack.gateway.send(&approved).await;
    retry.assert_unavailable("operation_outcome_unknown", "the approval, later");
    let fresh = stack.gateway.send(&request).await;
    fresh.assert_unavailable(
        "operation_outcome_unknown",
        "a new request for the same action gets no new operation",
    );
    assert_eq!(fresh.json()["operation_id"], op.operation_id.as_str());
    stack.assert_executions(1, "never forwarded again");

    let (status, body) = admin(&stack.gateway, "GET", "/operations?state=unknown", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(listed(&body), vec![op.operation_id.clone()], "{body}");
    assert_eq!(body["operations"][0]["policy"], "refund");
    let (_, body) = admin(&stack.gateway, "GET", "/operations?state=in_flight", None).await;
    assert!(listed(&body).is_empty(), "not running any more: {body}");
    let (status, body) = admin(&stack.gateway, "GET", "/operations", None).await;
    assert_eq!(status, 400, "the state is required: {body}");
    let metrics = stack.gateway.metrics().await;
    assert_eq!(metrics.value("poppy_operations_unknown", &[]), 1.0);

    let recorded = json!({"status": 201, "headers": [["content-type", "application/json"]], "body": "{\"resolved\":true}"});
    let (status, body) = admin(
        &stack.gateway,
        "POST",
        &format!("/operations/{}/resolve", op.operation_id),
        Some(json!({"performed": true, "response": recorded})),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let (_, body) = admin(&stack.gateway, "GET", "/operations?state=unknown", None).await;
    assert!(listed(&body).is_empty(), "resolved: {body}");
    let metrics = stack.gateway.metrics().await;
    assert_eq!(metrics.get("poppy_operations_unknown", &[]), Some(0.0));
    let replay = stack.gateway.send(&approved).await;
    replay.assert_status(201, "the resolved answer");
    assert_eq!(replay.json(), json!({"resolved": true}));
    let next = stack.gateway.send(&request).await.operation();
    assert_ne!(
        next.operation_id, op.operation_id,
        "performed: a new operation"
    );
    stack.assert_executions(1, "resolving performs nothing");
}

/// Without the admin token the listing is refused like the rest of the operations API.
async fn the_listing_needs_the_admin_token(store: Store) {
    let stack = Stack::start_with(store, short_lived);
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!(
            "{}/operations?state=unknown",
            stack.gateway.admin_url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
}

/// A reload that shortens `expires_in`: a revision minted before it, which would outlive what
/// a completion now remembers, is refused as expired (a new revision, nothing forwarded); one
/// minted after it performs.
async fn a_reload_that_shortens_expires_in_refuses_longer_revisions(store: Store) {
    let long = SHORT_POLICY.replace("expires_in = \"6s\"", "expires_in = \"15m\"");
    let stack = Stack::start_with(store, |b| with_policy(b, &long));
    let request = Request::refund(&Session::signed_out("ses_reload"), "o3", "30.00");
    let before = stack.gateway.send(&request).await.operation();

    std::fs::write(
        stack.gateway.policies_dir().join("refund.toml"),
        SHORT_POLICY,
    )
    .unwrap();
    let reloads = |m: &poppy_e2e::metrics::Metrics| {
        m.value("poppy_config_reloads_total", &[("result", "success")])
    };
    let counted = reloads(&stack.gateway.metrics().await);
    stack.gateway.signal("HUP");
    poppy_e2e::wait::until_some(Duration::from_secs(10), || async {
        (reloads(&stack.gateway.metrics().await) > counted).then_some(())
    })
    .await
    .expect("the reload applies");

    let refused = stack.gateway.send(&request.clone().approve(&before)).await;
    let after = refused.operation_in("a revision longer than the policy now allows");
    assert!(after.expires_at_unix < before.expires_at_unix - 60.0);
    stack.assert_executions(0, "refused, nothing forwarded");
    stack
        .gateway
        .send(&request.clone().approve(&after))
        .await
        .assert_status(201, "a revision of the reloaded policy performs");
    stack.assert_executions(1, "once");
}

store_tests!(
    a_reload_that_shortens_expires_in_refuses_longer_revisions,
    a_later_revision_never_executes_again,
    an_unknown_operation_is_never_forgotten,
    the_listing_needs_the_admin_token,
);
