//! Reload without a shell (issue 39): `POST /reload` on the admin listener, and the
//! `poppy-gateway reload` subcommand that sends it, run the SIGHUP reload. A policy added
//! after start is served after it; a bad edit answers its problems and keeps the running
//! policies; without the admin token nothing reloads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use poppy_e2e::policies::{assert_return_held, return_request, returns_policy};
use poppy_e2e::{Session, Stack, Store, binaries, store_tests};
use serde_json::Value;

const TOKEN: &str = "reload-admin-token";

/// `POST /reload` with `authorization` (if any): the status and the JSON body.
async fn post_reload(stack: &Stack, authorization: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().post(format!("{}/reload", stack.gateway.admin_url()));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, body)
}

/// `poppy-gateway reload` against the stack's config, with `token` in the environment.
fn reload_command(stack: &Stack, token: Option<&str>) -> Output {
    let mut command = Command::new(binaries::gateway());
    command
        .arg("reload")
        .env("POPPY_GATEWAY_CONFIG", stack.gateway.config_path())
        .env_remove("POPPY_GATEWAY_ADMIN_TOKEN")
        .env("RUST_LOG", "warn");
    if let Some(token) = token {
        command.env("POPPY_GATEWAY_ADMIN_TOKEN", token);
    }
    command.output().unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

async fn the_reload_endpoint_applies_new_policies_and_keeps_them_on_a_bad_edit(store: Store) {
    let stack = Stack::start_with(store, |b| b.env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN));
    let session = Session::signed_out("ses_reload_endpoint");
    let file = stack.gateway.policies_dir().join("returns.toml");
    std::fs::write(
        &file,
        returns_policy(r#"summary = "Return order {order_id} ({reason}).""#),
    )
    .unwrap();

    // No token, a wrong token, a GET: nothing reloads, the route still passes through.
    let (status, body) = post_reload(&stack, None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    let (status, _) = post_reload(&stack, Some("Bearer wrong")).await;
    assert_eq!(status, 401);
    let output = reload_command(&stack, None);
    assert!(!output.status.success());
    assert!(
        text(&output).contains("set POPPY_GATEWAY_ADMIN_TOKEN"),
        "{}",
        text(&output)
    );
    let output = reload_command(&stack, Some("wrong"));
    assert!(!output.status.success());
    assert!(text(&output).contains("401"), "{}", text(&output));
    stack
        .gateway
        .send(&return_request(&session))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o9/returns");

    // The subcommand reloads (what `kubectl exec ... -- poppy-gateway reload` runs): the
    // policy added after start is in force.
    let output = reload_command(&stack, Some(TOKEN));
    assert!(output.status.success(), "{}", text(&output));
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["reloaded"], true, "{answer}");
    assert!(
        answer["policies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "returns"),
        "{answer}"
    );
    assert_return_held(&stack.gateway, &session).await;

    // A bad edit (the summary leaves out a term): 422 with the problem, policies kept.
    std::fs::write(
        &file,
        returns_policy(r#"summary = "Return order {order_id}.""#),
    )
    .unwrap();
    let (status, body) = post_reload(&stack, Some(&format!("Bearer {TOKEN}"))).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"], "reload_failed", "{body}");
    let problems = body["problems"].to_string();
    assert!(
        problems.contains("returns.toml") && problems.contains("reason"),
        "{body}"
    );
    let output = reload_command(&stack, Some(TOKEN));
    assert!(!output.status.success());
    assert!(text(&output).contains("returns.toml"), "{}", text(&output));
    let again = stack
        .gateway
        .send(&return_request(&session))
        .await
        .operation();
    assert_eq!(again.summary, "Return order o9 (too small).");

    let metrics = stack.gateway.metrics().await;
    assert_eq!(
        metrics.value("poppy_config_reloads_total", &[("result", "success")]),
        1.0
    );
    assert_eq!(
        metrics.value("poppy_config_reloads_total", &[("result", "failure")]),
        2.0
    );
    assert_eq!(
        metrics.value("poppy_config_last_reload_successful", &[]),
        0.0
    );
    // Only the passthrough before the reload reached the upstream.
    stack.assert_executions(1, "the passthrough request before the reload");
}

store_tests!(the_reload_endpoint_applies_new_policies_and_keeps_them_on_a_bad_edit);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_admin_token_the_endpoint_is_off() {
    let stack = Stack::start_with(Store::Memory, |b| b.env("POPPY_GATEWAY_ADMIN_TOKEN", ""));
    let (status, body) = post_reload(&stack, Some("Bearer ")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("admin_api_disabled"))
    );
}
