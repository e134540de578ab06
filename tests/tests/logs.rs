//! Logs: every operation event carries policy, operation_id and outcome; the Session, the
//! bearer token and request bodies never appear, even at debug level; the access log never
//! writes a query, in either format.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::agent::jwt_payload;
use poppy_e2e::{Request, Session, Stack, Store};
use serde_json::{Value, json};

const BODY_MARKER: &str = "body-marker-3b9e71";
const TERM_MARKER: &str = "sku-marker-c40d2a";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_and_bodies_are_never_logged() {
    let stack = Stack::start_with(Store::Memory, |builder| {
        builder
            .arg("--log-format")
            .arg("json")
            .env("RUST_LOG", "debug")
    });
    let session = Session::signed_in("ses_logs", "acct_logs");
    let request = Request::agent("POST", "/orders/o1/exchanges", &session).json(&json!({
        "item_id": "i1",
        "replacement_sku": TERM_MARKER,
        "note": BODY_MARKER,
    }));
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.clone().approve(&op);
    stack
        .gateway
        .send(&approved)
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_status(201, "replay");
    stack
        .gateway
        .send(&request.clone().without_header("Poppy-Extensions"))
        .await
        .assert_error(400, "extension_required", "no extension");
    // Passthrough with the same secrets.
    let plain =
        Request::agent("POST", "/orders/o1/notes", &session).json(&json!({"note": BODY_MARKER}));
    stack
        .gateway
        .send(&plain)
        .await
        .assert_status(201, "passthrough");

    let log = stack.gateway.log();
    // A Session JWT that was sent (each request carries a new one): the one forwarded last.
    let session_jwt = stack
        .upstream
        .last_header("poppy-session")
        .expect("a forwarded Poppy-Session");
    let bearer = session.authorization().unwrap();
    let token = bearer.trim_start_matches("Bearer ").to_owned();
    assert!(jwt_payload(&token).is_some());
    let secrets = [
        ("the Poppy-Session JWT", session_jwt.clone()),
        (
            "the Poppy-Session payload",
            session_jwt.split('.').nth(1).unwrap().to_owned(),
        ),
        ("the bearer token", token.clone()),
        (
            "the bearer token payload",
            token.split('.').nth(1).unwrap().to_owned(),
        ),
        ("a request body", BODY_MARKER.to_owned()),
        ("a term taken from the body", TERM_MARKER.to_owned()),
    ];
    for (what, secret) in &secrets {
        assert!(
            !log.contains(secret.as_str()),
            "{what} ({secret}) is in the gateway's log:\n{log}"
        );
    }

    // Every operation event is a JSON line with policy, operation_id and outcome.
    let events: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["message"] == "operation")
        .collect();
    let outcomes: Vec<&str> = events
        .iter()
        .map(|e| e["outcome"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        outcomes,
        ["held", "performed", "replayed"],
        "one event per decision:\n{log}"
    );
    for event in &events {
        assert_eq!(event["policy"], "exchange", "{event}");
        assert_eq!(event["operation_id"], op.operation_id.as_str(), "{event}");
    }
    let refused = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|e| e["outcome"] == "extension_required")
        .unwrap_or_else(|| panic!("the refused request is logged:\n{log}"));
    assert_eq!(refused["policy"], "exchange");
}

