//! What each probe tells an orchestrator (docs/operations.md, "Probes"): `poppy-gateway health`
//! and `/healthz` say the process is up, whatever was edited since it started; `/readyz` says
//! this replica takes new traffic (503 from the stop signal on); `/readyz/store` says the
//! store answers, without taking the replica out of rotation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};
use std::time::Duration;

use poppy_e2e::gateway::http_client;
use poppy_e2e::{Request, Session, Stack, Store, binaries, store_tests, wait};

fn health(config: &std::path::Path) -> Output {
    Command::new(binaries::gateway())
        .arg("health")
        .env("POPPY_GATEWAY_CONFIG", config)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// An operator breaks a policy file and a section of gateway.toml on a running gateway. The
/// gateway keeps serving what it loaded (a reload would be refused), so its health check must
/// keep passing: a failing one would make Swarm, ECS or Nomad replace a working gateway with
/// one that cannot start. `check` still reports the edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_passes_a_running_gateway_after_a_bad_edit() {
    let stack = Stack::start(Store::Memory);
    let config = stack.gateway.config_path();
    let output = health(&config);
    assert!(output.status.success(), "{}", text(&output));

    for entry in std::fs::read_dir(stack.gateway.policies_dir()).unwrap() {
        std::fs::write(entry.unwrap().path(), "[[operation]\nthis is not toml").unwrap();
    }
    let mut edited = std::fs::read_to_string(&config).unwrap();
    edited.push_str("\n[no_such_section]\nkey = 1\n");
    std::fs::write(&config, edited).unwrap();

    let checked = Command::new(binaries::gateway())
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        !checked.status.success(),
        "check must still report the edit"
    );

    let output = health(&config);
    assert!(
        output.status.success(),
        "health failed a running gateway after a bad edit:\n{}",
        text(&output)
    );
    // And the gateway does serve its old policies.
    stack
        .gateway
        .send(&Request::exchange(
            &Session::signed_out("ses_h"),
            "o1",
            "i1",
            "s1",
        ))
        .await
        .operation();
    stack.assert_executions(0, "a held request");
}

/// `health` still fails when the gateway is gone, and names a broken `[admin]` table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_fails_when_the_gateway_is_gone_or_admin_is_unreadable() {
    let mut stack = Stack::start(Store::Memory);
    let config = stack.gateway.config_path();
    stack.gateway.kill();
    let output = health(&config);
    assert!(!output.status.success());
    assert!(
        text(&output).contains("unhealthy: GET http://"),
        "{}",
        text(&output)
    );

    let edited = std::fs::read_to_string(&config)
        .unwrap()
        .replace("[admin]", "[admin]\nport = 1");
    std::fs::write(&config, edited).unwrap();
    let output = health(&config);
    assert!(!output.status.success());
    assert!(text(&output).contains("port"), "{}", text(&output));
}

/// From SIGTERM on, `/readyz` answers 503 (load balancers stop sending new requests) while the
/// approved forward in flight finishes and is recorded; `/healthz` stays 200 (the process is
/// alive: restarting it would cut the forward).
async fn readyz_is_503_from_the_stop_signal_on(store: Store) {
    let mut stack = Stack::start_with(store, |b| {
        b.env("POPPY_GATEWAY__SERVER__SHUTDOWN_GRACE", "20s")
    });
    stack
        .gateway
        .admin_get("/readyz")
        .await
        .assert_status(200, "/readyz before the stop signal");
    let request = Request::exchange(&Session::signed_out("ses_drain"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    stack.upstream.hold();
    let url = format!("{}/orders/o1/exchanges", stack.gateway.base_url());
    let in_flight = tokio::spawn(async move {
        let mut builder = http_client(Duration::from_secs(30)).post(url);
        for (name, value) in approved.wire_headers() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder
            .body(approved.body.clone())
            .send()
            .await
            .ok()
            .map(|a| a.status().as_u16())
    });
    stack
        .upstream
        .wait_for_count(1, Duration::from_secs(10))
        .await;
    stack.gateway.terminate();

    let draining = wait::until_some(Duration::from_secs(10), || async {
        let answer = stack.gateway.admin_get("/readyz").await;
        (answer.status == 503).then(|| answer.text())
    })
    .await;
    let body = draining.expect("/readyz must answer 503 once SIGTERM arrived");
    assert!(body.contains("draining"), "{body}");
    stack
        .gateway
        .admin_get("/healthz")
        .await
        .assert_status(200, "/healthz while draining");

    stack.upstream.release();
    assert_eq!(in_flight.await.unwrap(), Some(201), "the forward in flight");
    stack.assert_executions(1, "the approved forward, finished while draining");
}

store_tests!(readyz_is_503_from_the_stop_signal_on);

/// Redis down: this replica stays ready (passthrough is served; approvals get 503
/// `store_unavailable` with `Retry-After`), and `/readyz/store` says the store is not, with
/// the reason, for an operator who chooses to gate on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_keeps_the_replica_ready() {
    let mut stack = Stack::start(Store::Redis);
    stack
        .gateway
        .admin_get("/readyz/store")
        .await
        .assert_status(200, "/readyz/store with Redis up");
    stack.redis().stop();
    let reason = wait::until_some(Duration::from_secs(10), || async {
        let answer = stack.gateway.admin_get("/readyz/store").await;
        (answer.status == 503).then(|| answer.text())
    })
    .await
    .expect("/readyz/store must answer 503 while Redis is down");
    assert!(reason.starts_with("store not ready: "), "{reason}");
    stack
        .gateway
        .admin_get("/readyz")
        .await
        .assert_status(200, "/readyz while only the store is down");
    stack
        .gateway
        .send(&Request::plain("GET", "/orders/o1"))
        .await
        .assert_upstream_answer(1, "GET", "/orders/o1");
}
