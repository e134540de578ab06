//! Approval by value (`needs_approval_when`): a policy's action needs approval only when its
//! condition holds for the terms (looked-up and computed ones included). The demo's
//! exchange: a same-price exchange passes through and executes (counted as unheld), a dearer
//! one is held, approved, executed exactly once and replayed; a condition that cannot be
//! evaluated (a failed lookup, a missing optional term) holds and executes nothing. On the
//! HTTP API, an MCP tool and the conversations service; the real binary, both stores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::conversations::{Service, Turn, approval_message, assert_outcome, text_message};
use poppy_e2e::mcp_client::{approved, assert_performed, call, call_ok, held_operation};
use poppy_e2e::upstream::Upstream;
use poppy_e2e::{
    AnswerMode, Client, GatewayBuilder, McpStack, Request, Session, Shop, Stack, Store,
};
use serde_json::{Value, json};

/// The demo's exchange, reduced: the prices are looked up, the difference computed, and only
/// a dearer replacement needs the User's approval. `quantity` is optional: a request without
/// it (or with one that is no number) has no value for the condition, and is held.
const EXCHANGE: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item {item_id} on order {order_id} for {replacement_sku} ({replacement_price}, paid {item_price}), **for {difference} more**{?quantity}, {quantity} of them{/quantity}."
needs_approval_when = "difference * quantity > 0.00"

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
replacement_sku = { body = "$.replacement_sku" }
quantity = { body = "$.quantity", optional = true }
replacement_price = { lookup = "$.price" }
item_price = { lookup = "item", at = "$.price" }
difference = { compute = "replacement_price - item_price" }

[operation.lookup]
url = "/catalog/{replacement_sku}"

[operation.lookups.item]
url = "/orders/{order_id}/items/{item_id}"
"#;

const UNHELD: &str = "poppy_unheld_requests_total";

fn exchange(session: &Session, order: &str, sku: &str, quantity: Option<Value>) -> Request {
    let mut body = json!({"item_id": "i1", "replacement_sku": sku});
    if let Some(quantity) = quantity {
        body["quantity"] = quantity;
    }
    Request::agent("POST", &format!("/orders/{order}/exchanges"), session).json(&body)
}

/// The shop's catalog and orders: the item paid 120.00; `same` costs as much, `dearer` more.
fn prices(upstream: &Upstream) {
    upstream.answer_json("/catalog/same", json!({"price": "120.00"}));
    upstream.answer_json("/catalog/dearer", json!({"price": "190.00"}));
    for order in ["o1", "o2", "o3", "o5", "o6"] {
        upstream.answer_json(
            &format!("/orders/{order}/items/i1"),
            json!({"price": "120.00"}),
        );
    }
}

async fn unheld(stack: &Stack, policy: &str) -> f64 {
    stack.gateway.metrics().await.value(
        UNHELD,
        &[("operation", policy), ("reason", "condition_false")],
    )
}

