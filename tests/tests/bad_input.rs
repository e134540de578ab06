//! Requests the gateway refuses before anything else: each gets a JSON error with a readable
//! `detail`, in the documented order of checks, and nothing reaches the upstream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use poppy_e2e::agent::unsigned_jwt;
use poppy_e2e::{Request, Session, Stack, Store, rawhttp, store_tests};
use serde_json::{Value, json};

fn exchange() -> Request {
    Request::exchange(&Session::signed_out("ses_bad"), "o1", "i1", "s1")
}

const SOME_APPROVAL: &str = "operation_id=\"exc_aaaaaaaaaaaaaaaaaaaaaaaaa\", revision=\"1-abc\"";

/// A JSON exchange body of exactly `len` bytes.
fn body_of_len(len: usize) -> Vec<u8> {
    let empty = json!({"item_id": "i1", "replacement_sku": "s1", "note": ""}).to_string();
    assert!(len >= empty.len());
    let body =
        json!({"item_id": "i1", "replacement_sku": "s1", "note": "x".repeat(len - empty.len())})
            .to_string()
            .into_bytes();
    assert_eq!(body.len(), len);
    body
}

async fn unparseable_session_is_invalid_session(store: Store) {
    let stack = Stack::start(store);
    let header = json!({"alg": "none", "typ": "poppy-session+jwt"});
    let b64 = |s: &str| URL_SAFE_NO_PAD.encode(s);
    let sessions = [
        ("not a JWT".to_owned(), "garbage"),
        ("three parts, not base64".to_owned(), "a.b.c"),
        (
            format!("{}.{}.sig", b64(&header.to_string()), b64("not json")),
            "payload not JSON",
        ),
        (
            unsigned_jwt(&header, &json!({"iss": "agent_1", "sub": "user_1"})),
            "no sid",
        ),
        (
            unsigned_jwt(&header, &json!({"sid": 7, "iss": "agent_1"})),
            "sid not a string",
        ),
        (
            unsigned_jwt(&header, &json!(["sid"])),
            "payload not an object",
        ),
    ];
    for (value, what) in sessions {
        for approval in [None, Some(SOME_APPROVAL)] {
            let mut request = exchange().header("Poppy-Session", &value);
            if let Some(approval) = approval {
                request = request.approval(approval);
            }
            stack.gateway.send(&request).await.assert_error(
                403,
                "invalid_session",
                &format!("Poppy-Session {what} (approval: {approval:?})"),
            );
        }
    }
    stack.assert_executions(0, "requests with an unparseable Session");
}

async fn oversized_body_is_413(store: Store) {
    let stack = Stack::start(store);
    let body = body_of_len(1024 * 1024 + 1);
    for approval in [None, Some(SOME_APPROVAL)] {
        let mut request = exchange().body(body.clone(), "application/json");
        if let Some(approval) = approval {
            request = request.approval(approval);
        }
        stack.gateway.send(&request).await.assert_error(
            413,
            "body_too_large",
            "a body over the default 1 MiB",
        );
    }
    stack.assert_executions(0, "oversized bodies");
}

