//! `/metrics` after a scripted sequence: every counter, gauge and histogram the gateway
//! exports moves by exactly what the sequence did (or, for store calls whose number is the
//! flow's own business, at least moves).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::metrics::Metrics;
use poppy_e2e::{Request, Session, Stack, Store, store_tests, tamper, wait};

const SETTLE: Duration = Duration::from_secs(5);

/// One expected change: metric, labels, by how much.
type Expect = (&'static str, &'static [(&'static str, &'static str)], f64);

fn delta(before: &Metrics, after: &Metrics, name: &str, labels: &[(&str, &str)]) -> f64 {
    after.value(name, labels) - before.value(name, labels)
}

/// Scrape until every expectation is reached (counters may move just after the answer is
/// sent), then assert each moved by exactly its amount.
async fn settled(stack: &Stack, before: &Metrics, expected: &[Expect], step: &str) -> Metrics {
    let reached = wait::until_some(SETTLE, || async {
        let now = stack.gateway.metrics().await;
        expected
            .iter()
            .all(|(name, labels, by)| {
                let moved = delta(before, &now, name, labels);
                if *by < 0.0 {
                    moved <= *by
                } else {
                    moved >= *by
                }
            })
            .then_some(now)
    })
    .await;
    let now = match reached {
        Some(now) => now,
        None => stack.gateway.metrics().await,
    };
    for (name, labels, by) in expected {
        let moved = delta(before, &now, name, labels);
        assert_eq!(
            moved, *by,
            "{step}: {name}{labels:?} moved by {moved}, expected {by}. /metrics now:\n{}",
            now.text
        );
    }
    now
}

const EXCHANGE: &[(&str, &str)] = &[("operation", "exchange")];

