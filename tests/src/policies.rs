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
