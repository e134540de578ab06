//! A proxy operators put in front of real traffic: TLS with HTTP/2 (ALPN) and HTTP/1.1 through
//! the whole operation flow with the system curl, certificate reload under load, cleartext
//! HTTP/2, proxy headers from trusted and untrusted peers, passthrough timeouts with JSON
//! answers, TLS to an upstream, the access log, and `check` on the new keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use poppy_e2e::curl::{self, Protocol};
use poppy_e2e::testtls::{LeafFiles, TestCa};
use poppy_e2e::upstream::Upstream;
use poppy_e2e::{GatewayBuilder, Request, Session, Stack, Store, TEST_KEYS, run_binary, wait};
use serde_json::Value;

fn tls_config(leaf: &LeafFiles) -> String {
    format!(
        "\n[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        leaf.cert.display(),
        leaf.key.display()
    )
}

/// Mint, approve, replay over curl; exactly one execution.
fn operation_flow(port: u16, ca: Option<&Path>, protocol: Protocol, order: &str) -> String {
    let session = Session::signed_out(&format!("ses_{order}"));
    let request = Request::exchange(&session, order, "i1", "sku-2");
    let minted = curl::send(&request, port, ca, protocol);
    let operation = minted.answer.operation_in("mint over curl");
    let approved = curl::send(&request.clone().approve(&operation), port, ca, protocol);
    // The counting upstream answers a POST with 201 and its execution number.
    approved
        .answer
        .assert_status(201, "the approved request is performed");
    let replayed = curl::send(&request.approve(&operation), port, ca, protocol);
    replayed
        .answer
        .assert_replay_of(&approved.answer, "the same approval again");
    for answer in [&minted, &approved, &replayed] {
        let expected = match protocol {
            Protocol::Http1 => "HTTP/1.1",
            Protocol::Http2 => "HTTP/2",
        };
        assert_eq!(answer.version, expected, "{}", answer.verbose);
    }
    minted.version
}

async fn tls_carries_the_operation_flow_over_http2_and_http1(store: Store) {
    let ca = TestCa::new();
    let leaf = ca.leaf("gateway");
    let stack = Stack::start_with(store, |b| b.extra_config(&tls_config(&leaf)));
    let port = stack.gateway.listen_addr().port();
    let ca_file = ca.ca_file();
    let (h2, h1) = tokio::task::spawn_blocking(move || {
        (
            operation_flow(port, Some(&ca_file), Protocol::Http2, "o-h2"),
            operation_flow(port, Some(&ca_file), Protocol::Http1, "o-h1"),
        )
    })
    .await
    .unwrap();
    assert_eq!((h2.as_str(), h1.as_str()), ("HTTP/2", "HTTP/1.1"));
    assert_eq!(
        stack.upstream.count_for("POST", "/orders/o-h2/exchanges"),
        1
    );
    assert_eq!(
        stack.upstream.count_for("POST", "/orders/o-h1/exchanges"),
        1
    );
    stack.assert_executions(2, "one execution per approved operation");
}

async fn cleartext_http2_carries_the_operation_flow(store: Store) {
    let stack = Stack::start_with(store, |b| b.server_option("h2c", "true"));
    let port = stack.gateway.listen_addr().port();
    tokio::task::spawn_blocking(move || {
        operation_flow(port, None, Protocol::Http2, "o-h2c");
        operation_flow(port, None, Protocol::Http1, "o-h1c");
    })
    .await
    .unwrap();
    stack.assert_executions(2, "one execution per approved operation");
}

poppy_e2e::store_tests!(
    tls_carries_the_operation_flow_over_http2_and_http1,
    cleartext_http2_carries_the_operation_flow,
);

