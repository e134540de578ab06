//! Exemplars on the latency histograms (issue 30): a sampled execution's trace, as the OTLP
//! collector received it, is the exemplar a real Prometheus (`--enable-feature=exemplar-storage`)
//! stores for the buckets it fell in; the OpenMetrics page that carries them passes a strict
//! third-party parser (`prometheus_client`'s); a scraper that does not ask for OpenMetrics gets
//! the text format as before, and a Prometheus without exemplar storage scrapes as before. No
//! exemplar without a sampled trace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use poppy_e2e::otlp::OtlpReceiver;
use poppy_e2e::prometheus::Prometheus;
use poppy_e2e::thirdparty::{deps_dir, python};
use poppy_e2e::{Client, Request, Session, Stack, Store, store_tests, wait};
use serde_json::Value;

/// Prometheus 2.x's scrape `Accept` header.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TIMEOUT: Duration = Duration::from_secs(30);

/// One approved execution of `exchange` (a mint, then its approval), performed once.
async fn execute(stack: &Stack, order: &str, traceparent: Option<&str>) {
    let session = Session::signed_out(&format!("ses_{order}"));
    let exchange = Request::exchange(&session, order, "i1", "s1");
    let exchange = match traceparent {
        Some(tp) => exchange.header("traceparent", tp),
        None => exchange,
    };
    let held = stack.gateway.send(&exchange).await.operation();
    stack
        .gateway
        .send(&exchange.approve(&held))
        .await
        .assert_status(201, "the approved execution");
}

/// `GET /metrics` with this `Accept` header (none: `None`).
async fn scrape(stack: &Stack, accept: Option<&str>) -> (String, String) {
    let request = Request::plain("GET", "/metrics");
    let request = match accept {
        Some(accept) => request.header("Accept", accept),
        None => request.without_header("Accept"),
    };
    let answer = Client::new(&stack.gateway.admin_url()).send(&request).await;
    answer.assert_status(200, "GET /metrics");
    let content_type = answer.header("content-type").unwrap_or_default().to_owned();
    (content_type, answer.text())
}

