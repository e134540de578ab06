//! OpenTelemetry traces (issue 30): one trace from the agent's `traceparent` through the
//! gateway's spans to the upstream, for a passthrough, a mint, an approved execution and a
//! replay, received by a real OTLP/HTTP collector (`deps/otel/receiver.py`, decoding with the
//! official `opentelemetry-proto` definitions); no secret in any span; and a collector that is
//! down changes nothing for requests, while the spans it missed are counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::otlp::OtlpReceiver;
use poppy_e2e::ports::free_port;
use poppy_e2e::{Request, Session, Stack, Store, store_tests};
use serde_json::Value;

/// The agent's bearer token, body and summary: none may reach a span.
const TOKEN: &str = "tok-secret-bearer-5d2e91";
const SKU: &str = "sku-secret-body-8c41f0";

/// A `traceparent` the agent sends: a new trace, sampled. Returns (header, trace, span).
fn agent_traceparent() -> (String, String, String) {
    let trace = format!("{:016x}{:016x}", random(), random());
    let span = format!("{:016x}", random());
    (format!("00-{trace}-{span}-01"), trace, span)
}

/// A random, non-zero `u64` (std's randomly seeded hasher).
fn random() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x5eed);
    hasher.finish() | 1
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span in {spans:#?}");
    found[0]
}

fn server(spans: &[Value]) -> &Value {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s["kind"] == "SPAN_KIND_SERVER")
        .collect();
    assert_eq!(found.len(), 1, "one server span in {spans:#?}");
    found[0]
}