async fn http_same_price_passes_through_and_a_dearer_one_is_held_once(store: Store) {
    let stack = Stack::start_with(store, |b| b.policy("exchange.toml", EXCHANGE));
    let upstream = &stack.upstream;
    prices(upstream);
    let session = Session::signed_out("ses_by_value");

    // Same price: no approval needed; forwarded as a request no policy names, its answer
    // the upstream's own.
    let same = stack
        .gateway
        .send(&exchange(&session, "o1", "same", Some(json!(1))))
        .await;
    same.assert_status(201, "a same-price exchange passes through");
    assert_eq!(upstream.count_for("POST", "/orders/o1/exchanges"), 1);
    let forwarded = upstream
        .requests()
        .into_iter()
        .find(|r| r.path == "/orders/o1/exchanges")
        .unwrap();
    assert_eq!(forwarded.header("poppy-approval"), None);
    assert_eq!(unheld(&stack, "exchange").await, 1.0);
    // Not an operation: the same request again is simply sent again, as without a policy.
    stack
        .gateway
        .send(&exchange(&session, "o1", "same", Some(json!(1))))
        .await
        .assert_status(201, "again");
    assert_eq!(upstream.count_for("POST", "/orders/o1/exchanges"), 2);
    assert_eq!(unheld(&stack, "exchange").await, 2.0);

    // Dearer: held, approved, executed exactly once, its retry replayed.
    let request = exchange(&session, "o2", "dearer", Some(json!(1)));
    let operation = stack.gateway.send(&request).await.operation();
    assert_eq!(operation.terms["difference"], "70.00");
    assert_eq!(upstream.count_for("POST", "/orders/o2/exchanges"), 0);
    let approved = request.clone().approve(&operation);
    let first = stack.gateway.send(&approved).await;
    first.assert_status(201, "the dearer exchange, approved");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "its retry");
    assert_eq!(upstream.count_for("POST", "/orders/o2/exchanges"), 1);

    // The replacement's price drops to the price paid after the approval: the retry is
    // still a replay of the one execution, never passed through as a new request.
    upstream.answer_json("/catalog/dearer", json!({"price": "120.00"}));
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry once the condition is false");
    assert_eq!(upstream.count_for("POST", "/orders/o2/exchanges"), 1);
    assert_eq!(unheld(&stack, "exchange").await, 2.0);
}

async fn a_condition_that_cannot_be_evaluated_holds(store: Store) {
    let stack = Stack::start_with(store, |b| b.policy("exchange.toml", EXCHANGE));
    let upstream = &stack.upstream;
    prices(upstream);
    let session = Session::signed_out("ses_by_value_unknown");

    // No quantity (an optional term): the condition has no value, and the request is held,
    // executing nothing; approved, it executes once as any held request.
    let request = exchange(&session, "o3", "same", None);
    let operation = stack.gateway.send(&request).await.operation();
    assert_eq!(operation.terms["difference"], "0.00");
    assert_eq!(upstream.count_for("POST", "/orders/o3/exchanges"), 0);
    let first = stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await;
    first.assert_status(201, "approved");
    assert_eq!(upstream.count_for("POST", "/orders/o3/exchanges"), 1);
    // A quantity that is no number: held too.
    let operation = stack
        .gateway
        .send(&exchange(&session, "o6", "same", Some(json!("two"))))
        .await
        .operation();
    assert_eq!(operation.terms["quantity"], "two");
    assert_eq!(upstream.count_for("POST", "/orders/o6/exchanges"), 0);

    // A failed lookup (an order the shop does not know): refused as without a condition,
    // nothing forwarded.
    stack
        .gateway
        .send(&exchange(&session, "o4", "same", Some(json!(1))))
        .await
        .assert_error(502, "lookup_failed", "the price paid can't be read");
    assert_eq!(upstream.count_for("POST", "/orders/o4/exchanges"), 0);

    // A lookup answer without the price: the computed difference has none.
    upstream.answer_json("/orders/o5/items/i1", json!({"cost": "120.00"}));
    let refused = stack
        .gateway
        .send(&exchange(&session, "o5", "same", Some(json!(1))))
        .await;
    assert!(
        refused.status == 502 || refused.status == 403,
        "held or refused, never forwarded: {}",
        refused.describe()
    );
    assert_eq!(upstream.count_for("POST", "/orders/o5/exchanges"), 0);
    assert_eq!(unheld(&stack, "exchange").await, 0.0);
}

/// The exchange tool: the amount the replacement costs more is an argument; a call for
/// nothing more needs no approval. In place of the stack's own tool policies.
const TOOL: &str = r#"
[[tool]]
name = "exchange_tool"
tool = "exchange_item"
id_prefix = "exi"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange an item on order {order_id}, **for {difference} more**."
needs_approval_when = "difference > 0"

[tool.terms]
order_id = { argument = "$.order_id" }
difference = { argument = "$.difference" }
"#;

