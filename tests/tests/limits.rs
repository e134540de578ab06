//! What one client can make the gateway hold is bounded (issues 11, 25): bodies held at once,
//! the time a request's body, head and TLS handshake may take, and connections open, within
//! the process's open-files limit. Each limit is tripped and its documented answer seen; what
//! a held body and an open connection cost is measured in the gateway's resident set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use poppy_e2e::curl::{self, Protocol};
use poppy_e2e::rawhttp;
use poppy_e2e::testtls::{LeafFiles, TestCa};
use poppy_e2e::{Request, Session, Stack, Store, store_tests, wait};
use serde_json::json;

const MIB: usize = 1024 * 1024;

/// An exchange whose ignored `note` makes the body just under 1 MiB.
fn big_exchange(session: &Session, order: &str) -> Request {
    let note = "n".repeat(MIB - 200);
    Request::exchange(session, order, "i1", "s1")
        .json(&json!({"item_id": "i1", "replacement_sku": "s1", "note": note}))
}

/// Bodies held at once stay within `max_held_body_bytes`: over it, `503 gateway_busy` with
/// `Retry-After`, nothing claimed (the same approval works later). A held 1 MiB body costs at
/// most 1.2 MiB of the gateway's resident memory (measured with the bodies held upstream).
async fn held_bodies_are_bounded(store: Store) {
    // Enough bodies that what one costs is measured, not the gateway's one-time costs.
    const HELD: usize = 32;
    let stack = Stack::start_with(store, |b| {
        b.max_body_bytes(MIB as u64)
            // Room for HELD bodies (each just under 1 MiB), not for one more.
            .server_option("max_held_body_bytes", &(HELD * MIB + MIB / 2).to_string())
    });
    let session = Session::signed_out("ses_big");
    let mut approved = Vec::new();
    for i in 0..=HELD {
        let request = big_exchange(&session, &format!("o{i}"));
        let op = stack.gateway.send(&request).await.operation();
        approved.push(request.approve(&op));
    }
    let extra = approved.pop().unwrap();
    // Measured after the mints, which read and parse the same bodies: what holding costs.
    let rss_before = stack.gateway.rss_kib();

    stack.upstream.hold();
    // The held requests wait for the release, after everything below.
    let client = stack.gateway.patient_client(Duration::from_secs(120));
    let mut sent = Vec::new();
    let mut rss_half = 0;
    for (i, request) in approved.into_iter().enumerate() {
        let client = client.clone();
        sent.push(tokio::spawn(async move { client.send(&request).await }));
        // One at a time: a debug build reads a 1 MiB body slowly enough that many at once
        // starve the store's connection (503 store_unavailable, nothing held).
        let held = i + 1;
        assert!(
            wait::until(Duration::from_secs(30), || stack.upstream.count() == held).await,
            "{} of {held} approved bodies reached the upstream",
            stack.upstream.count()
        );
        if held == HELD / 2 {
            rss_half = stack.gateway.rss_kib();
        }
    }
    let rss_held = stack.gateway.rss_kib();
    let mib_per_body = |kib: u64, bodies: usize| kib as f64 / bodies as f64 / 1024.0;
    let per_body = mib_per_body(rss_held.saturating_sub(rss_before), HELD);
    let marginal = mib_per_body(rss_held.saturating_sub(rss_half), HELD - HELD / 2);
    eprintln!(
        "{store:?}: RSS {rss_before} KiB before, {rss_held} KiB with {HELD} bodies of 1 MiB held: {per_body:.3} MiB per held MiB ({marginal:.3} for the last {})",
        HELD - HELD / 2
    );
    // What one more held body costs (the last 16): measured 1.13 to 1.18 (debug and release
    // builds, both stores): the body, pingora's 64 KiB body buffer and the request's state
    // (RELIABILITY.md, "What one client can hold"). The average over all 32 also carries what
    // the first approved forwards allocate once (about 2 MiB since the MCP streaming work of
    // issue 27: 1.20 to 1.22), so it gets its own, looser bound.
    assert!(
        marginal <= 1.2,
        "one more held 1 MiB body costs {marginal:.3} MiB of RSS"
    );
    assert!(
        per_body <= 1.25,
        "a held 1 MiB body costs {per_body:.3} MiB of RSS on average"
    );

    let busy = stack.gateway.send(&extra).await;
    busy.assert_error(503, "gateway_busy", "over max_held_body_bytes");
    assert_eq!(busy.header("retry-after"), Some("1"));
    assert_eq!(stack.upstream.count(), HELD, "nothing more forwarded");
    let metrics = stack.gateway.metrics().await;
    assert_eq!(
        metrics.value("poppy_limits_hit_total", &[("limit", "held_bodies")]),
        1.0
    );

    stack.upstream.release();
    for answer in sent {
        answer
            .await
            .unwrap()
            .assert_status(201, "a held body, released");
    }
    stack
        .gateway
        .send(&extra)
        .await
        .assert_status(201, "the refused approval was never claimed");
    assert_eq!(stack.upstream.count(), HELD + 1);
}

