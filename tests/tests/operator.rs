//! Crashes and the operator's API: a gateway killed with SIGKILL at any point of the flow
//! never executes an operation twice; an outcome it can't know is settled on the admin API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::{
    Answer, Gateway, GatewayBuilder, Operation, RedisServer, Request, Session, Stack, Store,
    Upstream, store_tests,
};
use serde_json::{Value, json};

const TOKEN: &str = "test-admin-token-0123456789";
/// connect_timeout 200 ms + timeout 500 ms + 1 s: a claim's lease.
const LEASE: Duration = Duration::from_millis(1_700);

fn with_admin(builder: GatewayBuilder) -> GatewayBuilder {
    builder
        .env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN)
        .upstream_connect_timeout("200ms")
        .upstream_timeout("500ms")
}

async fn admin(
    gateway: &Gateway,
    method: &str,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (u16, Value) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("{}{path}", gateway.admin_url());
    let mut request = match method {
        "GET" => client.get(url),
        _ => client.post(url),
    };
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("admin request");
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("admin answers JSON");
    (status, body)
}

async fn state_of(gateway: &Gateway, op: &Operation) -> (u16, Value) {
    admin(
        gateway,
        "GET",
        &format!("/operations/{}", op.operation_id),
        None,
        Some(TOKEN),
    )
    .await
}

async fn the_operations_api_needs_its_token(store: Store) {
    let stack = Stack::start(store);
    let never = "/operations/exc_sAAAAAAAAAAAAAAAABBBBBBBB";
    let (status, body) = admin(&stack.gateway, "GET", never, None, Some(TOKEN)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("admin_api_disabled")),
        "no token configured: {body}"
    );

    let stack = Stack::start_with(store, with_admin);
    let (status, _) = admin(&stack.gateway, "GET", never, None, None).await;
    assert_eq!(status, 401, "no Authorization");
    let (status, _) = admin(&stack.gateway, "GET", never, None, Some("wrong")).await;
    assert_eq!(status, 401, "a wrong token");
    let (status, body) = admin(&stack.gateway, "GET", never, None, Some(TOKEN)).await;
    assert_eq!(status, 404, "an operation never approved: {body}");

    let request = Request::exchange(&Session::signed_out("ses_api"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    stack
        .gateway
        .send(&request.approve(&op))
        .await
        .assert_status(201, "performed");
    let (status, body) = state_of(&stack.gateway, &op).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "performed");
    assert_eq!(body["status"], 201);
    let (status, body) = admin(
        &stack.gateway,
        "POST",
        &format!("/operations/{}/resolve", op.operation_id),
        Some(json!({"performed": false})),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 409, "a recorded answer can't be changed: {body}");
}

/// An operation being forwarded (its lease live) is not the operator's to resolve: `409
/// in_flight`, the record unchanged, so no retry is forwarded a second time while the first
/// is still at the upstream; the agent's retry gets `503` and then the first answer.
async fn an_operation_being_forwarded_is_never_resolved(store: Store) {
    let stack = Stack::start_with(store, |b| b.env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN));
    let request = Request::exchange(&Session::signed_out("ses_live"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);
    stack.upstream.hold();
    let first = stack.send_held(&approved, 1).await;
    let resolve = format!("/operations/{}/resolve", op.operation_id);
    for verdict in [
        json!({"performed": false}),
        json!({"performed": true, "response": {"status": 200, "headers": [], "body": "{}"}}),
    ] {
        let (status, body) =
            admin(&stack.gateway, "POST", &resolve, Some(verdict), Some(TOKEN)).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (409, Some("in_flight")),
            "{body}"
        );
        assert!(body["lease_until_ms"].as_i64().is_some(), "{body}");
    }
    let (_, state) = state_of(&stack.gateway, &op).await;
    assert_eq!(state["state"], "in_flight", "{state}");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_unavailable("operation_in_progress", "a retry while it is forwarded");
    stack.upstream.release();
    let first = first.await.unwrap();
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry once it was performed");
    stack.assert_executions(1, "an operator's attempt while it was forwarded");
}

/// A resolution is checked as strictly as an upstream's answer before it is recorded: a header
/// value with CR or LF (every replay would be a `500`), a header that isn't one, or one the
/// gateway writes itself is `400`, and nothing is recorded.
async fn a_resolution_is_checked_before_it_is_recorded(store: Store) {
    let stack = Stack::start_with(store, with_admin);
    let resolve = "/operations/exc_sAAAAAAAAAAAAAAAABBBBBBBB/resolve";
    for (headers, needle) in [
        (json!([["x-note", "a\r\nx-injected: 1"]]), "can't carry"),
        (json!([["x-note", "a\nb"]]), "can't carry"),
        (json!([["bad name", "x"]]), "not an HTTP header name"),
        (json!([["Content-Length", "5"]]), "the gateway's to write"),
        (
            json!([["transfer-encoding", "chunked"]]),
            "the gateway's to write",
        ),
    ] {
        let verdict = json!({"performed": true, "response": {"status": 200, "headers": headers, "body": "{}"}});
        let (status, body) =
            admin(&stack.gateway, "POST", resolve, Some(verdict), Some(TOKEN)).await;
        assert_eq!(status, 400, "{headers}: {body}");
        assert!(
            body["detail"].as_str().is_some_and(|d| d.contains(needle)),
            "{headers}: {body}"
        );
    }
}

