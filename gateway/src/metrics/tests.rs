#![allow(clippy::unwrap_used)]
use std::collections::BTreeSet;

use super::scraped::Page;
use super::*;

fn text(metrics: &Metrics) -> String {
    String::from_utf8(metrics.render(Format::Text)).unwrap()
}

/// Every family's name and type, as dashboards, alerts and the docs know them (in the text
/// format, as `# TYPE` lines).
const FAMILIES: &[(&str, &str)] = &[
    ("poppy_approval_delay_seconds", "histogram"),
    ("poppy_approvals_rejected_total", "counter"),
    ("poppy_build_info", "gauge"),
    ("poppy_config_last_reload_successful", "gauge"),
    ("poppy_config_reloads_total", "counter"),
    ("poppy_connections_max", "gauge"),
    ("poppy_connections_open", "gauge"),
    ("poppy_declared_operations_versions_total", "counter"),
    ("poppy_http_request_duration_seconds", "histogram"),
    ("poppy_limits_hit_total", "counter"),
    ("poppy_log_lines_suppressed_total", "counter"),
    ("poppy_operations_asked_total", "counter"),
    ("poppy_operations_in_flight", "gauge"),
    ("poppy_operations_total", "counter"),
    ("poppy_operations_unknown", "gauge"),
    ("poppy_passthrough_requests_total", "counter"),
    ("poppy_policies_loaded", "gauge"),
    ("poppy_store_durability_problems", "gauge"),
    ("poppy_store_duration_seconds", "histogram"),
    ("poppy_store_errors_total", "counter"),
    ("poppy_store_full_total", "counter"),
    ("poppy_token_introspections_total", "counter"),
    ("poppy_trace_spans_dropped_total", "counter"),
    ("poppy_unheld_requests_total", "counter"),
    ("poppy_upstream_connections_in_use", "gauge"),
    ("poppy_upstream_connections_max", "gauge"),
    ("poppy_upstream_duration_seconds", "histogram"),
    ("poppy_webhook_events_total", "counter"),
    ("poppy_webhook_queued", "gauge"),
];

/// Metrics with a policy, a store call, a request and an upstream call counted, `ids` their
/// spans.
fn busy(ids: Option<SampledIds>) -> Metrics {
    let metrics = Metrics::new().unwrap();
    metrics.policies(["exchange"]);
    metrics.store_call(StoreCall::Claim, Duration::from_micros(300), false, ids);
    metrics.set_routes(["default"]);
    let took = Duration::from_millis(3);
    metrics.request("default", &http::Method::GET, Some(200), took, ids);
    metrics.per_policy.upstream_duration("exchange", 0.002, ids);
    metrics.operation("exchange", Outcome::Performed);
    metrics
}

#[test]
fn the_text_has_every_family_with_its_name_and_type() {
    let metrics = busy(None);
    let (events, _) = metrics.webhook_counters().unwrap();
    events
        .with_label_values(&["operation.performed", "sent"])
        .inc();
    // The registry's families are all encoded: counters and gauges (`registered.rs`).
    for family in metrics.registry.gather() {
        use prometheus::proto::MetricType::{COUNTER, GAUGE};
        let kind = family.get_field_type();
        assert!(
            matches!(kind, COUNTER | GAUGE),
            "{}: {kind:?}",
            family.name()
        );
    }
    let text = text(&metrics);
    let mut families: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE ")?.split_once(' '))
        .filter(|(name, _)| !name.starts_with("process_"))
        .collect();
    families.sort_unstable();
    assert_eq!(families, FAMILIES, "{text}");
    // Each family's help just before its type, and help a scraper reads verbatim in both
    // formats (OpenMetrics would need `\`, `"` and newlines escaped).
    let lines: Vec<&str> = text.lines().collect();
    for (at, line) in lines.iter().enumerate() {
        if let Some(head) = line.strip_prefix("# TYPE ") {
            let name = head.split(' ').next().unwrap();
            let help = lines[at - 1]
                .strip_prefix(&format!("# HELP {name} "))
                .unwrap();
            assert!(!help.contains(['\\', '"']) && !help.is_empty(), "{help}");
            // Ours as written (the library's `register` would add a ".").
            assert!(
                !name.starts_with("poppy_") || !help.ends_with('.'),
                "{name}: {help}"
            );
        }
    }
    let page = Page::parse(&text);
    let claim = [("call", "claim"), ("le", "0.0005")];
    assert_eq!(
        page.value("poppy_store_duration_seconds_bucket", &claim),
        Some(1.0)
    );
    assert!(text.contains("poppy_store_duration_seconds_bucket{call=\"claim\",le=\"0.0005\"} 1\n"));
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
    assert!(!text.contains('\u{0}') && !text.contains("# EOF") && !text.contains(" # {"));
}

