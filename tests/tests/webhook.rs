//! `[webhook]`: events for the Company's systems (docs/webhook.md), sent to a real receiver
//! that verifies each delivery with the Standard Webhooks reference library
//! (`tests/deps/webhook/receiver.py`, `standardwebhooks` 1.3.0): a held operation and a
//! performed one raise one event each, naming the operation and nothing of the request; a
//! receiver answering 500 gets the event again; a receiver that never answers, or is down,
//! slows no request, and what the queue can't hold is dropped and counted; an unknown outcome
//! raises an `unknown` event; SIGTERM tries what is queued once more; a decision on the
//! approval page raises `approved_on_page` or `declined` with the signed-in subject.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::page::{PAGE_CLIENT_SECRET, PAGE_SECRET_ENV, PageProvider, approve_on_page};
use poppy_e2e::policies::{DEFAULT, DEFAULT_FILE};
use poppy_e2e::webhook::{Attempt, SECRET, WebhookReceiver};
use poppy_e2e::{GatewayBuilder, Request, Session, Stack, Store, store_tests, wait};

/// The variable the gateway reads the secret from.
const SECRET_ENV: &str = "POPPY_E2E_WEBHOOK_SECRET";
/// How long an event may take to arrive (a few attempts 100 ms apart, on a busy machine).
const ARRIVAL: Duration = Duration::from_secs(20);

/// The gateway with `[webhook]` sending to `url`, plus `lines` (retries 100 ms apart unless
/// they say otherwise).
fn webhook(url: &str, lines: &str) -> impl FnOnce(GatewayBuilder) -> GatewayBuilder {
    let backoff = if lines.contains("retry_backoff") {
        ""
    } else {
        "retry_backoff = \"100ms\"\n"
    };
    let table =
        format!("[webhook]\nurl = \"{url}\"\nsecret_env = \"{SECRET_ENV}\"\n{backoff}{lines}");
    move |builder| builder.env(SECRET_ENV, SECRET).extra_config(&table)
}

/// The one delivered attempt of an event, checked: verified, answered 200.
fn delivered(attempts: &[Attempt]) -> &Attempt {
    let ok: Vec<&Attempt> = attempts.iter().filter(|a| a.status == 200).collect();
    assert_eq!(ok.len(), 1, "delivered once: {attempts:#?}");
    assert!(ok[0].verified, "a verified signature: {:#?}", ok[0]);
    ok[0]
}

/// What the Personal Agent's request carried never reaches the receiver: only identifiers.
fn assert_identifiers_only(attempt: &Attempt, secrets: &[&str]) {
    for secret in secrets {
        assert!(
            !attempt.raw.contains(secret),
            "the event carries {secret:?}: {}",
            attempt.raw
        );
    }
    // No JWT (a Session, a delegation, a token) in any header or the body.
    assert!(!attempt.raw.contains("eyJ"), "a JWT in {}", attempt.raw);
    let data = attempt.event["data"].as_object().unwrap();
    let mut keys: Vec<&str> = data.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let expected: &[&str] = match attempt.kind() {
        "operation.performed" => &[
            "operation_id",
            "outcome",
            "policy",
            "route",
            "upstream_status",
        ],
        _ => &["operation_id", "outcome", "policy", "route"],
    };
    assert_eq!(keys, expected, "{}", attempt.raw);
}

