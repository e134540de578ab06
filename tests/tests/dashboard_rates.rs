//! The dashboard's rate panels read true: a real Prometheus scrapes a gateway while a scripted
//! sequence with known answers runs, then the panels' own queries (with the dashboard's
//! variables filled in as Grafana would) are evaluated on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use poppy_e2e::prometheus::{JOB, Prometheus};
use poppy_e2e::{Request, Session, Stack, Store};
use serde_json::Value;

fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docker/grafana/dashboards/poppy-approvals.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The queries of the panel titled `title`.
fn panel(dashboard: &Value, title: &str) -> Vec<String> {
    let panel = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("no panel {title:?}"));
    panel["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect()
}

/// A panel query as Grafana sends it: this job and instance, every operation, a range longer
/// than the test.
fn fill(expr: &str, instance: &str) -> String {
    expr.replace("$job", JOB)
        .replace("$instance", instance)
        .replace("$operation", ".*")
        .replace("$__range", "1h")
        .replace("$__rate_interval", "1m")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_panels_read_true_for_a_scripted_sequence() {
    let stack = Stack::start_with(Store::Memory, |b| b.upstream_timeout("1s"));
    let gateway = &stack.gateway;
    let instance = gateway.admin_addr().to_string();
    let prometheus = Prometheus::scraping(gateway.admin_addr()).await;
    let session = Session::signed_out("ses_rates");

    // Exchange 1: asked three times before the user decides, approved, retried twice.
    let first = Request::exchange(&session, "o1", "i1", "s1");
    let mut op = gateway.send(&first).await.operation();
    for _ in 0..2 {
        op = gateway.send(&first).await.operation();
    }
    let approved = first.approve(&op);
    gateway
        .send(&approved)
        .await
        .assert_status(201, "approve 1");
    for _ in 0..2 {
        gateway.send(&approved).await.assert_status(201, "replay 1");
    }
    // Exchange 2: asked twice, never approved.
    let second = Request::exchange(&session, "o2", "i2", "s2");
    for _ in 0..2 {
        gateway.send(&second).await.operation();
    }
    // Exchange 3: asked once, approved.
    let third = Request::exchange(&session, "o3", "i3", "s3");
    let op = gateway.send(&third).await.operation();
    gateway
        .send(&third.approve(&op))
        .await
        .assert_status(201, "approve 3");
    // A cancellation: asked, never approved.
    gateway
        .send(&Request::cancel(&session, "o9"))
        .await
        .operation();
    let mut exchanges_asked = 3.0;

    // Exchange 4: the upstream does not answer within its 1 s timeout, so the outcome is
    // unknown; the agent retries twice.
    {
        let fourth = Request::exchange(&session, "o4", "i4", "s4");
        let op = gateway.send(&fourth).await.operation();
        let approved = fourth.approve(&op);
        stack.upstream.hold();
        let answer = gateway.send(&approved).await;
        assert!(answer.status >= 500, "{}", answer.describe());
        for _ in 0..2 {
            let retry = gateway.send(&approved).await;
            assert_eq!(retry.status, 503, "{}", retry.describe());
        }
        stack.upstream.release();
        exchanges_asked += 1.0;
    }

    // Two exchanges without a Poppy-Session: they pass through unheld.
    for order in ["o5", "o6"] {
        gateway
            .send(
                &Request::plain("POST", &format!("/orders/{order}/exchanges"))
                    .json(&serde_json::json!({"item_id": "i5", "replacement_sku": "s5"})),
            )
            .await
            .assert_status(201, "an exchange without a Session");
    }

    // Wait until Prometheus has scraped the end of the sequence.
    let scraped = |name: &str, operation: &str| {
        format!("{name}{{job=\"{JOB}\",instance=\"{instance}\",operation=\"{operation}\"}}")
    };
    prometheus
        .wait_for(
            &scraped("poppy_operations_asked_total", "exchange"),
            exchanges_asked,
        )
        .await;
    prometheus
        .wait_for(&scraped("poppy_operations_asked_total", "cancel"), 1.0)
        .await;
    prometheus
        .wait_for(
            &format!(
                "poppy_operations_total{{job=\"{JOB}\",instance=\"{instance}\",operation=\"exchange\",outcome=\"replayed\"}}"
            ),
            2.0,
        )
        .await;

    prometheus
        .wait_for(
            &format!(
                "poppy_unheld_requests_total{{job=\"{JOB}\",instance=\"{instance}\",operation=\"exchange\",reason=\"no_session\"}}"
            ),
            2.0,
        )
        .await;

    let dashboard = dashboard();
    // Approval rate: performed ÷ distinct operations asked, by operation. 403s would say
    // 2 of 6 (or 7) for exchange.
    let [rate] = panel(&dashboard, "Approval rate").try_into().unwrap();
    let result = prometheus.query(&fill(&rate, &instance)).await.unwrap();
    let by_operation = |name: &str| {
        result
            .iter()
            .find(|(labels, _)| labels["operation"] == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no {name} in {result:?}"))
    };
    let exchange = by_operation("exchange");
    assert!(
        (exchange - 2.0 / exchanges_asked).abs() < 1e-6,
        "exchange approval rate {exchange}, expected 2 of {exchanges_asked}"
    );
    assert_eq!(
        by_operation("cancel"),
        0.0,
        "cancel: asked once, never performed"
    );

    // Unheld requests to policy routes: the exchanges sent without a Session, by policy and
    // reason; every other policy and reason reads 0.
    let [unheld] = panel(&dashboard, "Unheld requests to policy routes")
        .try_into()
        .unwrap();
    let result = prometheus.query(&fill(&unheld, &instance)).await.unwrap();
    for (labels, value) in &result {
        if labels["operation"] == "exchange" && labels["reason"] == "no_session" {
            assert!(*value > 0.0, "{result:?}");
        } else {
            assert_eq!(*value, 0.0, "{result:?}");
        }
    }
    assert!(
        result
            .iter()
            .any(|(labels, _)| labels["operation"] == "cancel"
                && labels["reason"] == "company_client"),
        "every policy and reason is on the panel: {result:?}"
    );

    // Unknown operations: one, however often it was retried; and it stays one.
    let [unknown] = panel(&dashboard, "Unknown operations").try_into().unwrap();
    let unknown = fill(&unknown, &instance);
    prometheus.wait_for(&unknown, 1.0).await;
    let result = prometheus.query(&unknown).await.unwrap();
    assert_eq!(result.len(), 1, "{result:?}");
    assert_eq!(result[0].1, 1.0, "{result:?}");
}