/// `page` through `prometheus_client`'s OpenMetrics parser (`deps/openmetrics/parse.py`): its
/// families and exemplars; panics with the parser's error when it refuses the page.
fn parsed(page: &str) -> Value {
    let mut child = Command::new(python("openmetrics"))
        .arg(deps_dir().join("openmetrics").join("parse.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start parse.py");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "parse.py did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}\n{page}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The execution's spans as the collector got them: its trace ID and the span IDs of
/// `poppy.execute`, `poppy.forward` and `poppy.store.claim`.
async fn execution_spans(receiver: &OtlpReceiver) -> (String, String, String, String) {
    wait::until_some(TIMEOUT, || async {
        let spans = receiver.spans();
        let execute = spans.iter().find(|s| s["name"] == "poppy.execute")?;
        let trace = execute["trace_id"].as_str()?.to_owned();
        let span = |name: &str| {
            spans
                .iter()
                .find(|s| s["name"] == name && s["trace_id"] == trace.as_str())
                .and_then(|s| s["span_id"].as_str())
                .map(str::to_owned)
        };
        Some((
            trace.clone(),
            span("poppy.execute")?,
            span("poppy.forward")?,
            span("poppy.store.claim")?,
        ))
    })
    .await
    .expect("the execution's spans at the collector")
}

/// The exemplar Prometheus stored for a series of `selector` whose trace ID is `trace`.
async fn stored_exemplar(prometheus: &Prometheus, selector: &str, trace: &str) -> Value {
    let found = wait::until_some(TIMEOUT, || async {
        let series = prometheus.exemplars(selector).await?;
        series
            .into_iter()
            .flat_map(|(labels, exemplars)| exemplars.into_iter().map(move |e| (labels.clone(), e)))
            .find(|(_, e)| e["labels"]["trace_id"] == trace)
            .map(|(labels, mut e)| {
                e["series"] = labels;
                e
            })
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "no exemplar of trace {trace} for {selector}\n{}",
            prometheus.log()
        )
    })
}

async fn prometheus_keeps_the_executions_trace_as_its_exemplars(store: Store) {
    let receiver = OtlpReceiver::start();
    let stack = Stack::start_with(store, |b| b.extra_config(&receiver.config()));
    let prometheus = Prometheus::scraping_with(
        stack.gateway.admin_addr(),
        &["--enable-feature=exemplar-storage"],
    )
    .await;
    execute(&stack, "o1", None).await;
    stack.assert_executions(1, "one approved execution");
    let (trace, execute_span, forward_span, claim_span) = execution_spans(&receiver).await;

    // The upstream's answer was timed in the forward span: its bucket's exemplar names it.
    let upstream = stored_exemplar(
        &prometheus,
        r#"poppy_upstream_duration_seconds_bucket{operation="exchange"}"#,
        &trace,
    )
    .await;
    assert_eq!(
        upstream["labels"]["span_id"],
        forward_span.as_str(),
        "{upstream:#}"
    );
    let value: f64 = upstream["value"].as_str().unwrap().parse().unwrap();
    let le: f64 = match upstream["series"]["le"].as_str().unwrap() {
        "+Inf" => f64::INFINITY,
        le => le.parse().unwrap(),
    };
    assert!(value > 0.0 && value <= le, "{upstream:#}");
    let at = upstream["timestamp"].as_f64().unwrap();
    assert!((at - wait::unix_now()).abs() < 120.0, "{upstream:#}");

    // The approval was claimed in the execution's span; the claim's store round trip has a
    // span of its own.
    for (selector, span) in [
        (
            r#"poppy_approval_delay_seconds_bucket{operation="exchange"}"#,
            &execute_span,
        ),
        (
            r#"poppy_store_duration_seconds_bucket{call="claim"}"#,
            &claim_span,
        ),
    ] {
        let exemplar = stored_exemplar(&prometheus, selector, &trace).await;
        assert_eq!(exemplar["labels"]["span_id"], span.as_str(), "{exemplar:#}");
    }

    // The whole request (issue 39: a latency for all proxied traffic) was timed in the
    // request's own span, of the same trace.
    let request = stored_exemplar(
        &prometheus,
        r#"poppy_http_request_duration_seconds_bucket{route="default",method="POST",class="2xx"}"#,
        &trace,
    )
    .await;
    assert_eq!(request["labels"]["trace_id"], trace.as_str(), "{request:#}");
    // And the mint (403) and the approval (201) were each counted once.
    for class in ["4xx", "2xx"] {
        prometheus
            .wait_for(
                &format!(
                    r#"poppy_http_request_duration_seconds_count{{route="default",method="POST",class="{class}"}}"#
                ),
                1.0,
            )
            .await;
    }
}

async fn each_scraper_gets_the_format_it_asks_for(store: Store) {
    let receiver = OtlpReceiver::start();
    let stack = Stack::start_with(store, |b| b.extra_config(&receiver.config()));
    execute(&stack, "o2", None).await;

    // Prometheus's header: OpenMetrics, valid to a strict parser, with the exemplars.
    let (content_type, page) = scrape(&stack, Some(PROMETHEUS_ACCEPT)).await;
    assert_eq!(content_type, OPENMETRICS);
    assert!(page.ends_with("# EOF\n"), "{page}");
    let parsed = parsed(&page);
    let families = &parsed["families"];
    for (family, kind) in [
        ("poppy_operations", "counter"),
        ("poppy_store_errors", "counter"),
        ("process_cpu_seconds", "counter"),
        ("poppy_upstream_duration_seconds", "histogram"),
        ("poppy_approval_delay_seconds", "histogram"),
        ("poppy_store_duration_seconds", "histogram"),
        ("poppy_http_request_duration_seconds", "histogram"),
        ("poppy_operations_in_flight", "gauge"),
    ] {
        assert_eq!(families[family], kind, "{family} in {families:#}");
    }
    let exemplars = parsed["exemplars"].as_array().unwrap();
    for histogram in [
        "poppy_upstream_duration_seconds_bucket",
        "poppy_approval_delay_seconds_bucket",
        "poppy_store_duration_seconds_bucket",
        "poppy_http_request_duration_seconds_bucket",
    ] {
        assert!(
            exemplars.iter().any(|e| e["name"] == histogram
                && e["exemplar"]["trace_id"]
                    .as_str()
                    .is_some_and(|t| t.len() == 32)
                && e["exemplar"]["span_id"]
                    .as_str()
                    .is_some_and(|s| s.len() == 16)),
            "no exemplar on {histogram}: {exemplars:#?}"
        );
    }

    // Any other scraper: the text format, as before.
    for accept in [None, Some("*/*"), Some("text/plain;version=0.0.4")] {
        let (content_type, text) = scrape(&stack, accept).await;
        assert_eq!(content_type, "text/plain; version=0.0.4", "{accept:?}");
        assert!(
            text.contains("# TYPE poppy_operations_total counter\n"),
            "{text}"
        );
        assert!(text.contains(
            "poppy_upstream_duration_seconds_bucket{operation=\"exchange\",le=\"60\"} 1\n"
        ));
        assert!(!text.contains("# EOF") && !text.contains(" # {"), "{text}");
        let metrics = poppy_e2e::metrics::Metrics::parse(&text);
        assert_eq!(metrics.operations("exchange", "performed"), 1.0);
    }

    // A Prometheus without exemplar storage asks for OpenMetrics too, and scrapes it as ever.
    let prometheus = Prometheus::scraping(stack.gateway.admin_addr()).await;
    prometheus
        .wait_for(
            r#"poppy_operations_total{operation="exchange",outcome="performed"}"#,
            1.0,
        )
        .await;
    prometheus
        .wait_for(
            r#"poppy_upstream_duration_seconds_count{operation="exchange"}"#,
            1.0,
        )
        .await;
    let stored = prometheus
        .exemplars("poppy_upstream_duration_seconds_bucket")
        .await;
    assert!(
        stored
            .as_ref()
            .is_none_or(|series| series.iter().all(|(_, e)| e.is_empty())),
        "{stored:?}"
    );
}

/// Only a sampled request's trace is an exemplar: not one the agent's `traceparent` says is
/// not sampled, and none with tracing off.
async fn no_exemplar_without_a_sampled_trace(store: Store) {
    let receiver = OtlpReceiver::start();
    let traced = Stack::start_with(store, |b| b.extra_config(&receiver.config()));
    let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    execute(&traced, "o3", Some(unsampled)).await;
    let untraced = Stack::start(store);
    execute(&untraced, "o4", None).await;
    for stack in [&traced, &untraced] {
        stack.assert_executions(1, "one approved execution");
        let (_, page) = scrape(stack, Some(PROMETHEUS_ACCEPT)).await;
        assert!(
            page.contains("poppy_upstream_duration_seconds_count{operation=\"exchange\"} 1\n"),
            "{page}"
        );
        assert_eq!(parsed(&page)["exemplars"], serde_json::json!([]), "{page}");
    }
}

store_tests!(
    prometheus_keeps_the_executions_trace_as_its_exemplars,
    each_scraper_gets_the_format_it_asks_for,
    no_exemplar_without_a_sampled_trace,
);
