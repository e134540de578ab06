//! Terms from the upstream's own records (`[operation.lookup]`, the demo's two lookups and its
//! computed charge): the summary shows them, the
//! approval round trip runs the same lookup, and a failed lookup is `502 lookup_failed` with
//! nothing forwarded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use poppy_e2e::markdown::unescape;
use poppy_e2e::ports::refusing_port;
use poppy_e2e::{
    Client, GatewayBuilder, Request, Session, Shop, Stack, Store, TEST_KEYS, binaries, run_binary,
};
use serde_json::{Value, json};

/// A policy whose `info` term is read from `GET /lookup/{order_id}` at `lookup_path`.
fn lookup_policy(lookup_path: &str) -> String {
    format!(
        r#"
[[operation]]
name = "annotate"
method = "POST"
path = "/orders/{{order_id}}/annotate"
id_prefix = "ann"
expires_in = "15m"
same_action = ["order_id"]
summary = "Annotate order {{order_id}} with {{info}}."

[operation.terms]
order_id = {{ path = "order_id" }}
info = {{ lookup = "{lookup_path}" }}

[operation.lookup]
url = "/lookup/{{order_id}}"
"#
    )
}

fn annotate(session: &Session, order: &str) -> Request {
    Request::agent("POST", &format!("/orders/{order}/annotate"), session).json(&json!({}))
}

async fn get_json(base: &str, path: &str) -> Value {
    let answer = Client::new(base).send(&Request::plain("GET", path)).await;
    answer.assert_status(200, path);
    answer.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_shows_the_catalog_price_and_the_approval_round_trip_works() {
    let shop = Shop::start();
    let policy = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/shop.toml"),
    )
    .unwrap();
    let gateway = GatewayBuilder::new(&shop.url())
        .policy("shop.toml", &policy)
        .extra_config(&poppy_e2e::shop::approval_page_config())
        .start();
    let request = Request::exchange(
        &Session::signed_out("ses_lookup"),
        "ord_7Hk2",
        "itm_4Qa",
        "stormline-insulated-m",
    );
    let operation = gateway.send(&request).await.operation();
    assert_eq!(
        unescape(&operation.summary),
        "Exchange item **itm_4Qa** (Stormline Jacket (M), paid 120.00 USD) on order ord_7Hk2 for Stormline Insulated Jacket (M) (stormline-insulated-m, 190.00 USD), **for 70.00 USD more**, charged to the card used for the order."
    );
    assert_eq!(operation.terms["replacement_price"], "190.00");
    assert_eq!(operation.terms["item_price"], "120.00");
    assert_eq!(
        operation.terms["difference"], "70.00",
        "what the shop charges"
    );
    assert_eq!(operation.terms["currency"], "USD");
    assert_eq!(
        get_json(&shop.url(), "/stats").await["exchanges"],
        0,
        "nothing performed yet"
    );

    let approved = request.clone().approve(&operation);
    let first = gateway.send(&approved).await;
    first.assert_status(201, "the approved exchange, with the same lookup");
    assert_eq!(first.json()["to_sku"], "stormline-insulated-m");
    gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry");
    assert_eq!(get_json(&shop.url(), "/stats").await["exchanges"], 1);

    // A product the catalog doesn't have: no terms, nothing forwarded.
    let unknown = Request::exchange(
        &Session::signed_out("ses_lookup"),
        "ord_7Hk2",
        "itm_8Rc",
        "no-such-sku",
    );
    let body = gateway
        .send(&unknown)
        .await
        .assert_error(502, "lookup_failed", "an unknown sku");
    let detail = body["detail"].as_str().unwrap();
    // The status, but not the lookup's path on the upstream (the gateway's log keeps it).
    assert!(
        detail.contains("404") && !detail.contains("/catalog/"),
        "{detail}"
    );
    assert_eq!(get_json(&shop.url(), "/stats").await["exchanges"], 1);
}

