//! The headers an approval is bound to: all but those that can't change the action
//! ([`UNBOUND_HEADERS`], `Poppy-*`, the policy's `ignore_headers`).

use http::HeaderMap;

use crate::policy::Policy;

/// The headers an approval is bound to, sorted by name (each name's values in their order):
/// `Content-Type`, every term's header, and every other header but the policy's
/// `ignore_headers` and [`UNBOUND_HEADERS`]. A header that changes between the request that
/// returned the operation and its approval (`X-Tenant: a`, then `b`) gets a new revision, as a
/// changed body does: the upstream executes only what was approved.
/// `also_unbound`: the interface's own per-connection headers (MCP's session and version).
pub(crate) fn bound_headers<'a>(
    policy: &Policy,
    term_headers: &[String],
    also_unbound: &[&str],
    headers: &'a HeaderMap,
) -> Vec<(&'a str, &'a [u8])> {
    let mut bound: Vec<(&str, &[u8])> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .filter(|(name, _)| {
            *name == "content-type"
                || term_headers.iter().any(|t| t == name)
                || !(UNBOUND_HEADERS.contains(name)
                    || also_unbound.contains(name)
                    || name.starts_with("poppy-")
                    || name.starts_with("x-b3-")
                    || policy.ignore_headers.iter().any(|i| i == name))
        })
        .collect();
    if !bound.iter().any(|(name, _)| *name == "content-type") {
        bound.push(("content-type", b""));
    }
    // Stable: a header's values keep their order; names are sorted.
    bound.sort_by(|a, b| a.0.cmp(b.0));
    bound
}

/// Headers no revision covers: they carry who is asking (checked on their own), describe one
/// hop, trace, negotiate the answer's form, or change on every retry by design
/// (`Idempotency-Key`: "doesn't carry over", spec 6). Every `Poppy-*` header too.
pub const UNBOUND_HEADERS: &[&str] = &[
    // Credentials and proof of possession: the approver's scope binds them.
    "authorization",
    "dpop",
    // One hop.
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
    "via",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-port",
    "x-real-ip",
    // Tracing.
    "traceparent",
    "tracestate",
    "baggage",
    "x-request-id",
    "x-correlation-id",
    "x-amzn-trace-id",
    "x-cloud-trace-context",
    "sentry-trace",
    "b3",
    // The answer's form, the client, the cache.
    "accept",
    "accept-encoding",
    "accept-language",
    "user-agent",
    "cache-control",
    "pragma",
    "date",
    // New on every retry by design.
    "idempotency-key",
];