fn has(spans: &[Value], name: &str) -> bool {
    spans.iter().any(|s| s["name"] == name)
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// Whether `child`'s parent is `parent`.
fn child_of(child: &Value, parent: &Value) -> bool {
    child["parent_span_id"] == parent["span_id"] && child["trace_id"] == parent["trace_id"]
}

async fn one_trace_from_the_agent_through_the_gateway_to_the_upstream(store: Store) {
    let receiver = OtlpReceiver::start();
    let stack = Stack::start_with(store, |b| b.extra_config(&receiver.config()));
    let session = Session::signed_out("ses_traced");

    // Passthrough: the agent's trace goes on through pingora's proxy path.
    let (tp, trace, agent_span) = agent_traceparent();
    stack
        .gateway
        .send(&Request::plain("GET", "/status/200").header("traceparent", &tp))
        .await
        .assert_status(200, "a passthrough");
    let spans = receiver
        .wait_for_trace(&trace, |s| has(s, "GET") && has(s, "poppy.forward"))
        .await;
    let request = server(&spans);
    assert_eq!(
        request["parent_span_id"],
        agent_span.as_str(),
        "the agent's span is the parent"
    );
    assert_eq!(attr(request, "poppy.route"), "default");
    assert_eq!(attr(request, "http.response.status_code"), 200);
    let forward = one(&spans, "poppy.forward");
    assert!(child_of(forward, request));
    assert_eq!(forward["kind"], "SPAN_KIND_CLIENT");
    let sent = stack
        .upstream
        .last_header("traceparent")
        .expect("a traceparent upstream");
    assert_eq!(
        sent,
        format!("00-{trace}-{}-01", forward["span_id"].as_str().unwrap()),
        "the upstream's parent is the gateway's forward span"
    );

    // A mint: held for approval, nothing forwarded.
    let (tp, trace, agent_span) = agent_traceparent();
    let exchange = Request::exchange(&session, "o1", "i1", SKU)
        .header("Authorization", &format!("Bearer {TOKEN}"));
    let held = stack
        .gateway
        .send(&exchange.clone().header("traceparent", &tp))
        .await
        .operation();
    let spans = receiver
        .wait_for_trace(&trace, |s| {
            has(s, "POST") && has(s, "poppy.admit") && has(s, "poppy.mint")
        })
        .await;
    let request = server(&spans);
    assert_eq!(request["parent_span_id"], agent_span.as_str());
    assert_eq!(attr(request, "poppy.policy"), "exchange");
    assert_eq!(attr(request, "poppy.outcome"), "held");
    assert_eq!(
        attr(request, "poppy.operation_id"),
        held.operation_id.as_str()
    );
    assert_eq!(attr(request, "http.response.status_code"), 403);
    let admit = one(&spans, "poppy.admit");
    assert!(child_of(admit, request));
    assert_eq!(attr(admit, "poppy.policy"), "exchange");
    let mint = one(&spans, "poppy.mint");
    assert!(child_of(mint, request));
    assert_eq!(attr(mint, "poppy.outcome"), "held");
    assert!(
        spans
            .iter()
            .any(|s| s["name"] == "poppy.store.generation" && child_of(s, mint)),
        "the mint's store round trip: {spans:#?}"
    );
    assert!(!has(&spans, "poppy.forward"), "a mint forwards nothing");

    // The approved execution: admit, claim, forward, record, under one execute span.
    let (tp, trace, agent_span) = agent_traceparent();
    let approved = exchange.clone().approve(&held);
    let performed = stack
        .gateway
        .send(&approved.clone().header("traceparent", &tp))
        .await;
    // The upstream's second request: the passthrough was its first.
    performed.assert_upstream_answer(2, "POST", "/orders/o1/exchanges");
    let spans = receiver
        .wait_for_trace(&trace, |s| {
            [
                "POST",
                "poppy.execute",
                "poppy.claim",
                "poppy.forward",
                "poppy.record",
                "poppy.store.complete",
            ]
            .iter()
            .all(|name| has(s, name))
        })
        .await;
    let request = server(&spans);
    assert_eq!(request["parent_span_id"], agent_span.as_str());
    assert_eq!(attr(request, "poppy.outcome"), "performed");
    assert_eq!(
        attr(request, "poppy.operation_id"),
        held.operation_id.as_str()
    );
    let execute = one(&spans, "poppy.execute");
    assert!(child_of(execute, request));
    assert_eq!(attr(execute, "poppy.policy"), "exchange");
    assert_eq!(
        attr(execute, "poppy.operation_id"),
        held.operation_id.as_str()
    );
    assert_eq!(attr(execute, "poppy.outcome"), "performed");
    let claim = one(&spans, "poppy.claim");
    assert!(child_of(claim, execute));
    assert!(
        spans
            .iter()
            .any(|s| s["name"] == "poppy.store.claim" && child_of(s, claim))
    );
    let forward = one(&spans, "poppy.forward");
    assert!(child_of(forward, execute));
    assert_eq!(attr(forward, "http.response.status_code"), 201);
    let record = one(&spans, "poppy.record");
    assert!(child_of(record, execute));
    assert!(
        spans
            .iter()
            .any(|s| s["name"] == "poppy.store.complete" && child_of(s, record))
    );
    let sent = stack
        .upstream
        .last_header("traceparent")
        .expect("a traceparent upstream");
    assert_eq!(
        sent,
        format!("00-{trace}-{}-01", forward["span_id"].as_str().unwrap()),
        "the approved forward's parent is the gateway's forward span"
    );
    let execution = (
        execute["trace_id"].as_str().unwrap().to_owned(),
        execute["span_id"].as_str().unwrap().to_owned(),
    );

    // A replay, in a trace of its own: its span links to the execution's.
    let (tp, trace, _) = agent_traceparent();
    stack
        .gateway
        .send(&approved.header("traceparent", &tp))
        .await
        .assert_replay_of(&performed, "a retry");
    stack.assert_executions(2, "the passthrough and one execution, then a replay");
    let spans = receiver
        .wait_for_trace(&trace, |s| has(s, "POST") && has(s, "poppy.replay"))
        .await;
    let request = server(&spans);
    assert_eq!(attr(request, "poppy.outcome"), "replayed");
    let replay = one(&spans, "poppy.replay");
    assert!(child_of(replay, request));
    assert_eq!(
        attr(replay, "poppy.operation_id"),
        held.operation_id.as_str()
    );
    let links = replay["links"].as_array().unwrap();
    assert_eq!(links.len(), 1, "{replay:#}");
    assert_eq!(
        (
            links[0]["trace_id"].as_str().unwrap(),
            links[0]["span_id"].as_str().unwrap()
        ),
        (execution.0.as_str(), execution.1.as_str()),
        "the replay links to the span that executed the operation"
    );
    assert!(!has(&spans, "poppy.forward"), "a replay forwards nothing");

    // Every span names the gateway, and none holds a secret: no Session JWT (a JWT's header
    // is base64url JSON: `eyJ`), no bearer token, no body, no summary.
    let all = receiver.spans();
    assert!(all.iter().all(|s| s["service"] == "poppy-gateway"));
    let raw = receiver.raw();
    for secret in ["eyJ", TOKEN, SKU, held.summary.as_str(), "ses_traced"] {
        assert!(!raw.contains(secret), "`{secret}` reached a span:\n{raw}");
    }
}

/// A malformed `traceparent` starts a new trace: the gateway's span is a root. The access log
/// line names the trace.
async fn a_malformed_traceparent_starts_a_new_trace(store: Store) {
    let receiver = OtlpReceiver::start();
    let config = receiver.config() + "\n[access_log]\npath = \"access.log\"\nformat = \"json\"\n";
    let stack = Stack::start_with(store, |b| b.extra_config(&config));
    let bad = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
    stack
        .gateway
        .send(&Request::plain("GET", "/status/204").header("traceparent", bad))
        .await
        .assert_status(204, "a passthrough");
    let sent = stack
        .upstream
        .last_header("traceparent")
        .expect("a traceparent upstream");
    assert_ne!(sent, bad, "the malformed header is replaced");
    let trace = sent.split('-').nth(1).unwrap().to_owned();
    assert_ne!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
    let spans = receiver
        .wait_for_trace(&trace, |s| has(s, "GET") && has(s, "poppy.forward"))
        .await;
    assert_eq!(server(&spans)["parent_span_id"], "", "a root span");
    let log = stack
        .gateway
        .config_path()
        .parent()
        .unwrap()
        .join("access.log");
    let line = poppy_e2e::wait::until_some(Duration::from_secs(10), || async {
        std::fs::read_to_string(&log)
            .ok()
            .and_then(|text| text.lines().next().map(str::to_owned))
    })
    .await
    .expect("an access log line");
    let line: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(line["trace_id"], trace.as_str(), "{line}");
}

/// A `traceparent` of a version other than `00` (`01`, with a suffix or without), or sent
/// twice, starts a new trace as docs/operations.md says: neither the client's trace ID nor
/// its span is the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_version_or_two_traceparents_start_a_new_trace() {
    let receiver = OtlpReceiver::start();
    let stack = Stack::start_with(Store::Memory, |b| b.extra_config(&receiver.config()));
    let (tp, client_trace, _) = agent_traceparent();
    let (other, other_trace, _) = agent_traceparent();
    let later = tp.replacen("00-", "01-", 1);
    let cases = [
        (
            "version 01 with a suffix",
            vec![format!("{later}-what-ever")],
        ),
        ("version 01", vec![later.clone()]),
        ("two headers", vec![tp.clone(), other.clone()]),
        ("two headers, the same", vec![tp.clone(), tp.clone()]),
    ];
    for (case, lines) in cases {
        let mut request = Request::plain("GET", "/status/204");
        for line in &lines {
            request = request.header_line("traceparent", line);
        }
        stack.gateway.send(&request).await.assert_status(204, case);
        let sent = stack
            .upstream
            .last_header("traceparent")
            .expect("a traceparent upstream");
        let trace = sent.split('-').nth(1).unwrap().to_owned();
        assert!(
            trace != client_trace && trace != other_trace,
            "{case}: the client's trace was kept: {sent}"
        );
        let spans = receiver
            .wait_for_trace(&trace, |s| has(s, "GET") && has(s, "poppy.forward"))
            .await;
        assert_eq!(server(&spans)["parent_span_id"], "", "{case}: a root span");
    }
}

