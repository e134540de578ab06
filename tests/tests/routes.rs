//! `[[route]]`: one gateway in front of several upstreams, each route with its own policies.
//! Each upstream counts what it executes: a request for one route never reaches another's
//! upstream, an approval minted on one route is not executed on another, a request that
//! matches no route is answered `404 no_route` and forwarded nowhere, an MCP server sits on
//! one route while an API is on another, SIGHUP re-reads every route's policies, and `check`
//! points at bad routes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::curl;
use poppy_e2e::mcp_client::{self, approved, assert_performed, call, call_ok, held_operation};
use poppy_e2e::mcp_stack::TOOL_POLICIES;
use poppy_e2e::metrics::Metrics;
use poppy_e2e::{
    AnswerMode, Gateway, GatewayBuilder, McpServer, RedisServer, Request, Run, Session, Store,
    TEST_KEYS, Upstream, binaries, policies, run_binary, store_tests, wait,
};
use serde_json::json;

const RELOAD_DEADLINE: Duration = Duration::from_secs(10);

fn check(config: &std::path::Path) -> Run {
    run_binary(
        &binaries::gateway(),
        &["check", "--config", config.to_str().unwrap()],
        "",
        &[("POPPY_GATEWAY_KEYS", TEST_KEYS)],
        Duration::from_secs(20),
    )
}

/// `pay`: an action of the billing API.
const BILLING: &str = r#"
[[operation]]
name = "pay"
method = "POST"
path = "/billing/invoices/{invoice_id}/pay"
id_prefix = "pay"
expires_in = "15m"
same_action = ["invoice_id"]
summary = "Pay invoice {invoice_id}."

[operation.terms]
invoice_id = { path = "invoice_id" }
"#;

/// The default policies' `exchange` under another name, for a second host serving the same
/// paths (policy names are unique across routes).
fn exchange_as(name: &str) -> String {
    policies::DEFAULT
        .split("[[operation]]")
        .nth(1)
        .map(|exchange| {
            format!(
                "[[operation]]{}",
                exchange.replace("\"exchange\"", &format!("\"{name}\""))
            )
        })
        .unwrap()
}

/// A world of two counting upstreams behind one gateway, on the store of the test.
struct Routed {
    gateway: Gateway,
    orders: Upstream,
    billing: Upstream,
    _redis: Option<RedisServer>,
}

fn start(store: Store, routes: impl FnOnce(&Upstream, &Upstream) -> GatewayBuilder) -> Routed {
    let redis = (store == Store::Redis).then(RedisServer::start);
    let (orders, billing) = (Upstream::start(), Upstream::start());
    let mut builder = routes(&orders, &billing).without_default_route();
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    Routed {
        gateway: builder.start(),
        orders,
        billing,
        _redis: redis,
    }
}

/// `orders` on `/orders`, `billing` on `/billing`, no default route.
fn by_prefix(orders: &Upstream, billing: &Upstream) -> GatewayBuilder {
    GatewayBuilder::new("http://127.0.0.1:9")
        .policy("orders.toml", policies::DEFAULT)
        .policy("billing.toml", BILLING)
        .extra_config(&format!(
            r#"[[route]]
name = "orders"
path_prefix = "/orders"
policies = ["policies/orders.toml"]
[route.upstream]
url = "{}"

[[route]]
name = "billing"
path_prefix = "/billing"
policies = ["policies/billing.toml"]
[route.upstream]
url = "{}"
"#,
            orders.url(),
            billing.url()
        ))
}

fn counts(world: &Routed) -> (usize, usize) {
    (world.orders.count(), world.billing.count())
}