async fn held_and_performed_raise_one_event_each_with_identifiers_only(store: Store) {
    let receiver = WebhookReceiver::start();
    let stack = Stack::start_with(store, webhook(&receiver.url(), ""));
    // Values that must never leave in an event: the Session, the bearer token, the body.
    let secrets = [
        "ses_webhook_private",
        "bearer-token-private-0451",
        "ord-private-5521",
        "item-private-8812",
        "sku-private-7731",
    ];
    let request = Request::exchange(
        &Session::signed_out("ses_webhook_private"),
        "ord-private-5521",
        "item-private-8812",
        "sku-private-7731",
    )
    .header("authorization", "Bearer bearer-token-private-0451");
    let op = stack.gateway.send(&request).await.operation();
    // Asked again before the User decides: the same operation, no second event.
    let again = stack.gateway.send(&request).await.operation();
    assert_eq!(again.operation_id, op.operation_id);

    let held = receiver
        .delivered("operation.held", &op.operation_id, ARRIVAL)
        .await;
    let held = delivered(&held);
    assert_eq!(held.event["version"], 1);
    assert_eq!(held.event["data"]["policy"], "exchange");
    assert_eq!(held.event["data"]["route"], "default");
    assert_eq!(held.event["data"]["outcome"], "held");
    assert_eq!(
        held.event["id"],
        held.id.as_str(),
        "webhook-id is the event's id"
    );
    assert_identifiers_only(held, &secrets);

    stack
        .gateway
        .send(&request.approve(&op))
        .await
        .assert_status(201, "performed");
    let performed = receiver
        .delivered("operation.performed", &op.operation_id, ARRIVAL)
        .await;
    let performed = delivered(&performed);
    assert_eq!(performed.event["data"]["upstream_status"], 201);
    assert_eq!(performed.event["data"]["outcome"], "performed");
    assert_ne!(performed.id, held.id);
    assert_identifiers_only(performed, &secrets);
    // One worker sends in order: the repeated ask's event would have come before this.
    assert_eq!(
        receiver.attempts().len(),
        2,
        "one held, one performed: {:#?}",
        receiver.attempts()
    );
    stack.assert_executions(1, "performed once");
    let metrics = stack.gateway.metrics().await;
    for kind in ["held", "performed"] {
        assert_eq!(
            metrics.value(
                "poppy_webhook_events_total",
                &[("type", kind), ("result", "sent")]
            ),
            1.0,
            "{kind}"
        );
    }
}