/// A collector that is down: every request is answered as without tracing, and the spans it
/// could not take are counted in /metrics.
async fn a_collector_that_is_down_changes_nothing_but_the_count(store: Store) {
    let port = free_port();
    let config = format!(
        "\n[tracing]\nendpoint = \"http://127.0.0.1:{port}\"\nexport_interval = \"100ms\"\nmax_queue_size = 4\n"
    );
    let stack = Stack::start_with(store, |b| b.extra_config(&config));
    let session = Session::signed_out("ses_down");
    for _ in 0..3 {
        stack
            .gateway
            .send(&Request::plain("GET", "/status/200"))
            .await
            .assert_status(200, "a passthrough");
    }
    let exchange = Request::exchange(&session, "o2", "i1", "s1");
    let held = stack.gateway.send(&exchange).await.operation();
    let approved = exchange.approve(&held);
    let performed = stack.gateway.send(&approved).await;
    performed.assert_upstream_answer(4, "POST", "/orders/o2/exchanges");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&performed, "a retry");
    stack.assert_executions(4, "three passthroughs and one execution");
    let counted = poppy_e2e::wait::until_some(Duration::from_secs(30), || async {
        let dropped = stack
            .gateway
            .metrics()
            .await
            .value("poppy_trace_spans_dropped_total", &[]);
        (dropped > 0.0).then_some(dropped)
    })
    .await;
    assert!(
        counted.is_some(),
        "poppy_trace_spans_dropped_total stayed 0 with the collector down"
    );
}

