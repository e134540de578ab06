//! The admin port: `/healthz`, `/readyz`, and the `/metrics` counters of outcomes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::metrics::Metrics;
use poppy_e2e::{Request, Session, Stack, Store, store_tests, tamper, wait};

async fn health_and_readiness(store: Store) {
    let stack = Stack::start(store);
    stack
        .gateway
        .admin_get("/healthz")
        .await
        .assert_status(200, "GET /healthz");
    stack
        .gateway
        .admin_get("/readyz")
        .await
        .assert_status(200, "GET /readyz");
    stack
        .gateway
        .admin_get("/readyz/store")
        .await
        .assert_status(200, "GET /readyz/store with the store reachable");
}

const OUTCOMES: [&str; 5] = ["held", "performed", "replayed", "in_progress", "rejected"];

fn deltas(before: &Metrics, after: &Metrics) -> Vec<(&'static str, f64)> {
    OUTCOMES
        .iter()
        .map(|outcome| {
            (
                *outcome,
                after.operations("exchange", outcome) - before.operations("exchange", outcome),
            )
        })
        .collect()
}

/// Assert the exchange counters moved by `expected` (outcomes not named: by 0, except those
/// in `ignore`).
fn assert_moved(
    before: &Metrics,
    after: &Metrics,
    expected: &[(&str, f64)],
    ignore: &[&str],
    step: &str,
) {
    for (outcome, delta) in deltas(before, after) {
        if ignore.contains(&outcome) {
            continue;
        }
        let want = expected
            .iter()
            .find(|(o, _)| *o == outcome)
            .map_or(0.0, |(_, d)| *d);
        assert_eq!(
            delta, want,
            "{step}: poppy_operations_total{{operation=\"exchange\",outcome=\"{outcome}\"}} moved \
             by {delta}, expected {want}. /metrics now:\n{}",
            after.text
        );
    }
}

/// `/metrics` once every counter in `expected` moved (counters may move just after the answer
/// is sent), then assert every exchange counter moved by exactly what `expected` says.
async fn settled(
    stack: &Stack,
    before: &Metrics,
    expected: &[(&str, f64)],
    ignore: &[&str],
    step: &str,
) -> Metrics {
    let reached = wait::until_some(Duration::from_secs(5), || async {
        let now = stack.gateway.metrics().await;
        expected
            .iter()
            .all(|(outcome, delta)| {
                now.operations("exchange", outcome) - before.operations("exchange", outcome)
                    >= *delta
            })
            .then_some(now)
    })
    .await;
    let now = match reached {
        Some(now) => now,
        None => stack.gateway.metrics().await,
    };
    assert_moved(before, &now, expected, ignore, step);
    now
}

async fn metrics_count_outcomes(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_metrics");
    let request = Request::exchange(&session, "o1", "i1", "s1");

    let start = stack.gateway.metrics().await;
    let op = stack.gateway.send(&request).await.operation();
    let minted = settled(&stack, &start, &[("held", 1.0)], &[], "mint").await;
    assert!(
        minted
            .text
            .contains("poppy_operations_total{operation=\"exchange\",outcome=\"held\"}"),
        "/metrics must expose poppy_operations_total{{operation=\"exchange\",outcome=\"held\"}}:\n{}",
        minted.text
    );

    let approved = request.clone().approve(&op);
    let in_flight = stack.send_held(&approved, 1).await;
    stack
        .gateway
        .send(&approved)
        .await
        .assert_unavailable("operation_in_progress", "a retry while in flight");
    let during = settled(
        &stack,
        &minted,
        &[("in_progress", 1.0)],
        &[],
        "retry in flight",
    )
    .await;
    stack.upstream.release();
    in_flight
        .await
        .expect("the approved request")
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    let performed = settled(&stack, &during, &[("performed", 1.0)], &[], "approve").await;

    stack
        .gateway
        .send(&approved)
        .await
        .assert_status(201, "a replay");
    let replayed = settled(&stack, &performed, &[("replayed", 1.0)], &[], "replay").await;

    let other = Request::exchange(&session, "o1", "i2", "s1");
    let other_op = stack.gateway.send(&other).await.operation();
    let minted_other = settled(&stack, &replayed, &[("held", 1.0)], &[], "second mint").await;
    stack
        .gateway
        .send(&other.approve(&other_op.with_revision(&tamper(&other_op.revision))))
        .await
        .operation_in("a tampered approval");
    // Whether the fresh operation also counts as `held` is the gateway's choice.
    settled(
        &stack,
        &minted_other,
        &[("rejected", 1.0)],
        &["held"],
        "tampered approval",
    )
    .await;
    stack.assert_executions(1, "the scripted sequence");
}

store_tests!(health_and_readiness, metrics_count_outcomes);
