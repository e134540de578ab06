//! What a revision covers for a held tool call.

use serde_json::Value;

use crate::policy::canonical_json;

/// The same tool with the same arguments (equal JSON, however its keys are ordered) is the
/// same call; `_meta` and the JSON-RPC `id` are not part of it. The gateway forwards its own
/// serialization of the message, whose arguments are exactly this canonical JSON.
pub(crate) fn call_fingerprint(tool: &str, arguments: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for part in [
        b"mcp tools/call".as_slice(),
        tool.as_bytes(),
        canonical_json(arguments).as_bytes(),
    ] {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fingerprint_is_the_tool_and_its_arguments() {
        let a = call_fingerprint("exchange_item", &json!({"a": 1, "b": [1, 2]}));
        let b: Value = serde_json::from_str(r#"{ "b": [1,2], "a": 1 }"#).unwrap();
        assert_eq!(a, call_fingerprint("exchange_item", &b));
        assert_ne!(a, call_fingerprint("cancel_order", &b));
        assert_ne!(
            a,
            call_fingerprint("exchange_item", &json!({"a": 2, "b": [1, 2]}))
        );
    }
}