async fn body_limit_is_exact_and_covers_chunked_bodies(store: Store) {
    let stack = Stack::start_with(store, |b| b.max_body_bytes(1024));
    stack
        .gateway
        .send(&exchange().body(body_of_len(1024), "application/json"))
        .await
        .operation_in("a body of exactly max_body_bytes");
    stack
        .gateway
        .send(&exchange().body(body_of_len(1025), "application/json"))
        .await
        .assert_error(413, "body_too_large", "one byte over max_body_bytes");

    let session = Session::signed_out("ses_chunked").header();
    let chunk = "x".repeat(1000);
    let mut raw = format!(
        "POST /orders/o1/exchanges HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Poppy-Session: {session}\r\nPoppy-Extensions: \"operations\";v=\"2\"\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    for _ in 0..3 {
        raw.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    raw.push_str("0\r\n\r\n");
    let response = rawhttp::exchange(
        stack.gateway.listen_addr(),
        raw.as_bytes(),
        Duration::from_secs(10),
    )
    .expect("an answer to a chunked body over the limit");
    assert_eq!(
        response.status,
        413,
        "a chunked body over max_body_bytes must get 413: {} {:?}",
        response.head,
        String::from_utf8_lossy(&response.body)
    );
    assert!(
        String::from_utf8_lossy(&response.body).contains("body_too_large"),
        "the 413 names body_too_large: {:?}",
        String::from_utf8_lossy(&response.body)
    );
    stack.assert_executions(0, "bodies over the limit");
}

async fn malformed_approval_is_invalid_header(store: Store) {
    let stack = Stack::start(store);
    let approvals = [
        ("((", "not a Dictionary"),
        ("operation_id=\"exc_1\", revision=\"r1\",", "trailing comma"),
        ("revision=\"r1\"", "no operation_id"),
        ("operation_id=\"exc_1\"", "no revision"),
        (
            "operation_id=exc_1, revision=\"r1\"",
            "operation_id a Token",
        ),
        ("operation_id=\"exc_1\", revision=5", "revision an Integer"),
        ("operation_id, revision=\"r1\"", "operation_id a Boolean"),
        (
            "operation_id=(\"exc_1\"), revision=\"r1\"",
            "operation_id an Inner List",
        ),
        (
            "operation_id=:ZXhjXzE=:, revision=\"r1\"",
            "operation_id a Byte Sequence",
        ),
        (
            "operation_id=\"exc 1\", revision=\"r1\"",
            "a space in operation_id",
        ),
        (
            "operation_id=\"exc.1\", revision=\"r1\"",
            "a dot in operation_id",
        ),
        (
            "operation_id=\"exc_1\", revision=\"r/1\"",
            "a slash in revision",
        ),
        (
            "operation_id=\"exc_1\", revision=\"r=1\"",
            "an equals sign in revision",
        ),
    ];
    for (value, what) in approvals {
        stack
            .gateway
            .send(&exchange().approval(value))
            .await
            .assert_error(
                400,
                "invalid_header",
                &format!("Poppy-Approval {what}: {value}"),
            );
    }
    stack.assert_executions(0, "malformed approvals");
}

async fn non_json_body_is_invalid_body(store: Store) {
    let stack = Stack::start(store);
    for (body, content_type) in [
        ("not json", "application/json"),
        ("{\"item_id\": \"i1\",", "application/json"),
        (
            "item_id=i1&replacement_sku=s1",
            "application/x-www-form-urlencoded",
        ),
    ] {
        for approval in [None, Some(SOME_APPROVAL)] {
            let mut request = exchange().body(body.as_bytes().to_vec(), content_type);
            if let Some(approval) = approval {
                request = request.approval(approval);
            }
            stack.gateway.send(&request).await.assert_error(
                400,
                "invalid_body",
                &format!("body {body:?} (approval: {approval:?})"),
            );
        }
    }
    stack.assert_executions(0, "bodies that are not JSON");
}

async fn missing_term_is_named(store: Store) {
    let stack = Stack::start(store);
    let cases = [
        (json!({"item_id": "i1"}), vec!["replacement_sku"]),
        (json!({"replacement_sku": "s1"}), vec!["item_id"]),
        (json!({}), vec!["item_id", "replacement_sku"]),
    ];
    for (body, names) in cases {
        for approval in [None, Some(SOME_APPROVAL)] {
            let mut request = exchange().json(&body);
            if let Some(approval) = approval {
                request = request.approval(approval);
            }
            let error = stack.gateway.send(&request).await.assert_error(
                400,
                "missing_term",
                &format!("body {body} (approval: {approval:?})"),
            );
            let term = error.get("term").and_then(Value::as_str).unwrap_or("");
            assert!(
                names.contains(&term),
                "body {body}: missing_term must name the missing term ({names:?}): {error}"
            );
        }
    }
    stack.assert_executions(0, "requests with a missing term");
}

/// When a request has several problems, the first check in the documented order answers.
async fn checks_are_made_in_order(store: Store) {
    let stack = Stack::start_with(store, |b| b.max_body_bytes(1024));
    let big = body_of_len(4096);
    let cases: Vec<(&str, Request, u16, &str)> = vec![
        (
            "malformed Poppy-Extensions and an unparseable Session",
            exchange()
                .extensions("((")
                .header("Poppy-Session", "garbage"),
            400,
            "invalid_header",
        ),
        (
            "no operations v2 and an unparseable Session",
            exchange()
                .extensions("\"operations\";v=\"1\"")
                .header("Poppy-Session", "garbage"),
            400,
            "extension_required",
        ),
        (
            "an unparseable Session and a body over the limit",
            exchange()
                .header("Poppy-Session", "garbage")
                .body(big.clone(), "application/json"),
            403,
            "invalid_session",
        ),
        (
            "a malformed approval and a body that is not JSON",
            exchange()
                .body(b"not json".to_vec(), "application/json")
                .approval("(("),
            400,
            "invalid_header",
        ),
        (
            "a malformed approval and a missing term",
            exchange().json(&json!({"item_id": "i1"})).approval("(("),
            400,
            "invalid_header",
        ),
    ];
    for (what, request, status, code) in cases {
        stack
            .gateway
            .send(&request)
            .await
            .assert_error(status, code, what);
    }
    stack.assert_executions(0, "requests with several problems");
}

/// The documented order puts the body limit before the approval header.
async fn body_limit_is_checked_before_the_approval_header(store: Store) {
    let stack = Stack::start_with(store, |b| b.max_body_bytes(1024));
    stack
        .gateway
        .send(
            &exchange()
                .body(body_of_len(4096), "application/json")
                .approval("(("),
        )
        .await
        .assert_error(
            413,
            "body_too_large",
            "a body over the limit and a malformed approval",
        );
    stack.assert_executions(0, "a body over the limit");
}

store_tests!(
    unparseable_session_is_invalid_session,
    oversized_body_is_413,
    body_limit_is_exact_and_covers_chunked_bodies,
    malformed_approval_is_invalid_header,
    non_json_body_is_invalid_body,
    missing_term_is_named,
    checks_are_made_in_order,
    body_limit_is_checked_before_the_approval_header,
);

/// The JSON error in `raw` (a whole HTTP/1.1 response) with `status` and `code`.
fn assert_json_error(raw: &str, status: u16, code: &str, what: &str) {
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{what}: no complete answer: {raw:?}"));
    assert!(
        head.starts_with(&format!("HTTP/1.1 {status} ")),
        "{what}: {head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{what}: {head}"
    );
    let json: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e}: {body:?}"));
    assert_eq!(json["error"], code, "{what}: {json}");
    assert!(
        json["detail"].as_str().is_some_and(|d| d.len() > 20),
        "{what}: {json}"
    );
}

