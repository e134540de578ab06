//! `docker/`: every metric the Grafana dashboard queries is one the gateway exports, the
//! compose file is valid, and the compose gateway config passes `check`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use poppy_e2e::{Request, Session, Stack, Store, binaries};
use serde_json::Value;

fn docker_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker")
}

fn dashboards() -> Vec<(PathBuf, Value)> {
    let dir = docker_dir().join("grafana/dashboards");
    let mut found: Vec<(PathBuf, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            (path, json)
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!found.is_empty(), "no dashboard in {}", dir.display());
    found
}

/// Every PromQL expression of a dashboard: panel targets' `expr`, and the metric of each
/// `label_values(metric, label)` template query.
fn queries(dashboard: &Value) -> (Vec<String>, Vec<String>) {
    fn walk(value: &Value, exprs: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("expr", Value::String(expr)) => exprs.push(expr.clone()),
                        _ => walk(v, exprs),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, exprs)),
            _ => {}
        }
    }
    let mut exprs = Vec::new();
    walk(&dashboard["panels"], &mut exprs);
    let mut template_metrics = Vec::new();
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = match &variable["query"] {
            Value::String(q) => q.clone(),
            other => other["query"].as_str().unwrap_or_default().to_owned(),
        };
        if let Some(args) = query.strip_prefix("label_values(") {
            let metric = args.split([',', ')', '{']).next().unwrap().trim();
            template_metrics.push(metric.to_owned());
        }
    }
    (exprs, template_metrics)
}

