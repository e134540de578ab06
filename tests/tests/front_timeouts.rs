//! Each passthrough timeout tripped by an upstream that stalls: connect (a listener whose
//! accept queue is full), write (an upstream that stops reading a large body), idle (a pooled
//! upstream connection closed after `idle_timeout`, counted by the connections the upstream
//! accepts). The client always gets JSON without the upstream's address.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use poppy_e2e::tcp_front::CountingFront;
use poppy_e2e::upstream::Upstream;
use poppy_e2e::{GatewayBuilder, Request, rawhttp};
use serde_json::Value;
use tokio::net::{TcpSocket, TcpStream};

/// The error body of a gateway answer must not name the upstream.
fn assert_no_address(text: &str, upstream: SocketAddr) {
    assert!(
        !text.contains(&upstream.port().to_string()) && !text.contains("127.0.0.1"),
        "the answer names the upstream: {text}"
    );
}

/// A listener with a backlog of 0 that never accepts, its accept queue filled: the kernel
/// drops further SYNs, so a connect to it neither succeeds nor is refused.
fn full_listener() -> (tokio::net::TcpListener, Vec<std::net::TcpStream>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    // Connect until one connect hangs: the queue is full from then on.
    for _ in 0..64 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(stream) => fillers.push(stream),
            Err(_) => return (listener, fillers),
        }
    }
    panic!("the accept queue of {addr} never filled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_accepts_no_connection_trips_the_connect_timeout_with_a_json_504() {
    let (listener, _fillers) = full_listener();
    let addr = listener.local_addr().unwrap();
    let gateway = GatewayBuilder::new(&format!("http://{addr}"))
        .upstream_connect_timeout("300ms")
        .start();
    let started = Instant::now();
    let answer = gateway.send(&Request::plain("GET", "/orders/o1")).await;
    let waited = started.elapsed();
    let body = answer.assert_error(504, "upstream_timeout", "a connect that never completes");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("accept a connection"),
        "{body}"
    );
    assert_no_address(&body.to_string(), addr);
    assert!(
        waited < Duration::from_secs(5),
        "connect_timeout is 300ms, waited {waited:?}"
    );
    assert!(
        gateway.log().contains(&addr.port().to_string()),
        "the log keeps the detail"
    );
}

/// Accepts connections and never reads from them, with a small receive buffer so a large
/// body stops flowing soon.
async fn upstream_that_stops_reading() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held: Vec<TcpStream> = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_reading_a_large_body_trips_the_write_timeout_with_a_json_504() {
    let (addr, stalled) = upstream_that_stops_reading().await;
    let gateway = GatewayBuilder::new(&format!("http://{addr}"))
        // After a failed write pingora still reads for an early answer (an upstream may
        // refuse a body with 413 before reading it): the answer comes within write_timeout +
        // read_timeout, as docs/configuration.md says.
        .upstream_line("write_timeout = \"300ms\"\nread_timeout = \"1s\"")
        .start();
    // More than the socket buffers on the way can take, so the gateway's writes stall.
    let size = 48 * 1024 * 1024;
    let mut request = format!(
        "PUT /uploads/big HTTP/1.1\r\nHost: api\r\nContent-Type: application/octet-stream\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    request.resize(request.len() + size, b'x');
    let listen = gateway.listen_addr();
    let started = Instant::now();
    let response = tokio::task::spawn_blocking(move || {
        rawhttp::exchange(listen, &request, Duration::from_secs(20))
    })
    .await
    .unwrap()
    .unwrap();
    let waited = started.elapsed();
    stalled.abort();
    assert_eq!(response.status, 504, "{}", response.head);
    assert!(
        response
            .head
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{}",
        response.head
    );
    let body: Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(body["error"], "upstream_timeout", "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("take the request"),
        "{body}"
    );
    assert_no_address(&body.to_string(), addr);
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
}

/// Two GETs, a pause of `pause`, a third GET: how many upstream connections they took.
async fn connections_across_a_pause(idle_timeout: &str, pause: Duration) -> (usize, usize) {
    let upstream = Upstream::start();
    let front = CountingFront::start(upstream.addr()).await;
    let gateway = GatewayBuilder::new(&front.url())
        .upstream_line(&format!("idle_timeout = \"{idle_timeout}\""))
        .start();
    for path in ["/orders/o1", "/orders/o2"] {
        gateway
            .send(&Request::plain("GET", path))
            .await
            .assert_status(200, "passthrough");
    }
    assert_eq!(
        front.accepted(),
        1,
        "the second GET reuses the pooled connection"
    );
    let before = front.closed();
    // The pause is what is under test: the pool must close its connection within it.
    tokio::time::sleep(pause).await;
    let closed_while_idle = front.closed() - before;
    gateway
        .send(&Request::plain("GET", "/orders/o3"))
        .await
        .assert_status(200, "passthrough after the pause");
    assert_eq!(upstream.count(), 3);
    (front.accepted(), closed_while_idle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_upstream_connection_is_closed_after_the_idle_timeout() {
    let (accepted, closed) = connections_across_a_pause("300ms", Duration::from_millis(1500)).await;
    assert_eq!(
        closed, 1,
        "the idle pooled connection was closed by the gateway"
    );
    assert_eq!(accepted, 2, "the next request opened a new connection");

    // With the default (60s) the same pause keeps the connection.
    let (accepted, closed) = connections_across_a_pause("60s", Duration::from_millis(1500)).await;
    assert_eq!((accepted, closed), (1, 0), "the pooled connection was kept");
}