/// A body that does not arrive within `body_read_timeout` gets `408`; nothing is forwarded.
async fn a_slow_body_times_out(store: Store) {
    let stack = Stack::start_with(store, |b| b.server_option("body_read_timeout", "\"1s\""));
    let session = Session::signed_out("ses_slow");
    let head = format!(
        "POST /orders/o1/exchanges HTTP/1.1\r\nHost: x\r\nPoppy-Session: {}\r\nPoppy-Extensions: \"operations\";v=\"2\"\r\nContent-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{{\"item_id\"",
        session.header()
    );
    let started = Instant::now();
    let answer = tokio::task::spawn_blocking({
        let addr = stack.gateway.listen_addr();
        move || rawhttp::exchange(addr, head.as_bytes(), Duration::from_secs(20))
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        answer.status,
        408,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    stack.assert_executions(0, "a body that never arrived");
    let metrics = stack.gateway.metrics().await;
    assert_eq!(
        metrics.value("poppy_limits_hit_total", &[("limit", "body_timeout")]),
        1.0
    );
}

/// Send the start of a head that never ends to `addr`: whether the gateway closed the
/// connection (rather than answering), and after how long.
async fn unfinished_head(addr: SocketAddr, start: &'static [u8]) -> (bool, Duration) {
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.write_all(start).unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 256];
        let read = stream.read(&mut buf);
        (read.map(|n| n == 0).unwrap_or(true), started.elapsed())
    })
    .await
    .unwrap()
}

/// A gauge or counter of the gateway's metrics now.
async fn metric(stack: &Stack, name: &str, labels: &[(&str, &str)]) -> f64 {
    stack.gateway.metrics().await.value(name, labels)
}

/// Open `cap` idle connections to the proxy's listener and wait until the gateway counts
/// them all open (the admin listener is not capped).
async fn fill_to_the_cap(stack: &Stack, cap: usize) -> Vec<TcpStream> {
    let idle: Vec<TcpStream> = (0..cap)
        .map(|_| TcpStream::connect(stack.gateway.listen_addr()).unwrap())
        .collect();
    let accepted = wait::until_some(Duration::from_secs(20), || async {
        let open = metric(stack, "poppy_connections_open", &[]).await;
        (open >= cap as f64).then_some(open)
    })
    .await;
    assert!(accepted.is_some(), "the gateway accepted {cap} connections");
    idle
}

/// Open `cap` connections to the proxy's listener, each with a request the upstream holds
/// (the upstream's gate is closed, until the caller releases it): every connection serves.
async fn fill_with_held_requests(stack: &Stack, cap: usize) -> Vec<TcpStream> {
    stack.upstream.hold();
    let busy: Vec<TcpStream> = (0..cap)
        .map(|i| {
            let mut stream = TcpStream::connect(stack.gateway.listen_addr()).unwrap();
            write!(stream, "GET /orders/held{i} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            stream
        })
        .collect();
    stack
        .upstream
        .wait_for_count(cap, Duration::from_secs(30))
        .await;
    busy
}

/// `request` to `addr` gets `503 gateway_busy`.
async fn assert_busy(addr: SocketAddr, request: &[u8]) {
    let request = request.to_vec();
    let refused = tokio::task::spawn_blocking(move || {
        rawhttp::exchange(addr, &request, Duration::from_secs(10))
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        refused.status,
        503,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert!(String::from_utf8_lossy(&refused.body).contains("gateway_busy"));
}

/// A head that does not arrive within `header_read_timeout` (a slow client, or a kept-alive
/// connection that sends nothing more) is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_head_is_closed() {
    let stack = Stack::start_with(Store::Memory, |b| {
        b.server_option("header_read_timeout", "\"1s\"")
    });
    let (closed, after) = unfinished_head(
        stack.gateway.listen_addr(),
        b"POST /orders/o1/exchanges HTTP/1.1\r\nHost: x\r\n",
    )
    .await;
    assert!(closed, "the slow head was answered instead of closed");
    assert!(after < Duration::from_secs(10), "{after:?}");
    stack.assert_executions(0, "a head that never arrived");
    let metrics = stack.gateway.metrics().await;
    assert_eq!(
        metrics.value("poppy_limits_hit_total", &[("limit", "header_timeout")]),
        1.0
    );

    // A kept-alive connection that got its answer and sends nothing more: closed after
    // header_read_timeout too (pingora alone keeps it 60 s).
    let addr = stack.gateway.listen_addr();
    let after = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream
            .write_all(b"GET /orders/o1 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut received = Vec::new();
        let mut buf = [0u8; 4096];
        let mut answered = None;
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buf[..n]);
            if answered.is_none() && received.ends_with(b"}") {
                answered = Some(Instant::now());
            }
        }
        let text = String::from_utf8_lossy(&received).into_owned();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        answered.expect("an answer").elapsed()
    })
    .await
    .unwrap();
    assert!(
        after < Duration::from_secs(10),
        "a kept-alive connection was held {after:?} after its answer"
    );
    assert_eq!(
        metric(
            &stack,
            "poppy_limits_hit_total",
            &[("limit", "header_timeout")]
        )
        .await,
        2.0
    );
}