async fn a_receiver_answering_500_twice_gets_the_event_on_the_third_try(store: Store) {
    let receiver = WebhookReceiver::failing_first(2);
    let stack = Stack::start_with(store, webhook(&receiver.url(), ""));
    let request = Request::exchange(&Session::signed_out("ses_webhook_retry"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let attempts = receiver
        .delivered("operation.held", &op.operation_id, ARRIVAL)
        .await;
    let statuses: Vec<(u64, u16)> = attempts.iter().map(|a| (a.attempt, a.status)).collect();
    assert_eq!(statuses, [(1, 500), (2, 500), (3, 200)], "{attempts:#?}");
    for attempt in &attempts {
        assert!(attempt.verified, "each attempt signed afresh: {attempt:#?}");
        assert_eq!(
            attempt.id, attempts[0].id,
            "one event ID across its retries"
        );
        assert_eq!(attempt.event, attempts[0].event, "the same body");
    }
    let metrics = stack.gateway.metrics().await;
    let sent = [("type", "held"), ("result", "sent")];
    assert_eq!(metrics.value("poppy_webhook_events_total", &sent), 1.0);
    let failed = [("type", "held"), ("result", "failed")];
    assert_eq!(metrics.value("poppy_webhook_events_total", &failed), 0.0);
}

/// A receiver that accepts connections and never answers: the first event waits in the
/// worker for its timeout, the second in the queue (`queue = 2`), the others are dropped and
/// counted; every request is answered meanwhile, within the client's timeout.
async fn a_receiver_that_never_answers_slows_no_request_and_overflow_is_counted(store: Store) {
    // Listening, never accepting: connections complete in the backlog, nothing is read.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hooks", silent.local_addr().unwrap());
    let stack = Stack::start_with(store, webhook(&url, "queue = 2\ntimeout = \"60s\""));
    let client = stack.gateway.patient_client(Duration::from_secs(5));
    let session = Session::signed_out("ses_webhook_silent");
    for order in 0..10 {
        let request = Request::exchange(&session, &format!("o{order}"), "i1", "s1");
        client.send(&request).await.operation();
    }
    let metrics = stack.gateway.metrics().await;
    let dropped = [("type", "held"), ("result", "dropped")];
    assert_eq!(
        metrics.value("poppy_webhook_events_total", &dropped),
        8.0,
        "ten held operations, two places"
    );
    assert_eq!(metrics.value("poppy_webhook_queued", &[]), 2.0);
    stack.assert_executions(0, "nothing approved");
}

/// A receiver that is down (every connection refused): each event's first attempt fails at
/// once and waits for its retry, holding its place; what the queue can't hold is dropped and
/// counted, and every request is answered.
async fn a_receiver_that_is_down_overflows_into_the_dropped_count(store: Store) {
    let (port, _refusing) = poppy_e2e::ports::refusing_port();
    let url = format!("http://127.0.0.1:{port}/hooks");
    let stack = Stack::start_with(store, webhook(&url, "queue = 3\nretry_backoff = \"60s\""));
    let client = stack.gateway.patient_client(Duration::from_secs(5));
    let session = Session::signed_out("ses_webhook_down");
    for order in 0..10 {
        let request = Request::exchange(&session, &format!("o{order}"), "i1", "s1");
        client.send(&request).await.operation();
    }
    let metrics = stack.gateway.metrics().await;
    let count = |result| {
        metrics.value(
            "poppy_webhook_events_total",
            &[("type", "held"), ("result", result)],
        )
    };
    assert_eq!(count("dropped"), 7.0, "ten held operations, three places");
    assert_eq!(
        count("sent") + count("failed"),
        0.0,
        "the others wait for a retry"
    );
    assert_eq!(metrics.value("poppy_webhook_queued", &[]), 3.0);
}

async fn an_unknown_outcome_raises_an_unknown_event(store: Store) {
    let receiver = WebhookReceiver::start();
    let stack = Stack::start_with(store, |builder| {
        webhook(&receiver.url(), "events = [\"unknown\"]")(builder)
            .upstream_timeout("500ms")
            .upstream_connect_timeout("500ms")
    });
    let request = Request::exchange(
        &Session::signed_out("ses_webhook_unknown"),
        "o1",
        "i1",
        "s1",
    );
    let op = stack.gateway.send(&request).await.operation();
    stack.upstream.hold();
    stack
        .gateway
        .send(&request.approve(&op))
        .await
        .assert_unavailable("operation_outcome_unknown", "the upstream timed out");
    let unknown = receiver
        .delivered("operation.unknown", &op.operation_id, ARRIVAL)
        .await;
    let unknown = delivered(&unknown);
    assert_eq!(unknown.event["data"]["outcome"], "unknown");
    assert!(unknown.event["data"].get("upstream_status").is_none());
    // Only the chosen type is sent: no held event came before it.
    assert_eq!(receiver.attempts().len(), 1, "{:#?}", receiver.attempts());
    stack.upstream.release();
    stack.assert_executions(1, "sent once");
}

/// SIGTERM: an event waiting for its retry (the receiver answered 500; the next attempt is
/// half a minute away) gets one more attempt before the gateway exits, within
/// `server.shutdown_grace`.
async fn sigterm_tries_what_is_queued_once_more_before_exiting(store: Store) {
    let receiver = WebhookReceiver::failing_first(1);
    let mut stack = Stack::start_with(store, webhook(&receiver.url(), "retry_backoff = \"60s\""));
    let request = Request::exchange(&Session::signed_out("ses_webhook_term"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let first = wait::until(ARRIVAL, || {
        !receiver
            .attempts_of("operation.held", &op.operation_id)
            .is_empty()
    })
    .await;
    assert!(first, "the first attempt arrives");
    stack.gateway.terminate();
    let status = stack
        .gateway
        .wait_for_exit(Duration::from_secs(15))
        .await
        .expect("the gateway exits within its grace");
    assert!(
        status.success(),
        "a graceful shutdown exits 0, not {status}"
    );
    let attempts = receiver.attempts_of("operation.held", &op.operation_id);
    let statuses: Vec<u16> = attempts.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [500, 200], "{attempts:#?}");
}

/// The operation ID inside an approval page link (`…/approve/{operation_id}?…`).
fn operation_of_link(link: &str) -> String {
    let after = link
        .split("/approve/")
        .nth(1)
        .expect("an approval page link");
    after.split('?').next().unwrap().to_owned()
}

/// A stack whose exchange allows the approval page, with `[webhook]` (and `lines`) sending to
/// `receiver`, and the page's provider; waits for the page to listen.
async fn page_stack(
    store: Store,
    receiver: &WebhookReceiver,
    lines: &str,
) -> (Stack, PageProvider) {
    let (provider, table) = PageProvider::with_page();
    let policies = DEFAULT.replacen(
        "id_prefix = \"exc\"\n",
        "id_prefix = \"exc\"\napproval = \"either\"\n",
        1,
    );
    let page_table = table.toml();
    let receiver_url = receiver.url();
    let with_webhook = webhook(&receiver_url, lines);
    let stack = Stack::start_with(store, |b| {
        with_webhook(
            b.policy(DEFAULT_FILE, &policies)
                .env(PAGE_SECRET_ENV, PAGE_CLIENT_SECRET)
                .extra_config(&page_table),
        )
    });
    let address = format!("127.0.0.1:{}", table.port());
    assert!(
        wait::until(Duration::from_secs(10), || std::net::TcpStream::connect(
            &address
        )
        .is_ok())
        .await,
        "the approval page did not listen"
    );
    (stack, provider)
}

async fn page_decisions_raise_their_events_with_the_subject(store: Store) {
    let receiver = WebhookReceiver::start();
    let (stack, _provider) = page_stack(store, &receiver, "").await;
    let session = Session::signed_in("ses_webhook_page", "acct-1");
    for (item, decision, kind) in [
        ("i1", "approve", "operation.approved_on_page"),
        ("i2", "decline", "operation.declined"),
    ] {
        let request =
            Request::exchange(&session, "o1", item, "s1").without_header("Poppy-Extensions");
        let held = stack.gateway.send(&request).await;
        let body = held.assert_error(403, "approval_required", "held for the page");
        let link = body["approval_url"].as_str().unwrap().to_owned();
        let operation_id = operation_of_link(&link);
        let held_attempts = receiver
            .delivered("operation.held", &operation_id, ARRIVAL)
            .await;
        let held_event = &delivered(&held_attempts).event;
        assert!(
            held_event["data"].get("approval_url").is_none(),
            "the link only with page_links: {held_event}"
        );
        let decided = approve_on_page(&link, "acct-1", decision).await;
        assert_eq!(decided.status, 200, "{}", decided.html);
        let attempts = receiver.delivered(kind, &operation_id, ARRIVAL).await;
        let event = &delivered(&attempts).event;
        assert_eq!(event["data"]["operation_id"], operation_id.as_str());
        assert_eq!(event["data"]["policy"], "exchange", "{event}");
        assert_eq!(event["data"]["subject"], "acct-1", "who decided: {event}");
        if decision == "approve" {
            assert_eq!(stack.gateway.send(&request).await.status, 201);
            receiver
                .delivered("operation.performed", &operation_id, ARRIVAL)
                .await;
        }
    }
    stack.assert_executions(1, "the approved one, once");
}

/// With `page_links = true`, `operation.held` of a request held for the page carries the very
/// link the agent got, for the Company to send to the User; a Poppy agent's held operation
/// has none (there is no page link to give).
async fn page_links_go_in_held_events_when_asked(store: Store) {
    let receiver = WebhookReceiver::start();
    let (stack, _provider) = page_stack(store, &receiver, "page_links = true\n").await;
    let session = Session::signed_in("ses_webhook_link", "acct-1");
    let request = Request::exchange(&session, "o1", "i1", "s1").without_header("Poppy-Extensions");
    let held = stack.gateway.send(&request).await;
    let body = held.assert_error(403, "approval_required", "held for the page");
    let link = body["approval_url"].as_str().unwrap().to_owned();
    let operation_id = operation_of_link(&link);
    let attempts = receiver
        .delivered("operation.held", &operation_id, ARRIVAL)
        .await;
    let event = &delivered(&attempts).event;
    assert_eq!(event["data"]["approval_url"], link.as_str(), "{event}");
    let poppy = stack
        .gateway
        .send(&Request::exchange(&session, "o2", "i2", "s2"))
        .await
        .operation();
    let attempts = receiver
        .delivered("operation.held", &poppy.operation_id, ARRIVAL)
        .await;
    let event = &delivered(&attempts).event;
    assert!(event["data"].get("approval_url").is_none(), "{event}");
    stack.assert_executions(0, "nothing approved");
}

store_tests!(
    page_links_go_in_held_events_when_asked,
    page_decisions_raise_their_events_with_the_subject,
    sigterm_tries_what_is_queued_once_more_before_exiting,
    held_and_performed_raise_one_event_each_with_identifiers_only,
    a_receiver_answering_500_twice_gets_the_event_on_the_third_try,
    a_receiver_that_never_answers_slows_no_request_and_overflow_is_counted,
    a_receiver_that_is_down_overflows_into_the_dropped_count,
    an_unknown_outcome_raises_an_unknown_event,
);
