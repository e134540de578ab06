//! MCP's standard request headers (`Mcp-Method`, `Mcp-Name`, from the 2026 protocol) must
//! not disagree with the body about what is called.

use serde_json::Value;

use super::message::{Incoming, RpcError};
use super::version::McpVersion;

/// MCP's standard request headers (`Mcp-Method`, `Mcp-Name`) repeat what the body says, and
/// a server may route on them. When they could name a held tool while the body does not
/// call it (or the other way round), the POST is refused: the server might run the held
/// tool on the strength of a header.
pub(crate) fn check_standard_headers(
    incoming: &Incoming,
    method_header: Option<&[u8]>,
    name_header: Option<&[u8]>,
    version: &McpVersion,
    needs_approval: impl Fn(&str) -> bool,
) -> Result<(), RpcError> {
    let name = name_header.map(decode_header_value);
    let mismatch = |id: Value, which: &str| {
        Err(RpcError::new(
            id,
            version.header_mismatch_code(),
            format!("Invalid Request: the {which} header does not match the request body"),
        ))
    };
    match incoming {
        Incoming::Held(call) => {
            if method_header.is_some_and(|m| m != b"tools/call") {
                return mismatch(call.id.clone(), "Mcp-Method");
            }
            if name
                .as_ref()
                .is_some_and(|n| n.as_deref() != Some(&call.tool))
            {
                return mismatch(call.id.clone(), "Mcp-Name");
            }
            Ok(())
        }
        Incoming::Other { .. } | Incoming::ToGateway => match name {
            // Not a held call, yet the header names a held tool (or can't be read).
            Some(None) => mismatch(Value::Null, "Mcp-Name"),
            Some(Some(n)) if needs_approval(&n) => mismatch(Value::Null, "Mcp-Name"),
            _ => Ok(()),
        },
    }
}

/// An MCP header value: plain text, or `=?base64?…?=` for values that are not plain ASCII.
/// `None` when it cannot be read.
fn decode_header_value(raw: &[u8]) -> Option<String> {
    use base64::Engine as _;
    let text = std::str::from_utf8(raw).ok()?.trim();
    match text
        .strip_prefix("=?base64?")
        .and_then(|inner| inner.strip_suffix("?="))
    {
        Some(inner) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(inner)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;
    use super::*;
    use crate::mcp::classify;
    use serde_json::json;

    fn held(name: &str) -> bool {
        name == "exchange_item"
    }

    fn call(id: Value, params: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    }

    fn classify_json(value: &Value) -> Result<Incoming, RpcError> {
        classify(value.to_string().as_bytes(), held)
    }

    #[test]
    fn standard_headers_must_agree_with_the_body() {
        let held_call = classify_json(&call(json!(1), json!({"name": "exchange_item"}))).unwrap();
        let other = classify_json(&call(json!(1), json!({"name": "lookup_order"}))).unwrap();
        let v2025 = McpVersion::of_request(Some(b"2025-11-25"), None);
        let check = |incoming: &Incoming, method: Option<&str>, name: Option<&str>| {
            check_standard_headers(
                incoming,
                method.map(str::as_bytes),
                name.map(str::as_bytes),
                &v2025,
                held,
            )
        };
        assert!(check(&held_call, None, None).is_ok());
        assert!(check(&held_call, Some("tools/call"), Some("exchange_item")).is_ok());
        assert!(check(&held_call, Some("tools/list"), None).is_err());
        assert!(check(&held_call, None, Some("lookup_order")).is_err());
        assert!(check(&other, Some("tools/call"), Some("lookup_order")).is_ok());
        assert!(check(&other, None, Some("exchange_item")).is_err());
        // "exchange_item" in base64.
        assert!(check(&other, None, Some("=?base64?ZXhjaGFuZ2VfaXRlbQ==?=")).is_err());
        assert!(check(&other, None, Some("=?base64?%%%?=")).is_err());
        assert_eq!(
            check(&held_call, Some("tools/list"), None)
                .unwrap_err()
                .code,
            codes::INVALID_REQUEST
        );
        let v2026 = McpVersion::of_request(Some(b"2026-07-28"), None);
        let mismatch = check_standard_headers(&held_call, Some(b"tools/list"), None, &v2026, held)
            .unwrap_err();
        assert_eq!(
            mismatch.code,
            codes::HEADER_MISMATCH,
            "2026-07-28 has its own code"
        );
    }
}
