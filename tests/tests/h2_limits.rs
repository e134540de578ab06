//! HTTP/2 under the gateway's limits (issue 25): many streams on few connections take a
//! bounded number of upstream connections, and a body in many small DATA frames is read and
//! answered like any other.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use poppy_e2e::h2client::H2Connection;
use poppy_e2e::tcp_front::CountingFront;
use poppy_e2e::upstream::Upstream;
use poppy_e2e::{GatewayBuilder, Request, Session};
use serde_json::json;

/// Streams of HTTP/2 connections each hold an upstream connection while they are forwarded:
/// however many streams the clients open, at most `max_upstream_connections` requests are at
/// the upstream at once (and at most as many connections more idle in the pool), and every
/// request is answered: the excess waits for a free connection, a stream over the
/// connection's `max_streams_per_connection` waits for the client to open it. So the
/// gateway's open files stay within its own, the client connections and twice the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_take_a_bounded_number_of_upstream_connections() {
    // The figures: 20 clients (the connection cap) of 100 streams each.
    const CONNECTIONS: usize = 20;
    const STREAMS: usize = 100;
    const UPSTREAM_CAP: usize = 64;
    const PER_CONNECTION: usize = 32;
    let upstream = Upstream::start();
    // Long enough that the streams overlap, short enough that each waits little.
    upstream.set_delay(Duration::from_millis(20));
    let front = CountingFront::start(upstream.addr()).await;
    let gateway = GatewayBuilder::new(&front.url())
        .server_option("h2c", "true")
        .server_option("max_connections", &CONNECTIONS.to_string())
        .server_option("max_upstream_connections", &UPSTREAM_CAP.to_string())
        .server_option("max_streams_per_connection", &PER_CONNECTION.to_string())
        .start();
    let mut connections = Vec::new();
    for _ in 0..CONNECTIONS {
        connections.push(H2Connection::open(gateway.listen_addr()).await);
    }
    assert_eq!(connections[0].max_streams(), PER_CONNECTION);
    let pid = gateway.pid().unwrap();
    let files_before = open_files(pid);
    let sampling = Arc::new(AtomicBool::new(true));
    let peak_files = std::thread::spawn({
        let sampling = Arc::clone(&sampling);
        move || {
            let mut peak = 0;
            while sampling.load(Ordering::SeqCst) {
                peak = peak.max(open_files(pid));
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        }
    });
    let mut sent = Vec::new();
    for (c, connection) in connections.iter().enumerate() {
        for s in 0..STREAMS {
            let connection = connection.clone();
            sent.push(tokio::spawn(async move {
                let request = Request::plain("GET", &format!("/orders/o{c}-{s}"));
                connection.send(&request, 1).await
            }));
        }
    }
    for (i, answer) in sent.into_iter().enumerate() {
        answer
            .await
            .unwrap()
            .answer(&format!("stream {i}"))
            .assert_status(200, "a stream over the caps waits, it is not refused");
    }
    sampling.store(false, Ordering::SeqCst);
    let peak_files = peak_files.join().unwrap();
    assert_eq!(upstream.count(), CONNECTIONS * STREAMS);
    eprintln!(
        "{} streams on {CONNECTIONS} connections: {} upstream connections made, at most {} open and {} requests in flight at once; the gateway's open files went from {files_before} to at most {peak_files}",
        CONNECTIONS * STREAMS,
        front.accepted(),
        front.peak(),
        upstream.peak_in_flight()
    );
    // Its own files, the client connections, the upstream connections in use and pooled.
    assert!(
        peak_files <= files_before + CONNECTIONS + 2 * UPSTREAM_CAP,
        "{peak_files} files open"
    );
    assert!(
        upstream.peak_in_flight() <= UPSTREAM_CAP,
        "{} requests in flight at the upstream at once (cap {UPSTREAM_CAP})",
        upstream.peak_in_flight()
    );
    // Each connection in use may leave one idle in pingora's pool; the pool, racing its own
    // idle watcher, now and then opens a connection while an idle one is closing.
    assert!(
        front.peak() <= 2 * UPSTREAM_CAP,
        "{} upstream connections open at once (cap {UPSTREAM_CAP} in use, as many pooled)",
        front.peak()
    );
}

/// The files process `pid` has open.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

/// A body in many small DATA frames, on a policy route and on passthrough, is read whole and
/// answered (pingora's HTTP/2 server once sent GOAWAY past about 150 frames).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_in_many_data_frames_is_answered() {
    let upstream = Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url())
        .server_option("h2c", "true")
        .start();
    let connection = H2Connection::open(gateway.listen_addr()).await;
    let session = Session::signed_out("ses_frames");
    let note = "n".repeat(4000);
    for frames in [10, 150, 400, 1000] {
        let exchange = Request::exchange(&session, &format!("o{frames}"), "i1", "s1")
            .json(&json!({"item_id": "i1", "replacement_sku": "s1", "note": note}));
        connection
            .send(&exchange, frames)
            .await
            .answer(&format!("a policy route's body in {frames} DATA frames"))
            .operation_in(&format!("{frames} DATA frames"));
        let plain = Request::plain("POST", "/orders/o1/notes").json(&json!({"note": note}));
        connection
            .send(&plain, frames)
            .await
            .answer(&format!("a passthrough body in {frames} DATA frames"))
            .assert_status(201, "passthrough");
    }
}

/// `CONNECT` over HTTP/2 gets the gateway's JSON `405`, as over HTTP/1.1 (pingora refused it
/// with an empty body), and the connection goes on serving; nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_over_http2_gets_the_json_405() {
    let upstream = Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url())
        .server_option("h2c", "true")
        .start();
    let connection = H2Connection::open(gateway.listen_addr()).await;
    connection
        .send(&Request::plain("CONNECT", "shop.example:443"), 1)
        .await
        .answer("CONNECT over HTTP/2")
        .assert_error(405, "method_not_allowed", "CONNECT is never tunnelled");
    connection
        .send(&Request::plain("GET", "/orders/o1"), 1)
        .await
        .answer("the next stream of the connection")
        .assert_status(200, "passthrough after the refusal");
    assert_eq!(upstream.count(), 1, "only the GET reached the upstream");
}
