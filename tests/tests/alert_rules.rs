//! The Prometheus alerting rules shipped in `docker/alerts.yml`: valid, behaving as their
//! unit tests (`docker/alerts.test.yml`) say, and about metrics the gateway exports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use poppy_e2e::{Stack, Store};

fn docker_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker")
}

fn promtool(args: &[&str]) {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(docker_dir())
        .output()
        .expect("run promtool: install Debian's `prometheus` package (.ci/run does)");
    assert!(
        output.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_rules_are_valid() {
    promtool(&["check", "rules", "alerts.yml"]);
}

#[test]
fn the_rules_fire_as_their_tests_say() {
    promtool(&["test", "rules", "alerts.test.yml"]);
}

#[test]
fn prometheus_loads_the_rules() {
    let prometheus = std::fs::read_to_string(docker_dir().join("prometheus.yml")).unwrap();
    let compose = std::fs::read_to_string(docker_dir().join("compose.yaml")).unwrap();
    assert!(
        prometheus.contains("/etc/prometheus/alerts.yml"),
        "{prometheus}"
    );
    assert!(
        compose.contains("./alerts.yml:/etc/prometheus/alerts.yml"),
        "{compose}"
    );
}

/// Every `poppy_*` metric an alert reads is on a fresh gateway's `/metrics`, so no alert
/// watches a name that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_read_exported_metrics() {
    let rules = std::fs::read_to_string(docker_dir().join("alerts.yml")).unwrap();
    let stack = Stack::start(Store::Memory);
    let metrics = stack.gateway.metrics().await;
    let exported = metrics.names();
    let mut read = Vec::new();
    for line in rules
        .lines()
        .filter(|l| l.trim_start().starts_with("expr:"))
    {
        for (at, _) in line.match_indices("poppy_") {
            let name: String = line[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            read.push(name);
        }
    }
    assert!(read.len() >= 5, "{read:?}");
    let missing: Vec<&String> = read
        .iter()
        .filter(|name| !exported.contains(name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "alerts read unexported metrics: {missing:?}"
    );
}

/// Each rule's `expr:` and `runbook_url:` lines, by alert name, in file order.
fn rules() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(docker_dir().join("alerts.yml")).unwrap();
    let mut rules: Vec<(String, String, String)> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert: ") {
            rules.push((name.to_owned(), String::new(), String::new()));
        } else if let (Some(expr), Some(rule)) = (line.strip_prefix("expr: "), rules.last_mut()) {
            rule.1 = expr.to_owned();
        } else if let (Some(url), Some(rule)) =
            (line.strip_prefix("runbook_url: "), rules.last_mut())
        {
            rule.2 = url.to_owned();
        }
    }
    rules
}

/// Prometheus can page when a gateway is gone (no scrape, or no target at all) and when a
/// reload failed, for the job docker/prometheus.yml scrapes.
#[test]
fn a_gateway_gone_and_a_failed_reload_alert() {
    let prometheus = std::fs::read_to_string(docker_dir().join("prometheus.yml")).unwrap();
    assert!(
        prometheus.contains("job_name: poppy-gateway"),
        "{prometheus}"
    );
    let exprs: Vec<String> = rules().into_iter().map(|r| r.1).collect();
    for wanted in [
        r#"up{job="poppy-gateway"} == 0"#,
        r#"absent(up{job="poppy-gateway"})"#,
        "poppy_config_last_reload_successful == 0",
    ] {
        assert!(
            exprs.iter().any(|e| e == wanted),
            "no rule {wanted}: {exprs:?}"
        );
    }
}

/// Aggregations keep `job` (and `instance`, but for the store-wide gauge every replica
/// reports alike), so an alert says which gateway it is about.
#[test]
fn aggregations_keep_job_and_instance() {
    for (name, expr, _) in rules() {
        for op in ["sum", "max", "min", "avg", "count"] {
            for (at, _) in expr.match_indices(&format!("{op} ")) {
                let rest = &expr[at + op.len() + 1..];
                let by = rest.strip_prefix("by (").unwrap_or_default();
                let labels = by.split(')').next().unwrap_or_default();
                assert!(
                    labels.contains("job")
                        && (labels.contains("instance") || name == "PoppyUnknownOperations"),
                    "{name}: `{expr}` drops job/instance"
                );
            }
            assert!(
                !expr.contains(&format!("{op}(")),
                "{name}: `{expr}` aggregates all"
            );
        }
    }
}

/// Every rule has a runbook_url that points at a section of docs/operations.md, and a
/// promtool unit test in alerts.test.yml.
#[test]
fn every_rule_has_a_runbook_and_a_unit_test() {
    let operations = std::fs::read_to_string(docker_dir().join("../docs/operations.md")).unwrap();
    let anchors = poppy_e2e::markdown::page(&operations).anchors;
    let tests = std::fs::read_to_string(docker_dir().join("alerts.test.yml")).unwrap();
    let rules = rules();
    assert!(rules.len() >= 8, "{rules:?}");
    for (name, _, url) in rules {
        let anchor = url.strip_prefix("docs/operations.md#").unwrap_or_else(|| {
            panic!("{name}: runbook_url {url:?} is not a docs/operations.md section")
        });
        assert!(
            anchors.iter().any(|a| a == anchor),
            "{name}: docs/operations.md has no section #{anchor}"
        );
        assert!(
            tests.contains(&format!(
                "alertname: {name}\n        exp_alerts:\n          - exp_labels"
            )),
            "{name}: no promtool test where it fires"
        );
    }
}
