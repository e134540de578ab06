//! The operation behaviours that are not the happy path, over HTTP/2 with the system curl: an
//! operation in progress (503 + `Retry-After`), a full store (503 + `Retry-After`, nothing
//! forwarded), and MCP tool calls answered as JSON and as an SSE stream, each performed once.
//! The happy path over HTTP/2 (TLS with ALPN, and h2c) is in `front.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use poppy_e2e::curl::{self, CurlAnswer, Protocol};
use poppy_e2e::mcp_client::{APPROVAL_KEY, held_operation, rpc_response, tools_call, with_meta};
use poppy_e2e::testtls::TestCa;
use poppy_e2e::upstream::Upstream;
use poppy_e2e::{
    AnswerMode, GatewayBuilder, McpStack, Request, Session, Stack, Store, store_tests, wait,
};
use serde_json::{Value, json};

const ARRIVAL: Duration = Duration::from_secs(10);

/// `request` over HTTP/2 (cleartext, prior knowledge), from a blocking thread.
async fn h2(request: Request, port: u16) -> CurlAnswer {
    h2_to(request, port, None).await
}

/// The same over TLS with ALPN when `ca` is given.
async fn h2_to(request: Request, port: u16, ca: Option<&Path>) -> CurlAnswer {
    let ca = ca.map(Path::to_path_buf);
    let answer = tokio::task::spawn_blocking(move || {
        curl::send(&request, port, ca.as_deref(), Protocol::Http2)
    })
    .await
    .unwrap();
    assert_eq!(answer.version, "HTTP/2", "{}", answer.verbose);
    answer
}

/// An approval sent again while the first is being performed gets `503 operation_in_progress`
/// with `Retry-After` over HTTP/2 too; once the first is answered, the retry replays it.
async fn an_operation_in_progress_is_a_503_over_http2(store: Store) {
    let stack = Stack::start_with(store, |b| b.server_option("h2c", "true"));
    let port = stack.gateway.listen_addr().port();
    let session = Session::signed_out("ses_h2_busy");
    let request = Request::exchange(&session, "o-busy", "i1", "s1");
    let operation = h2(request.clone(), port)
        .await
        .answer
        .operation_in("mint over HTTP/2");
    let approved = request.approve(&operation);

    stack.upstream.hold();
    let first = tokio::spawn(h2(approved.clone(), port));
    assert!(
        wait::until(ARRIVAL, || stack.upstream.count() == 1).await,
        "the approved request reaches the upstream"
    );
    h2(approved.clone(), port)
        .await
        .answer
        .assert_unavailable("operation_in_progress", "the same approval while performed");
    stack.upstream.release();
    let performed = first.await.unwrap().answer;
    performed.assert_status(201, "the first approval is performed");
    h2(approved, port)
        .await
        .answer
        .assert_replay_of(&performed, "the same approval afterwards");
    stack.assert_executions(1, "one execution");
}

store_tests!(an_operation_in_progress_is_a_503_over_http2);

/// A full `memory://` store refuses a new claim with `503 store_unavailable` and `Retry-After`
/// over HTTP/2 through TLS, and forwards nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_is_a_503_over_http2_with_tls() {
    const ANSWER: usize = 256 * 1024;
    const CAP: usize = 2 * 1024 * 1024;
    let ca = TestCa::new();
    let leaf = ca.leaf("gateway");
    let upstream = Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url())
        .extra_config(&format!(
            "memory_max_bytes = {CAP}\n\n[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            leaf.cert.display(),
            leaf.key.display()
        ))
        .start();
    let port = gateway.listen_addr().port();
    let ca_file = ca.ca_file();
    let session = Session::signed_out("ses_h2_full");
    let mut refused = false;
    for i in 0..2 * CAP / ANSWER {
        let request = Request::exchange(&session, &format!("o{i}"), "i1", "s1")
            .header("x-answer-bytes", &ANSWER.to_string());
        let operation = h2_to(request.clone(), port, Some(&ca_file))
            .await
            .answer
            .operation_in("mint over HTTP/2 with TLS");
        let before = upstream.count();
        let answer = h2_to(request.approve(&operation), port, Some(&ca_file))
            .await
            .answer;
        if answer.status == 503 {
            answer.assert_unavailable("store_unavailable", "the store is full");
            assert_eq!(upstream.count(), before, "a refused claim forwards nothing");
            refused = true;
            break;
        }
        answer.assert_status(201, "performed while there is room");
    }
    assert!(refused, "the cap of {CAP} bytes must be reached");
}

fn exchange_call(id: u64, order: &str) -> Value {
    tools_call(
        json!(id),
        "exchange_item",
        json!({"order_id": order, "item_id": "i1", "replacement_sku": "s1"}),
    )
}