/// An agent's trace that is not sampled goes on unrecorded: the upstream gets the same trace,
/// flagged not sampled, under the gateway's span, and no span of it is exported.
async fn a_trace_that_is_not_sampled_goes_on_unrecorded(store: Store) {
    let receiver = OtlpReceiver::start();
    let stack = Stack::start_with(store, |b| b.extra_config(&receiver.config()));
    let (tp, unsampled, agent_span) = agent_traceparent();
    // Only the flags: a trace or span ID may itself hold "-01" (one that starts with 01).
    let tp = format!(
        "{}-00",
        tp.strip_suffix("-01").expect("a sampled traceparent")
    );
    stack
        .gateway
        .send(&Request::plain("GET", "/status/200").header("traceparent", &tp))
        .await
        .assert_status(200, "a passthrough");
    let sent = stack
        .upstream
        .last_header("traceparent")
        .expect("a traceparent upstream");
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts.len(), 4, "{sent}");
    assert_eq!((parts[1], parts[3]), (unsampled.as_str(), "00"), "{sent}");
    assert_ne!(
        parts[2], agent_span,
        "the gateway's span is the upstream's parent"
    );
    // A sampled request after it: once its spans are in, the first one's would be too.
    let (tp, sampled, _) = agent_traceparent();
    stack
        .gateway
        .send(&Request::plain("GET", "/status/200").header("traceparent", &tp))
        .await
        .assert_status(200, "a passthrough");
    receiver
        .wait_for_trace(&sampled, |s| has(s, "GET") && has(s, "poppy.forward"))
        .await;
    assert!(
        receiver
            .spans()
            .iter()
            .all(|s| s["trace_id"] != unsampled.as_str()),
        "nothing of the unsampled trace is exported"
    );
}