async fn mcp_a_call_for_nothing_more_passes_through(store: Store) {
    let stack = McpStack::start_with(store, AnswerMode::Json, |b| b.policy("tools.toml", TOOL));
    let client = stack.agent(&Session::signed_out("ses_by_value_mcp")).await;

    let same = call_ok(
        &client,
        call(
            "exchange_item",
            json!({"order_id": "o1", "difference": "0.00"}),
        ),
    )
    .await;
    assert_performed(&same, 1, "exchange_item", "a call for nothing more");
    assert_eq!(stack.server.executions_of("exchange_item"), 1);

    let params = call(
        "exchange_item",
        json!({"order_id": "o2", "difference": "70.00"}),
    );
    let operation = held_operation(&call_ok(&client, params.clone()).await, "a dearer call");
    assert_eq!(stack.server.executions_of("exchange_item"), 1, "held");
    let done = call_ok(&client, approved(params.clone(), &operation)).await;
    assert_performed(&done, 2, "exchange_item", "the approved call");
    let again = call_ok(&client, approved(params, &operation)).await;
    assert_performed(&again, 2, "exchange_item", "its retry, replayed");
    assert_eq!(stack.server.executions_of("exchange_item"), 2);

    // An approval of a dearer call never approved, carried by a call for nothing more
    // (other terms): it approves nothing here, and none is needed; the call goes to the
    // server without it. (The approval of a performed call would replay it, above.)
    let dearer = call(
        "exchange_item",
        json!({"order_id": "o4", "difference": "70.00"}),
    );
    let unapproved = held_operation(&call_ok(&client, dearer).await, "another dearer call");
    let other = call_ok(
        &client,
        approved(
            call(
                "exchange_item",
                json!({"order_id": "o4", "difference": "0.00"}),
            ),
            &unapproved,
        ),
    )
    .await;
    assert_performed(
        &other,
        3,
        "exchange_item",
        "a call for nothing more, with an approval",
    );
    let sent = stack
        .server
        .posts()
        .into_iter()
        .rfind(|p| p.method() == Some("tools/call"))
        .unwrap();
    assert_eq!(sent.body["params"]["arguments"]["difference"], "0.00");
    assert!(
        !sent
            .body
            .to_string()
            .contains("personalagentprotocol.org/approval"),
        "the approval is the gateway's business only: {}",
        sent.body
    );
    assert_eq!(stack.server.executions_of("exchange_item"), 3);

    // No difference at all: the condition can't be evaluated, and the call is held.
    let missing = call_ok(&client, call("exchange_item", json!({"order_id": "o3"}))).await;
    assert_eq!(
        missing["isError"], true,
        "a term missing is refused or held: {missing}"
    );
    assert_eq!(stack.server.executions_of("exchange_item"), 3);

    let metrics = stack.gateway.metrics().await;
    assert_eq!(
        metrics.value(
            UNHELD,
            &[
                ("operation", "exchange_tool"),
                ("reason", "condition_false")
            ]
        ),
        2.0,
        "{}",
        metrics.text
    );
}

/// The conversations service's exchange (the Turn's body: `item_id`, `replacement_sku`).
const CONVERSATION: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item {item_id} on order {order_id} for {replacement_sku} ({replacement_price}, paid {item_price}), **for {difference} more**."
needs_approval_when = "difference > 0"

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
replacement_sku = { body = "$.replacement_sku" }
replacement_price = { lookup = "$.price" }
item_price = { lookup = "item", at = "$.price" }
difference = { compute = "replacement_price - item_price" }

[operation.lookup]
url = "/catalog/{replacement_sku}"

[operation.lookups.item]
url = "/orders/{order_id}/items/{item_id}"
"#;

