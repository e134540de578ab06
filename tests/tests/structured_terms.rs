//! Optional and structured terms (issue 38), through the real binary and the counting
//! upstream, both stores: a Stripe-like form API (`POST /v1/checkout/sessions`) and a JSON one
//! (`POST /v1/orders`), sent as SDKs send them: the required fields only, or every optional
//! field too (`metadata[k]=v`, `line_items[0][price]=…`, `expand[]=…`; nested JSON objects and
//! arrays of objects with optional members). Each request is held, approved once, executed
//! once and replayed without reaching the upstream; a field added after the approval is other
//! terms, another revision, and executes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::markdown::unescape;
use poppy_e2e::policies::CHECKOUT;
use poppy_e2e::{GatewayBuilder, Request, Session, Stack, Store};
use serde_json::json;

/// A JSON action with optional and nested terms, beside [`CHECKOUT`].
const ORDERS: &str = r#"
[[operation]]
name = "order"
method = "POST"
path = "/v1/orders"
id_prefix = "ord"
expires_in = "15m"
same_action = ["customer"]
summary = "Order for {customer}.\n\n{...}"

[operation.terms]
customer = { body = "$.customer" }
items = { body = "$.items" }
shipping = { body = "$.shipping", optional = true }
note = { body = "$.note", optional = true }
"#;

const FORM: &str = "application/x-www-form-urlencoded";
const CHECKOUT_PATH: &str = "/v1/checkout/sessions";

/// A form request as stripe-python encodes it (brackets percent-encoded, `+` for spaces).
fn checkout(session: &Session, body: &str) -> Request {
    Request::agent("POST", CHECKOUT_PATH, session).body(body.as_bytes().to_vec(), FORM)
}

/// Held, approved once, executed once, replayed without reaching the upstream; the terms and
/// the summary it was held with.
async fn approve_once(
    stack: &Stack,
    request: &Request,
    executed_before: usize,
) -> (serde_json::Value, String) {
    let answer = stack.gateway.send(request).await;
    let operation = answer.operation_in("held");
    stack.assert_executions(executed_before, "held, not executed");
    let approved = request.clone().approve(&operation);
    let first = stack.gateway.send(&approved).await;
    first.assert_status(201, "approved");
    stack.assert_executions(executed_before + 1, "executed once");
    assert_eq!(
        stack.upstream.requests()[executed_before].body,
        request.body,
        "the approved bytes are what the upstream received"
    );
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry");
    stack.assert_executions(executed_before + 1, "a retry is replayed");
    (operation.terms, unescape(&operation.summary))
}

async fn optional_and_structured_form_terms(store: Store) {
    let stack = Stack::start_with(store, |b| {
        b.policy("stripe.toml", CHECKOUT)
            .policy("orders.toml", ORDERS)
    });
    let session = Session::signed_out("ses_structured");

    // The common case: the required fields only.
    let required =
        "mode=payment&line_items%5B0%5D%5Bprice%5D=price_1&line_items%5B0%5D%5Bquantity%5D=2";
    let (terms, summary) = approve_once(&stack, &checkout(&session, required), 0).await;
    assert_eq!(
        terms,
        json!({"mode": "payment", "line_items": [{"price": "price_1", "quantity": "2"}]})
    );
    assert_eq!(
        summary,
        "Start a payment checkout for (price: price_1, quantity: 2)."
    );

    // Every optional field, and two indexed items.
    let full = "mode=payment&line_items%5B0%5D%5Bprice%5D=price_2&line_items%5B0%5D%5Bquantity%5D=1&line_items%5B1%5D%5Bprice%5D=price_3&line_items%5B1%5D%5Bquantity%5D=4&customer=cus_9&metadata%5Border_id%5D=6735&metadata%5Bchannel%5D=web+shop&expand%5B%5D=customer&expand%5B%5D=payment_intent";
    let request = checkout(&session, full);
    let (terms, summary) = approve_once(&stack, &request, 1).await;
    assert_eq!(
        terms,
        json!({
            "mode": "payment",
            "line_items": [
                {"price": "price_2", "quantity": "1"},
                {"price": "price_3", "quantity": "4"},
            ],
            "customer": "cus_9",
            "metadata": {"order_id": "6735", "channel": "web shop"},
            "expand": ["customer", "payment_intent"],
        })
    );
    assert_eq!(
        summary,
        "Start a payment checkout for (price: price_2, quantity: 1), (price: price_3, quantity: 4), for customer cus_9. Metadata: channel: web shop, order_id: 6735. Returns customer, payment_intent too."
    );

    // Approved without `customer`, sent with it: other terms, another revision, not executed.
    let plain =
        "mode=payment&line_items%5B0%5D%5Bprice%5D=price_4&line_items%5B0%5D%5Bquantity%5D=1";
    let held = checkout(&session, plain);
    let operation = stack
        .gateway
        .send(&held)
        .await
        .operation_in("held without customer");
    let added = checkout(&session, &format!("{plain}&customer=cus_evil")).approve(&operation);
    let answer = stack.gateway.send(&added).await;
    let other = answer.operation_in("an optional field added after the approval");
    assert_eq!(
        other.operation_id, operation.operation_id,
        "the same action"
    );
    assert_ne!(other.revision, operation.revision, "other terms");
    assert_eq!(other.terms["customer"], "cus_evil");
    let added_metadata =
        checkout(&session, &format!("{plain}&metadata%5Bx%5D=1")).approve(&operation);
    stack
        .gateway
        .send(&added_metadata)
        .await
        .operation_in("a group added after the approval");
    stack.assert_executions(
        2,
        "an approval of the request without the field runs nothing else",
    );
    let first = stack.gateway.send(&held.clone().approve(&operation)).await;
    first.assert_status(201, "the approved request itself");
    stack.assert_executions(3, "executed once");

    // Spellings form readers read differently are refused naming the field; nothing runs.
    for (body, field) in [
        ("mode=payment&line_items[0]price=p", "line_items[0]price"),
        (
            "mode=payment&line_items[0][price]=p&expand[]=a&expand[0]=b",
            "expand[0]",
        ),
        (
            "mode=payment&line_items[1][price]=p",
            "line_items[1][price]",
        ),
        (
            "mode=payment&line_items[0][price]=p&metadata[a]=1&metadata=2",
            "metadata",
        ),
        (
            "mode=payment&line_items[0][price]=p&metadata[a][b][c][d][e][f]=1",
            "metadata[a][b][c][d][e][f]",
        ),
        ("mode=payment&line_items[0][price]=p&fee=0", "fee"),
    ] {
        let answer = stack.gateway.send(&checkout(&session, body)).await;
        let error = answer.json();
        assert_eq!(answer.status, 400, "{body}: {}", answer.describe());
        assert_eq!(error["field"], field, "{body}: {error}");
        assert!(error["detail"].is_string(), "{error}");
    }
    stack.assert_executions(3, "refused spellings execute nothing");
}

