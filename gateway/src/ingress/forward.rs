//! What is sent upstream once a request is approved, built by the front door
//! ([`super::admit`]) from the request's own bytes: the forwarder sends exactly this, so what
//! the fingerprint covers is what the upstream executes.

use bytes::Bytes;

/// Headers that describe one connection, not the message: never forwarded or recorded.
pub(crate) const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// A Personal Agent's headers as they go upstream with an operation: without `Poppy-Approval`
/// (the gateway's business), hop-by-hop headers, `Content-Length` (set anew for the body) and
/// `Expect` (the body is sent at once). HTTP and MCP operations both go through here.
pub(crate) fn forwarded_headers(
    headers: &http::HeaderMap,
) -> Vec<(http::HeaderName, http::HeaderValue)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            !matches!(name, "poppy-approval" | "content-length" | "expect")
                && !HOP_BY_HOP.contains(&name)
        })
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

/// A request to send upstream, complete with its body.
#[derive(Debug, Clone)]
pub(crate) struct ForwardRequest {
    pub(crate) method: http::Method,
    /// Path and query, as the Personal Agent sent them.
    pub(crate) path_and_query: String,
    pub(crate) headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub(crate) body: Bytes,
}