async fn conversations_a_same_price_message_performs_and_a_dearer_one_is_held(store: Store) {
    let stack = Stack::start_with(store, |b| {
        b.conversations().policy("exchange.toml", CONVERSATION)
    });
    let service = Service::of(&stack.gateway);
    prices(&stack.upstream);
    let session = Session::signed_out("ses_by_value_conv");

    // Same price: the proposal has no operation and performs nothing; a message without
    // an approval performs it once, and its retry gets the same answer.
    let same = Turn::exchange("conv_same", &session, "o1", "i1", "same");
    let proposed = service.propose(&same).await;
    assert_outcome(&proposed, "not_held", "a proposal that needs no approval");
    let executed = |order: &str| {
        stack
            .upstream
            .count_for("POST", &format!("/orders/{order}/exchanges"))
    };
    assert_eq!(executed("o1"), 0, "a proposal performs nothing");
    let message = text_message("msg_same_1", "Swap it for the same price, please.");
    let answer = service.perform(&same, &message).await;
    let body = assert_outcome(&answer, "not_held", "a same-price message");
    assert_eq!(body["response"]["status"], 201, "{body}");
    assert_eq!(executed("o1"), 1, "performed once");
    let retried = service.perform(&same, &message).await;
    assert_eq!(
        retried.json(),
        answer.json(),
        "the retried message's answer"
    );
    assert_eq!(
        executed("o1"),
        1,
        "a retried message performs nothing again"
    );

    // Dearer: proposed as an operation, performed once on its approval message.
    let dearer = Turn::exchange("conv_dearer", &session, "o2", "i1", "dearer");
    let operation = service.proposed(&dearer).await;
    assert_eq!(operation.terms["difference"], "70.00");
    let held = service
        .perform(&dearer, &text_message("msg_dearer_1", "Do it."))
        .await;
    held.assert_status(403, "a message without an approval is held");
    assert_eq!(executed("o2"), 0, "held");
    let approval = approval_message("msg_dearer_2", &operation);
    let performed = service.perform(&dearer, &approval).await;
    assert_outcome(&performed, "performed", "the approval message");
    assert_eq!(executed("o2"), 1, "the approved exchange, once");
    let again = service
        .perform(&dearer, &approval_message("msg_dearer_3", &operation))
        .await;
    assert_outcome(
        &again,
        "already_performed",
        "a new message, the same approval",
    );
    assert_eq!(executed("o2"), 1, "never twice");
    service.assert_answers_are_described();
}

/// The condition is in no revision: an operation minted before a reload adds it is approved
/// after, executed once; and the reload makes a same-price exchange pass through.
async fn adding_a_condition_changes_no_revision(store: Store) {
    const TOKEN: &str = "by-value-admin-token";
    let without = EXCHANGE.replace(
        "needs_approval_when = \"difference * quantity > 0.00\"\n",
        "",
    );
    assert_ne!(without, EXCHANGE);
    let stack = Stack::start_with(store, |b| {
        b.policy("exchange.toml", &without)
            .env("POPPY_GATEWAY_ADMIN_TOKEN", TOKEN)
    });
    let upstream = &stack.upstream;
    prices(upstream);
    let session = Session::signed_out("ses_by_value_reload");
    let dearer = exchange(&session, "o2", "dearer", Some(json!(1)));
    let operation = stack.gateway.send(&dearer).await.operation();
    // Without a condition a same-price exchange is held too.
    let same = exchange(&session, "o1", "same", Some(json!(1)));
    stack.gateway.send(&same).await.operation();

    std::fs::write(stack.gateway.policies_dir().join("exchange.toml"), EXCHANGE).unwrap();
    let reloaded = reqwest::Client::new()
        .post(format!("{}/reload", stack.gateway.admin_url()))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        reloaded.status().as_u16(),
        200,
        "{:?}",
        reloaded.text().await
    );

    let approved = dearer.clone().approve(&operation);
    let first = stack.gateway.send(&approved).await;
    first.assert_status(
        201,
        "approved under the revision minted before the condition",
    );
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "its retry");
    assert_eq!(upstream.count_for("POST", "/orders/o2/exchanges"), 1);
    stack
        .gateway
        .send(&same)
        .await
        .assert_status(201, "a same-price exchange, once the condition is in force");
    assert_eq!(upstream.count_for("POST", "/orders/o1/exchanges"), 1);
}

