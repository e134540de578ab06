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
