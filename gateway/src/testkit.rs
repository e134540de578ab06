//! What the unit tests of several modules share: the spec's exchange as a policy, the Session
//! claims of `verify = "off"`, and unsigned Sessions.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::identity::{SessionClaims, VerifyMode};

/// The spec's exchange: an order's item for another SKU. `EXPIRES` stands for `expires_in`.
pub(crate) const EXCHANGE_POLICY: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "EXPIRES"
same_action = ["order_id", "item_id"]
summary = "Exchange item {item_id} on order {order_id} for {sku}."
[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
sku = { body = "$.sku" }
"#;

/// Session claims read without verification (`[session] verify = "off"`).
pub(crate) fn claims_off() -> SessionClaims {
    SessionClaims {
        verify: VerifyMode::Off,
        session_claim: "sid".into(),
        agent_claim: "iss".into(),
        user_claim: "sub".into(),
        account_claim: "sub".into(),
    }
}

/// An unsigned JWT with `payload` (what `verify = "off"` reads).
pub(crate) fn unsigned_jwt(payload: &serde_json::Value) -> String {
    let part = |v: String| URL_SAFE_NO_PAD.encode(v);
    format!(
        "{}.{}.sig",
        part(r#"{"alg":"none"}"#.to_owned()),
        part(payload.to_string())
    )
}

/// Terms from `(name, value)` pairs.
pub(crate) fn terms(pairs: &[(&str, serde_json::Value)]) -> crate::policy::Terms {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}