#[test]
fn openmetrics_has_the_same_series_with_exemplars() {
    let ids = SampledIds {
        trace_id: 0xabc,
        span_id: 0xdef,
    };
    let metrics = busy(Some(ids));
    let page = String::from_utf8(metrics.render(Format::OpenMetrics)).unwrap();
    assert!(page.ends_with("\n# EOF\n"), "{page}");
    for line in [
        "# TYPE poppy_operations counter\n",
        "# HELP poppy_operations Requests for operations, by policy and outcome\n",
        "# TYPE poppy_store_errors counter\n",
        "# TYPE poppy_store_duration_seconds histogram\n# UNIT poppy_store_duration_seconds seconds\n",
        "# TYPE process_cpu_seconds counter\n# UNIT process_cpu_seconds seconds\n",
    ] {
        assert!(page.contains(line), "no {line} in\n{page}");
    }
    assert!(!page.contains("# TYPE poppy_operations_total"));
    let om = Page::parse(&page);
    let performed = [("operation", "exchange"), ("outcome", "performed")];
    assert_eq!(om.value("poppy_operations_total", &performed), Some(1.0));
    // OpenMetrics's canonical bounds.
    assert!(page.contains("le=\"1.0\""), "{page}");
    let exemplar = "{trace_id=\"00000000000000000000000000000abc\",span_id=\"0000000000000def\"} ";
    for (name, labels) in [
        (
            "poppy_store_duration_seconds_bucket",
            &[("call", "claim"), ("le", "0.0005")][..],
        ),
        (
            "poppy_upstream_duration_seconds_bucket",
            &[("operation", "exchange"), ("le", "0.0025")],
        ),
        (
            "poppy_http_request_duration_seconds_bucket",
            &[
                ("class", "2xx"),
                ("method", "GET"),
                ("route", "default"),
                ("le", "0.005"),
            ],
        ),
    ] {
        let sample = om
            .get(name, labels)
            .unwrap_or_else(|| panic!("{name} {labels:?}\n{page}"));
        assert_eq!(sample.value, 1.0);
        let seen = sample.exemplar.as_deref().unwrap_or_default();
        assert!(seen.starts_with(exemplar), "{name}: {seen}");
    }
    // The text has every series the OpenMetrics page has, no more (the process's own move).
    let without_process = |page: &Page| -> BTreeSet<String> {
        page.series()
            .into_iter()
            .filter(|series| !series.starts_with("process_"))
            .collect()
    };
    assert_eq!(
        without_process(&Page::parse(&text(&metrics))),
        without_process(&om)
    );
}

/// Issue 39: `prometheus-client` writes the exposition; no metrics source writes exposition
/// lines of its own (as `openmetrics.rs`, `histogram.rs` and `per_policy.rs` did).
#[test]
fn the_exposition_is_written_by_the_library() {
    let sources = [
        ("metrics.rs", include_str!("../metrics.rs")),
        ("asked.rs", include_str!("asked.rs")),
        ("declared.rs", include_str!("declared.rs")),
        ("format.rs", include_str!("format.rs")),
        ("histogram.rs", include_str!("histogram.rs")),
        ("labels.rs", include_str!("labels.rs")),
        ("per_policy.rs", include_str!("per_policy.rs")),
        (
            "per_policy/collector.rs",
            include_str!("per_policy/collector.rs"),
        ),
        ("registered.rs", include_str!("registered.rs")),
        ("requests.rs", include_str!("requests.rs")),
        ("store_duration.rs", include_str!("store_duration.rs")),
    ];
    for (file, source) in sources {
        let code = source
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        for written in [
            "\"# HELP", "\"# TYPE", "\"# UNIT", "# EOF\\n", "_bucket{", "le=\\\"",
        ] {
            assert!(!code.contains(written), "{file} writes {written} itself");
        }
    }
}

