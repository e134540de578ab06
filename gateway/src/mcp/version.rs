//! The MCP protocol version a request speaks, for the results the gateway writes itself.
//!
//! Before 2026-07-28 the version is negotiated once (`initialize`) and then sent in the
//! `MCP-Protocol-Version` header of every HTTP request; from 2026-07-28 every request carries
//! it (header, and `_meta["io.modelcontextprotocol/protocolVersion"]`). What differs for the
//! gateway's own results: from 2026-07-28 every result MUST have `resultType` (schema
//! `Result`), and `structuredContent` may be any JSON value; earlier, results have no
//! `resultType` and `structuredContent` is an object.

use serde_json::Value;

/// The `_meta` key of a 2026-07-28 request's protocol version.
pub(crate) const PROTOCOL_VERSION_META_KEY: &str = "io.modelcontextprotocol/protocolVersion";

/// The revisions negotiated with `initialize`, whose results have no `resultType`.
const HANDSHAKE_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// A request's protocol version, as far as the gateway's answers depend on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct McpVersion(Option<String>);

impl McpVersion {
    /// From the `MCP-Protocol-Version` header, else the request's `_meta`. Neither: a client
    /// of the handshake era (the transport spec says to assume 2025-03-26 then).
    /// `message`: the request as parsed (the body is parsed once per request).
    pub(crate) fn of_request(header: Option<&[u8]>, message: Option<&Value>) -> McpVersion {
        let from_header = header
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned);
        McpVersion(from_header.or_else(|| message.and_then(from_meta)))
    }

    /// Whether results must carry `resultType` (2026-07-28 and any revision the gateway
    /// does not know, which can only be newer: adding the member is harmless to older ones,
    /// whose `Result` admits any member).
    pub(crate) fn results_have_type(&self) -> bool {
        self.0
            .as_deref()
            .is_some_and(|v| !HANDSHAKE_VERSIONS.contains(&v))
    }

    /// The JSON-RPC code for a standard header that disagrees with the body: 2026-07-28 gave
    /// it its own, earlier versions answer an invalid request.
    pub(crate) fn header_mismatch_code(&self) -> i64 {
        if self.results_have_type() {
            super::codes::HEADER_MISMATCH
        } else {
            super::codes::INVALID_REQUEST
        }
    }

    /// How a server asks this version's client to open a URL while it answers a request
    /// (URL-mode elicitation, new in 2025-11-25).
    pub(crate) fn url_elicitation(&self) -> UrlElicitation {
        match self.0.as_deref() {
            _ if self.results_have_type() => UrlElicitation::InResult,
            Some("2025-11-25") => UrlElicitation::Request,
            _ => UrlElicitation::None,
        }
    }

    /// A result the gateway wrote, completed for this version.
    pub(crate) fn finish(&self, mut result: Value) -> Value {
        if self.results_have_type() {
            if let Some(object) = result.as_object_mut() {
                object
                    .entry("resultType")
                    .or_insert_with(|| Value::from("complete"));
            }
        }
        result
    }
}

/// How a protocol version carries a URL-mode elicitation to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UrlElicitation {
    /// Before 2025-11-25: there is no URL mode.
    None,
    /// 2025-11-25: an `elicitation/create` request, sent on the POST's event stream before
    /// the response, to a client that declared the mode in `initialize`.
    Request,
    /// 2026-07-28: inside an `input_required` result, to a client that declares the mode in
    /// the request's `_meta`.
    InResult,
}

fn from_meta(message: &Value) -> Option<String> {
    message
        .pointer("/params/_meta")?
        .get(PROTOCOL_VERSION_META_KEY)?
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn version(header: Option<&str>, body: &Value) -> McpVersion {
        McpVersion::of_request(header.map(str::as_bytes), Some(body))
    }

    #[test]
    fn result_type_only_from_2026_07_28() {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}});
        for old in [
            None,
            Some("2025-03-26"),
            Some("2025-06-18"),
            Some("2025-11-25"),
        ] {
            let v = version(old, &call);
            assert!(!v.results_have_type(), "{old:?}");
            assert_eq!(v.finish(json!({"content": []})), json!({"content": []}));
        }
        for new in ["2026-07-28", "2027-01-01"] {
            let v = version(Some(new), &call);
            assert_eq!(
                v.finish(json!({"content": []})),
                json!({"content": [], "resultType": "complete"}),
                "{new}"
            );
        }
        let in_meta = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28"}}});
        assert!(version(None, &in_meta).results_have_type());
        assert!(
            !version(Some("2025-11-25"), &in_meta).results_have_type(),
            "the header wins"
        );
        assert_eq!(
            version(None, &call).url_elicitation(),
            UrlElicitation::None,
            "no header: 2025-03-26"
        );
        assert_eq!(
            version(Some("2025-06-18"), &call).url_elicitation(),
            UrlElicitation::None
        );
        assert_eq!(
            version(Some("2025-11-25"), &call).url_elicitation(),
            UrlElicitation::Request
        );
        assert_eq!(
            version(Some("2026-07-28"), &call).url_elicitation(),
            UrlElicitation::InResult
        );
        let typed = json!({"resultType": "input_required"});
        assert_eq!(
            version(Some("2026-07-28"), &call).finish(typed.clone()),
            typed
        );
    }
}
