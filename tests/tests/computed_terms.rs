//! Summaries that state the charge: two lookups (one named), a quote, and terms computed from
//! them with exact decimals. The summary shows the computed amount, the approval forwards once,
//! an upstream answer that changes before the approval is never approved, a quote is sent the
//! request's own body and never forwarded as the action, and an operand that is no number
//! forwards nothing. Both stores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::markdown::unescape;
use poppy_e2e::mcp_client::{approved, assert_performed, call, call_ok, held_operation, text_of};
use poppy_e2e::{AnswerMode, McpStack, Request, Session, Stack, Store};
use serde_json::json;

/// The new price from the catalog, the price paid from the order's item (a named lookup), the
/// difference and the total for `quantity` computed.
const EXCHANGE: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange {quantity} of item {item_id} on order {order_id} for {sku} ({new_price}, paid {paid}), **for {difference} more** each, {total} in all."

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
sku = { body = "$.sku" }
quantity = { body = "$.quantity" }
new_price = { lookup = "$.price" }
paid = { lookup = "item", at = "$.price" }
difference = { compute = "new_price - paid" }
total = { compute = "difference * quantity" }

[operation.lookup]
url = "/catalog/{sku}"

[operation.lookups.item]
url = "/orders/{order_id}/items/{item_id}"
"#;

/// The charge quoted by the upstream's preview endpoint, sent the request's own body.
const QUOTED: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item {item_id} on order {order_id} for {sku}, **for {charge} {currency} more** ({with_fee} with the fee)."

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
sku = { body = "$.sku" }
charge = { lookup = "quote", at = "$.charge.amount" }
currency = { lookup = "quote", at = "$.charge.currency" }
with_fee = { compute = "charge + 1.50" }

[operation.lookups.quote]
method = "POST"
url = "/orders/{order_id}/exchanges/preview"
"#;

fn exchange(session: &Session, order: &str, item: &str, quantity: serde_json::Value) -> Request {
    Request::agent("POST", &format!("/orders/{order}/exchanges"), session).json(&json!({
        "item_id": item,
        "sku": "jacket-insulated",
        "quantity": quantity,
    }))
}

async fn the_summary_states_the_computed_charge_and_a_changed_answer_is_never_approved(
    store: Store,
) {
    let stack = Stack::start_with(store, |b| b.policy("exchange.toml", EXCHANGE));
    let upstream = &stack.upstream;
    upstream.answer_json("/catalog/jacket-insulated", json!({"price": "190.00"}));
    upstream.answer_json("/orders/o1/items/i1", json!({"price": "120.00"}));
    upstream.answer_json("/orders/o2/items/i2", json!({"price": 120}));
    let session = Session::signed_out("ses_charge");

    let request = exchange(&session, "o1", "i1", json!(2));
    let operation = stack.gateway.send(&request).await.operation();
    assert_eq!(
        unescape(&operation.summary),
        "Exchange 2 of item i1 on order o1 for jacket-insulated (190.00, paid 120.00), **for 70.00 more** each, 140.00 in all."
    );
    assert_eq!(operation.terms["difference"], "70.00");
    assert_eq!(operation.terms["total"], "140.00");
    assert_eq!(upstream.count_for("POST", "/orders/o1/exchanges"), 0);
    assert_eq!(upstream.count_for("GET", "/catalog/jacket-insulated"), 1);
    assert_eq!(upstream.count_for("GET", "/orders/o1/items/i1"), 1);

    let approved = request.clone().approve(&operation);
    let first = stack.gateway.send(&approved).await;
    first.assert_status(201, "approved while both lookups say the same");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry");
    assert_eq!(
        upstream.count_for("POST", "/orders/o1/exchanges"),
        1,
        "forwarded once"
    );

    // The price paid, as the order says it, changes between the mint and the approval: the
    // revision the User approved no longer matches, and nothing is forwarded.
    let request = exchange(&session, "o2", "i2", json!(1));
    let operation = stack.gateway.send(&request).await.operation();
    assert_eq!(
        operation.terms["difference"], "70.00",
        "a JSON number operand"
    );
    upstream.answer_json("/orders/o2/items/i2", json!({"price": "150.00"}));
    let answer = stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await;
    let renewed = answer.operation_in("an approval of the old charge");
    assert_eq!(
        renewed.operation_id, operation.operation_id,
        "the same action"
    );
    assert_ne!(renewed.revision, operation.revision, "a new revision");
    assert_eq!(renewed.terms["difference"], "40.00");
    assert!(
        unescape(&renewed.summary).contains("**for 40.00 more** each, 40.00 in all"),
        "{}",
        renewed.summary
    );
    assert_eq!(
        upstream.count_for("POST", "/orders/o2/exchanges"),
        0,
        "the old approval forwarded nothing"
    );
    stack
        .gateway
        .send(&request.clone().approve(&renewed))
        .await
        .assert_status(201, "the new charge, approved");
    assert_eq!(upstream.count_for("POST", "/orders/o2/exchanges"), 1);
}