/// At most `max_connections` are open. At the cap a new connection takes the place of the one
/// that has waited longest for a request (closed); when every connection serves a request,
/// the next gets `503 gateway_busy` and is closed, and once one closes a new one is served.
/// An idle connection's cost is measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_capped() {
    const CAP: usize = 200;
    let stack = Stack::start_with(Store::Memory, |b| {
        b.server_option("max_connections", &CAP.to_string())
    });
    let addr = stack.gateway.listen_addr();
    let rss_before = stack.gateway.rss_kib();
    let idle = fill_to_the_cap(&stack, CAP).await;
    let rss_open = stack.gateway.rss_kib();
    eprintln!(
        "RSS {rss_before} KiB before, {rss_open} KiB with {CAP} idle connections: {:.1} KiB each",
        rss_open.saturating_sub(rss_before) as f64 / CAP as f64
    );
    let request = b"GET /anything HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let served = rawhttp::exchange(addr, request, Duration::from_secs(10)).unwrap();
    assert_eq!(served.status, 200, "an idle connection gave its place");
    assert_eq!(
        metric(
            &stack,
            "poppy_limits_hit_total",
            &[("limit", "connections_reclaimed")]
        )
        .await,
        1.0
    );
    assert_eq!(
        metric(&stack, "poppy_connections_max", &[]).await,
        CAP as f64
    );
    drop(idle);
    let closed = wait::until_some(Duration::from_secs(10), || async {
        (metric(&stack, "poppy_connections_open", &[]).await == 0.0).then_some(())
    })
    .await;
    assert!(closed.is_some(), "the idle connections were counted closed");

    let mut busy = fill_with_held_requests(&stack, CAP).await;
    assert_busy(addr, request).await;
    assert_eq!(
        metric(
            &stack,
            "poppy_limits_hit_total",
            &[("limit", "connections")]
        )
        .await,
        1.0
    );
    assert_eq!(
        stack.upstream.count(),
        CAP + 1,
        "the held requests and the one before: nothing forwarded over the cap"
    );

    stack.upstream.release();
    busy.truncate(CAP - 1);
    let served = wait::until(Duration::from_secs(10), || {
        rawhttp::exchange(addr, request, Duration::from_secs(5)).is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(served, "a connection under the cap is served again");
    drop(busy);
}

/// `[server.tls]` with `leaf`.
fn tls_config(leaf: &LeafFiles) -> String {
    format!(
        "\n[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        leaf.cert.display(),
        leaf.key.display()
    )
}

/// A TLS connection counts against `max_connections` from the moment it is accepted, and its
/// handshake must be done within `header_read_timeout` (pingora alone handshakes outside every
/// limit and gives a handshake 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_handshakes_count_and_have_the_header_deadline() {
    const SILENT: usize = 5;
    let ca = TestCa::new();
    let leaf = ca.leaf("gateway");
    let stack = Stack::start_with(Store::Memory, |b| {
        b.server_option("header_read_timeout", "\"2s\"")
            .extra_config(&tls_config(&leaf))
    });
    let addr = stack.gateway.listen_addr();
    let started = Instant::now();
    let silent: Vec<TcpStream> = (0..SILENT)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let counted = wait::until_some(Duration::from_secs(10), || async {
        (metric(&stack, "poppy_connections_open", &[]).await == SILENT as f64).then_some(())
    })
    .await;
    assert!(
        counted.is_some(),
        "{SILENT} connections in their TLS handshake are counted open"
    );
    let held = tokio::task::spawn_blocking(move || {
        let mut held = Duration::ZERO;
        for mut stream in silent {
            stream
                .set_read_timeout(Some(Duration::from_secs(90)))
                .unwrap();
            let mut buf = [0u8; 64];
            let read = stream.read(&mut buf);
            assert!(
                matches!(read, Ok(0) | Err(_)),
                "closed without a byte: {read:?}"
            );
            held = held.max(started.elapsed());
        }
        held
    })
    .await
    .unwrap();
    eprintln!("{SILENT} silent TLS connections were closed after {held:?}");
    assert!(held < Duration::from_secs(10), "held {held:?}");
    assert_eq!(
        metric(
            &stack,
            "poppy_limits_hit_total",
            &[("limit", "header_timeout")]
        )
        .await,
        SILENT as f64
    );
    assert_eq!(metric(&stack, "poppy_connections_open", &[]).await, 0.0);
}