async fn optional_and_nested_json_terms(store: Store) {
    let stack = Stack::start_with(store, |b| {
        b.policy("stripe.toml", CHECKOUT)
            .policy("orders.toml", ORDERS)
    });
    let session = Session::signed_out("ses_nested");
    let order =
        |body: serde_json::Value| Request::agent("POST", "/v1/orders", &session).json(&body);

    let (terms, summary) = approve_once(
        &stack,
        &order(json!({"customer": "c1", "items": [{"sku": "a"}, {"sku": "b", "qty": 2}]})),
        0,
    )
    .await;
    assert_eq!(terms.as_object().unwrap().len(), 2, "{terms}");
    assert_eq!(
        summary,
        "Order for c1.\n\n- items: (sku: a), (qty: 2, sku: b)"
    );
    let (terms, summary) = approve_once(
        &stack,
        &order(json!({
            "customer": "c2",
            "items": [{"sku": "a"}],
            "shipping": {"address": {"city": "Paris", "line1": "1 rue X"}, "phone": null},
            "note": "leave at the door",
        })),
        1,
    )
    .await;
    assert_eq!(terms["shipping"]["address"]["city"], "Paris");
    assert_eq!(
        summary,
        "Order for c2.\n\n- items: (sku: a)\n- note: leave at the door\n- shipping: address: (city: Paris, line1: 1 rue X), phone: null"
    );
}

/// A `[[tool]]` whose argument is optional, as an MCP tool's argument that is not `required`.
const TOOL: &str = r#"
[[tool]]
name = "refund_tool"
tool = "refund"
id_prefix = "ref"
expires_in = "15m"
same_action = ["order_id"]
summary = "Refund order {order_id}{?reason} because {reason}{/reason}."

[tool.terms]
order_id = { argument = "$.order_id" }
reason = { argument = "$.reason", optional = true }
"#;

/// `explain` shows an optional term present and absent, over HTTP and MCP: the same reading.
#[test]
fn explain_shows_optional_terms_present_and_absent() {
    let config = GatewayBuilder::new("http://127.0.0.1:1")
        .policy("stripe.toml", CHECKOUT)
        .policy("orders.toml", ORDERS)
        .policy("tools.toml", TOOL)
        .extra_config("[mcp]\npath = \"/mcp\"")
        .write();
    let explain = |args: &[&str]| config.run("explain", args);
    let form = "Content-Type: application/x-www-form-urlencoded";
    let checkout = |body: &str| {
        explain(&[
            "--path",
            "/v1/checkout/sessions",
            "--header",
            form,
            "--body",
            body,
        ])
    };
    let absent = checkout("mode=payment&line_items[0][price]=p1");
    absent.assert_code(0, "required fields only");
    for shown in [
        "(absent: optional)",
        "Start a payment checkout for (price: p1).",
    ] {
        assert!(
            absent.stdout.contains(shown),
            "shows `{shown}`:\n{}",
            absent.describe()
        );
    }
    let present = checkout("mode=payment&line_items[0][price]=p1&customer=cus_9&metadata[k]=v");
    present.assert_code(0, "every optional field");
    assert!(
        present
            .stdout
            .contains("for customer cus_9. Metadata: k: v."),
        "{}",
        present.describe()
    );

    let tool = |arguments: &str| explain(&["--tool", "refund", "--arguments", arguments]);
    let absent = tool(r#"{"order_id": "o1"}"#);
    absent.assert_code(0, "an MCP call without the optional argument");
    assert!(
        absent.stdout.contains("(absent: optional)"),
        "{}",
        absent.describe()
    );
    assert!(
        absent.stdout.contains("Refund order o1."),
        "{}",
        absent.describe()
    );
    let present = tool(r#"{"order_id": "o1", "reason": "damaged"}"#);
    present.assert_code(0, "with it");
    assert!(
        present.stdout.contains("Refund order o1 because damaged."),
        "{}",
        present.describe()
    );
    tool(r#"{"order_id": "o1", "other": 1}"#).assert_code(1, "an argument outside the terms");

    let check = config.run("check", &[]);
    check.assert_code(0, "check");
    assert!(
        check.stdout.contains(
            "accepts form: terms customer?, expand?, line_items, metadata?, mode; ignored none"
        ),
        "{}",
        check.describe()
    );
}

poppy_e2e::store_tests!(
    optional_and_structured_form_terms,
    optional_and_nested_json_terms
);
