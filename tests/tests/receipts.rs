//! Approval receipts (issues 15, 25): a JSON Lines chain written on every performed operation
//! and every operator resolution, read back by `GET /operations/{id}/receipt`, checked by
//! `poppy-gateway audit verify FILE [--public-key PEM]`, which names the first bad line. With
//! `[receipts] signing_key` every line is signed (Ed25519), so a forged receipt whose later links
//! were recomputed is caught; a line torn by a crash is sealed when the gateway restarts; each
//! replica writes its own chain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use poppy_e2e::binaries;
use poppy_e2e::openssl::ed25519_key;
use poppy_e2e::run::run_binary;
use poppy_e2e::{Gateway, GatewayBuilder, Request, Session, Stack, Store, TEST_KEYS, store_tests};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const TOKEN: &str = "test-admin-token-0123456789";

fn stack_with_receipts(store: Store, file: &Path) -> Stack {
    let table = format!("[receipts]\npath = \"{}\"", file.display());
    Stack::start_with(store, |b| {
        b.extra_config(&table)
            .env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN)
    })
}

fn audit(file: &Path) -> poppy_e2e::Run {
    audit_with(file, &[])
}

/// `audit verify FILE --public-key K…`.
fn audit_with(file: &Path, keys: &[&Path]) -> poppy_e2e::Run {
    let mut args = vec!["audit", "verify", file.to_str().unwrap()];
    for key in keys {
        args.extend(["--public-key", key.to_str().unwrap()]);
    }
    run_binary(
        &binaries::gateway(),
        &args,
        "",
        &[],
        Duration::from_secs(30),
    )
}

fn signed_table(file: &Path, key: &Path, replica: Option<&str>) -> String {
    let mut table = format!(
        "[receipts]\npath = \"{}\"\nsigning_key = \"{}\"\n",
        file.display(),
        key.display()
    );
    if let Some(replica) = replica {
        table.push_str(&format!("replica = \"{replica}\"\n"));
    }
    table
}

/// Approve and perform one exchange of order `order` on `gateway`; its operation id.
async fn perform(gateway: &Gateway, session: &Session, order: &str) -> String {
    let request = Request::exchange(session, order, "i1", "s1");
    let op = gateway.send(&request).await.operation();
    gateway
        .send(&request.approve(&op))
        .await
        .assert_status(201, "an approval");
    op.operation_id
}

/// `poppy-gateway check` of a running gateway's config.
fn check(gateway: &Gateway) -> poppy_e2e::Run {
    let run = run_binary(
        &binaries::gateway(),
        &["check", "--config", gateway.config_path().to_str().unwrap()],
        "",
        &[],
        Duration::from_secs(30),
    );
    run.assert_code(0, "check");
    run
}

