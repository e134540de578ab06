//! What the store can promise, checked and bounded (issue 11): the gateway warns about (or
//! refuses) a Redis that could forget claims, makes the operator choose about replica
//! acknowledgement, and `memory://` refuses new claims when full instead of growing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::{Gateway, GatewayBuilder, RedisServer, Request, Session, Stack, Store, Upstream};

/// Start the gateway binary on this config and expect it to refuse: its stderr.
fn refused_start(builder: GatewayBuilder) -> String {
    let config = builder.write();
    let output = std::process::Command::new(poppy_e2e::binaries::gateway())
        .arg("--config")
        .arg(&config.config)
        .env("POPPY_GATEWAY_KEYS", poppy_e2e::TEST_KEYS)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "must not start: {stderr}");
    stderr
}

/// The store's readiness signal (`/readyz` is the replica's own and ignores the store).
async fn readyz(gateway: &Gateway) -> u16 {
    gateway.admin_get("/readyz/store").await.status
}

/// The test's private redis-server runs with `--save "" --appendonly no`: the gateway says
/// loudly that a restart would forget claims, and says so again (once) when it changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_persistent_redis_is_reported() {
    let redis = RedisServer::start();
    let upstream = Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url())
        .store_url(&redis.url())
        .start();
    let log = gateway.log();
    assert!(
        log.contains("REDIS CAN FORGET CLAIMS") && log.contains("no persistence"),
        "the startup log warns: {log}"
    );
    let metrics = gateway.metrics().await;
    assert_eq!(
        metrics.get("poppy_store_durability_problems", &[]),
        Some(1.0)
    );
    assert_eq!(readyz(&gateway).await, 200, "ready, with a warning");
    assert_eq!(
        gateway.log().matches("no persistence").count(),
        1,
        "a probe repeats no warning"
    );

    redis
        .command(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .unwrap();
    assert_eq!(readyz(&gateway).await, 200);
    assert!(
        gateway.log().contains("maxmemory-policy allkeys-lru"),
        "eviction is reported: {}",
        gateway.log()
    );
    redis
        .command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .unwrap();
    redis
        .command(&["CONFIG", "SET", "appendonly", "yes"])
        .unwrap();
    assert_eq!(readyz(&gateway).await, 200);
    let metrics = gateway.metrics().await;
    assert_eq!(
        metrics.get("poppy_store_durability_problems", &[]),
        Some(0.0)
    );
    assert!(gateway.log().contains("the Redis store is durable now"));
}

/// `require_durable = true`: a non-persistent Redis is a startup error that says why; a
/// durable one starts, and `/readyz/store` turns 503 if it stops being durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_durable_refuses_a_redis_that_can_forget() {
    let redis = RedisServer::start();
    let upstream = Upstream::start();
    let strict = || {
        GatewayBuilder::new(&upstream.url())
            .store_url(&redis.url())
            .extra_config("require_durable = true")
    };
    let stderr = refused_start(strict());
    assert!(
        stderr.contains("require_durable") && stderr.contains("no persistence"),
        "{stderr}"
    );

    redis
        .command(&["CONFIG", "SET", "appendonly", "yes"])
        .unwrap();
    let gateway = strict().start();
    assert_eq!(readyz(&gateway).await, 200);
    redis
        .command(&["CONFIG", "SET", "appendonly", "no"])
        .unwrap();
    assert_eq!(readyz(&gateway).await, 503, "not durable any more");
}

/// A Redis with a replica and no `wait_replicas` chosen: refused, naming both choices.
/// `wait_replicas = 0` is the explicit opt-out; `1` makes claims wait for the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_need_an_explicit_choice() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    replica.wait_for_replication(&primary);
    let upstream = Upstream::start();
    let stderr = refused_start(GatewayBuilder::new(&upstream.url()).store_url(&primary.url()));
    assert!(
        stderr.contains("wait_replicas = 1") && stderr.contains("wait_replicas = 0"),
        "{stderr}"
    );
    let opted_out = GatewayBuilder::new(&upstream.url())
        .store_url(&primary.url())
        .extra_config("wait_replicas = 0")
        .start();
    assert_eq!(readyz(&opted_out).await, 200);
    let waiting = GatewayBuilder::new(&upstream.url())
        .store_url(&primary.url())
        .store_wait_replicas(1, "100ms")
        .start();
    let request = Request::exchange(&Session::signed_out("ses_replica"), "o1", "i1", "s1");
    let op = waiting.send(&request).await.operation();
    waiting
        .send(&request.approve(&op))
        .await
        .assert_status(201, "acknowledged by the replica");
}

