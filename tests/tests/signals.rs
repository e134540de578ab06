//! What each stop signal does (docs/operations.md, "Signals"): every one first finishes and
//! records the approved forwards in flight; then SIGTERM and SIGQUIT give other requests
//! `server.shutdown_grace`, SIGINT stops at once. And a SIGTERM with a forward in flight ends
//! with it recorded, within the documented grace: connect_timeout + timeout + 1 s, then
//! shutdown_grace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use poppy_e2e::gateway::http_client;
use poppy_e2e::{Request, Session, Stack, Store, store_tests};

const ARRIVAL: Duration = Duration::from_secs(10);

/// Long enough that a stop which waited for it is told apart from one that did not, on a
/// loaded machine.
const LONG_GRACE: &str = "20s";

/// SIGINT with an approved forward in flight: the forward is finished and recorded first, then
/// the gateway exits at once, without waiting `shutdown_grace`. Its answer gets a moment to be
/// written; whether or not it reached the client, the execution is recorded (Redis: a retry
/// after a restart replays it) and happened once.
async fn sigint_records_the_forward_then_stops_at_once(store: Store) {
    let mut stack = Stack::start_with(store, |b| {
        b.env("POPPY_GATEWAY__SERVER__SHUTDOWN_GRACE", LONG_GRACE)
    });
    let request = Request::exchange(&Session::signed_out("ses_int"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    stack.upstream.hold();
    let url = format!("{}/orders/o1/exchanges", stack.gateway.base_url());
    let in_flight = {
        let approved = approved.clone();
        // A raw request: the harness client panics on a cut connection, which SIGINT may cause.
        tokio::spawn(async move {
            let mut builder = http_client(Duration::from_secs(30)).post(url);
            for (name, value) in approved.wire_headers() {
                builder = builder.header(name.as_str(), value.as_str());
            }
            let answer = builder.body(approved.body.clone()).send().await.ok()?;
            Some(answer.status().as_u16())
        })
    };
    stack.upstream.wait_for_count(1, ARRIVAL).await;
    stack.gateway.signal("INT");
    assert!(
        stack
            .gateway
            .wait_for_exit(Duration::from_millis(500))
            .await
            .is_none(),
        "SIGINT cut an approved forward in flight"
    );
    stack.upstream.release();
    let released = Instant::now();
    let status = stack
        .gateway
        .wait_for_exit(Duration::from_secs(10))
        .await
        .expect("SIGINT stops well within shutdown_grace (20 s) once the forward is done");
    assert!(status.success(), "exit status {status}");
    eprintln!(
        "SIGINT with a forward in flight: exited {:?} after the upstream answered",
        released.elapsed()
    );
    let delivered = in_flight.await.expect("the in-flight request task");
    assert!(
        delivered.is_none_or(|status| status == 201),
        "the approved request got {delivered:?}"
    );
    let log = stack.gateway.log();
    assert!(log.contains("performed; answer recorded"), "{log}");
    if store == Store::Redis {
        stack.gateway.restart();
        let replay = stack.gateway.send(&approved).await;
        replay.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    }
    stack.assert_executions(1, "an approval forwarded across a SIGINT");
}

/// SIGQUIT is no socket-passing upgrade (the gateway has none): it stops like SIGTERM,
/// gracefully and with exit status 0.
async fn sigquit_stops_like_sigterm(store: Store) {
    let mut stack = Stack::start(store);
    stack.gateway.signal("QUIT");
    let status = stack
        .gateway
        .wait_for_exit(Duration::from_secs(15))
        .await
        .expect("the gateway exits after SIGQUIT");
    assert!(status.success(), "exit status {status}");
    let log = stack.gateway.log();
    assert!(log.contains("SIGQUIT"), "{log}");
}

/// SIGTERM while the upstream takes its time (well within `timeout`): the forward is finished
/// and recorded, not left unknown, and the gateway is gone within the grace the docs give a
/// container: connect_timeout + timeout + 1 s + shutdown_grace.
async fn sigterm_ends_recorded_within_the_documented_grace(store: Store) {
    let (connect, timeout, grace) = (1, 4, 1);
    let mut stack = Stack::start_with(store, |b| {
        b.upstream_connect_timeout(&format!("{connect}s"))
            .upstream_timeout(&format!("{timeout}s"))
            .env(
                "POPPY_GATEWAY__SERVER__SHUTDOWN_GRACE",
                &format!("{grace}s"),
            )
    });
    let documented = Duration::from_secs(connect + timeout + 1 + grace);
    let request = Request::exchange(&Session::signed_out("ses_grace"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    // A slow upstream: it answers after 2 s, half its timeout.
    stack.upstream.set_delay(Duration::from_secs(2));
    let client = stack.gateway.client();
    let in_flight = {
        let approved = approved.clone();
        tokio::spawn(async move { client.send(&approved).await })
    };
    stack.upstream.wait_for_count(1, ARRIVAL).await;
    let signalled = Instant::now();
    stack.gateway.terminate();
    let answer = in_flight.await.expect("the in-flight request task");
    answer.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    let status = stack
        .gateway
        .wait_for_exit(documented)
        .await
        .unwrap_or_else(|| panic!("still running {documented:?} after SIGTERM"));
    assert!(status.success(), "exit status {status}");
    let took = signalled.elapsed();
    let log = stack.gateway.log();
    assert!(!log.contains("outcome=\"unknown\""), "{log}");
    assert!(log.contains("performed; answer recorded"), "{log}");
    if store == Store::Redis {
        stack.gateway.restart();
        stack
            .gateway
            .send(&approved)
            .await
            .assert_replay_of(&answer, "a retry after the restart");
    }
    stack.assert_executions(1, "an approval forwarded across a SIGTERM");
    eprintln!(
        "SIGTERM with a 2 s forward in flight: exited after {took:?} (documented bound {documented:?})"
    );
}

/// SIGINT on an idle gateway: gone at once, not after `shutdown_grace`.
async fn sigint_on_an_idle_gateway_is_fast(store: Store) {
    let mut stack = Stack::start_with(store, |b| {
        b.env("POPPY_GATEWAY__SERVER__SHUTDOWN_GRACE", LONG_GRACE)
    });
    let signalled = Instant::now();
    stack.gateway.signal("INT");
    let status = stack
        .gateway
        .wait_for_exit(Duration::from_secs(10))
        .await
        .expect("SIGINT does not wait shutdown_grace (20 s)");
    assert!(status.success(), "exit status {status}");
    eprintln!("SIGINT, idle: exited after {:?}", signalled.elapsed());
}

store_tests!(
    sigint_records_the_forward_then_stops_at_once,
    sigquit_stops_like_sigterm,
    sigterm_ends_recorded_within_the_documented_grace,
    sigint_on_an_idle_gateway_is_fast,
);
