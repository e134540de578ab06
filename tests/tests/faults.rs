//! At most once when things break: a graceful shutdown with a forward in flight, an upstream
//! that refuses connections, answers that prove nothing was performed, and a port already
//! taken at startup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::ports::refusing_port;
use poppy_e2e::{
    GatewayBuilder, RedisServer, Request, Session, Stack, Store, Upstream, store_tests,
};

/// SIGTERM while an approved request is held at the upstream: the gateway waits for the
/// answer, records it, delivers it, and only then exits.
async fn sigterm_finishes_the_forward_in_flight(store: Store) {
    let mut stack = Stack::start(store);
    let request = Request::exchange(&Session::signed_out("ses_term"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    let in_flight = stack.send_held(&approved, 1).await;
    stack.gateway.terminate();

    // The gateway is draining, not gone: it waits for the forward it started.
    assert!(
        stack
            .gateway
            .wait_for_exit(Duration::from_millis(500))
            .await
            .is_none(),
        "the gateway exited with an approved forward in flight"
    );
    stack.upstream.release();
    let answer = in_flight.await.expect("the in-flight request task");
    answer.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    let status = stack
        .gateway
        .wait_for_exit(Duration::from_secs(15))
        .await
        .expect("the gateway exits once its forward is done");
    assert!(
        status.success(),
        "a graceful shutdown exits 0, not {status}"
    );

    if store == Store::Redis {
        // The answer was recorded before the exit: a new process replays it.
        stack.gateway.restart();
        let replay = stack.gateway.send(&approved).await;
        replay.assert_replay_of(&answer, "a retry after a graceful restart");
    }
    stack.assert_executions(1, "an approval forwarded across a graceful shutdown");
}

/// An idle gateway stops promptly on SIGTERM.
async fn sigterm_without_forwards_exits_promptly(store: Store) {
    let mut stack = Stack::start(store);
    stack.gateway.terminate();
    let status = stack
        .gateway
        .wait_for_exit(Duration::from_secs(10))
        .await
        .expect("an idle gateway exits within 10 s of SIGTERM");
    assert!(status.success(), "exit status {status}");
}

/// Nothing listens upstream: the request was never sent, so the claim is released and the
/// very same approval works once the upstream is up.
async fn refused_connection_releases_the_claim(store: Store) {
    // Held, refusing, until the upstream starts on it: no other test's server can take it.
    let (port, refusing) = refusing_port();
    let upstream_addr = format!("127.0.0.1:{port}");
    let redis = (store == Store::Redis).then(RedisServer::start);
    let mut builder = GatewayBuilder::new(&format!("http://{upstream_addr}"));
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    let gateway = builder.start();
    let request = Request::exchange(&Session::signed_out("ses_refused"), "o1", "i1", "s1");
    let op = gateway.send(&request).await.operation();
    let approved = request.approve(&op);
    for what in [
        "an approval whose upstream refuses connections",
        "the same approval again",
    ] {
        gateway
            .send(&approved)
            .await
            .assert_unavailable("upstream_unavailable", what);
    }
    // Counted as its own outcome, not with the upstream's 401/429 answers ("released").
    let metrics = gateway.metrics().await;
    assert_eq!(metrics.operations("exchange", "upstream_unavailable"), 2.0);
    assert_eq!(metrics.operations("exchange", "released"), 0.0);

    drop(refusing);
    let upstream = Upstream::start_on(upstream_addr.parse().unwrap());
    let first = gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry after it was performed");
    assert_eq!(
        upstream.count(),
        1,
        "performed exactly once, after the upstream came up"
    );
}

/// A policy whose route lets the counting upstream answer any status.
const STATUS_POLICY: &str = r#"
[[operation]]
name = "status"
method = "POST"
path = "/status/{code}"
id_prefix = "sts"
expires_in = "15m"
same_action = ["code"]
summary = "Ask for status {code}."
[operation.terms]
code = { path = "code" }
"#;

/// 429 (a default release status) proves nothing was performed: the answer is delivered but
/// not recorded, and the same approval goes upstream again. Any other answer is recorded.
async fn release_statuses_are_delivered_but_not_recorded(store: Store) {
    let stack = Stack::start_with(store, |b| b.policy("status.toml", STATUS_POLICY));
    let session = Session::signed_out("ses_status");

    let limited = Request::agent("POST", "/status/429", &session);
    let op = stack.gateway.send(&limited).await.operation();
    let approved = limited.approve(&op);
    stack
        .gateway
        .send(&approved)
        .await
        .assert_status(429, "the upstream's 429, delivered");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_status(429, "the same approval, forwarded again");
    assert_eq!(
        stack.upstream.count_for("POST", "/status/429"),
        2,
        "a released claim is forwarded again on retry"
    );
    let metrics = stack.gateway.metrics().await;
    assert_eq!(metrics.operations("status", "released"), 2.0);
    assert_eq!(metrics.operations("status", "upstream_unavailable"), 0.0);

    let failed = Request::agent("POST", "/status/500", &session);
    let op = stack.gateway.send(&failed).await.operation();
    let approved = failed.approve(&op);
    let first = stack.gateway.send(&approved).await;
    first.assert_status(500, "the upstream's 500");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a 500 is an answer: replayed");
    assert_eq!(
        stack.upstream.count_for("POST", "/status/500"),
        1,
        "a recorded failure is never forwarded again"
    );
}

store_tests!(
    sigterm_finishes_the_forward_in_flight,
    sigterm_without_forwards_exits_promptly,
    refused_connection_releases_the_claim,
    release_statuses_are_delivered_but_not_recorded,
);

/// A second gateway on a taken port exits with a clear error instead of looking healthy.
#[test]
fn a_taken_listen_port_is_a_startup_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let upstream = Upstream::start();
    let config = GatewayBuilder::new(&upstream.url()).write();
    let text = std::fs::read_to_string(&config.config).unwrap().replace(
        &format!("127.0.0.1:{}", config.listen_port),
        &format!("127.0.0.1:{port}"),
    );
    std::fs::write(&config.config, text).unwrap();
    let output = std::process::Command::new(poppy_e2e::binaries::gateway())
        .arg("--config")
        .arg(&config.config)
        .env("POPPY_GATEWAY_KEYS", poppy_e2e::TEST_KEYS)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the gateway must not start on a taken port"
    );
    assert!(
        stderr.contains("server.listen") && stderr.contains(&port.to_string()),
        "the error names the key and the address: {stderr}"
    );
}
