//! Config at run time: policies reload on SIGHUP (a broken reload keeps the running ones), and
//! any gateway.toml key can be set from the environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use poppy_e2e::metrics::Metrics;
use poppy_e2e::policies::{assert_return_held, return_request, returns_policy};
use poppy_e2e::{GatewayBuilder, Request, Session, Stack, Store, TEST_KEYS, binaries, wait};

const RELOAD_DEADLINE: Duration = Duration::from_secs(10);
/// The test's `shutdown_grace` (1 s) and plenty.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// Send SIGHUP and wait until `/metrics` shows the reload with `result` counted once more.
async fn hang_up(stack: &Stack, result: &str) -> Metrics {
    let reloads = |m: &Metrics| m.value("poppy_config_reloads_total", &[("result", result)]);
    let before = reloads(&stack.gateway.metrics().await);
    stack.gateway.signal("HUP");
    wait::until_some(RELOAD_DEADLINE, || async {
        let now = stack.gateway.metrics().await;
        (reloads(&now) > before).then_some(now)
    })
    .await
    .unwrap_or_else(|| panic!("no {result} reload counted within {RELOAD_DEADLINE:?} of SIGHUP"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_policies_and_a_broken_reload_keeps_the_running_ones() {
    // A short grace, for the SIGTERM at the end (set through the environment, too).
    let mut stack = Stack::start_with(Store::Memory, |builder| {
        builder.env("POPPY_GATEWAY__SERVER__SHUTDOWN_GRACE", "1s")
    });
    let session = Session::signed_out("ses_reload");
    let exchange = Request::exchange(&session, "o1", "i1", "s1");

    // Before: /returns is not a policy route, so it passes through.
    stack
        .gateway
        .send(&return_request(&session))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o9/returns");

    // A policy file that fails validation: its summary leaves out a term.
    let file = stack.gateway.policies_dir().join("returns.toml");
    std::fs::write(
        &file,
        returns_policy(r#"summary = "Return order {order_id}.""#),
    )
    .unwrap();
    let after_broken = hang_up(&stack, "failure").await;
    assert_eq!(
        after_broken.value("poppy_config_reloads_total", &[("result", "success")]),
        0.0
    );
    assert_eq!(
        after_broken.value("poppy_config_last_reload_successful", &[]),
        0.0
    );
    assert_eq!(after_broken.value("poppy_policies_loaded", &[]), 3.0);
    // The log says why, with the file, line and column.
    let log = stack.gateway.log();
    assert!(
        log.contains("returns.toml:8:11: operation `returns`: summary leaves out term `reason`"),
        "the failed reload must be logged with file:line:column:\n{log}"
    );
    assert!(log.contains("the running policies are kept"), "{log}");
    // The running policies still serve: exchange is held, returns still passes through.
    stack.gateway.send(&exchange).await.operation();
    stack
        .gateway
        .send(&return_request(&session))
        .await
        .assert_upstream_answer(2, "POST", "/orders/o9/returns");

    // Fixed, and a setting that only a restart applies changed too.
    std::fs::write(
        &file,
        returns_policy(r#"summary = "Return order {order_id} ({reason}).""#),
    )
    .unwrap();
    let config = stack.gateway.config_path();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("timeout = \"30s\"", "timeout = \"31s\""),
    )
    .unwrap();
    let after_fixed = hang_up(&stack, "success").await;
    assert_eq!(
        after_fixed.value("poppy_config_reloads_total", &[("result", "failure")]),
        1.0
    );
    assert_eq!(
        after_fixed.value("poppy_config_last_reload_successful", &[]),
        1.0
    );
    assert_eq!(after_fixed.value("poppy_policies_loaded", &[]), 4.0);
    assert_eq!(
        after_fixed.operations("returns", "held"),
        0.0,
        "the new policy's series exist from the reload on:\n{}",
        after_fixed.text
    );

    // The new route is held now; nothing more reaches the upstream.
    assert_return_held(&stack.gateway, &session).await;
    stack.gateway.send(&exchange).await.operation();
    stack.assert_executions(2, "the two passthrough requests before the reload");
    let log = stack.gateway.log();
    assert!(log.contains("policies reloaded"), "{log}");
    assert!(
        log.contains("[upstream]") && log.contains("restart the gateway"),
        "a changed restart-only setting is named:\n{log}"
    );

    // SIGHUP is ours, but SIGTERM is still pingora's: a graceful shutdown.
    assert!(stack.gateway.is_running());
    stack.gateway.signal("TERM");
    let stopped = wait::until(SHUTDOWN_DEADLINE, || !stack.gateway.is_running()).await;
    assert!(
        stopped,
        "SIGTERM must still stop the gateway within {SHUTDOWN_DEADLINE:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_variable_sets_a_config_key() {
    let stack = Stack::start_with(Store::Memory, |builder| {
        builder.env("POPPY_GATEWAY__SERVER__MAX_BODY_BYTES", "10")
    });
    let session = Session::signed_out("ses_env");
    stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i1", "s1"))
        .await
        .assert_error(
            413,
            "body_too_large",
            "a body over the 10 bytes set by the environment",
        );
    stack.assert_executions(0, "a refused body");
}

#[test]
fn an_unknown_key_from_the_environment_is_an_error_naming_the_variable() {
    let dir = GatewayBuilder::new("http://127.0.0.1:9").write();
    let output = Command::new(binaries::gateway())
        .arg("check")
        .arg("--config")
        .arg(&dir.config)
        .env("POPPY_GATEWAY_KEYS", TEST_KEYS)
        .env("POPPY_GATEWAY__SERVER__MAX_BODY_BYTE", "10")
        .output()
        .expect("run poppy-gateway check");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "check must fail:\n{stderr}");
    assert!(
        stderr.contains(
            "environment variable POPPY_GATEWAY__SERVER__MAX_BODY_BYTE: unknown field `max_body_byte`"
        ),
        "{stderr}"
    );
}