/// Write `bytes` on a new connection to `addr` and read until the gateway closes it.
fn answer_to(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(bytes).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// Heads pingora itself refuses before any part of the gateway sees them (a malformed request
/// line or header, a bad `Content-Length`, `CONNECT`) get the gateway's JSON errors, as the
/// first request of a connection, a later one on a kept-alive connection, and over TLS (pingora
/// wrote them with empty bodies). Nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_pingora_refuses_get_json_errors() {
    use poppy_e2e::testtls::TestCa;
    use std::io::{Read, Write};

    let ca = TestCa::new();
    let leaf = ca.leaf("gateway");
    let stack = Stack::start(Store::Memory);
    let addr = stack.gateway.listen_addr();
    let cases: [(&str, &[u8], u16, &str); 6] = [
        ("no request line", b"GARBAGE\r\n\r\n", 400, "bad_request"),
        (
            "a header without a colon",
            b"GET /orders/o1 HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            "an unknown HTTP version",
            b"GET /orders/o1 HTTP/3.0\r\nHost: x\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            "a Content-Length that is no number",
            b"POST /orders/o1/notes HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            "two Content-Lengths",
            b"POST /orders/o1/notes HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            400,
            "bad_request",
        ),
        (
            "CONNECT",
            b"CONNECT shop.example:443 HTTP/1.1\r\nHost: shop.example:443\r\n\r\n",
            405,
            "method_not_allowed",
        ),
    ];
    for (what, bytes, status, code) in cases {
        let raw = tokio::task::spawn_blocking(move || answer_to(addr, bytes))
            .await
            .unwrap();
        assert_json_error(&raw, status, code, what);
    }

    // The second request of a kept-alive connection.
    let raw = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(b"GET /orders/o1 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut first = Vec::new();
        let mut buf = [0u8; 4096];
        while !first.ends_with(b"}") {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "the first answer");
            first.extend_from_slice(&buf[..n]);
        }
        stream.write_all(b"GARBAGE\r\n\r\n").unwrap();
        let mut second = Vec::new();
        let _ = stream.read_to_end(&mut second);
        String::from_utf8_lossy(&second).into_owned()
    })
    .await
    .unwrap();
    assert_json_error(
        &raw,
        400,
        "bad_request",
        "a kept-alive connection's second head",
    );
    stack.assert_executions(1, "only the well-formed GET");

    // Over TLS.
    let tls = Stack::start_with(Store::Memory, |b| {
        b.extra_config(&format!(
            "\n[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            leaf.cert.display(),
            leaf.key.display()
        ))
    });
    let tls_addr = tls.gateway.listen_addr();
    let raw = tokio::task::spawn_blocking(move || {
        let mut client = std::process::Command::new("timeout")
            .args(["20", "openssl", "s_client", "-quiet", "-connect"])
            .arg(tls_addr.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = client.stdin.take().unwrap();
        stdin.write_all(b"GARBAGE\r\n\r\n").unwrap();
        let mut out = String::new();
        client
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        drop(stdin);
        let _ = client.wait();
        out
    })
    .await
    .unwrap();
    assert_json_error(&raw, 400, "bad_request", "a malformed head over TLS");
    tls.assert_executions(0, "a malformed head over TLS");
}
