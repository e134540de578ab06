//! The routes a request can take: each an upstream with its own policies, executor and MCP
//! endpoint. A request is matched once, when its head is read, and everything it leads to
//! (operations, lookups, passthrough, poppy.json) uses that route's parts only.

use std::sync::Arc;

use pingora::proxy::Session;

use super::mcp_api::McpEndpoint;
use super::operations::Operations;
use crate::config::Passthrough;
use crate::ingress::Refusal;
use crate::policy::percent_decode;
use crate::upstream::UpstreamClient;

/// One route, running.
pub(crate) struct RouteRuntime {
    pub(crate) name: String,
    /// Lower case, no port; `None`: any host.
    pub(crate) host: Option<String>,
    /// `None`: any path.
    pub(crate) path_prefix: Option<String>,
    pub(crate) operations: Operations,
    pub(crate) upstream: Arc<UpstreamClient>,
    pub(crate) mcp: Option<McpEndpoint>,
    /// Passthrough timeouts, `Host` and TLS to this route's upstream.
    pub(crate) passthrough: Passthrough,
}

/// Every route, most specific first.
pub(crate) struct Routes {
    routes: Vec<Arc<RouteRuntime>>,
    /// Whether any route is a `[[route]]` (not only the default route): then every request's
    /// target must be a plain path, so that a prefix can't be dodged by another spelling.
    routed: bool,
}

impl Routes {
    pub(crate) fn new(mut routes: Vec<RouteRuntime>) -> Routes {
        let rank = |r: &RouteRuntime| {
            (
                r.host.is_some(),
                r.path_prefix.as_ref().map_or(0, String::len),
            )
        };
        // `check` refuses two routes of the same host and prefix, so this order is total on
        // the routes that can match one request.
        routes.sort_by_key(|r| std::cmp::Reverse(rank(r)));
        let routed = routes
            .iter()
            .any(|r| r.host.is_some() || r.path_prefix.is_some());
        Routes {
            routes: routes.into_iter().map(Arc::new).collect(),
            routed,
        }
    }

    /// The route for a request: `Ok(None)` when none matches; the ingress's refusal when
    /// `[[route]]`s are configured and its target is not a plain path.
    pub(crate) fn pick(&self, session: &Session) -> Result<Option<Arc<RouteRuntime>>, Refusal> {
        let header = session.req_header();
        if !self.routed {
            return Ok(self.routes.first().cloned());
        }
        let target = crate::ingress::check_target(header.raw_path())?;
        // The checked target decodes to one plain ASCII path (see ingress/target.rs).
        let path = percent_decode(&target.path);
        let host = header
            .headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| header.uri.authority().map(|a| a.as_str()))
            .map(host_without_port);
        Ok(self
            .routes
            .iter()
            .find(|r| matches(r, host.as_deref(), &path))
            .cloned())
    }
}

fn matches(route: &RouteRuntime, host: Option<&str>, path: &str) -> bool {
    let host_ok = route.host.as_deref().is_none_or(|want| host == Some(want));
    let path_ok = route
        .path_prefix
        .as_deref()
        .is_none_or(|prefix| prefix_matches(prefix, path));
    host_ok && path_ok
}

/// At a segment boundary: `/billing` matches `/billing` and `/billing/x`, never `/billingx`.
/// As forgiving as the policy routes' matcher (ASCII case, empty segments): a spelling an
/// upstream or framework could read as under the prefix (`/Billing/x`, `//billing/x`) must not
/// reach another route's upstream and policies.
fn prefix_matches(prefix: &str, path: &str) -> bool {
    let mut path = path.split('/').filter(|s| !s.is_empty());
    prefix.split('/').filter(|s| !s.is_empty()).all(|want| {
        path.next()
            .is_some_and(|seg| seg.eq_ignore_ascii_case(want))
    })
}

/// `Host` in lower case without its port (`[::1]:80` → `[::1]`) or trailing dot.
fn host_without_port(host: &str) -> String {
    let host = match host.rfind(':') {
        Some(colon) if !host[colon..].contains(']') => &host[..colon],
        _ => host,
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_at_segment_boundaries() {
        assert!(prefix_matches("/billing", "/billing"));
        assert!(prefix_matches("/billing", "/billing/x"));
        assert!(!prefix_matches("/billing", "/billingx"));
        assert!(!prefix_matches("/billing", "/bill"));
        assert!(prefix_matches("/a/b", "/a/b/c"));
        assert!(!prefix_matches("/a/b", "/a/bc"));
        // Spellings the policy matcher (and lenient frameworks) read as the same path.
        assert!(prefix_matches("/billing", "/Billing/x"));
        assert!(prefix_matches("/billing", "//billing//x"));
        assert!(prefix_matches("/billing", "/billing/"));
        assert!(!prefix_matches("/billing", "/BillingX"));
        assert!(!prefix_matches("/a/b", "/a"));
    }

    #[test]
    fn hosts_lose_port_case_and_dot() {
        assert_eq!(host_without_port("Billing.Example:8443"), "billing.example");
        assert_eq!(host_without_port("billing.example."), "billing.example");
        assert_eq!(host_without_port("[::1]:80"), "[::1]");
        assert_eq!(host_without_port("[::1]"), "[::1]");
    }
}