#[test]
fn series_exist_before_anything_happens() {
    let metrics = Metrics::new().unwrap();
    metrics.policies(["exchange"]);
    let text = text(&metrics);
    for series in [
        r#"poppy_operations_total{operation="exchange",outcome="performed"} 0"#,
        r#"poppy_approvals_rejected_total{operation="exchange",reason="stale_generation"} 0"#,
        r#"poppy_operations_asked_total{operation="exchange"} 0"#,
        r#"poppy_unheld_requests_total{operation="exchange",reason="no_session"} 0"#,
        r#"poppy_unheld_requests_total{operation="exchange",reason="company_client"} 0"#,
        r#"poppy_operations_total{operation="exchange",outcome="upstream_unavailable"} 0"#,
        r#"poppy_upstream_duration_seconds_bucket{operation="exchange",le="0.001"} 0"#,
        r#"poppy_build_info{version=""#,
        "process_resident_memory_bytes ",
        "process_start_time_seconds ",
        r#"poppy_approval_delay_seconds_count{operation="exchange"} 0"#,
        r#"poppy_upstream_duration_seconds_count{operation="exchange"} 0"#,
        r#"poppy_store_duration_seconds_count{call="claim"} 0"#,
        r#"poppy_store_errors_total{call="claim"} 0"#,
        r#"poppy_passthrough_requests_total{class="5xx"} 0"#,
        r#"poppy_config_reloads_total{result="failure"} 0"#,
        "poppy_operations_in_flight 0",
        "poppy_config_last_reload_successful 1",
        "poppy_policies_loaded 1",
        "poppy_log_lines_suppressed_total ",
        r#"poppy_token_introspections_total{result="rate_limited"}"#,
    ] {
        assert!(text.contains(series), "missing {series} in\n{text}");
    }
    assert!(!text.contains("operation_id"));
}

#[test]
fn repeated_asks_for_one_operation_count_once() {
    let metrics = Metrics::new().unwrap();
    metrics.policies(["exchange"]);
    let window = Duration::from_secs(900);
    for _ in 0..3 {
        metrics.asked("exchange", "exc_a", window);
    }
    metrics.asked("exchange", "exc_b", window);
    assert!(text(&metrics).contains(r#"poppy_operations_asked_total{operation="exchange"} 2"#));
}

#[test]
fn approval_delay_is_measured_from_minting() {
    let metrics = Metrics::new().unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // Minted 40 s ago with a 15 min window.
    metrics.approval_delay("exchange", now - 40 + 900, Duration::from_secs(900));
    let text = text(&metrics);
    assert!(
        text.contains(r#"poppy_approval_delay_seconds_bucket{operation="exchange",le="30"} 0"#),
        "{text}"
    );
    assert!(
        text.contains(r#"poppy_approval_delay_seconds_bucket{operation="exchange",le="60"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn upstream_calls_are_in_flight_while_they_run() {
    let metrics = Metrics::new().unwrap();
    let seen = metrics
        .upstream_call("exchange", async { metrics.in_flight.get() })
        .await;
    assert_eq!(seen, 1);
    assert_eq!(metrics.in_flight.get(), 0);
    assert!(
        text(&metrics).contains(r#"poppy_upstream_duration_seconds_count{operation="exchange"} 1"#)
    );
}

#[test]
fn a_failed_reload_is_remembered_until_one_succeeds() {
    let metrics = Metrics::new().unwrap();
    metrics.reload(ReloadResult::Failure);
    assert_eq!(metrics.last_reload_successful.get(), 0);
    metrics.reload(ReloadResult::Success);
    assert_eq!(metrics.last_reload_successful.get(), 1);
    let text = text(&metrics);
    assert!(text.contains(r#"poppy_config_reloads_total{result="failure"} 1"#));
    assert!(text.contains(r#"poppy_config_reloads_total{result="success"} 1"#));
}