store_tests!(
    the_operations_api_needs_its_token,
    an_operation_being_forwarded_is_never_resolved,
    a_resolution_is_checked_before_it_is_recorded,
);

/// Retry until the answer is final (anything but a 503), at most `limit`.
async fn retry_until_final(
    client: &poppy_e2e::Client,
    request: &Request,
    limit: Duration,
) -> Answer {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let answer = client.send(request).await;
        if answer.status != 503 || std::time::Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGKILL while the upstream holds an approved request: after a restart, retries get 503
/// (in progress, then unknown once the lease ran out), the upstream count never exceeds 1, and
/// once an operator resolves it as performed, retries get that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_forward_is_unknown_until_resolved() {
    let redis = RedisServer::start();
    let upstream = Upstream::start();
    let mut gateway =
        with_admin(GatewayBuilder::new(&upstream.url()).store_url(&redis.url())).start();
    let request = Request::exchange(&Session::signed_out("ses_kill"), "o1", "i1", "s1");
    let op = gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    upstream.hold();
    let client = gateway.client();
    let in_flight = {
        let approved = approved.clone();
        tokio::spawn(async move { client.try_send(&approved).await })
    };
    upstream.wait_for_count(1, Duration::from_secs(10)).await;
    gateway.kill();
    let _ = in_flight.await;
    gateway.restart();

    let retry = gateway.send(&approved).await;
    retry.assert_unavailable(
        "operation_in_progress",
        "a retry while the dead gateway's lease runs",
    );
    let (_, state) = state_of(&gateway, &op).await;
    assert_eq!(state["state"], "in_flight", "{state}");
    upstream.release();

    tokio::time::sleep(LEASE).await; // the lease is a span of time, not an event to wait on
    let retry = gateway.send(&approved).await;
    retry.assert_unavailable(
        "operation_outcome_unknown",
        "a retry after the lease ran out",
    );
    let (_, state) = state_of(&gateway, &op).await;
    assert_eq!(state["state"], "unknown", "{state}");
    assert_eq!(upstream.count(), 1, "never forwarded again");

    let recorded = json!({"status": 201, "headers": [["content-type", "application/json"]], "body": "{\"resolved\":true}"});
    let (status, body) = admin(
        &gateway,
        "POST",
        &format!("/operations/{}/resolve", op.operation_id),
        Some(json!({"performed": true, "response": recorded})),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let replay = gateway.send(&approved).await;
    replay.assert_status(201, "the resolved answer");
    assert_eq!(replay.json(), json!({"resolved": true}));
    assert_eq!(upstream.count(), 1, "resolving performs nothing");
}

/// A tiny deterministic generator: the same seed replays the same kill points.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// SIGKILL at 20 random points of mint → approve → forward → record, each on a fresh
/// operation. Whatever the point, the operation executes at most once; an operator settles
/// unknown outcomes from what the upstream saw, and the agent then gets a final answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_points_never_executes_twice() {
    let seed = std::env::var("POPPY_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2026_u64);
    let mut random = XorShift(seed);
    let redis = RedisServer::start();
    let upstream = Upstream::start();
    let mut gateway =
        with_admin(GatewayBuilder::new(&upstream.url()).store_url(&redis.url())).start();
    let (mut doubles, mut resolved_performed, mut resolved_not_performed) = (0, 0, 0);

    for round in 0..20u64 {
        let order = format!("o{round}");
        let path = format!("/orders/{order}/exchanges");
        let request = Request::exchange(&Session::signed_out("ses_random"), &order, "i1", "s1");
        let op = gateway.send(&request).await.operation();
        let approved = request.approve(&op);
        upstream.set_delay(Duration::from_millis(random.below(40)));
        let client = gateway.client();
        let sent = {
            let approved = approved.clone();
            tokio::spawn(async move { client.try_send(&approved).await })
        };
        // The kill point: a random moment of the flow, by design not an event.
        tokio::time::sleep(Duration::from_millis(random.below(60))).await;
        gateway.kill();
        let _ = sent.await;
        gateway.restart();

        let mut answer =
            retry_until_final(&gateway.client(), &approved, LEASE + Duration::from_secs(2)).await;
        if answer.status == 503 {
            // Unknown: settle it from what the upstream saw, as an operator would.
            let executed = upstream.count_for("POST", &path);
            let verdict = if executed == 0 {
                resolved_not_performed += 1;
                json!({"performed": false})
            } else {
                resolved_performed += 1;
                json!({"performed": true, "response": {"status": 201, "body": "{\"resolved\":true}"}})
            };
            let (status, body) = admin(
                &gateway,
                "POST",
                &format!("/operations/{}/resolve", op.operation_id),
                Some(verdict),
                Some(TOKEN),
            )
            .await;
            assert_eq!(status, 200, "round {round}: resolve: {body}");
            answer = retry_until_final(&gateway.client(), &approved, Duration::from_secs(5)).await;
        }
        answer.assert_status(201, &format!("round {round}: the final answer"));
        let executed = upstream.count_for("POST", &path);
        if executed > 1 {
            doubles += 1;
        }
        assert!(executed <= 1, "round {round}: executed {executed} times");
        assert_eq!(
            executed, 1,
            "round {round}: every approved operation ends performed exactly once"
        );
    }
    upstream.set_delay(Duration::ZERO);
    eprintln!(
        "seed {seed:#x}: 20 kill points, {doubles} double executions, {resolved_performed} resolved as performed, {resolved_not_performed} as not performed"
    );
    assert_eq!(doubles, 0);
}