/// With the gateway at 512 open files, 600 TCP connections that never send a byte (nor a TLS
/// ClientHello) and stay open do not lock clients out: `max_connections` is fitted under the
/// limit, each new connection takes the place of the one that has waited longest, and a
/// client is served at once (before: after the 60 s handshake deadline on TLS, after
/// `header_read_timeout` in cleartext, as accept failed for want of descriptors).
async fn a_flood_of_silent_connections(tls: bool) -> Duration {
    const OPEN_FILES: u64 = 512;
    const SILENT: usize = 600;
    let ca = TestCa::new();
    let leaf = ca.leaf("gateway");
    let stack = Stack::start_with(Store::Memory, |b| {
        let b = b.open_files_limit(OPEN_FILES);
        if tls {
            b.extra_config(&tls_config(&leaf))
        } else {
            b
        }
    });
    let addr = stack.gateway.listen_addr();
    let cap = metric(&stack, "poppy_connections_max", &[]).await;
    assert!(
        cap > 0.0 && cap < OPEN_FILES as f64,
        "max_connections fitted under the limit: {cap}"
    );
    let silent = tokio::task::spawn_blocking(move || {
        (0..SILENT)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    // Every one accepted: open, or closed to make room for a later one.
    let accepted = wait::until_some(Duration::from_secs(30), || async {
        let metrics = stack.gateway.metrics().await;
        let open = metrics.value("poppy_connections_open", &[]);
        let reclaimed = metrics.value(
            "poppy_limits_hit_total",
            &[("limit", "connections_reclaimed")],
        );
        (open + reclaimed >= SILENT as f64).then_some((open, reclaimed))
    })
    .await;
    assert!(
        accepted.is_some(),
        "the gateway took all {SILENT} connections"
    );
    let started = Instant::now();
    let port = addr.port();
    let ca_file = ca.ca_file();
    let status = tokio::task::spawn_blocking(move || {
        if tls {
            curl::send(
                &Request::plain("GET", "/orders/o1"),
                port,
                Some(&ca_file),
                Protocol::Http1,
            )
            .answer
            .status
        } else {
            rawhttp::exchange(
                addr,
                b"GET /orders/o1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                Duration::from_secs(90),
            )
            .map_or(0, |r| r.status)
        }
    })
    .await
    .unwrap();
    let waited = started.elapsed();
    assert_eq!(status, 200, "a client among {SILENT} silent connections");
    let metrics = stack.gateway.metrics().await;
    let fds = metrics.value("process_open_fds", &[]);
    eprintln!(
        "tls: {tls}: {SILENT} silent connections held, max_connections fitted to {cap}, {fds} files open: a client was served after {waited:?}"
    );
    assert!(fds < OPEN_FILES as f64, "{fds} files open");
    let log = stack.gateway.log();
    assert!(
        !log.contains("Too many open files"),
        "the gateway ran out of descriptors:\n{log}"
    );
    drop(silent);
    waited
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_connections_does_not_lock_clients_out() {
    for tls in [true, false] {
        let waited = a_flood_of_silent_connections(tls).await;
        assert!(
            waited < Duration::from_secs(5),
            "tls: {tls}: a client waited {waited:?}"
        );
    }
}

store_tests!(held_bodies_are_bounded, a_slow_body_times_out);

/// The conversations service's listener has the proxy's limits: its connections count
/// against the one `max_connections` (over it, with every connection serving: `503
/// gateway_busy`), a head that does not
/// arrive within `header_read_timeout` is closed, and a call's body counts against
/// `max_held_body_bytes` (over it: `503 gateway_busy`, nothing performed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conversations_listener_has_the_proxys_limits() {
    use poppy_e2e::conversations::{Service, Turn, approval_message};
    const CAP: usize = 20;
    let stack = Stack::start_with(Store::Memory, |b| {
        b.conversations()
            .server_option("max_connections", &CAP.to_string())
            .server_option("header_read_timeout", "\"1s\"")
            .max_body_bytes(2048)
            .server_option("max_held_body_bytes", "4096")
    });
    let service_addr: std::net::SocketAddr = stack
        .gateway
        .conversations_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();

    // A body over the held-bodies budget: refused before anything is performed.
    let service = Service::of(&stack.gateway);
    let turn = Turn::exchange(
        "conv_big",
        &Session::signed_out("ses_big"),
        "o1",
        "i1",
        "s1",
    );
    let operation = service.proposed(&turn).await;
    let mut message = approval_message("msg_big_1", &operation);
    message["text"] = json!("t".repeat(8192));
    let busy = service.perform(&turn, &message).await;
    busy.assert_error(503, "gateway_busy", "a call over max_held_body_bytes");
    assert_eq!(busy.header("retry-after"), Some("1"));
    stack.assert_executions(0, "a call over the budget");

    // A head that never ends is closed.
    let (closed, after) =
        unfinished_head(service_addr, b"POST /v1/perform HTTP/1.1\r\nHost: x\r\n").await;
    assert!(closed, "the slow head was answered instead of closed");
    assert!(after < Duration::from_secs(10), "{after:?}");

    // The proxy's listener holds every connection the cap allows, each serving a request:
    // the service's next is refused, and served again once one closes.
    let busy = fill_with_held_requests(&stack, CAP).await;
    let request = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_busy(service_addr, request).await;
    stack.upstream.release();
    drop(busy);
    let served = wait::until(Duration::from_secs(10), || {
        rawhttp::exchange(service_addr, request, Duration::from_secs(5))
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(served, "the service is served again under the cap");
}

/// At most `max_upstream_connections` requests use an upstream connection at once; the next
/// waits up to the route's `connect_timeout` for one to come free, then gets `503
/// gateway_busy` with `Retry-After` (nothing forwarded); once one is free, requests go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_capped() {
    const CAP: usize = 2;
    let stack = Stack::start_with(Store::Memory, |b| {
        b.server_option("max_upstream_connections", &CAP.to_string())
            .upstream_connect_timeout("1s")
    });
    assert_eq!(
        metric(&stack, "poppy_upstream_connections_max", &[]).await,
        CAP as f64
    );
    let busy = fill_with_held_requests(&stack, CAP).await;
    assert_eq!(
        metric(&stack, "poppy_upstream_connections_in_use", &[]).await,
        CAP as f64
    );
    let started = Instant::now();
    let refused = stack
        .gateway
        .send(&Request::plain("GET", "/orders/o1"))
        .await;
    refused.assert_error(503, "gateway_busy", "over max_upstream_connections");
    assert_eq!(refused.header("retry-after"), Some("1"));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "waited {waited:?} for an upstream connection"
    );
    assert_eq!(stack.upstream.count(), CAP, "nothing more forwarded");
    assert_eq!(
        metric(
            &stack,
            "poppy_limits_hit_total",
            &[("limit", "upstream_connections")]
        )
        .await,
        1.0
    );
    stack.upstream.release();
    stack
        .gateway
        .send(&Request::plain("GET", "/orders/o1"))
        .await
        .assert_status(200, "an upstream connection came free");
    drop(busy);
}

/// The conversations service's calls use the upstream (a lookup, the approved forward) and
/// count against the same `max_upstream_connections` as proxied requests: with the cap taken
/// by a held request, a proposal waits `connect_timeout` and gets `503 gateway_busy` (nothing
/// forwarded); once a connection is free it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversation_calls_count_against_the_upstream_connection_cap() {
    use poppy_e2e::conversations::{Service, Turn};
    let stack = Stack::start_with(Store::Memory, |b| {
        b.conversations()
            .server_option("max_upstream_connections", "1")
            .upstream_connect_timeout("1s")
    });
    let service = Service::of(&stack.gateway);
    let busy = fill_with_held_requests(&stack, 1).await;
    let turn = Turn::exchange(
        "conv_cap",
        &Session::signed_out("ses_conv_cap"),
        "o1",
        "i1",
        "s1",
    );
    let refused = service.propose(&turn).await;
    refused.assert_error(503, "gateway_busy", "a proposal over the cap");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(stack.upstream.count(), 1, "nothing more forwarded");
    stack.upstream.release();
    service.proposed(&turn).await;
    drop(busy);
}