/// `explain` shows the condition and its value for the request: false (passes through),
/// true (held, with the operation), or no value (held, and why).
#[test]
fn explain_shows_the_condition_and_its_value() {
    let config = GatewayBuilder::new("http://127.0.0.1:1")
        .policy("exchange.toml", EXCHANGE)
        .write();
    let explain = |sku: &str, quantity: &str| {
        let body = format!(r#"{{"item_id": "i1", "replacement_sku": "{sku}"{quantity}}}"#);
        let price = if sku == "same" { "120.00" } else { "190.00" };
        let catalog = format!(r#"{{"price": "{price}"}}"#);
        let args = [
            "--path",
            "/orders/o1/exchanges",
            "--body",
            &body,
            "--lookup-answer",
            &catalog,
            "--lookup-answer",
            r#"item={"price": "120.00"}"#,
        ];
        config.run("explain", &args)
    };
    let same = explain("same", r#", "quantity": 1"#);
    same.assert_code(0, "a same-price exchange");
    for shown in [
        "needs_approval_when: difference * quantity > 0.00",
        "false: passes through to the upstream as if no policy named it",
    ] {
        assert!(same.stdout.contains(shown), "{shown}:\n{}", same.describe());
    }
    assert!(!same.stdout.contains("403 {"), "{}", same.describe());

    let dearer = explain("dearer", r#", "quantity": 1"#);
    assert!(
        dearer.stdout.contains("true: held for approval") && dearer.stdout.contains("403 {"),
        "{}",
        dearer.describe()
    );

    let no_quantity = explain("same", "");
    assert!(
        no_quantity.stdout.contains(
            "cannot be evaluated: held for approval, because term `quantity` has no value"
        ) && no_quantity.stdout.contains("403 {"),
        "{}",
        no_quantity.describe()
    );
}

/// The demo itself: `policies/shop.toml` in front of the real example shop. Swapping the
/// Stormline Jacket M for L (the same price) is performed at once; for the insulated one
/// (70.00 USD more) it is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_shop_exchanges_at_the_same_price_without_approval() {
    let shop = Shop::start();
    let policy = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/shop.toml"),
    )
    .unwrap();
    let gateway = GatewayBuilder::new(&shop.url())
        .policy("shop.toml", &policy)
        .extra_config(&poppy_e2e::shop::approval_page_config())
        .start();
    let session = Session::signed_out("ses_demo_by_value");
    let stats = || async {
        let answer = Client::new(&shop.url())
            .send(&Request::plain("GET", "/stats"))
            .await;
        answer.json()["exchanges"].as_u64().unwrap()
    };

    let same = Request::exchange(&session, "ord_7Hk2", "itm_4Qa", "stormline-l");
    let done = gateway.send(&same).await;
    done.assert_status(201, "a same-price exchange, without approval");
    assert_eq!(done.json()["to_sku"], "stormline-l");
    assert_eq!(stats().await, 1);

    let dearer = Request::exchange(&session, "ord_9Pg4", "itm_3Hb", "stormline-insulated-m");
    let operation = gateway.send(&dearer).await.operation();
    assert_eq!(operation.terms["difference"], "70.00");
    assert_eq!(stats().await, 1, "held");
    gateway
        .send(&dearer.clone().approve(&operation))
        .await
        .assert_status(201, "the dearer exchange, approved");
    assert_eq!(stats().await, 2);
}

poppy_e2e::store_tests!(
    adding_a_condition_changes_no_revision,
    http_same_price_passes_through_and_a_dearer_one_is_held_once,
    a_condition_that_cannot_be_evaluated_holds,
    mcp_a_call_for_nothing_more_passes_through,
    conversations_a_same_price_message_performs_and_a_dearer_one_is_held,
);