/// `memory://` with `memory_max_bytes`: operations with 256 KiB answers are performed until
/// the cap, then new claims get `503 store_unavailable` (nothing forwarded) while every
/// performed operation still replays; the gateway's RSS stops growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_store_refuses_new_claims() {
    const ANSWER: usize = 256 * 1024;
    const CAP: usize = 8 * 1024 * 1024;
    let upstream = Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url())
        .extra_config(&format!("memory_max_bytes = {CAP}"))
        .start();
    let session = Session::signed_out("ses_full");
    let request = |i: usize| {
        Request::exchange(&session, &format!("o{i}"), "i1", "s1")
            .header("x-answer-bytes", &ANSWER.to_string())
    };
    let rss_before = gateway.rss_kib();
    let mut performed = Vec::new();
    let mut refused = None;
    for i in 0..100 {
        let op = gateway.send(&request(i)).await.operation();
        let answer = gateway.send(&request(i).approve(&op)).await;
        if answer.status == 503 {
            answer.assert_unavailable("store_unavailable", "the store is full");
            refused = Some(i);
            break;
        }
        answer.assert_status(201, "performed while there is room");
        performed.push((request(i).approve(&op), answer));
    }
    let first_refused = refused.expect("the cap must be reached");
    let fits = CAP / ANSWER;
    assert!(
        (fits - 2..=fits).contains(&performed.len()),
        "about {fits} answers of {ANSWER} bytes fit in {CAP}: {}",
        performed.len()
    );
    assert_eq!(
        upstream.count(),
        performed.len(),
        "the refused one was not forwarded"
    );
    let rss_full = gateway.rss_kib();

    for i in first_refused..first_refused + 20 {
        let op = gateway.send(&request(i)).await.operation();
        gateway
            .send(&request(i).approve(&op))
            .await
            .assert_unavailable("store_unavailable", "still full");
    }
    for (approved, first) in &performed {
        gateway
            .send(approved)
            .await
            .assert_replay_of(first, "never evicted");
    }
    let rss_after = gateway.rss_kib();
    assert_eq!(upstream.count(), performed.len(), "nothing more forwarded");
    let metrics = gateway.metrics().await;
    assert!(metrics.value("poppy_store_full_total", &[]) >= 21.0);
    let per_record = (rss_full.saturating_sub(rss_before)) as f64 / performed.len() as f64;
    eprintln!(
        "memory:// RSS: {rss_before} KiB empty, {rss_full} KiB with {} records of {} KiB ({per_record:.0} KiB each), {rss_after} KiB after 20 refusals and {} replays",
        performed.len(),
        ANSWER / 1024,
        performed.len()
    );
    assert!(
        rss_after <= rss_full + 4 * 1024,
        "refusals and replays hold nothing more: {rss_full} → {rss_after} KiB"
    );
}

/// Redis restarts empty (no persistence) while the upstream holds an approved request: when
/// the answer comes, its record is gone, and the answer is written anyway, so a retry of the
/// same approval replays it instead of executing the operation a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_recorded_after_redis_restarted_empty() {
    const TOKEN: &str = "test-admin-token-0123456789";
    let mut stack = Stack::start_with(Store::Redis, |b| b.env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN));
    let request = Request::exchange(&Session::signed_out("ses_empty"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    let in_flight = stack.send_held(&approved, 1).await;
    stack.redis().restart();
    stack.redis().ping();
    stack.upstream.release();
    let first = in_flight.await.unwrap();
    first.assert_status(201, "the answer is delivered");

    // Recorded at once, or by the background retry once the connection is back.
    let admin = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!(
        "{}/operations/{}",
        stack.gateway.admin_url(),
        op.operation_id
    );
    let recorded = poppy_e2e::wait::until_some(Duration::from_secs(15), || async {
        let response = admin.get(&url).bearer_auth(TOKEN).send().await.ok()?;
        let body: serde_json::Value = response.json().await.ok()?;
        (body["state"] == "performed").then_some(body)
    })
    .await;
    assert!(
        recorded.is_some(),
        "the answer is written although its record vanished"
    );
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry replays");
    stack.assert_executions(1, "never twice");
}

/// Redis restarts: the gateway's next requests are served, none answered `503
/// store_unavailable` for a connection Redis had closed (each runtime's dead connection is
/// replaced within the request that finds it). Measured: Redis back → the first answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_redis_fails_no_request() {
    let mut stack = Stack::start(Store::Redis);
    let mint = |n: usize| {
        Request::exchange(
            &Session::signed_out(&format!("ses_restart_{n}")),
            "o1",
            &format!("i{n}"),
            "s1",
        )
    };
    // Every gateway thread has used its connection.
    for n in 0..8 {
        stack
            .gateway
            .send(&mint(n))
            .await
            .assert_status(403, "held");
    }
    stack.redis().restart();
    assert!(stack.redis().ping(), "redis-server is back");
    let back = std::time::Instant::now();
    for n in 8..16 {
        stack
            .gateway
            .send(&mint(n))
            .await
            .assert_status(403, "held at once after Redis restarted, never 503");
        if n == 8 {
            eprintln!("redis back → first answer: {:?}", back.elapsed());
        }
    }
    stack.assert_executions(0, "nothing approved");
}
