//! Approval receipts (issue 15): a JSON Lines chain written on every performed operation and
//! every operator resolution, read back by `GET /operations/{id}/receipt`, checked by
//! `poppy-gateway audit verify FILE`, which names the first broken link.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use poppy_e2e::binaries;
use poppy_e2e::run::run_binary;
use poppy_e2e::{Gateway, Request, Session, Stack, Store, store_tests};
use serde_json::{Value, json};

const TOKEN: &str = "test-admin-token-0123456789";

fn stack_with_receipts(store: Store, file: &Path) -> Stack {
    let table = format!("[receipts]\npath = \"{}\"", file.display());
    Stack::start_with(store, |b| {
        b.extra_config(&table)
            .env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN)
    })
}

fn audit(file: &Path) -> poppy_e2e::Run {
    run_binary(
        &binaries::gateway(),
        &["audit", "verify", file.to_str().unwrap()],
        "",
        &[],
        Duration::from_secs(30),
    )
}

async fn admin(gateway: &Gateway, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
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
    request = request.bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("admin request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("admin answers JSON"))
}

fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(file: &Path, lines: &[String]) {
    std::fs::write(
        file,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
}

/// 12 approvals performed at once write one intact chain of 12 receipts, each with the terms,
/// the approver and a digest of the answer; an edited, removed or reordered line is caught at
/// the right line.
async fn concurrent_approvals_write_one_chain(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("receipts.jsonl");
    let stack = stack_with_receipts(store, &file);
    let session = Session::signed_in("ses_receipts", "acct_1");
    let mut approved = Vec::new();
    for n in 0..12 {
        let request = Request::exchange(&session, &format!("o{n}"), "i1", "s1");
        let op = stack.gateway.send(&request).await.operation();
        approved.push((request.approve(&op), op));
    }
    let sends = approved.iter().map(|(request, _)| {
        let client = stack.gateway.client();
        let request = request.clone();
        tokio::spawn(async move { client.send(&request).await })
    });
    for answer in futures_util::future::join_all(sends).await {
        answer.unwrap().assert_status(201, "an approval");
    }
    stack.assert_executions(12, "twelve approvals");

    let run = audit(&file);
    run.assert_code(0, "an intact chain");
    assert!(run.stdout.contains("12 receipts"), "{}", run.describe());

    let (_, op) = &approved[3];
    let (status, body) = admin(
        &stack.gateway,
        "GET",
        &format!("/operations/{}/receipt", op.operation_id),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let receipt = &body["receipt"];
    assert_eq!(receipt["kind"], "performed");
    assert_eq!(receipt["operation_id"], op.operation_id.as_str());
    assert_eq!(receipt["revision"], op.revision.as_str());
    assert_eq!(receipt["summary"], op.summary.as_str());
    assert_eq!(receipt["terms"]["order_id"], "o3", "{receipt}");
    assert_eq!(receipt["agent"], "agent_1");
    assert_eq!(receipt["user"], "user_1");
    assert_eq!(receipt["session"], "ses_receipts");
    assert_eq!(receipt["identity"], "unverified", "verify = \"off\"");
    assert_eq!(receipt["upstream_status"], 201);
    assert_eq!(receipt["answer_sha256"].as_str().map(str::len), Some(64));
    assert!(receipt["approved_at"].is_string() && receipt["performed_at"].is_string());
    let (status, _) = admin(
        &stack.gateway,
        "GET",
        "/operations/exc_0000000000000000000000000000/receipt",
        None,
    )
    .await;
    assert!(
        status == 404 || status == 400,
        "an unknown operation: {status}"
    );

    // A replay writes nothing more.
    stack.gateway.send(&approved[0].0).await;
    assert_eq!(lines(&file).len(), 12);

    let original = lines(&file);
    let mut edited = original.clone();
    edited[4] = edited[4].replace("\"upstream_status\":201", "\"upstream_status\":500");
    assert_ne!(edited[4], original[4]);
    write_lines(&file, &edited);
    let run = audit(&file);
    run.assert_code(1, "an edited line");
    assert!(run.stdout.contains("line 6"), "{}", run.describe());

    let mut removed = original.clone();
    removed.remove(7);
    write_lines(&file, &removed);
    let run = audit(&file);
    run.assert_code(1, "a removed line");
    assert!(run.stdout.contains("line 8"), "{}", run.describe());

    let mut reordered = original.clone();
    reordered.swap(2, 9);
    write_lines(&file, &reordered);
    let run = audit(&file);
    run.assert_code(1, "reordered lines");
    assert!(run.stdout.contains("line 3"), "{}", run.describe());

    write_lines(&file, &original[1..]);
    audit(&file).assert_code(1, "the first line removed");
    write_lines(&file, &original);
    audit(&file).assert_code(0, "restored");
}

/// An operator's resolution (of an outcome unknown: the forward timed out and its lease ran
/// out) writes a receipt, in the same chain.
async fn operator_resolutions_write_receipts(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("receipts.jsonl");
    let table = format!("[receipts]\npath = \"{}\"", file.display());
    // connect_timeout 200 ms + timeout 500 ms + 1 s: the claim's lease.
    let stack = Stack::start_with(store, |b| {
        b.extra_config(&table)
            .env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN)
            .upstream_connect_timeout("200ms")
            .upstream_timeout("500ms")
    });
    let request = Request::exchange(&Session::signed_out("ses_resolve"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    let in_flight = stack.try_send_held(&approved, 1).await;
    let state = format!("/operations/{}", op.operation_id);
    let unknown = poppy_e2e::wait::until_some(Duration::from_secs(10), || async {
        let (_, body) = admin(&stack.gateway, "GET", &state, None).await;
        (body["state"] == "unknown").then_some(body)
    })
    .await;
    assert!(unknown.is_some(), "the forward's outcome turned unknown");
    let recorded = json!({"status": 201, "headers": [["content-type", "application/json"]], "body": "{\"resolved\":true}"});
    let (status, body) = admin(
        &stack.gateway,
        "POST",
        &format!("/operations/{}/resolve", op.operation_id),
        Some(json!({"performed": true, "response": recorded})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    stack.upstream.release();
    let _ = in_flight.await;

    let (status, body) = admin(
        &stack.gateway,
        "GET",
        &format!("/operations/{}/receipt", op.operation_id),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let receipts = body["receipts"].as_array().unwrap();
    assert_eq!(receipts.len(), 1, "the resolution only: {body}");
    assert_eq!(receipts[0]["kind"], "resolved_performed");
    assert_eq!(receipts[0]["revision"], op.revision.as_str());
    assert_eq!(receipts[0]["upstream_status"], 201);
    audit(&file).assert_code(0, "a chain with a resolution");
}

store_tests!(
    concurrent_approvals_write_one_chain,
    operator_resolutions_write_receipts,
);