/// curl `count` GETs on one connection; the status of each.
fn curl_batch(port: u16, ca: &Path, count: usize, protocol: Protocol) -> Vec<String> {
    let mut command = Command::new("curl");
    command
        .args(["-sS", "--max-time", "30"])
        .args(["-w", "%{http_code}\\n"])
        .arg(if protocol == Protocol::Http2 {
            "--http2"
        } else {
            "--http1.1"
        })
        .arg("--cacert")
        .arg(ca)
        .arg("--resolve")
        .arg(format!("localhost:{port}:127.0.0.1"));
    for i in 0..count {
        command
            .args(["-o", "/dev/null"])
            .arg(format!("https://localhost:{port}/orders/o{i}"));
    }
    let output = command.output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .chain((!output.status.success()).then(|| {
            format!(
                "curl exit {:?}: {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            )
        }))
        .collect()
}

/// The subject CN the listener serves now, from curl's verbose log.
fn served_name(port: u16, ca: &Path) -> String {
    let output = Command::new("curl")
        .args(["-sS", "-v", "--max-time", "10", "-o", "/dev/null"])
        .arg("--cacert")
        .arg(ca)
        .arg("--resolve")
        .arg(format!("localhost:{port}:127.0.0.1"))
        .arg(format!("https://localhost:{port}/orders/o1"))
        .output()
        .unwrap();
    let verbose = String::from_utf8_lossy(&output.stderr);
    verbose
        .lines()
        .find_map(|l| {
            l.split_once("subject: CN=")
                .map(|(_, cn)| cn.trim().to_owned())
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_reloads_on_sighup_under_load_without_failed_requests() {
    let ca = TestCa::new();
    let first = ca.leaf("first");
    let second = ca.leaf("second");
    let stack = Stack::start_with(Store::Memory, |b| b.extra_config(&tls_config(&first)));
    let port = stack.gateway.listen_addr().port();
    assert_eq!(served_name(port, &ca.ca_file()), "first");

    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = [Protocol::Http2, Protocol::Http1, Protocol::Http2]
        .into_iter()
        .map(|protocol| {
            let stop = Arc::clone(&stop);
            let ca_file = ca.ca_file();
            std::thread::spawn(move || {
                let mut statuses = Vec::new();
                // Each batch reuses one connection across the reload.
                while !stop.load(Ordering::Acquire) || statuses.is_empty() {
                    statuses.extend(curl_batch(port, &ca_file, 20, protocol));
                }
                statuses
            })
        })
        .collect();
    // Replace the files, then SIGHUP: new handshakes get the new certificate.
    std::fs::copy(&second.cert, &first.cert).unwrap();
    std::fs::copy(&second.key, &first.key).unwrap();
    stack.gateway.signal("HUP");
    let ca_file = ca.ca_file();
    let reloaded = wait::until(Duration::from_secs(20), || {
        served_name(port, &ca_file) == "second"
    })
    .await;
    stop.store(true, Ordering::Release);
    let statuses: Vec<String> = loads.into_iter().flat_map(|l| l.join().unwrap()).collect();
    assert!(reloaded, "the new certificate was not served within 20 s");
    assert!(
        statuses.len() >= 60,
        "load ran: {} requests",
        statuses.len()
    );
    let failed: Vec<&String> = statuses.iter().filter(|s| *s != "200").collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed across the reload: {failed:?}",
        failed.len(),
        statuses.len()
    );
    assert!(stack.gateway.log().contains("TLS certificate reloaded"));
}

/// Gateway A (cleartext) → gateway B (TLS, a private CA) → the counting upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_upstream_is_verified_and_a_ca_file_trusts_a_private_ca() {
    let ca = TestCa::new();
    let leaf = ca.leaf("inner");
    let stack = Stack::start_with(Store::Memory, |b| b.extra_config(&tls_config(&leaf)));
    let inner = format!("https://localhost:{}", stack.gateway.listen_addr().port());

    let unverified = GatewayBuilder::new(&inner).start();
    let refused = unverified.send(&Request::plain("GET", "/orders/o1")).await;
    let body = refused.assert_error(502, "upstream_unavailable", "an unknown CA");
    assert!(!body.to_string().contains("localhost:"), "{body}");
    assert_eq!(stack.upstream.count(), 0, "nothing reached the upstream");

    let trusting = GatewayBuilder::new(&inner)
        .upstream_line(&format!("ca_file = \"{}\"", ca.ca_file().display()))
        .start();
    trusting
        .send(&Request::plain("GET", "/orders/o1"))
        .await
        .assert_upstream_answer(1, "GET", "/orders/o1");
}

async fn forwarded_for(trusted: &str) -> (Upstream, poppy_e2e::Gateway) {
    let upstream = Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url())
        .extra_config(&format!(
            "\n[proxy_headers]\ntrusted_proxies = [{trusted}]\n"
        ))
        .upstream_line(
            "host_header = \"api.internal:8080\"\noperation_id_header = \"X-Operation-Id\"",
        )
        .start();
    (upstream, gateway)
}

fn spoofed(request: Request) -> Request {
    request
        .header("X-Forwarded-For", "198.51.100.1")
        .header("Forwarded", "for=198.51.100.1;proto=https")
        .header("X-Forwarded-Proto", "https")
        .header("X-Request-Id", "req-abc.123")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_keep_what_trusted_proxies_say_and_replace_the_rest() {
    // Trusted: the loopback peer is a proxy; what it says is kept and appended to.
    let (upstream, gateway) = forwarded_for("\"127.0.0.0/8\"").await;
    gateway
        .send(&spoofed(Request::plain("GET", "/orders/o1")))
        .await
        .assert_status(200, "passthrough");
    let seen = &upstream.requests()[0];
    assert_eq!(
        seen.header("x-forwarded-for"),
        Some("198.51.100.1, 127.0.0.1")
    );
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
    assert_eq!(
        seen.header("forwarded"),
        Some(format!(
            "for=198.51.100.1;proto=https, for=127.0.0.1;host=\"127.0.0.1:{}\";proto=http",
            gateway.listen_addr().port()
        ))
        .as_deref()
    );
    assert_eq!(seen.header("x-request-id"), Some("req-abc.123"));
    assert_eq!(seen.header("host"), Some("api.internal:8080"));

    // Untrusted: nothing the client says about earlier hops goes on.
    let (upstream, gateway) = forwarded_for("\"10.0.0.0/8\"").await;
    gateway
        .send(&spoofed(Request::plain("GET", "/orders/o1")))
        .await
        .assert_status(200, "passthrough");
    let seen = &upstream.requests()[0];
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
    assert!(
        seen.header("forwarded")
            .unwrap()
            .starts_with("for=127.0.0.1;host="),
        "{:?}",
        seen.header("forwarded")
    );

    // An approved forward carries the same headers, and its operation ID.
    let session = Session::signed_out("ses_fwd");
    let request = spoofed(Request::exchange(&session, "o7", "i1", "sku"));
    let operation = gateway.send(&request).await.operation();
    gateway
        .send(&request.approve(&operation))
        .await
        .assert_status(201, "approved");
    let performed = upstream
        .requests()
        .into_iter()
        .find(|r| r.path_and_query == "/orders/o7/exchanges")
        .unwrap();
    assert_eq!(performed.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(performed.header("x-request-id"), Some("req-abc.123"));
    assert_eq!(
        performed.header("x-operation-id"),
        Some(operation.operation_id.as_str())
    );
    assert_eq!(performed.header("host"), Some("api.internal:8080"));
    assert!(performed.header("poppy-approval").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upstream_trips_the_read_timeout_with_a_json_504() {
    let upstream = Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url())
        .upstream_line("read_timeout = \"300ms\"")
        .start();
    upstream.hold();
    let started = Instant::now();
    let answer = gateway.send(&Request::plain("GET", "/orders/o1")).await;
    let waited = started.elapsed();
    upstream.release();
    let body = answer.assert_error(504, "upstream_timeout", "a stalled upstream");
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    let text = body.to_string();
    assert!(
        !text.contains(&upstream.addr().port().to_string()) && !text.contains("127.0.0.1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_json_502_without_its_address() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let gateway = GatewayBuilder::new(&format!("http://127.0.0.1:{port}")).start();
    let answer = gateway.send(&Request::plain("GET", "/orders/o1")).await;
    let body = answer.assert_error(502, "upstream_unavailable", "nothing listens");
    assert!(!body.to_string().contains(&port.to_string()), "{body}");
    assert!(
        gateway.log().contains(&port.to_string()),
        "the log keeps the detail"
    );
}

/// `access.log` next to the gateway's config (where `path = "access.log"` puts it).
fn access_log_path(stack: &Stack) -> std::path::PathBuf {
    stack
        .gateway
        .config_path()
        .parent()
        .unwrap()
        .join("access.log")
}

fn log_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_has_one_line_per_request_field_by_field() {
    let stack = Stack::start_with(Store::Memory, |b| {
        b.extra_config("\n[access_log]\npath = \"access.log\"\nformat = \"json\"\n")
    });
    let log = access_log_path(&stack);
    let session = Session::signed_out("ses_log");
    stack
        .gateway
        .send(
            &Request::agent("GET", "/orders/o1?secret=q", &session)
                .header("X-Request-Id", "req-1")
                .header("Authorization", "Bearer tok-secret"),
        )
        .await
        .assert_status(200, "passthrough");
    let request = Request::exchange(&session, "o9", "i1", "sku");
    let operation = stack.gateway.send(&request).await.operation();
    stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await
        .assert_status(201, "approved");
    stack.gateway.send(&request.approve(&operation)).await;
    let complete = wait::until(Duration::from_secs(10), || log_lines(&log).len() >= 4).await;
    assert!(complete, "4 lines: {:?}", log_lines(&log));
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 4, "{lines:?}");

    let pass = &lines[0];
    assert_eq!(pass["request_id"], "req-1");
    assert_eq!(pass["method"], "GET");
    assert_eq!(pass["path"], "/orders/o1", "no query in the log");
    assert_eq!(pass["status"], 200);
    assert_eq!(pass["upstream_status"], 200);
    assert_eq!(pass["route"], "default");
    assert_eq!(pass["passthrough"], true);
    assert_eq!(pass["client"], "127.0.0.1");
    assert_eq!(pass["protocol"], "HTTP/1.1");
    assert!(pass["operation_id"].is_null() && pass["outcome"].is_null());
    assert!(pass["duration_ms"].as_f64().unwrap() >= 0.0);
    assert!(pass["time"].as_str().unwrap().ends_with('Z'));

    let held = &lines[1];
    assert_eq!(held["status"], 403);
    assert_eq!(held["outcome"], "held");
    assert_eq!(held["operation_id"], operation.operation_id.as_str());
    assert!(held["upstream_status"].is_null());
    assert_eq!(held["passthrough"], false);
    assert_eq!(held["request_id"].as_str().unwrap().len(), 32, "generated");

    let performed = &lines[2];
    assert_eq!(performed["status"], 201);
    assert_eq!(performed["outcome"], "performed");
    assert_eq!(performed["operation_id"], operation.operation_id.as_str());
    assert_eq!(performed["upstream_status"], 201);
    assert_eq!(performed["method"], "POST");
    assert_eq!(performed["path"], "/orders/o9/exchanges");

    assert_eq!(lines[3]["outcome"], "replayed");
    assert_eq!(lines[3]["operation_id"], operation.operation_id.as_str());

    let text = std::fs::read_to_string(&log).unwrap();
    let sent_session = stack
        .upstream
        .last_header("poppy-session")
        .expect("a forwarded Poppy-Session");
    for secret in ["tok-secret", &sent_session, "secret=q", "sku"] {
        assert!(
            !text.contains(secret),
            "{secret} leaked into the access log"
        );
    }
}

/// After a rotation moves the file away, SIGHUP reopens the access log at its path: lines
/// before it are in the moved file, lines after it in the new one, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_reopens_on_sighup_after_a_rotation() {
    let stack = Stack::start_with(Store::Memory, |b| {
        b.extra_config("\n[access_log]\npath = \"access.log\"\nformat = \"json\"\n")
    });
    let dir = stack.gateway.config_path().parent().unwrap().to_path_buf();
    let (log, rotated) = (dir.join("access.log"), dir.join("access.log.1"));
    let send = |request_id: &'static str| {
        let gateway = &stack.gateway;
        async move {
            gateway
                .send(&Request::plain("GET", "/orders/o1").header("X-Request-Id", request_id))
                .await
                .assert_status(200, "passthrough");
        }
    };
    send("before").await;
    assert!(wait::until(Duration::from_secs(10), || log_lines(&log).len() == 1).await);
    std::fs::rename(&log, &rotated).unwrap();
    stack.gateway.signal("HUP");
    assert!(
        wait::until(Duration::from_secs(10), || stack
            .gateway
            .log()
            .contains("SIGHUP: access log reopened"))
        .await,
        "the gateway says it reopened the access log:\n{}",
        stack.gateway.log()
    );
    send("after").await;
    assert!(wait::until(Duration::from_secs(10), || log_lines(&log).len() == 1).await);
    let ids = |path: &Path| -> Vec<Value> {
        log_lines(path)
            .into_iter()
            .map(|l| l["request_id"].clone())
            .collect()
    };
    assert_eq!(ids(&rotated), ["before"]);
    assert_eq!(ids(&log), ["after"]);
}

/// The front settings can come from the environment alone, as in a container:
/// `[server.tls]`, `[access_log]` and `[proxy_headers]` keys by `POPPY_GATEWAY__…` variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_settings_come_from_the_environment_too() {
    let ca = TestCa::new();
    let leaf = ca.leaf("gateway");
    let stack = Stack::start_with(Store::Memory, |b| {
        b.env(
            "POPPY_GATEWAY__SERVER__TLS__CERT_FILE",
            &leaf.cert.display().to_string(),
        )
        .env(
            "POPPY_GATEWAY__SERVER__TLS__KEY_FILE",
            &leaf.key.display().to_string(),
        )
        .env("POPPY_GATEWAY__ACCESS_LOG__PATH", "access.log")
        .env("POPPY_GATEWAY__PROXY_HEADERS__X_FORWARDED", "false")
    });
    let port = stack.gateway.listen_addr().port();
    let ca_file = ca.ca_file();
    let answer = tokio::task::spawn_blocking(move || {
        curl::send(
            &Request::plain("GET", "/orders/o1"),
            port,
            Some(&ca_file),
            Protocol::Http2,
        )
    })
    .await
    .unwrap();
    assert_eq!(
        answer.version, "HTTP/2",
        "TLS with ALPN from the environment"
    );
    answer.answer.assert_status(200, "passthrough");
    let seen = stack.upstream.requests();
    let headers = &seen.last().expect("the upstream saw the request").headers;
    assert!(
        !headers.iter().any(|(name, _)| name == "x-forwarded-for"),
        "x_forwarded = false from the environment: {headers:?}"
    );
    let log = access_log_path(&stack);
    assert!(
        wait::until(Duration::from_secs(10), || log_lines(&log).len() == 1).await,
        "the access log path from the environment"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_combined_access_log_reads_like_nginx() {
    let stack = Stack::start_with(Store::Memory, |b| {
        b.extra_config("\n[access_log]\npath = \"access.log\"\nformat = \"combined\"\n")
    });
    let log = access_log_path(&stack);
    stack
        .gateway
        .send(&Request::plain("GET", "/orders/o1").header("X-Request-Id", "r-2"))
        .await
        .assert_status(200, "passthrough");
    let written = wait::until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.ends_with('\n'))
    })
    .await;
    assert!(written);
    let line = std::fs::read_to_string(&log).unwrap();
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(
        line.contains("] \"GET /orders/o1 HTTP/1.1\" 200 "),
        "{line}"
    );
    assert!(
        line.contains(" request_id=r-2 ")
            && line.contains(" route=default upstream_status=200 operation_id=- outcome=-"),
        "{line}"
    );

    // A client can't end a quoted field or forge a line: `"`, `\` and controls are `\xHH`,
    // as nginx writes them. (pingora itself refuses a `"` in the target.)
    let addr = stack.gateway.listen_addr();
    let raw = tokio::task::spawn_blocking(move || {
        poppy_e2e::rawhttp::exchange(
            addr,
            b"GET /orders/o1?q=1 HTTP/1.1\r\nHost: x\r\nUser-Agent: a\"b\\c\td\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(raw.status, 200, "{}", String::from_utf8_lossy(&raw.body));
    let two = wait::until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() == 2 && t.ends_with('\n'))
    })
    .await;
    assert!(two, "{:?}", std::fs::read_to_string(&log));
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text.lines().nth(1).unwrap();
    assert!(
        line.contains("\"GET /orders/o1 HTTP/1.1\"") && line.contains("\"a\\x22b\\x5Cc\\x09d\""),
        "{line}"
    );
    assert_eq!(line.matches('"').count(), 6, "three quoted fields: {line}");
}

#[test]
fn check_points_at_bad_front_settings() {
    let upstream = "http://127.0.0.1:9";
    let config = GatewayBuilder::new(upstream)
        .server_option("h2c", "true")
        .extra_config(
            "\n[server.tls]\ncert_file = \"missing.pem\"\nkey_file = \"missing.key\"\n\n[proxy_headers]\ntrusted_proxies = [\"10.0.0.0/33\"]\n\n[access_log]\npath = \"a.log\"\nformat = \"xml\"\n",
        )
        .upstream_line("read_timeout = \"soon\"\nhost_header = \"a b\"")
        .write();
    let run = run_binary(
        &poppy_e2e::binaries::gateway(),
        &["check", "--config", config.config.to_str().unwrap()],
        "",
        &[("POPPY_GATEWAY_KEYS", TEST_KEYS)],
        Duration::from_secs(30),
    );
    assert!(!run.success(), "{}", run.describe());
    let text = run.output();
    let source = std::fs::read_to_string(&config.config).unwrap();
    for (needle, key) in [
        ("cert_file = ", "server.tls: cert_file"),
        ("trusted_proxies = ", "proxy_headers.trusted_proxies"),
        ("format = \"xml\"", "access_log.format"),
        ("read_timeout = ", "upstream.read_timeout"),
        ("host_header = ", "upstream.host_header"),
    ] {
        let offset = source.find(needle).unwrap();
        let line = source[..offset].lines().count() + 1;
        let prefix = format!("gateway.toml:{line}:");
        assert!(
            text.lines().any(|l| l.contains(&prefix) && l.contains(key)),
            "expected {key} at line {line}:\n{text}"
        );
    }
}
