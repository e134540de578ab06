//! What a revision covers for a held tool call.

use serde_json::Value;

use crate::policy::canonical_json;

/// The same tool with the same arguments (equal JSON, however its keys are ordered) is the
/// same call; `_meta` and the JSON-RPC `id` are not part of it. The gateway forwards its own
/// serialization of the message, whose arguments are exactly this canonical JSON. `headers`:
/// the POST's headers that bind the approval (`ingress::bound_headers`), which the MCP server
/// receives too: a tenant header that changes is another call.
pub(crate) fn call_fingerprint(
    tool: &str,
    arguments: &Value,
    headers: &[(&str, &[u8])],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut push = |part: &[u8]| {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part);
    };
    push(b"mcp tools/call");
    push(tool.as_bytes());
    push(canonical_json(arguments).as_bytes());
    for (name, value) in headers {
        push(name.as_bytes());
        push(value);
    }
    out
}

/// The headers of an MCP connection, not of a call: another client of the same Personal
/// Agent (another MCP session, another protocol version) may send the approval.
pub(crate) const MCP_CONNECTION_HEADERS: &[&str] =
    &["mcp-session-id", "mcp-protocol-version", "last-event-id"];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fingerprint_is_the_tool_and_its_arguments() {
        let a = call_fingerprint("exchange_item", &json!({"a": 1, "b": [1, 2]}), &[]);
        let b: Value = serde_json::from_str(r#"{ "b": [1,2], "a": 1 }"#).unwrap();
        assert_eq!(a, call_fingerprint("exchange_item", &b, &[]));
        assert_ne!(a, call_fingerprint("cancel_order", &b, &[]));
        assert_ne!(
            a,
            call_fingerprint("exchange_item", &json!({"a": 2, "b": [1, 2]}), &[])
        );
        let tenant = |t: &'static [u8]| [("x-tenant", t)];
        assert_ne!(
            call_fingerprint("exchange_item", &b, &tenant(b"a")),
            call_fingerprint("exchange_item", &b, &tenant(b"b"))
        );
    }
}