async fn lookups_carry_the_credentials_and_encode_values(store: Store) {
    let stack = Stack::start_with(store, |b| b.policy("a.toml", &lookup_policy("$.path")));
    let session = Session::signed_in("ses_creds", "acct_1");
    let request = annotate(&session, "a%20b%26c")
        .header("Cookie", "shop_session=s1")
        .header("X-Other", "not for the lookup");
    let operation = stack.gateway.send(&request).await.operation();
    assert_eq!(operation.terms["info"], "/lookup/a%20b%26c");
    let lookups = stack.upstream.requests();
    assert_eq!(lookups.len(), 1, "one lookup, nothing forwarded");
    let lookup = &lookups[0];
    assert_eq!(lookup.method, "GET");
    assert_eq!(lookup.path_and_query, "/lookup/a%20b%26c");
    assert_eq!(lookup.header("cookie"), Some("shop_session=s1"));
    assert_eq!(
        lookup.header("authorization"),
        session.authorization().as_deref()
    );
    // The agent's own Session JWT, signed for its request (not for the lookup's path).
    poppy_e2e::signer::assert_session_of(
        &session,
        lookup
            .header("poppy-session")
            .expect("the lookup carries Poppy-Session"),
        &request.method,
        &request.path,
    );
    assert_eq!(lookup.header("x-other"), None);

    let approved = stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await;
    approved.assert_status(201, "approved with the same lookup answer");
    let requests = stack.upstream.requests();
    assert_eq!(requests.len(), 3, "lookup, lookup, the action");
    assert_eq!(requests[1].header("poppy-approval"), None);
    assert_eq!(
        stack
            .upstream
            .count_for("POST", "/orders/a%20b%26c/annotate"),
        1
    );
}

async fn a_failing_lookup_forwards_nothing(store: Store) {
    let stack = Stack::start_with(store, |b| b.policy("a.toml", &lookup_policy("$.price")));
    let session = Session::signed_out("ses_fail");
    let body = stack
        .gateway
        .send(&annotate(&session, "o1"))
        .await
        .assert_error(502, "lookup_failed", "a path the answer lacks");
    assert!(
        body["detail"].as_str().unwrap().contains("$.price"),
        "{body}"
    );
    assert_eq!(stack.upstream.count_for("POST", "/orders/o1/annotate"), 0);
    assert_eq!(
        stack.upstream.count(),
        1,
        "only the lookup reached the upstream"
    );
}

async fn a_value_that_could_name_another_record_is_refused(store: Store) {
    let policy = r#"
[[operation]]
name = "swap"
method = "POST"
path = "/swaps"
id_prefix = "swp"
expires_in = "15m"
same_action = ["sku"]
summary = "Swap for {sku} at {price}."

[operation.terms]
sku = { body = "$.sku" }
price = { lookup = "$.path" }

[operation.lookup]
url = "/catalog/{sku}"
"#;
    let stack = Stack::start_with(store, |b| b.policy("a.toml", policy));
    let session = Session::signed_out("ses_dots");
    for sku in ["..", ".", "", "../orders/o1", "a\\b"] {
        let request = Request::agent("POST", "/swaps", &session).json(&json!({ "sku": sku }));
        let body = stack.gateway.send(&request).await.assert_error(
            400,
            "invalid_term",
            &format!("sku {sku:?}"),
        );
        assert_eq!(body["term"], "sku");
    }
    stack.assert_executions(0, "no lookup, nothing forwarded");
    let request = Request::agent("POST", "/swaps", &session).json(&json!({ "sku": "a b" }));
    let operation = stack.gateway.send(&request).await.operation();
    assert_eq!(operation.terms["price"], "/catalog/a%20b");
}

async fn a_record_that_changes_is_never_approved(store: Store) {
    // The counting upstream's answer numbers each request: the lookup differs every time, so
    // an approval of one answer never matches the next one.
    let stack = Stack::start_with(store, |b| b.policy("a.toml", &lookup_policy("$.execution")));
    let request = annotate(&Session::signed_out("ses_change"), "o1");
    let operation = stack.gateway.send(&request).await.operation();
    assert_eq!(operation.terms["info"], 1);
    let again = stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await
        .operation_in("an approval of terms the record no longer has");
    assert_ne!(again.revision, operation.revision);
    assert_eq!(
        again.operation_id, operation.operation_id,
        "the same action"
    );
    assert_eq!(again.terms["info"], 2);
    assert_eq!(stack.upstream.count_for("POST", "/orders/o1/annotate"), 0);
}