async fn an_operand_that_is_no_number_forwards_nothing(store: Store) {
    let stack = Stack::start_with(store, |b| b.policy("exchange.toml", EXCHANGE));
    let upstream = &stack.upstream;
    upstream.answer_json("/catalog/jacket-insulated", json!({"price": "190.00"}));
    upstream.answer_json("/orders/o1/items/i1", json!({"price": "120.00"}));
    upstream.answer_json("/orders/o3/items/i3", json!({"price": "ask us"}));
    let session = Session::signed_out("ses_nan");

    // From the request: 400 naming the term.
    let body = stack
        .gateway
        .send(&exchange(&session, "o1", "i1", json!("two")))
        .await
        .assert_error(400, "invalid_term", "a quantity that is no number");
    assert_eq!(body["term"], "quantity", "{body}");
    assert!(body["detail"].as_str().unwrap().contains("total"), "{body}");
    for not_plain in [json!("1e2"), json!("+2"), json!(true)] {
        stack
            .gateway
            .send(&exchange(&session, "o1", "i1", not_plain.clone()))
            .await
            .assert_error(400, "invalid_term", &format!("quantity {not_plain}"));
    }

    // From a lookup's answer: 502, as a failed lookup.
    let body = stack
        .gateway
        .send(&exchange(&session, "o3", "i3", json!(1)))
        .await
        .assert_error(502, "lookup_failed", "a price paid that is no number");
    assert!(body["detail"].as_str().unwrap().contains("paid"), "{body}");
    assert_eq!(upstream.count_for("POST", "/orders/o1/exchanges"), 0);
    assert_eq!(upstream.count_for("POST", "/orders/o3/exchanges"), 0);
}

async fn a_quote_is_sent_the_request_body_and_never_forwarded_as_the_action(store: Store) {
    let stack = Stack::start_with(store, |b| b.policy("quoted.toml", QUOTED));
    let upstream = &stack.upstream;
    upstream.answer_json(
        "/orders/o1/exchanges/preview",
        json!({"charge": {"amount": "70.00", "currency": "USD"}}),
    );
    let session = Session::signed_out("ses_quote");
    let body = br#"{"item_id": "i1",  "sku": "jacket-insulated"}"#.to_vec();
    let request = Request::agent("POST", "/orders/o1/exchanges", &session)
        .body(body.clone(), "application/json")
        .header("Cookie", "shop_session=s1");

    let operation = stack.gateway.send(&request).await.operation();
    assert_eq!(
        unescape(&operation.summary),
        "Exchange item i1 on order o1 for jacket-insulated, **for 70.00 USD more** (71.50 with the fee)."
    );
    assert_eq!(
        upstream.count_for("POST", "/orders/o1/exchanges"),
        0,
        "the action is never the quote"
    );
    let quotes: Vec<_> = upstream
        .requests()
        .into_iter()
        .filter(|r| r.path == "/orders/o1/exchanges/preview")
        .collect();
    assert_eq!(quotes.len(), 1);
    let quote = &quotes[0];
    assert_eq!(quote.method, "POST");
    assert_eq!(quote.body, body, "the request's own bytes");
    assert_eq!(quote.header("content-type"), Some("application/json"));
    assert_eq!(quote.header("cookie"), Some("shop_session=s1"));
    assert_eq!(quote.header("poppy-approval"), None);

    let approved = stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await;
    approved.assert_status(201, "approved while the quote says the same");
    assert_eq!(upstream.count_for("POST", "/orders/o1/exchanges"), 1);
    assert_eq!(
        upstream.count_for("POST", "/orders/o1/exchanges/preview"),
        2,
        "quoted again for the approval"
    );
    let action = upstream
        .requests()
        .into_iter()
        .find(|r| r.path == "/orders/o1/exchanges")
        .unwrap();
    assert_eq!(action.body, body);
}

/// A tool whose summary states a value computed from its arguments.
const TOOL: &str = r#"
[[tool]]
name = "lookup_tool"
tool = "lookup_order"
id_prefix = "lku"
expires_in = "15m"
same_action = ["order_id"]
summary = "Look up order {order_id}; twice that is {double}."

[tool.terms]
order_id = { argument = "$.order_id" }
double = { compute = "order_id * 2" }
"#;

async fn a_tool_call_gets_its_computed_terms(store: Store) {
    let stack = McpStack::start_with(store, AnswerMode::Json, |b| b.policy("lookup.toml", TOOL));
    let client = stack.agent(&Session::signed_out("ses_tool")).await;
    let params = call("lookup_order", json!({"order_id": "12.50"}));
    let operation = held_operation(&call_ok(&client, params.clone()).await, "a held call");
    assert_eq!(operation.terms["double"], "25.00");
    assert!(unescape(&operation.summary).ends_with("twice that is 25.00."));

    let refused = call_ok(&client, call("lookup_order", json!({"order_id": "o1"}))).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        text_of(&refused).contains("not a decimal number"),
        "{refused}"
    );
    assert_eq!(
        stack.server.executions_of("lookup_order"),
        0,
        "nothing executed"
    );

    let done = call_ok(&client, approved(params, &operation)).await;
    assert_performed(&done, 1, "lookup_order", "the approved call");
    assert_eq!(stack.server.executions_of("lookup_order"), 1);
}

poppy_e2e::store_tests!(
    a_tool_call_gets_its_computed_terms,
    the_summary_states_the_computed_charge_and_a_changed_answer_is_never_approved,
    an_operand_that_is_no_number_forwards_nothing,
    a_quote_is_sent_the_request_body_and_never_forwarded_as_the_action,
);