/// A policy's lookup goes upstream under its own span, in the request's trace.
async fn a_lookup_carries_the_trace_upstream(store: Store) {
    const POLICY: &str = r#"
[[operation]]
name = "annotate"
method = "POST"
path = "/orders/{order_id}/annotate"
id_prefix = "ann"
expires_in = "15m"
same_action = ["order_id"]
summary = "Annotate order {order_id} with {info}."

[operation.terms]
order_id = { path = "order_id" }
info = { lookup = "$.path" }

[operation.lookup]
url = "/lookup/{order_id}"
"#;
    let receiver = OtlpReceiver::start();
    let stack = Stack::start_with(store, |b| {
        b.policy("a.toml", POLICY).extra_config(&receiver.config())
    });
    let (tp, trace, _) = agent_traceparent();
    let request = Request::agent(
        "POST",
        "/orders/o4/annotate",
        &Session::signed_out("ses_lk"),
    )
    .json(&serde_json::json!({}))
    .header("traceparent", &tp);
    stack.gateway.send(&request).await.operation();
    let spans = receiver
        .wait_for_trace(&trace, |s| {
            has(s, "POST") && has(s, "poppy.lookup") && has(s, "poppy.mint")
        })
        .await;
    let lookup = one(&spans, "poppy.lookup");
    assert!(child_of(lookup, server(&spans)));
    assert_eq!(lookup["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(attr(lookup, "poppy.policy"), "annotate");
    let requests = stack.upstream.requests();
    assert_eq!(requests.len(), 1, "the lookup only");
    assert_eq!(
        requests[0].header("traceparent"),
        Some(format!("00-{trace}-{}-01", lookup["span_id"].as_str().unwrap()).as_str()),
        "the lookup's parent is its span"
    );
}

/// Spans still queued when the gateway is stopped (SIGTERM) are sent before it exits.
async fn the_last_spans_are_sent_at_a_clean_stop(store: Store) {
    let receiver = OtlpReceiver::start();
    let config = format!(
        "\n[tracing]\nendpoint = \"{}\"\nexport_interval = \"10m\"\n",
        receiver.url()
    );
    let mut stack = Stack::start_with(store, |b| b.extra_config(&config));
    let (tp, trace, _) = agent_traceparent();
    stack
        .gateway
        .send(&Request::plain("GET", "/status/200").header("traceparent", &tp))
        .await
        .assert_status(200, "a passthrough");
    stack.gateway.terminate();
    assert!(
        stack
            .gateway
            .wait_for_exit(Duration::from_secs(20))
            .await
            .is_some(),
        "the gateway stops on SIGTERM"
    );
    receiver
        .wait_for_trace(&trace, |s| has(s, "GET") && has(s, "poppy.forward"))
        .await;
}

/// The conversations service: the Company Agent's `traceparent` is the parent of the call's
/// span, and the approved forward goes upstream under the gateway's forward span.
async fn a_company_agents_call_is_one_trace_to_the_upstream(store: Store) {
    use poppy_e2e::conversations::{Service, Turn, approval_message};
    let receiver = OtlpReceiver::start();
    let stack = Stack::start_with(store, |b| {
        b.conversations().extra_config(&receiver.config())
    });
    let service = Service::of(&stack.gateway);
    let turn = Turn::exchange(
        "conv_traced",
        &Session::signed_out("ses_conv_traced"),
        "o3",
        "i1",
        SKU,
    );
    let operation = service.proposed(&turn).await;
    let (tp, trace, agent_span) = agent_traceparent();
    let performed = poppy_e2e::Client::new(&stack.gateway.conversations_url())
        .send(
            &Request::plain("POST", "/v1/perform")
                .json(&turn.perform_body(&approval_message("msg_traced", &operation)))
                .header(
                    "Authorization",
                    &format!("Bearer {}", poppy_e2e::gateway::CONVERSATIONS_TOKEN),
                )
                .header("traceparent", &tp),
        )
        .await;
    performed.assert_status(200, "perform");
    stack.assert_executions(1, "the approved message");
    let spans = receiver
        .wait_for_trace(&trace, |s| {
            has(s, "POST /v1/perform") && has(s, "poppy.execute") && has(s, "poppy.forward")
        })
        .await;
    let call = one(&spans, "POST /v1/perform");
    assert_eq!(call["kind"], "SPAN_KIND_SERVER");
    assert_eq!(call["parent_span_id"], agent_span.as_str());
    assert_eq!(attr(call, "poppy.outcome"), "performed");
    let execute = one(&spans, "poppy.execute");
    assert!(child_of(one(&spans, "poppy.admit"), call));
    let forward = one(&spans, "poppy.forward");
    assert!(child_of(forward, execute));
    assert_eq!(
        stack
            .upstream
            .last_header("traceparent")
            .expect("a traceparent upstream"),
        format!("00-{trace}-{}-01", forward["span_id"].as_str().unwrap()),
    );
    let raw = receiver.raw();
    for secret in [
        "eyJ",
        SKU,
        operation.summary.as_str(),
        poppy_e2e::gateway::CONVERSATIONS_TOKEN,
    ] {
        assert!(!raw.contains(secret), "`{secret}` reached a span:\n{raw}");
    }
}

store_tests!(
    one_trace_from_the_agent_through_the_gateway_to_the_upstream,
    a_malformed_traceparent_starts_a_new_trace,
    a_collector_that_is_down_changes_nothing_but_the_count,
    the_last_spans_are_sent_at_a_clean_stop,
    a_trace_that_is_not_sampled_goes_on_unrecorded,
    a_lookup_carries_the_trace_upstream,
    a_company_agents_call_is_one_trace_to_the_upstream,
);