/// A lookup answer with a member twice is read by no one way (serde keeps the last value,
/// other readers the first): `502 lookup_failed` saying so, nothing minted, nothing forwarded,
/// neither before nor with an approval.
async fn a_lookup_answer_with_a_member_twice_mints_nothing(store: Store) {
    let stack = Stack::start_with(store, |b| {
        b.policy("a.toml", &lookup_policy("$.price.amount"))
    });
    stack.upstream.answer_json_text(
        "/lookup/o1",
        r#"{"price":{"currency":"USD","amount":"10.00","amount":"0.01"}}"#,
    );
    let session = Session::signed_out("ses_twice");
    let body = stack
        .gateway
        .send(&annotate(&session, "o1"))
        .await
        .assert_error(502, "lookup_failed", "an answer with `amount` twice");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("read two ways") && detail.contains("$.price.amount"),
        "{body}"
    );
    assert!(body.get("operation").is_none(), "nothing minted: {body}");

    // The same record read one way mints; an approval of it is refused once the record has
    // the member twice again, and nothing is forwarded.
    stack.upstream.answer_json_text(
        "/lookup/o1",
        r#"{"price":{"currency":"USD","amount":"10.00"}}"#,
    );
    let operation = stack
        .gateway
        .send(&annotate(&session, "o1"))
        .await
        .operation();
    assert_eq!(operation.terms["info"], "10.00");
    stack.upstream.answer_json_text(
        "/lookup/o1",
        r#"{"price":{"amount":"0.01","currency":"USD","amount":"10.00"}}"#,
    );
    stack
        .gateway
        .send(&annotate(&session, "o1").approve(&operation))
        .await
        .assert_error(502, "lookup_failed", "an approval read against it");
    assert_eq!(stack.upstream.count_for("POST", "/orders/o1/annotate"), 0);
}

/// Check 2 before the lookup: once performed, retries replay even while the lookup fails.
async fn a_performed_operation_replays_while_its_lookup_fails(store: Store) {
    let stack = Stack::start_with(store, |b| {
        b.policy("a.toml", &lookup_policy("$.method"))
            .upstream_timeout("1s")
    });
    let request = annotate(&Session::signed_out("ses_replay"), "o1");
    let operation = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&operation);
    let first = stack.gateway.send(&approved).await;
    first.assert_status(201, "performed");
    // The upstream now answers nothing in time: every lookup would fail.
    stack.upstream.hold();
    let replay = stack.gateway.send(&approved).await;
    stack.upstream.release();
    replay.assert_replay_of(&first, "a retry while the lookup cannot be read");
    assert_eq!(stack.upstream.count_for("POST", "/orders/o1/annotate"), 1);
}