/// A burst of passthrough traffic in which every request succeeds writes no ERROR line: an
/// operator reads ERROR as something to act on. pingora's pool logged "failed to acquire
/// reusable stream" at ERROR for each idle upstream connection it could not take back in
/// time (it opens another; nothing fails): 220 such lines for 3200 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_in_which_every_request_succeeds_logs_no_error() {
    const CLIENTS: usize = 32;
    const REQUESTS: usize = 100;
    // Races of the pool are written at debug: count them, to know the burst had some.
    let stack = Stack::start_with(Store::Memory, |builder| {
        builder.env(
            "RUST_LOG",
            "info,pingora_core=info,pingora_core::connectors=debug",
        )
    });
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let client = stack.gateway.client();
        clients.push(tokio::spawn(async move {
            for r in 0..REQUESTS {
                client
                    .send(&Request::plain("GET", &format!("/orders/o{c}-{r}")))
                    .await
                    .assert_status(200, "passthrough");
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    assert_eq!(stack.upstream.count(), CLIENTS * REQUESTS);
    let log = stack.gateway.log();
    let races = log
        .lines()
        .filter(|l| l.contains("DEBUG") && l.contains("failed to acquire reusable stream"))
        .count();
    eprintln!(
        "{} requests: {races} lost races of pingora's pool, written at debug",
        CLIENTS * REQUESTS
    );
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(errors.is_empty(), "ERROR lines:\n{}", errors.join("\n"));
}

/// `--log-format json` writes one flat object per line (`message` and the event's fields at
/// the top level, as log shippers expect), with no source path of the build machine, and a
/// start and a stop write the gateway's own lines, not pingora's narration (29 INFO lines
/// before issue 39).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_flat_without_source_paths_or_pingora_chatter() {
    let mut stack = Stack::start_with(Store::Memory, |builder| {
        builder
            .arg("--log-format")
            .arg("json")
            .env("RUST_LOG", "info")
    });
    let session = Session::signed_out("ses_flat");
    stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i1", "s1"))
        .await
        .operation();
    stack.gateway.terminate();
    assert!(
        stack
            .gateway
            .wait_for_exit(std::time::Duration::from_secs(30))
            .await
            .is_some(),
        "the gateway stops on SIGTERM"
    );
    let log = stack.gateway.log();
    let events: Vec<Value> = log
        .lines()
        // The harness's own marker of each start.
        .filter(|line| !line.starts_with("===== poppy-e2e:"))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for event in &events {
        assert!(event.get("fields").is_none(), "nested fields: {event}");
        assert!(
            event["message"].is_string(),
            "no top-level message: {event}"
        );
        assert!(
            !event["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("pingora"))
                || event["level"] != "INFO",
            "pingora's narration at INFO: {event}"
        );
    }
    for leak in ["log.file", "log.line", "registry/src", ".rs\""] {
        assert!(!log.contains(leak), "{leak} in the log:\n{log}");
    }
    let messages: Vec<&str> = events
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    for own in [
        "poppy-gateway starting",
        "shutting down: finishing approved forwards in flight",
    ] {
        assert!(messages.contains(&own), "{own:?} missing: {messages:?}");
    }
    // The start line's fields are top-level values of their own type.
    let start = events
        .iter()
        .find(|e| e["message"] == "poppy-gateway starting")
        .unwrap();
    assert!(start["policies"].as_u64().is_some_and(|n| n > 0), "{start}");
    assert!(
        events.len() <= 12,
        "{} lines for a start, one request and a stop:\n{log}",
        events.len()
    );
}

/// A query can carry a token (`?access_token=…`): neither access log format writes it, only
/// the path (the combined format once did). The real binary's file, read line by line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_writes_no_query_in_either_format() {
    const SECRET: &str = "qs-secret-token-71f3a0";
    for format in ["json", "combined"] {
        let config = format!("\n[access_log]\npath = \"access.log\"\nformat = \"{format}\"\n");
        let stack = Stack::start_with(Store::Memory, |b| b.extra_config(&config));
        // `path = "access.log"` is beside the config.
        let log = stack.gateway.config_path().with_file_name("access.log");
        for target in [
            format!("/orders/o1?access_token={SECRET}&page=2"),
            format!("/orders/o1?{SECRET}"),
            "/orders/o1?".to_owned(),
        ] {
            stack
                .gateway
                .send(&Request::plain("GET", &target))
                .await
                .assert_status(200, &target);
        }
        let text = poppy_e2e::wait::until_some(std::time::Duration::from_secs(10), || async {
            std::fs::read_to_string(&log)
                .ok()
                .filter(|text| text.lines().count() == 3 && text.ends_with('\n'))
        })
        .await
        .expect("three access log lines");
        assert!(
            !text.contains(SECRET),
            "{format}: the query was logged:\n{text}"
        );
        assert!(!text.contains('?'), "{format}: {text}");
        for line in text.lines() {
            match format {
                "json" => {
                    let line: Value = serde_json::from_str(line).unwrap();
                    assert_eq!(line["path"], "/orders/o1", "{line}");
                }
                _ => assert!(line.contains("\"GET /orders/o1 HTTP/1.1\""), "{line}"),
            }
        }
    }
}