fn sha256_hex(line: &str) -> String {
    Sha256::digest(line.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

/// The file's lines (a torn one, cut inside a UTF-8 character, read lossily).
fn lines(file: &Path) -> Vec<String> {
    String::from_utf8_lossy(&std::fs::read(file).unwrap())
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
    assert!(
        stack.gateway.log().contains("receipts are not signed"),
        "{}",
        stack.gateway.log()
    );
    let run = check(&stack.gateway);
    assert!(run.stdout.contains("NOT signed"), "{}", run.describe());
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

/// A signed chain verifies with the operator's public key (PEM, or the JWKS `audit public-key`
/// prints). A forger without the key edits a receipt's terms and user and recomputes every later
/// link: the links alone still hold (and `audit verify` without a key says so, and that it did
/// not check signatures), the key catches it at that very line. Another key is refused by kid.
async fn a_signed_chain_catches_a_relinked_forgery(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("receipts.jsonl");
    let (key, public) = ed25519_key(dir.path(), "receipts");
    let stack = Stack::start_with(store, |b| {
        b.extra_config(&signed_table(&file, &key, None))
            .env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN)
    });
    assert!(
        stack.gateway.log().contains("receipts are signed"),
        "{}",
        stack.gateway.log()
    );
    let session = Session::signed_in("ses_signed", "acct_1");
    for n in 0..6 {
        perform(&stack.gateway, &session, &format!("o{n}")).await;
    }
    let original = lines(&file);
    assert_eq!(original.len(), 6);
    let first: Value = serde_json::from_str(&original[0]).unwrap();
    let kid = first["kid"].as_str().unwrap().to_owned();
    assert_eq!(first["sig"].as_str().map(str::len), Some(86), "{first}");

    let check = check(&stack.gateway);
    assert!(
        check.stdout.contains(&format!("signed (key {kid})")),
        "{}",
        check.describe()
    );

    let run = audit_with(&file, &[&public]);
    run.assert_code(0, "a signed chain, with its key");
    assert!(
        run.stdout.contains("6 receipts") && run.stdout.contains("6 signatures verified"),
        "{}",
        run.describe()
    );
    assert!(run.stdout.contains(&kid), "{}", run.describe());
    let jwks = run_binary(
        &binaries::gateway(),
        &["audit", "public-key", key.to_str().unwrap()],
        "",
        &[],
        Duration::from_secs(30),
    );
    jwks.assert_code(0, "audit public-key");
    assert!(jwks.stdout.contains(&kid), "{}", jwks.describe());
    let jwks_file = dir.path().join("receipts.jwks.json");
    std::fs::write(&jwks_file, &jwks.stdout).unwrap();
    audit_with(&file, &[&jwks_file]).assert_code(0, "the key as a JWKS");
    let run = audit(&file);
    run.assert_code(0, "a signed chain, no key given");
    assert!(
        run.stdout.contains("signatures not checked"),
        "{}",
        run.describe()
    );

    // The forgery: line 3's terms and user, then every later link recomputed.
    let mut forged = original.clone();
    assert!(forged[2].contains(r#""order_id":"o2""#), "{}", forged[2]);
    forged[2] = forged[2]
        .replace(r#""order_id":"o2""#, r#""order_id":"o9""#)
        .replace(r#""user":"user_1""#, r#""user":"mallory""#);
    assert_ne!(forged[2], original[2]);
    for i in 3..forged.len() {
        let old: Value = serde_json::from_str(&forged[i]).unwrap();
        let old = old["prev"].as_str().unwrap().to_owned();
        forged[i] = forged[i].replace(&old, &sha256_hex(&forged[i - 1]));
    }
    write_lines(&file, &forged);
    let run = audit(&file);
    run.assert_code(0, "a relinked forgery, no key: the links hold");
    assert!(
        run.stdout.contains("chain intact") && run.stdout.contains("signatures not checked"),
        "{}",
        run.describe()
    );
    let run = audit_with(&file, &[&public]);
    run.assert_code(1, "a relinked forgery, with the key");
    assert!(
        run.stdout.contains("line 3:") && run.stdout.contains("does not verify"),
        "{}",
        run.describe()
    );

    // Another key: named by kid, refused. A private key given as the public one: refused.
    write_lines(&file, &original);
    let (_, other) = ed25519_key(dir.path(), "other");
    let run = audit_with(&file, &[&other]);
    run.assert_code(1, "another key");
    assert!(
        run.stdout.contains("line 1:")
            && run.stdout.contains(&kid)
            && run.stdout.contains("none of the given public keys"),
        "{}",
        run.describe()
    );
    let run = audit_with(&file, &[&key]);
    run.assert_code(2, "a private key as --public-key");
    assert!(run.stderr.contains("private key"), "{}", run.describe());
    // Both keys (a rotation): the right one is found by kid.
    audit_with(&file, &[&other, &public]).assert_code(0, "two keys");
}

/// A crash that tears the last line (a write cut short, here inside a UTF-8 character): before
/// a restart `audit verify` reports an unfinished last line, not a break; the restarted gateway
/// keeps the torn bytes, seals them with a signed line, and the chain goes on after it.
async fn a_torn_last_line_is_sealed_on_restart(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("receipts.jsonl");
    let (key, public) = ed25519_key(dir.path(), "receipts");
    let mut stack = Stack::start_with(store, |b| b.extra_config(&signed_table(&file, &key, None)));
    let session = Session::signed_in("ses_torn", "acct_1");
    perform(&stack.gateway, &session, "o1").await;
    perform(&stack.gateway, &session, "o2").await;
    stack.gateway.kill();

    let intact = std::fs::read(&file).unwrap();
    let last = lines(&file)[1].clone();
    let mut torn = last.as_bytes()[..last.len() / 2].to_vec();
    torn.extend_from_slice("€".as_bytes().get(..2).unwrap());
    let mut crashed = intact.clone();
    crashed.extend_from_slice(&torn);
    std::fs::write(&file, &crashed).unwrap();
    let run = audit_with(&file, &[&public]);
    run.assert_code(0, "an unfinished last line is not a break");
    assert!(
        run.stdout.contains("2 receipts")
            && run
                .stdout
                .contains(&format!("last {} bytes have no newline", torn.len())),
        "{}",
        run.describe()
    );

    stack.gateway.restart();
    assert!(
        stack.gateway.log().contains("torn by a crash"),
        "{}",
        stack.gateway.log()
    );
    let after = std::fs::read(&file).unwrap();
    assert!(after.starts_with(&crashed), "the torn bytes are kept");
    perform(&stack.gateway, &session, "o3").await;

    let run = audit_with(&file, &[&public]);
    run.assert_code(0, "a sealed tear");
    assert!(
        run.stdout.contains("3 receipts")
            && run.stdout.contains("4 signatures verified")
            && run.stdout.contains(&format!(
                "lines 3-3: {} bytes torn by a crash, sealed by line 4",
                torn.len()
            )),
        "{}",
        run.describe()
    );
    let seal: Value = serde_json::from_str(&lines(&file)[3]).unwrap();
    assert_eq!(seal["kind"], "seal");
    assert_eq!(seal["torn_bytes"], torn.len());
    assert_eq!(seal["prev"], sha256_hex(&lines(&file)[1]));

    // The seal names those bytes only: other bytes in their place break the chain there.
    let mut swapped = after.clone();
    swapped[intact.len()] = b'[';
    std::fs::write(&file, &swapped).unwrap();
    let run = audit_with(&file, &[&public]);
    run.assert_code(1, "other torn bytes than the sealed ones");
    assert!(
        run.stdout.contains("line 3:") && run.stdout.contains("names other torn bytes"),
        "{}",
        run.describe()
    );
}

/// Two gateways (replicas) with one config but their own `replica` share the receipts folder:
/// each writes its own chain file, which verifies on its own, and either one's admin API finds
/// a receipt the other wrote. A third process on a chain already held refuses to start.
async fn replicas_write_their_own_chains(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("receipts.jsonl");
    let (key, public) = ed25519_key(dir.path(), "receipts");
    let stack = Stack::start_with(store, |b| {
        b.extra_config(&signed_table(&file, &key, Some("gw-a")))
            .env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN)
    });
    let replica = |builder: GatewayBuilder| match &stack.redis {
        Some(redis) => builder.store_url(&redis.url()),
        None => builder,
    };
    // The replica's name from the environment, as a Deployment would set it per pod.
    let b = replica(GatewayBuilder::new(&stack.upstream.url()))
        .extra_config(&signed_table(&file, &key, None))
        .env("POPPY_GATEWAY__RECEIPTS__REPLICA", "gw-b")
        .env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN)
        .start();
    let session = Session::signed_in("ses_replicas", "acct_1");
    let on_a = perform(&stack.gateway, &session, "o1").await;
    perform(&b, &session, "o2").await;
    perform(&stack.gateway, &session, "o3").await;

    let (file_a, file_b) = (
        dir.path().join("receipts.gw-a.jsonl"),
        dir.path().join("receipts.gw-b.jsonl"),
    );
    assert!(!file.exists(), "no shared chain");
    for (chain, replica, n) in [(&file_a, "gw-a", 2), (&file_b, "gw-b", 1)] {
        let run = audit_with(chain, &[&public]);
        run.assert_code(0, replica);
        assert!(
            run.stdout
                .contains(&format!("{n} receipts (replica {replica})")),
            "{}",
            run.describe()
        );
    }
    let (status, body) = admin(&b, "GET", &format!("/operations/{on_a}/receipt"), None).await;
    assert_eq!(status, 200, "replica b reads replica a's chain: {body}");
    assert_eq!(body["receipt"]["replica"], "gw-a");

    // A process on gw-a's chain while gw-a runs: refused at startup, the chain untouched.
    let before = std::fs::read(&file_a).unwrap();
    let third = replica(GatewayBuilder::new(&stack.upstream.url()))
        .extra_config(&signed_table(&file, &key, Some("gw-a")))
        .write();
    let run = run_binary(
        &binaries::gateway(),
        &["--config", third.config.to_str().unwrap()],
        "",
        &[("POPPY_GATEWAY_KEYS", TEST_KEYS)],
        Duration::from_secs(30),
    );
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(
        run.stderr.contains("in use by another process")
            && run.stderr.contains("[receipts] replica"),
        "{}",
        run.describe()
    );
    assert_eq!(std::fs::read(&file_a).unwrap(), before);
}

store_tests!(
    concurrent_approvals_write_one_chain,
    operator_resolutions_write_receipts,
    a_signed_chain_catches_a_relinked_forgery,
    a_torn_last_line_is_sealed_on_restart,
    replicas_write_their_own_chains,
);