/// A tool call over HTTP/2 is held, then performed once on approval and replayed after, with
/// the server answering as JSON or as an SSE stream.
async fn mcp_tool_calls_over_http2(store: Store, mode: AnswerMode) {
    let stack = McpStack::start_with(store, mode, |b| b.server_option("h2c", "true"));
    let port = stack.gateway.listen_addr().port();
    let session = Session::signed_out("ses_h2_mcp");
    // The MCP session is opened over HTTP/1.1; the tool calls go over HTTP/2.
    let raw = stack.raw(&session).await;
    let call = exchange_call(1, "o-mcp");
    let held = h2(raw.request(&call), port).await.answer;
    held.assert_status(200, "a held call is a JSON-RPC result");
    let operation = held_operation(&rpc_response(&held)["result"], "held over HTTP/2");
    let approved = with_meta(
        exchange_call(2, "o-mcp"),
        json!({APPROVAL_KEY: {"operation_id": operation.operation_id, "revision": operation.revision}}),
    );
    let performed = h2(raw.request(&approved), port).await.answer;
    performed.assert_status(200, "the approved call");
    let result = rpc_response(&performed)["result"].clone();
    assert_eq!(
        result["structuredContent"]["execution"],
        json!(1),
        "the server's own result:\n{}",
        performed.describe()
    );
    if mode == AnswerMode::Sse {
        assert!(
            performed
                .header("content-type")
                .is_some_and(|c| c.starts_with("text/event-stream")),
            "the server's stream reaches the client over HTTP/2:\n{}",
            performed.describe()
        );
    }
    let replayed = h2(raw.request(&approved), port).await.answer;
    assert_eq!(
        rpc_response(&replayed)["result"],
        result,
        "the same approval again gets the first result"
    );
    stack
        .server
        .assert_executions(1, "one execution over HTTP/2");
}

async fn mcp_json_over_http2(store: Store) {
    mcp_tool_calls_over_http2(store, AnswerMode::Json).await;
}

async fn mcp_sse_over_http2(store: Store) {
    mcp_tool_calls_over_http2(store, AnswerMode::Sse).await;
}

store_tests!(mcp_json_over_http2, mcp_sse_over_http2);

/// How long the gateway keeps a connection open that opens HTTP/2 and then sends nothing:
/// over TLS (ALPN `h2`, not even the preface) and over h2c (the preface, then nothing).
async fn silent_http2_is_closed(tls: bool) -> Duration {
    use std::io::Read as _;
    use std::process::{Command, Stdio};
    use std::time::Instant;

    let ca = TestCa::new();
    let leaf = ca.leaf("gateway");
    let stack = Stack::start_with(Store::Memory, |b| {
        let b = b.server_option("header_read_timeout", "\"1s\"");
        if tls {
            b.extra_config(&format!(
                "\n[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
                leaf.cert.display(),
                leaf.key.display()
            ))
        } else {
            b.server_option("h2c", "true")
        }
    });
    let addr = stack.gateway.listen_addr();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        if tls {
            // s_client ends when the server closes; its stdin stays open and silent.
            let mut client = Command::new("timeout")
                .args(["20", "openssl", "s_client", "-alpn", "h2", "-quiet"])
                .arg("-connect")
                .arg(addr.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let _stdin = client.stdin.take();
            client.wait().unwrap();
        } else {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            std::io::Write::write_all(&mut stream, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
            let mut buf = [0u8; 1024];
            while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
        }
        started.elapsed()
    })
    .await
    .unwrap()
}

/// `header_read_timeout` also closes HTTP/2 connections that never send a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_http2_connections_are_closed() {
    for tls in [false, true] {
        let held = silent_http2_is_closed(tls).await;
        assert!(
            held < Duration::from_secs(10),
            "a silent HTTP/2 connection (tls: {tls}) was kept {held:?}"
        );
    }
}

/// Over `max_connections`, with every connection serving a request, an HTTP/2 client gets
/// `503 gateway_busy` with `Retry-After` in HTTP/2 (cleartext and TLS), not HTTP/1.1 bytes it
/// cannot read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_connection_cap_http2_gets_a_503_in_http2() {
    use std::process::{Child, Command, Stdio};

    const CAP: usize = 2;
    for tls in [false, true] {
        let ca = TestCa::new();
        let leaf = ca.leaf("gateway");
        let stack = Stack::start_with(Store::Memory, |b| {
            let b = b.server_option("max_connections", &CAP.to_string());
            if tls {
                b.extra_config(&format!(
                    "\n[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
                    leaf.cert.display(),
                    leaf.key.display()
                ))
            } else {
                b.server_option("h2c", "true")
            }
        });
        let addr = stack.gateway.listen_addr();
        let ca_file = ca.ca_file();
        // Connections serving a request the upstream holds (idle ones would give their place
        // to the new one).
        stack.upstream.hold();
        let mut busy_tcp = Vec::new();
        let mut busy_tls: Vec<Child> = Vec::new();
        for i in 0..CAP {
            let path = format!("/orders/held{i}");
            if tls {
                busy_tls.push(
                    Command::new("curl")
                        .args(["-sS", "--http1.1", "--max-time", "30", "--cacert"])
                        .arg(&ca_file)
                        .arg("--resolve")
                        .arg(format!("localhost:{}:127.0.0.1", addr.port()))
                        .arg(format!("https://localhost:{}{path}", addr.port()))
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap(),
                );
            } else {
                let mut stream = std::net::TcpStream::connect(addr).unwrap();
                std::io::Write::write_all(
                    &mut stream,
                    format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
                )
                .unwrap();
                busy_tcp.push(stream);
            }
        }
        stack.upstream.wait_for_count(CAP, ARRIVAL).await;
        let request = Request::plain("GET", "/orders/o1");
        let answer = h2_to(request, addr.port(), tls.then_some(ca_file.as_path()))
            .await
            .answer;
        answer.assert_unavailable("gateway_busy", "over the connection cap");
        stack.assert_executions(CAP, "nothing forwarded over the cap");
        stack.upstream.release();
        for mut child in busy_tls {
            let _ = child.wait();
        }
    }
}