fn outcome(outcome: &'static str) -> &'static [(&'static str, &'static str)] {
    match outcome {
        "held" => &[("operation", "exchange"), ("outcome", "held")],
        "performed" => &[("operation", "exchange"), ("outcome", "performed")],
        "replayed" => &[("operation", "exchange"), ("outcome", "replayed")],
        "rejected" => &[("operation", "exchange"), ("outcome", "rejected")],
        "bad_request" => &[("operation", "exchange"), ("outcome", "bad_request")],
        "extension_required" => &[("operation", "exchange"), ("outcome", "extension_required")],
        other => panic!("add {other} here"),
    }
}

fn reason(reason: &'static str) -> &'static [(&'static str, &'static str)] {
    match reason {
        "revision_invalid" => &[("operation", "exchange"), ("reason", "revision_invalid")],
        "not_this_approver" => &[("operation", "exchange"), ("reason", "not_this_approver")],
        "not_ours" => &[("operation", "exchange"), ("reason", "not_ours")],
        other => panic!("add {other} here"),
    }
}

const OPS: &str = "poppy_operations_total";
const REJECTED: &str = "poppy_approvals_rejected_total";
const DELAY_COUNT: &str = "poppy_approval_delay_seconds_count";
const UPSTREAM_COUNT: &str = "poppy_upstream_duration_seconds_count";
const IN_FLIGHT: &str = "poppy_operations_in_flight";
const STORE_COUNT: &str = "poppy_store_duration_seconds_count";
const PASSTHROUGH: &str = "poppy_passthrough_requests_total";
/// Requests to a policy's route that passed through without being held (issue 39).
const UNHELD: &str = "poppy_unheld_requests_total";
/// Every request the proxy answered (issue 39), by route, method and status class.
const REQUESTS: &str = "poppy_http_request_duration_seconds_count";

async fn scripted_sequence_moves_every_metric(store: Store) {
    let stack = Stack::start(store);
    let gateway = &stack.gateway;
    let session = Session::signed_out("ses_metrics");
    let start = gateway.metrics().await;

    // Passthrough: no Poppy-Session.
    gateway
        .send(&Request::plain("GET", "/catalog"))
        .await
        .assert_status(200, "a plain GET");
    gateway
        .send(&Request::plain("GET", "/status/404"))
        .await
        .assert_status(404, "a plain GET of a missing page");
    let passed = settled(
        &stack,
        &start,
        &[
            (PASSTHROUGH, &[("class", "2xx")], 1.0),
            (PASSTHROUGH, &[("class", "4xx")], 1.0),
            (PASSTHROUGH, &[("class", "5xx")], 0.0),
            (
                REQUESTS,
                &[("route", "default"), ("method", "GET"), ("class", "2xx")],
                1.0,
            ),
            (
                REQUESTS,
                &[("route", "default"), ("method", "GET"), ("class", "4xx")],
                1.0,
            ),
        ],
        "passthrough",
    )
    .await;

    // Mint.
    let request = Request::exchange(&session, "o1", "i1", "s1");
    let op = gateway.send(&request).await.operation();
    let minted = settled(
        &stack,
        &passed,
        &[
            (OPS, outcome("held"), 1.0),
            (DELAY_COUNT, EXCHANGE, 0.0),
            (STORE_COUNT, &[("call", "claim")], 0.0),
            // The held request (403) is counted with the rest of the traffic.
            (
                REQUESTS,
                &[("route", "default"), ("method", "POST"), ("class", "4xx")],
                1.0,
            ),
        ],
        "mint",
    )
    .await;

    // Approve, held at the upstream: one operation in flight.
    let approved = request.clone().approve(&op);
    // Executions 1 and 2 were the passthrough requests.
    let in_flight = stack.send_held(&approved, 3).await;
    let during = settled(
        &stack,
        &minted,
        &[
            (IN_FLIGHT, &[], 1.0),
            (STORE_COUNT, &[("call", "claim")], 1.0),
            // Observed when the approval is claimed, before the upstream answers.
            (DELAY_COUNT, EXCHANGE, 1.0),
            (UPSTREAM_COUNT, EXCHANGE, 0.0),
        ],
        "approved, upstream answering",
    )
    .await;
    stack.upstream.release();
    in_flight
        .await
        .expect("the approved request")
        .assert_upstream_answer(3, "POST", "/orders/o1/exchanges");
    let performed = settled(
        &stack,
        &during,
        &[
            (OPS, outcome("performed"), 1.0),
            (DELAY_COUNT, EXCHANGE, 0.0),
            (UPSTREAM_COUNT, EXCHANGE, 1.0),
            (IN_FLIGHT, &[], -1.0),
            (STORE_COUNT, &[("call", "complete")], 1.0),
            (STORE_COUNT, &[("call", "release")], 0.0),
        ],
        "performed",
    )
    .await;
    // Approved within seconds of minting: in the first buckets, never below zero.
    assert_eq!(
        delta(
            &minted,
            &performed,
            "poppy_approval_delay_seconds_bucket",
            &[("operation", "exchange"), ("le", "60")]
        ),
        1.0,
        "the approval came within 60 s of minting:\n{}",
        performed.text
    );
    let delay_sum = delta(
        &minted,
        &performed,
        "poppy_approval_delay_seconds_sum",
        EXCHANGE,
    );
    assert!(
        (0.0..60.0).contains(&delay_sum),
        "approval delay {delay_sum}"
    );
    let upstream_sum = delta(
        &minted,
        &performed,
        "poppy_upstream_duration_seconds_sum",
        EXCHANGE,
    );
    assert!(upstream_sum > 0.0, "upstream duration {upstream_sum}");

    // Replay: the recorded answer, no upstream call, no claim.
    gateway.send(&approved).await.assert_status(201, "a replay");
    let replayed = settled(
        &stack,
        &performed,
        &[
            (OPS, outcome("replayed"), 1.0),
            (UPSTREAM_COUNT, EXCHANGE, 0.0),
            (STORE_COUNT, &[("call", "claim")], 0.0),
            (DELAY_COUNT, EXCHANGE, 0.0),
        ],
        "replay",
    )
    .await;
    assert!(
        delta(&performed, &replayed, STORE_COUNT, &[("call", "lookup")]) >= 1.0,
        "a replay looks the record up:\n{}",
        replayed.text
    );

    // Bad input: a missing term, and no extension declared.
    gateway
        .send(
            &Request::agent("POST", "/orders/o1/exchanges", &session)
                .json(&serde_json::json!({"replacement_sku": "s1"})),
        )
        .await
        .assert_error(400, "missing_term", "no item_id");
    gateway
        .send(&request.clone().without_header("Poppy-Extensions"))
        .await
        .assert_error(400, "extension_required", "no Poppy-Extensions");
    let bad = settled(
        &stack,
        &replayed,
        &[
            (OPS, outcome("bad_request"), 1.0),
            (OPS, outcome("extension_required"), 1.0),
            (OPS, outcome("held"), 0.0),
        ],
        "bad input",
    )
    .await;

    // Approvals that fail a check, one reason each.
    let other = Request::exchange(&session, "o1", "i2", "s1");
    let other_op = gateway.send(&other).await.operation();
    gateway
        .send(
            &other
                .clone()
                .approve(&other_op.with_revision(&tamper(&other_op.revision))),
        )
        .await
        .operation_in("a tampered approval");
    gateway
        .send(
            &other
                .clone()
                .session(&Session::signed_out("ses_someone_else"))
                .approve(&other_op),
        )
        .await
        .operation_in("another Session's approval");
    gateway
        .send(
            &other
                .clone()
                .approval("operation_id=\"not-one-of-ours\", revision=\"1-abc\""),
        )
        .await
        .operation_in("an operation_id of another shape");
    let end = settled(
        &stack,
        &bad,
        &[
            (OPS, outcome("held"), 1.0),
            (OPS, outcome("rejected"), 3.0),
            (REJECTED, reason("revision_invalid"), 1.0),
            (REJECTED, reason("not_this_approver"), 1.0),
            (REJECTED, reason("not_ours"), 1.0),
            (STORE_COUNT, &[("call", "claim")], 0.0),
        ],
        "rejected approvals",
    )
    .await;

    // Over the whole sequence.
    for call in [
        "generation",
        "lookup",
        "claim",
        "complete",
        "release",
        "ping",
    ] {
        assert_eq!(
            delta(&start, &end, "poppy_store_errors_total", &[("call", call)]),
            0.0,
            "no store call failed ({call})"
        );
    }
    assert_eq!(end.value(IN_FLIGHT, &[]), 0.0, "nothing left in flight");
    assert!(delta(&start, &end, STORE_COUNT, &[("call", "generation")]) >= 1.0);
    assert_eq!(
        delta(&start, &end, UPSTREAM_COUNT, EXCHANGE),
        1.0,
        "one approved execution"
    );
    assert!(
        !end.text.contains("operation_id="),
        "operation IDs are never labels:\n{}",
        end.text
    );
    stack.assert_executions(3, "two passthrough requests and one approved operation");
}

/// Approval applies only to requests that carry a `Poppy-Session` (or that
/// `[approval_page.agents]` makes an agent's): a request to a policy's route without one
/// passes through, and is counted for that policy, from a series that reads 0 from the start.
/// Other paths, another method on the route's path and a Personal Agent's request are not.
async fn requests_to_policy_routes_that_pass_unheld_are_counted(store: Store) {
    let stack = Stack::start(store);
    let gateway = &stack.gateway;
    let start = gateway.metrics().await;
    for operation in ["exchange", "cancel"] {
        for reason in ["no_session", "company_client"] {
            assert_eq!(
                start.get(UNHELD, &[("operation", operation), ("reason", reason)]),
                Some(0.0),
                "{operation} {reason} exists from the start:\n{}",
                start.text
            );
        }
    }

    let body = serde_json::json!({"item_id": "i1", "replacement_sku": "s1"});
    for path in ["/orders/o1/exchanges", "/orders/o2/exchanges?note=1"] {
        gateway
            .send(&Request::plain("POST", path).json(&body))
            .await
            .assert_status(201, "an exchange without a Poppy-Session passes through");
    }
    gateway
        .send(&Request::plain("POST", "/orders/o3/cancel").json(&serde_json::json!({})))
        .await
        .assert_status(201, "a cancellation without a Poppy-Session passes through");
    gateway
        .send(&Request::plain("GET", "/catalog"))
        .await
        .assert_status(200, "no policy's route");
    gateway
        .send(&Request::plain("GET", "/orders/o1/exchanges"))
        .await
        .assert_status(200, "another method on the route's path");
    let session = Session::signed_out("ses_unheld");
    gateway
        .send(&Request::exchange(&session, "o1", "i1", "s1"))
        .await
        .operation();
    settled(
        &stack,
        &start,
        &[
            (
                UNHELD,
                &[("operation", "exchange"), ("reason", "no_session")],
                2.0,
            ),
            (
                UNHELD,
                &[("operation", "cancel"), ("reason", "no_session")],
                1.0,
            ),
            (
                UNHELD,
                &[("operation", "exchange"), ("reason", "company_client")],
                0.0,
            ),
            (OPS, outcome("held"), 1.0),
            (PASSTHROUGH, &[("class", "2xx")], 5.0),
        ],
        "unheld",
    )
    .await;
    stack.assert_executions(5, "every request without a Session was forwarded");
}

store_tests!(
    scripted_sequence_moves_every_metric,
    requests_to_policy_routes_that_pass_unheld_are_counted
);