/// The metric names of a PromQL expression: identifiers that are not functions,
/// aggregations, keywords, label names or Grafana variables.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 21] = [
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
        // Aggregations, which may be followed by `by (…)` before their parenthesis.
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    const GROUPINGS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let skip_until = |mut i: usize, open: char, close: char| {
        let mut depth = 0;
        while i < chars.len() {
            match chars[i] {
                c if c == open => depth += 1,
                c if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                '"' | '\'' | '`' => {
                    let quote = chars[i];
                    i += 1;
                    while i < chars.len() && chars[i] != quote {
                        i += if chars[i] == '\\' { 2 } else { 1 };
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i
    };
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = skip_until(i, '{', '}');
        } else if c == '[' {
            i = skip_until(i, '[', ']');
        } else if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            // A Grafana variable or a number (with its exponent or unit letters).
            i += 1;
            while i < chars.len() && (ident(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let called = next < chars.len() && chars[next] == '(';
            if GROUPINGS.contains(&word.as_str()) {
                if called {
                    i = skip_until(next, '(', ')');
                }
            } else if !called && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn promql_metric_names_are_found() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, call) (rate(poppy_store_duration_seconds_bucket{call=~"a|b", x="}"}[$__rate_interval]))) / on (call) group_left max without (x) (up) > bool 1e3 or vector(0)"#,
    );
    assert_eq!(
        names,
        BTreeSet::from([
            "poppy_store_duration_seconds_bucket".to_owned(),
            "up".to_owned()
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exported() {
    // Exercise the gateway: a passthrough request, a mint, an approval and a replay.
    let stack = Stack::start(Store::Memory);
    let gateway = &stack.gateway;
    gateway.send(&Request::plain("GET", "/catalog")).await;
    let session = Session::signed_out("ses_dashboard");
    let request = Request::exchange(&session, "o1", "i1", "s1");
    let op = gateway.send(&request).await.operation();
    let approved = request.approve(&op);
    gateway.send(&approved).await.assert_status(201, "approve");
    gateway.send(&approved).await.assert_status(201, "replay");
    let scraped = gateway.metrics().await;
    let exported = scraped.names();

    for (path, dashboard) in dashboards() {
        let (exprs, template_metrics) = queries(&dashboard);
        assert!(!exprs.is_empty(), "{}: no queries", path.display());
        let mut missing = BTreeSet::new();
        for expr in &exprs {
            let names = metric_names(expr);
            assert!(
                !names.is_empty(),
                "{}: `{expr}` queries no metric",
                path.display()
            );
            missing.extend(names.into_iter().filter(|n| !exported.contains(n.as_str())));
        }
        missing.extend(
            template_metrics
                .into_iter()
                .filter(|n| !exported.contains(n.as_str())),
        );
        assert!(
            missing.is_empty(),
            "{} queries metrics the gateway does not export: {missing:?}\nexported: {exported:?}",
            path.display()
        );
    }
}

/// Imported into any Grafana, the dashboard works: its data source is a variable (no uid of
/// ours), and every series it reads is scoped by the `job` and `instance` variables.
#[test]
fn the_dashboard_is_portable() {
    for (path, dashboard) in dashboards() {
        let text = serde_json::to_string(&dashboard).unwrap();
        let variables: Vec<&str> = dashboard["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        for name in ["datasource", "job", "instance"] {
            assert!(
                variables.contains(&name),
                "{}: no ${name} variable",
                path.display()
            );
        }
        let datasource = dashboard["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "datasource")
            .unwrap();
        assert_eq!(datasource["type"], "datasource");
        assert_eq!(datasource["query"], "prometheus");
        // Every datasource reference, in panels, targets and variables, is the variable.
        fn datasources(value: &Value, found: &mut Vec<Value>) {
            match value {
                Value::Object(map) => {
                    for (key, v) in map {
                        if key == "datasource" && v.is_object() {
                            found.push(v.clone());
                        } else {
                            datasources(v, found);
                        }
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| datasources(v, found)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        datasources(&dashboard, &mut found);
        assert!(!found.is_empty());
        for reference in found {
            assert_eq!(
                reference["uid"],
                "${datasource}",
                "{}: a fixed data source {reference}",
                path.display()
            );
        }
        // Every metric selector is scoped by job and instance.
        let (exprs, _) = queries(&dashboard);
        for expr in &exprs {
            for name in metric_names(expr) {
                let scoped = format!(r#"{name}{{job=~"$job",instance=~"$instance""#);
                assert!(
                    expr.contains(&scoped),
                    "{}: `{name}` in `{expr}` is not scoped by $job and $instance",
                    path.display()
                );
            }
        }
        assert!(
            !text.contains(r#""uid":"prometheus""#),
            "{}",
            path.display()
        );
    }
}

/// `docker compose` (the plugin), else `docker-compose`, if either is installed.
fn compose_command() -> Option<Vec<&'static str>> {
    let works = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works("docker", &["compose", "version"]) {
        Some(vec!["docker", "compose"])
    } else if works("docker-compose", &["version"]) {
        Some(vec!["docker-compose"])
    } else {
        None
    }
}

#[test]
fn compose_file_is_valid() {
    let Some(compose) = compose_command() else {
        eprintln!(
            "SKIPPED compose_file_is_valid: neither `docker compose` nor `docker-compose` is installed"
        );
        return;
    };
    let file = docker_dir().join("compose.yaml");
    let output = Command::new(compose[0])
        .args(&compose[1..])
        .arg("-f")
        .arg(&file)
        .args(["config", "--quiet"])
        // The file's defaults must be enough.
        .env_remove("POPPY_GATEWAY_KEYS")
        .output()
        .expect("run compose config");
    assert!(
        output.status.success(),
        "{compose:?} -f {} config failed:\n{}{}",
        file.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn prometheus_scrapes_the_admin_port_of_the_compose_gateway() {
    let gateway = std::fs::read_to_string(docker_dir().join("gateway.toml")).unwrap();
    let prometheus = std::fs::read_to_string(docker_dir().join("prometheus.yml")).unwrap();
    assert!(gateway.contains("listen = \"0.0.0.0:9100\""), "{gateway}");
    assert!(gateway.contains("listen = \"0.0.0.0:8080\""), "{gateway}");
    assert!(prometheus.contains("\"gateway:9100\""), "{prometheus}");
}

#[test]
fn compose_gateway_config_passes_check() {
    // In the container, compose mounts ../policies next to the config; here an override
    // points at them where they are.
    let output = Command::new(binaries::gateway())
        .arg("check")
        .arg("--config")
        .arg(docker_dir().join("gateway.toml"))
        .env("POPPY_GATEWAY__POLICIES", r#"["../policies/*.toml"]"#)
        // As compose.yaml sets it for the approval page's OpenID client.
        .env(
            "POPPY_GATEWAY_PAGE_CLIENT_SECRET",
            "dev-only-page-client-secret",
        )
        .env("RUST_LOG", "warn")
        .output()
        .expect("run poppy-gateway check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "check of docker/gateway.toml failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("redis://redis:6379/0"), "{stdout}");
    assert!(stdout.contains("http://shop:9000"), "{stdout}");
}

/// The compose gateway sends its traces to the compose Jaeger's OTLP/HTTP port, Prometheus
/// keeps exemplars, and Grafana's Prometheus data source links an exemplar's `trace_id` to a
/// data source that is provisioned (the Jaeger one, at the service's query port).
#[test]
fn compose_traces_reach_jaeger_and_exemplars_link_to_them() {
    let gateway = std::fs::read_to_string(docker_dir().join("gateway.toml")).unwrap();
    let compose = std::fs::read_to_string(docker_dir().join("compose.yaml")).unwrap();
    let datasources = docker_dir().join("grafana/provisioning/datasources");
    let prometheus = std::fs::read_to_string(datasources.join("prometheus.yaml")).unwrap();
    let jaeger = std::fs::read_to_string(datasources.join("jaeger.yaml")).unwrap();
    assert!(
        gateway.contains("[tracing]\nendpoint = \"http://jaeger:4318\""),
        "{gateway}"
    );
    assert!(
        compose.contains("\n  jaeger:\n    image: jaegertracing/jaeger:"),
        "{compose}"
    );
    assert!(
        compose.contains("--enable-feature=exemplar-storage"),
        "{compose}"
    );
    assert!(
        prometheus.contains("- name: trace_id\n          datasourceUid: jaeger"),
        "{prometheus}"
    );
    assert!(jaeger.contains("uid: jaeger"), "{jaeger}");
    // The dashboard's p99 latency queries show the exemplars.
    for (path, dashboard) in dashboards() {
        let text = dashboard.to_string();
        for histogram in [
            "poppy_approval_delay_seconds_bucket",
            "poppy_upstream_duration_seconds_bucket",
            "poppy_store_duration_seconds_bucket",
            "poppy_http_request_duration_seconds_bucket",
        ] {
            assert!(text.contains(histogram), "{}: {histogram}", path.display());
        }
        assert_eq!(
            text.matches("\"exemplar\":true").count(),
            4,
            "{}: one exemplar query per latency panel",
            path.display()
        );
    }
    assert!(jaeger.contains("url: http://jaeger:16686"), "{jaeger}");
}
