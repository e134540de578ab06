//! The policies the tests run with unless they bring their own.

/// `exchange` (15 min, the spec's example; a `note` body field and an `express` query parameter
/// that are not terms), `cancel` (another route, for approvals sent to the wrong one) and
/// `refund` (expires in 2 s, for expiry).
pub const DEFAULT: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku}."
ignore = ["$.note"]
ignore_query = ["express"]

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
replacement_sku = { body = "$.replacement_sku" }

[[operation]]
name = "cancel"
method = "POST"
path = "/orders/{order_id}/cancel"
id_prefix = "can"
expires_in = "15m"
same_action = ["order_id"]
summary = "Cancel order {order_id}."

[operation.terms]
order_id = { path = "order_id" }

[[operation]]
name = "refund"
method = "POST"
path = "/orders/{order_id}/refunds"
id_prefix = "ref"
expires_in = "2s"
same_action = ["order_id"]
summary = "Refund {amount} on order {order_id}."

[operation.terms]
order_id = { path = "order_id" }
amount = { body = "$.amount" }
"#;

/// The file name the default policies are written to.
pub const DEFAULT_FILE: &str = "shop.toml";

/// Expected `summary` of the default `exchange` policy (before escaping).
pub fn exchange_summary(order: &str, item: &str, sku: &str) -> String {
    format!("Exchange item **{item}** on order {order} for {sku}.")
}

/// A Stripe-like form action with optional and structured terms (issue 38): `mode` and the
/// indexed `line_items[N][…]` required; `customer`, the group `metadata[…]` and the list
/// `expand[]` optional.
pub const CHECKOUT: &str = r#"
[[operation]]
name = "checkout"
method = "POST"
path = "/v1/checkout/sessions"
id_prefix = "cs"
expires_in = "15m"
same_action = ["line_items"]
summary = "Start a {mode} checkout for {line_items}{?customer}, for customer {customer}{/customer}.{?metadata} Metadata: {metadata}.{/metadata}{?expand} Returns {expand} too.{/expand}"

[operation.terms]
mode = { form = "mode" }
line_items = { form = "line_items" }
customer = { form = "customer", optional = true }
metadata = { form = "metadata", optional = true }
expand = { form = "expand", optional = true }
"#;

/// `returns`: a route the default policies do not name, for policies added while the gateway
/// runs (a reload). `summary` is the whole line, so a test can write one that fails `check`.
pub fn returns_policy(summary: &str) -> String {
    format!(
        r#"[[operation]]
name = "returns"
method = "POST"
path = "/orders/{{order_id}}/returns"
id_prefix = "ret"
expires_in = "15m"
same_action = ["order_id"]
{summary}

[operation.terms]
order_id = {{ path = "order_id" }}
reason = {{ body = "$.reason" }}
"#
    )
}

/// A request to the `returns` route, `reason` "too small".
pub fn return_request(session: &crate::Session) -> crate::Request {
    crate::Request::agent("POST", "/orders/o9/returns", session)
        .json(&serde_json::json!({"reason": "too small"}))
}

/// Sends [`return_request`] and asserts the `returns` policy holds it (it is in force).
pub async fn assert_return_held(gateway: &crate::Gateway, session: &crate::Session) {
    let held = gateway.send(&return_request(session)).await.operation();
    assert!(held.operation_id.starts_with("ret_"), "{held:?}");
    assert_eq!(held.summary, "Return order o9 (too small).");
}