poppy_e2e::store_tests!(
    a_performed_operation_replays_while_its_lookup_fails,
    lookups_carry_the_credentials_and_encode_values,
    a_failing_lookup_forwards_nothing,
    a_value_that_could_name_another_record_is_refused,
    a_record_that_changes_is_never_approved,
    a_lookup_answer_with_a_member_twice_mints_nothing,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_failed_lookup() {
    let (port, _refusing) = refusing_port();
    let dead = format!("http://127.0.0.1:{port}");
    let gateway = GatewayBuilder::new(&dead)
        .policy("a.toml", &lookup_policy("$.path"))
        .start();
    let body = gateway
        .send(&annotate(&Session::signed_out("ses_dead"), "o1"))
        .await
        .assert_error(502, "lookup_failed", "the upstream is down");
    // Agents are not shown internal addresses, lookup URLs or library error text.
    let detail = body["detail"].as_str().unwrap();
    assert!(
        !detail.contains(&port.to_string()) && !detail.contains("/lookup/"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_answering_an_error_status_is_a_failed_lookup() {
    let policy = lookup_policy("$.path").replace("/lookup/{order_id}", "/status/{order_id}");
    let stack = Stack::start_with(Store::Memory, |b| b.policy("a.toml", &policy));
    let body = stack
        .gateway
        .send(&annotate(&Session::signed_out("ses_500"), "500"))
        .await
        .assert_error(502, "lookup_failed", "the lookup answered 500");
    assert!(body["detail"].as_str().unwrap().contains("500"), "{body}");
    assert_eq!(stack.upstream.count_for("POST", "/orders/500/annotate"), 0);
}

// ---- `check` lints ------------------------------------------------------------------------

/// `check` of a config whose only policy is `policy`.
fn check(policy: &str) -> poppy_e2e::Run {
    let config = GatewayBuilder::new("http://127.0.0.1:1")
        .policy("lookup.toml", policy)
        .write();
    run_binary(
        &binaries::gateway(),
        &["check", "--config", config.config.to_str().unwrap()],
        "",
        &[("POPPY_GATEWAY_KEYS", TEST_KEYS)],
        std::time::Duration::from_secs(20),
    )
}

/// Assert `check` failed with an error at `lookup.toml:LINE:` (LINE one of `lines`) that says
/// every one of `needles`.
fn assert_lint(policy: &str, lines: &[usize], needles: &[&str], what: &str) {
    let run = check(policy);
    assert!(
        !run.success(),
        "{what}: check must fail:\n{}",
        run.describe()
    );
    assert!(
        run.stderr.lines().any(|l| {
            lines
                .iter()
                .any(|line| l.contains(&format!("lookup.toml:{line}:")))
                && needles.iter().all(|n| l.contains(n))
        }),
        "{what}: expected an error at lookup.toml line {lines:?} saying {needles:?}:\n{}",
        run.describe()
    );
}

#[test]
fn check_accepts_a_good_lookup_and_prints_it() {
    let run = check(&lookup_policy("$.path"));
    assert!(run.success(), "{}", run.describe());
    assert!(
        run.stdout.contains("lookup GET /lookup/{order_id}"),
        "{}",
        run.describe()
    );
}

#[test]
fn check_lints_lookups() {
    let good = lookup_policy("$.path");
    // Line numbers in `good`: 9 is the summary, 13 the `info` term, 15 [operation.lookup], 16 its url.
    assert_eq!(
        good.lines().nth(12),
        Some(r#"info = { lookup = "$.path" }"#)
    );
    assert_eq!(good.lines().nth(15), Some(r#"url = "/lookup/{order_id}""#));

    let without_table = good.replace("[operation.lookup]\nurl = \"/lookup/{order_id}\"\n", "");
    assert_lint(
        &without_table,
        &[13],
        &["terms.info", "[operation.lookup]"],
        "a lookup term without [operation.lookup]",
    );
    assert_lint(
        &good.replace("/lookup/{order_id}", "/lookup/{colour}"),
        &[16],
        &["{colour}", "names no term"],
        "a url placeholder naming no term",
    );
    assert_lint(
        &good.replace("/lookup/{order_id}", "/lookup/{info}"),
        &[16],
        &["{info}", "comes from a lookup"],
        "a url placeholder naming a lookup term",
    );
    assert_lint(
        &good.replace("/lookup/{order_id}", "http://evil.example/{order_id}"),
        &[16],
        &["lookup.url", "path"],
        "a url that is not a path",
    );
    assert_lint(
        &good.replace(
            r#"info = { lookup = "$.path" }"#,
            r#"info = { value = "x" }"#,
        ),
        &[15, 16],
        &["no term reads its answer"],
        "a lookup no term reads",
    );
    assert_lint(
        &good.replace("$.path", "$.[["),
        &[13],
        &["terms.info", "JSONPath"],
        "a lookup term that is not a JSONPath",
    );
    assert_lint(
        &good.replace(" with {info}", ""),
        &[9],
        &["summary leaves out term `info`"],
        "a summary without the looked-up value",
    );
    assert_lint(
        &good.replace(
            "url = \"/lookup/{order_id}\"",
            "url = \"/lookup/{order_id}\"\nheaders = [\"X-Tenant\"]",
        ),
        &[17],
        &["headers"],
        "an unknown key in [operation.lookup]",
    );
}
