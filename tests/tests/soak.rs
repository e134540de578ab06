//! A soak: the traffic of agents as they are (a new Session JWT per request, verified against
//! the agent's published keys) at a steady rate, for as long as asked. It asserts
//! what an operator relies on over hours: every request answered as it should be, every
//! approved operation executed once, no ERROR line without a failure behind it; and it prints
//! the gateway's resident set once a minute (RELIABILITY.md, "Memory over time").
//!
//! In the suite it runs for 15 seconds on each store. For the hour-long figure (release build):
//!
//!     cargo build --release -p poppy-gateway
//!     POPPY_GATEWAY_BIN=target/release/poppy-gateway POPPY_SOAK=60m \
//!         POPPY_SOAK_RSS=/tmp/soak-rss.csv cargo test -p poppy-e2e --test soak redis -- --nocapture
//!
//! `POPPY_SOAK_RATE` sets the requests per second (default 50).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::time::{Duration, Instant};

use poppy_e2e::test_agent::TestAgent;
use poppy_e2e::{Request, Stack, Store, store_tests};

/// Each cycle sends these ten requests: what a day of agent traffic on a fronted API is made
/// of, mostly reads.
const CYCLE: usize = 10;

fn soak_length() -> Duration {
    match std::env::var("POPPY_SOAK") {
        Ok(text) => parse_minutes_or_seconds(&text),
        Err(_) => Duration::from_secs(15),
    }
}

fn parse_minutes_or_seconds(text: &str) -> Duration {
    let text = text.trim();
    let (number, unit) = text.split_at(text.len() - 1);
    let n: u64 = number.parse().expect("POPPY_SOAK: like 20s or 60m");
    match unit {
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => panic!("POPPY_SOAK: like 20s, 60m or 1h"),
    }
}

store_tests!(a_soak_answers_every_request_executes_each_approval_once_and_logs_no_error);

async fn a_soak_answers_every_request_executes_each_approval_once_and_logs_no_error(store: Store) {
    let length = soak_length();
    let rate: u64 = std::env::var("POPPY_SOAK_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(50);
    let agent = TestAgent::start();
    let stack = Stack::start_with(store, |b| agent.configure(b));
    let client = stack.gateway.client();
    let mut rss_out = std::env::var("POPPY_SOAK_RSS")
        .ok()
        .map(|path| std::fs::File::create(path).unwrap());
    if let Some(out) = rss_out.as_mut() {
        writeln!(out, "seconds,requests,rss_kib").unwrap();
    }

    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 * CYCLE as u64 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_sample = Duration::ZERO;
    let (mut cycles, mut approvals) = (0usize, 0usize);
    while started.elapsed() < length {
        tick.tick().await;
        if started.elapsed() >= next_sample {
            let rss = stack.gateway.rss_kib();
            let secs = started.elapsed().as_secs();
            eprintln!(
                "soak: {secs:>5} s, {:>7} requests, RSS {rss} KiB",
                cycles * CYCLE
            );
            if let Some(out) = rss_out.as_mut() {
                writeln!(out, "{secs},{},{rss}", cycles * CYCLE).unwrap();
            }
            next_sample += Duration::from_secs(60);
        }
        // A new Session every cycle, as a user's new conversation; a new JWT per request.
        let session = agent.signed_in(&format!("ses_soak_{cycles}"), "acct_soak");
        for read in 0..5 {
            let path = format!("/orders/o{cycles}-{read}");
            client
                .send(&Request::agent("GET", &path, &session))
                .await
                .assert_status(200, "an agent's read");
        }
        client
            .send(&Request::plain("GET", &format!("/catalog/{cycles}")))
            .await
            .assert_status(200, "the company's own app");
        let exchange = Request::exchange(&session, &format!("ord_{cycles}"), "itm_1", "sku-m");
        let op = client.send(&exchange).await.operation();
        let approved = exchange.clone().approve(&op);
        client
            .send(&approved)
            .await
            .assert_status(201, "the approved exchange");
        approvals += 1;
        client
            .send(&approved)
            .await
            .assert_status(201, "a retry of it, replayed");
        client
            .send(
                &Request::agent("POST", "/orders/o1/exchanges", &session)
                    .body(b"{\"item_id\":".to_vec(), "application/json"),
            )
            .await
            .assert_error(400, "invalid_body", "a truncated body");
        cycles += 1;
    }
    let rss = stack.gateway.rss_kib();
    eprintln!(
        "soak: {} s, {} requests, {approvals} approvals, RSS {rss} KiB at the end",
        started.elapsed().as_secs(),
        cycles * CYCLE
    );
    if let Some(out) = rss_out.as_mut() {
        writeln!(
            out,
            "{},{},{rss}",
            started.elapsed().as_secs(),
            cycles * CYCLE
        )
        .unwrap();
    }

    // Passthrough requests count too: 6 per cycle, and one execution per approval.
    stack.assert_executions(cycles * 6 + approvals, "each approval executed once");
    let log = stack.gateway.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(
        errors.is_empty(),
        "{} ERROR lines in a soak in which every request succeeded; the first: {:?}",
        errors.len(),
        errors.first()
    );
}