async fn two_upstreams_each_with_its_own_policies(store: Store) {
    let world = start(store, by_prefix);
    let session = Session::signed_out("ses_routes");

    let exchange = Request::exchange(&session, "o1", "i1", "s1");
    let operation = world.gateway.send(&exchange).await.operation();
    operation.assert_prefix("exc");
    world
        .gateway
        .send(&exchange.clone().approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    assert_eq!(
        counts(&world),
        (1, 0),
        "the exchange went to the orders API only"
    );

    let pay = Request::agent("POST", "/billing/invoices/in7/pay", &session).json(&json!({}));
    let operation = world.gateway.send(&pay).await.operation();
    operation.assert_prefix("pay");
    assert_eq!(operation.summary, "Pay invoice in7.");
    world
        .gateway
        .send(&pay.clone().approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", "/billing/invoices/in7/pay");
    world
        .gateway
        .send(&pay.approve(&operation))
        .await
        .assert_status(201, "a replay");
    assert_eq!(
        counts(&world),
        (1, 1),
        "the payment went to the billing API, once"
    );

    // The orders policies are not the billing route's: this path needs no approval there,
    // and the billing route's policies do not apply on /orders.
    let plain = world
        .gateway
        .send(&Request::agent("POST", "/billing/orders/o1/exchanges", &session).json(&json!({})))
        .await;
    plain.assert_upstream_answer(2, "POST", "/billing/orders/o1/exchanges");
    world
        .gateway
        .send(&Request::plain("GET", "/orders/o1"))
        .await
        .assert_upstream_answer(2, "GET", "/orders/o1");
    assert_eq!(counts(&world), (2, 2));

    // No route: answered by the gateway, forwarded nowhere. A prefix ends at a segment.
    for path in ["/other", "/billingx/invoices/in7/pay", "/", "/ordersx"] {
        world
            .gateway
            .send(&Request::plain("GET", path))
            .await
            .assert_error(404, "no_route", path);
        world
            .gateway
            .send(&Request::agent("POST", path, &session).json(&json!({})))
            .await
            .assert_error(404, "no_route", path);
    }
    assert_eq!(counts(&world), (2, 2), "nothing forwarded without a route");

    // A spelling of a path that some server would read as another is refused before routing.
    world
        .gateway
        .send(&Request::plain("GET", "/orders;x=1/o1"))
        .await
        .assert_status(400, "a path parameter");
    assert_eq!(counts(&world), (2, 2));

    let metrics = world.gateway.metrics().await;
    assert_eq!(metrics.operations("exchange", "performed"), 1.0);
    assert_eq!(metrics.operations("pay", "performed"), 1.0);
}

/// A spelling a lenient framework reads as under a prefix (`/Billing/…`, `//billing/…`) is
/// routed, and approved, as that prefix's route: never another route's upstream or policies,
/// never `no_route` waved through to somewhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_spellings_reach_their_own_route() {
    let world = start(Store::Memory, by_prefix);
    let session = Session::signed_out("ses_spellings");
    for path in [
        "/Billing/invoices/in7/pay",
        "//billing/invoices/in7/pay",
        "/BILLING//invoices/in7/pay",
    ] {
        let pay = Request::agent("POST", path, &session).json(&json!({}));
        let operation = world.gateway.send(&pay).await.operation();
        operation.assert_prefix("pay");
    }
    assert_eq!(counts(&world), (0, 0), "nothing forwarded without approval");
    world
        .gateway
        .send(&Request::plain("GET", "/Billing/invoices"))
        .await
        .assert_status(200, "passthrough on the billing route");
    assert_eq!(counts(&world), (0, 1), "to the billing upstream");
}

/// `a.example` and `b.example` serve the same paths from two upstreams; `a.example/admin`
/// is a third route (host and prefix beat host alone) on the billing upstream.
fn by_host(orders: &Upstream, billing: &Upstream) -> GatewayBuilder {
    GatewayBuilder::new("http://127.0.0.1:9")
        .policy("a.toml", policies::DEFAULT)
        .policy("b.toml", &exchange_as("exchange_b"))
        .policy("admin.toml", &exchange_as("exchange_admin"))
        .extra_config(&format!(
            r#"[[route]]
name = "a"
host = "a.example"
policies = ["policies/a.toml"]
[route.upstream]
url = "{orders}"

[[route]]
name = "b"
host = "B.example"
policies = ["policies/b.toml"]
[route.upstream]
url = "{billing}"

[[route]]
name = "a-admin"
host = "a.example"
path_prefix = "/admin"
policies = ["policies/admin.toml"]
[route.upstream]
url = "{billing}"
"#,
            orders = orders.url(),
            billing = billing.url()
        ))
}

async fn an_approval_minted_on_one_route_is_not_executed_on_another(store: Store) {
    let world = start(store, by_host);
    let session = Session::signed_out("ses_cross");
    let on_a = Request::exchange(&session, "o1", "i1", "s1").header("Host", "a.example");
    let operation = world.gateway.send(&on_a).await.operation();

    // The same request, approval and all, for the other host: held there as a new operation.
    let on_b = on_a
        .clone()
        .approve(&operation)
        .header("Host", "b.example:8080");
    let answer = world.gateway.send(&on_b).await;
    assert!(
        answer.is_approval_required(),
        "an approval from route a must not be executed on route b:\n{}",
        answer.describe()
    );
    assert_ne!(answer.operation().operation_id, operation.operation_id);
    assert_eq!(counts(&world), (0, 0), "nothing executed anywhere");

    // On its own route it is executed, once.
    world
        .gateway
        .send(&on_a.clone().approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    assert_eq!(counts(&world), (1, 0));
    // And its replay is not served on the other route either.
    let again_on_b = world.gateway.send(&on_b).await;
    assert!(
        again_on_b.is_approval_required(),
        "{}",
        again_on_b.describe()
    );
    assert_eq!(counts(&world), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_routing_is_case_and_port_blind_and_host_with_prefix_wins() {
    let world = start(Store::Memory, by_host);
    let get = |host: &str, path: &str| Request::plain("GET", path).header("Host", host);
    world
        .gateway
        .send(&get("A.Example:1234", "/orders/o1"))
        .await
        .assert_upstream_answer(1, "GET", "/orders/o1");
    world
        .gateway
        .send(&get("b.example", "/orders/o1"))
        .await
        .assert_upstream_answer(1, "GET", "/orders/o1");
    assert_eq!(counts(&world), (1, 1));
    world
        .gateway
        .send(&get("a.example", "/admin/users"))
        .await
        .assert_upstream_answer(2, "GET", "/admin/users");
    world
        .gateway
        .send(&get("a.example", "/administrator"))
        .await
        .assert_upstream_answer(2, "GET", "/administrator");
    assert_eq!(counts(&world), (2, 2), "host and prefix beat host alone");
    world
        .gateway
        .send(&get("c.example", "/orders/o1"))
        .await
        .assert_error(404, "no_route", "another host");
    assert_eq!(counts(&world), (2, 2));
    let log = std::fs::read_to_string(world.gateway.log_path()).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
}

/// Over HTTP/2 the client's `:authority` is its Host (curl sends `-H Host:` as `:authority`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_authority_counts_as_host() {
    let world = start(Store::Memory, |a, b| {
        by_host(a, b).server_option("h2c", "true")
    });
    let port = world.gateway.listen_addr().port();
    for (host, expected) in [("b.example", (0, 1)), ("A.example", (1, 1))] {
        let request = Request::plain("GET", "/orders/o1").header("Host", host);
        let sent = tokio::task::spawn_blocking(move || {
            curl::send(&request, port, None, curl::Protocol::Http2)
        })
        .await
        .unwrap();
        assert_eq!(sent.version, "HTTP/2", "{}", sent.verbose);
        sent.answer.assert_status(200, host);
        assert_eq!(counts(&world), expected, "{host}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_on_one_route_and_an_api_on_another() {
    let server = McpServer::start(AnswerMode::Json);
    let orders = Upstream::start();
    let gateway = GatewayBuilder::new("http://127.0.0.1:9")
        .without_default_route()
        .policy("orders.toml", policies::DEFAULT)
        .policy("tools.toml", TOOL_POLICIES)
        .extra_config(&format!(
            r#"[[route]]
name = "tools"
path_prefix = "/mcp"
policies = ["policies/tools.toml"]
[route.upstream]
url = "{mcp}"
[route.mcp]
path = "/mcp"

[[route]]
name = "orders"
path_prefix = "/orders"
policies = ["policies/orders.toml"]
[route.upstream]
url = "{orders}"
"#,
            mcp = server.url(),
            orders = orders.url()
        ))
        .start();
    let session = Session::signed_out("ses_mcp_routes");
    let client = mcp_client::connect(&gateway.base_url(), &session, true).await;
    let exchange = call(
        "exchange_item",
        json!({"order_id": "o1", "item_id": "i1", "replacement_sku": "s1"}),
    );
    let held = call_ok(&client, exchange.clone()).await;
    let operation = held_operation(&held, "the tool call");
    let performed = call_ok(&client, approved(exchange, &operation)).await;
    assert_performed(&performed, 1, "exchange_item", "the approved call");
    server.assert_executions(1, "the MCP route");

    let request = Request::exchange(&session, "o1", "i1", "s1");
    let api_operation = gateway.send(&request).await.operation();
    gateway
        .send(&request.approve(&api_operation))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    assert_eq!(orders.count(), 1, "the API route");
    server.assert_executions(1, "nothing of the API reached the MCP server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_every_routes_policies() {
    let world = start(Store::Memory, by_prefix);
    let session = Session::signed_out("ses_reload_routes");
    let refund = Request::agent("POST", "/billing/refunds/r1", &session).json(&json!({}));
    world
        .gateway
        .send(&refund)
        .await
        .assert_upstream_answer(1, "POST", "/billing/refunds/r1");

    let more = format!(
        "{BILLING}\n{}",
        BILLING
            .replace("name = \"pay\"", "name = \"refund_invoice\"")
            .replace(
                "/billing/invoices/{invoice_id}/pay",
                "/billing/refunds/{invoice_id}"
            )
            .replace("id_prefix = \"pay\"", "id_prefix = \"rfd\"")
            .replace("Pay invoice", "Refund")
    );
    std::fs::write(world.gateway.policies_dir().join("billing.toml"), more).unwrap();
    let reloads = |m: &Metrics| m.value("poppy_config_reloads_total", &[("result", "success")]);
    let before = reloads(&world.gateway.metrics().await);
    world.gateway.signal("HUP");
    wait::until_some(RELOAD_DEADLINE, || async {
        let now = world.gateway.metrics().await;
        (reloads(&now) > before).then_some(())
    })
    .await
    .expect("the reload is counted");

    let held = world.gateway.send(&refund).await;
    held.operation().assert_prefix("rfd");
    // The orders route kept its own policies, and did not get billing's.
    world
        .gateway
        .send(&Request::agent("POST", "/orders/refunds/r1", &session).json(&json!({})))
        .await
        .assert_upstream_answer(1, "POST", "/orders/refunds/r1");
    assert_eq!(counts(&world), (1, 1));
}

#[test]
fn check_reports_bad_routes_with_their_position() {
    let config = GatewayBuilder::new("http://127.0.0.1:9")
        .without_default_route()
        .policy("a.toml", policies::DEFAULT)
        .policy("b.toml", policies::DEFAULT)
        .extra_config(
            r#"[[route]]
name = "a"
path_prefix = "/a"
policies = ["policies/a.toml"]
[route.upstream]
url = "http://127.0.0.1:9001"

[[route]]
name = "a"
path_prefix = "/a"
policies = ["policies/b.toml"]
[route.upstream]
url = "ftp://x"

[[route]]
name = "c"
path_prefix = "c/"
policies = ["policies/a.toml"]
bogus = 1
[route.upstream]
url = "http://127.0.0.1:9003"
"#,
        )
        .write();
    let run = check(&config.config);
    assert!(
        !run.success(),
        "bad routes must fail check:\n{}",
        run.describe()
    );
    let printed = format!("{}{}", run.stdout, run.stderr);
    assert!(printed.contains("gateway.toml:"), "{printed}");
    assert!(printed.contains("bogus"), "unknown key named:\n{printed}");

    // Without the unknown key, every other problem is reported at once.
    let text = std::fs::read_to_string(&config.config).unwrap();
    std::fs::write(&config.config, text.replace("bogus = 1\n", "")).unwrap();
    let run = check(&config.config);
    assert!(!run.success(), "{}", run.describe());
    let printed = format!("{}{}", run.stdout, run.stderr);
    for expected in [
        "route name `a` is used twice",
        "must start with http:// or https://",
        "path_prefix `c/` must start with `/`",
        "policy name `exchange` is used by routes `a` and `a`",
    ] {
        assert!(
            printed.contains(expected),
            "expected {expected:?} in:\n{printed}"
        );
    }
    let positioned = printed
        .lines()
        .filter(|l| l.contains("gateway.toml:") && l.contains("route"))
        .count();
    assert!(positioned >= 3, "errors carry file:line:column:\n{printed}");

    // Two routes that match exactly the same requests.
    let tie = GatewayBuilder::new("http://127.0.0.1:9")
        .policy("b.toml", BILLING)
        .extra_config(
            r#"[[route]]
name = "one"
host = "x.example"
policies = ["policies/b.toml"]
[route.upstream]
url = "http://127.0.0.1:9001"

[[route]]
name = "two"
host = "X.example"
policies = ["policies/b.toml"]
[route.upstream]
url = "http://127.0.0.1:9002"
"#,
        )
        .write();
    let run = check(&tie.config);
    assert!(!run.success(), "{}", run.describe());
    assert!(
        format!("{}{}", run.stdout, run.stderr)
            .contains("matches exactly what route `one` matches"),
        "{}",
        run.describe()
    );
}

store_tests!(
    two_upstreams_each_with_its_own_policies,
    an_approval_minted_on_one_route_is_not_executed_on_another
);
