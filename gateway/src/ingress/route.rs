//! Which policy a Personal Agent request is for: its route, the MCP endpoint, or none. A
//! request that some framework would route to a policy's handler, but that is not that
//! policy's method and path, is refused rather than passed through.

use std::sync::Arc;

use crate::policy::{Captures, PathTemplate, Policy, PolicySet};

use super::Refusal;

/// What a checked target is, for the gateway.
#[derive(Debug, Clone)]
pub enum RouteMatch {
    /// An HTTP policy's route, with its captures.
    Policy(Arc<Policy>, Captures),
    /// The MCP endpoint (`[mcp] path`).
    Mcp,
    /// Nothing that needs approval: pass through.
    None,
}

/// Match a Personal Agent request whose target passed [`super::check_target`]. `form_body`:
/// the request has a form `Content-Type`.
pub fn match_route(
    policies: &PolicySet,
    mcp: Option<&PathTemplate>,
    method: &str,
    path: &str,
    form_body: bool,
) -> Result<RouteMatch, Refusal> {
    if mcp.is_some_and(|template| template.matches(path).is_some()) {
        return Ok(RouteMatch::Mcp);
    }
    if let Some((policy, captures)) = policies.find_route(method, path) {
        // `/confirm/{code}` with `/confirm/c1.json`: Rails runs it with code `c1`.
        if policy
            .route
            .as_ref()
            .is_some_and(|route| route.path.ends_with_capture())
            && without_format_suffix(path).is_some()
        {
            return Err(Refusal::path(format!(
                "`{path}` ends in what some frameworks strip as a format suffix, and it is the term `{}` of the action `{}`: the upstream could act on another value",
                captures
                    .last()
                    .map(|(name, _)| name.as_str())
                    .unwrap_or_default(),
                policy.name
            )));
        }
        // `/Calls/CA1%2Ejson` for `/Calls/{Sid}.json`: a framework that routes before decoding
        // would not read it as this route.
        if let Some(segment) = policy
            .route
            .as_ref()
            .and_then(|route| route.path.escaped_affix(path))
        {
            return Err(Refusal::path(format!(
                "path segment `{segment}` of the action `{}` spells the literal part around its capture with `%` escapes, and some frameworks match routes before decoding: write the literal part plainly",
                policy.name
            )));
        }
        return Ok(RouteMatch::Policy(policy, captures));
    }
    // HEAD runs the GET handler in Flask, Express, Rails and most others.
    if method.eq_ignore_ascii_case("HEAD")
        && let Some((policy, _)) = policies.find_route("GET", path)
    {
        return Err(Refusal::new(
            400,
            "invalid_method",
            format!(
                "HEAD runs the GET handler in many frameworks, and GET on this path is the action `{}`: send GET",
                policy.name
            ),
        ));
    }
    // A format suffix (`/exchanges.json`) is stripped by Rails, Django REST framework and
    // older Spring before routing.
    if let Some(stripped) = without_format_suffix(path) {
        let is_mcp = mcp.is_some_and(|template| template.matches(stripped).is_some());
        if is_mcp || policies.find_route(method, stripped).is_some() {
            return Err(Refusal::path(format!(
                "`{path}` is an action's path with a format suffix, which some frameworks strip: send it without the suffix"
            )));
        }
    }
    // `/Calls/CA1` or `/Calls/CA1.xml` for `/Calls/{Sid}.json`: frameworks that read a
    // format suffix run the same handler without it, or with another.
    for candidate in std::iter::once(path).chain(without_format_suffix(path)) {
        if let Some(policy) = policies.find_route_without_suffix(method, candidate) {
            return Err(Refusal::path(format!(
                "`{path}` is the path of the action `{}` without its format suffix, or with another, and some frameworks run the same handler for both: send the action's own path (`{}`)",
                policy.name,
                policy
                    .route
                    .as_ref()
                    .map(|route| route.path.to_string())
                    .unwrap_or_default()
            )));
        }
    }
    // A form POST can carry `_method`, which Rails, Laravel and Symfony read as the method.
    if form_body
        && method.eq_ignore_ascii_case("POST")
        && let Some((policy, _)) = policies.find_route_any_method(path)
    {
        return Err(Refusal::header(
            "content-type",
            format!(
                "a form body on the path of the action `{}` can override the method in some frameworks: send JSON, with the action's own method",
                policy.name
            ),
        ));
    }
    Ok(RouteMatch::None)
}

/// The HTTP policy whose route a request passing through unheld (no `Poppy-Session`, not an
/// agent's) is for: its own method and path, as sent (`raw_target` up to `?`). What
/// `poppy_unheld_requests_total` counts; nothing is refused for it.
pub(crate) fn unheld_policy(
    policies: &PolicySet,
    method: &str,
    raw_target: &[u8],
) -> Option<Arc<Policy>> {
    let path = raw_target.split(|b| *b == b'?').next()?;
    let (policy, _) = policies.find_route(method, std::str::from_utf8(path).ok()?)?;
    Some(policy)
}

/// The path without a `.ext` suffix on its last segment (letters and digits, 1 to 10).
fn without_format_suffix(path: &str) -> Option<&str> {
    let trimmed = path.trim_end_matches('/');
    let (stem, ext) = trimmed.rsplit_once('.')?;
    let last_segment_has_it = !ext.contains('/') && !stem.ends_with('/');
    let extension_like =
        (1..=10).contains(&ext.len()) && ext.bytes().all(|b| b.is_ascii_alphanumeric());
    (last_segment_has_it && extension_like).then_some(stem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_policy_file;

    fn policies() -> PolicySet {
        let toml = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange on {order_id}."
[operation.terms]
order_id = { path = "order_id" }

[[operation]]
name = "confirm"
method = "GET"
path = "/confirm/{code}"
id_prefix = "cnf"
expires_in = "15m"
same_action = ["code"]
summary = "Confirm {code}."
[operation.terms]
code = { path = "code" }
"#;
        PolicySet::new(parse_policy_file(std::path::Path::new("p.toml"), toml).unwrap())
    }

    fn route(method: &str, path: &str, form: bool) -> Result<RouteMatch, Refusal> {
        let mcp = PathTemplate::parse("/mcp").unwrap();
        match_route(&policies(), Some(&mcp), method, path, form)
    }

    #[test]
    fn policy_routes_and_the_endpoint_match() {
        assert!(matches!(
            route("POST", "/orders/o1/exchanges", false),
            Ok(RouteMatch::Policy(..))
        ));
        assert!(matches!(
            route("post", "/ORDERS//o%31/exchanges/", false),
            Ok(RouteMatch::Policy(..))
        ));
        assert!(matches!(route("POST", "/MCP/", false), Ok(RouteMatch::Mcp)));
        assert!(matches!(
            route("GET", "/orders/o1", false),
            Ok(RouteMatch::None)
        ));
        assert!(matches!(
            route("PUT", "/orders/o1/exchanges", false),
            Ok(RouteMatch::None)
        ));
    }

    /// A request passing through unheld is counted for the policy whose own method and path
    /// it is, whatever its query; other paths and methods for none.
    #[test]
    fn unheld_requests_are_named_by_their_route() {
        let policies = policies();
        let name = |method: &str, target: &[u8]| {
            unheld_policy(&policies, method, target).map(|p| p.name.clone())
        };
        assert_eq!(
            name("POST", b"/orders/o1/exchanges").as_deref(),
            Some("exchange")
        );
        assert_eq!(
            name("POST", b"/orders/o1/exchanges?x=1").as_deref(),
            Some("exchange")
        );
        assert_eq!(name("GET", b"/confirm/c1").as_deref(), Some("confirm"));
        assert_eq!(name("GET", b"/orders/o1/exchanges"), None);
        assert_eq!(name("POST", b"/orders/o1"), None);
        assert_eq!(name("POST", b"/orders/\xff/exchanges"), None);
    }

    /// `/Calls/{Sid}.json`: the declared suffix is the route's own; the path without it, or
    /// with another format, is the same handler to frameworks that read format suffixes; the
    /// literal part must be written plainly.
    #[test]
    fn captures_with_a_suffix_keep_the_format_rules() {
        let toml = r#"
[[operation]]
name = "update_call"
method = "POST"
path = "/Accounts/{AccountSid}/Calls/{Sid}.json"
id_prefix = "cal"
expires_in = "15m"
same_action = ["sid"]
summary = "Update call {sid}."
[operation.terms]
sid = { path = "Sid" }

[[operation]]
name = "create_call"
method = "POST"
path = "/Accounts/{AccountSid}/Calls.json"
id_prefix = "cal"
expires_in = "15m"
same_action = ["account"]
summary = "Call from {account}."
[operation.terms]
account = { path = "AccountSid" }

[[operation]]
name = "versioned"
method = "POST"
path = "/api/v{version}"
id_prefix = "ver"
expires_in = "15m"
same_action = ["version"]
summary = "Version {version}."
[operation.terms]
version = { path = "version" }
"#;
        let policies =
            PolicySet::new(parse_policy_file(std::path::Path::new("p.toml"), toml).unwrap());
        let route = |method: &str, path: &str| match_route(&policies, None, method, path, false);
        let Ok(RouteMatch::Policy(policy, captures)) =
            route("POST", "/Accounts/AC1/Calls/CA1.json")
        else {
            panic!("the route matches");
        };
        assert_eq!(policy.name, "update_call");
        assert_eq!(captures[1], ("Sid".into(), "CA1".into()));
        assert!(matches!(
            route("POST", "/Accounts/AC1/Calls.json"),
            Ok(RouteMatch::Policy(..))
        ));
        assert!(matches!(
            route("POST", "/api/v2"),
            Ok(RouteMatch::Policy(..))
        ));
        for path in [
            "/Accounts/AC1/Calls/CA1",
            "/Accounts/AC1/Calls/CA1/",
            "/Accounts/AC1/Calls/CA1.xml",
            "/Accounts/AC1/Calls/CA1.json.xml",
            "/Accounts/AC1/Calls/CA1%2Ejson",
            "/Accounts/AC1/Calls",
            "/Accounts/AC1/Calls.xml",
            "/api/v2.json",
        ] {
            let refused = route("POST", path).unwrap_err();
            assert_eq!(
                (refused.status, refused.error),
                (400, "invalid_path"),
                "{path}"
            );
        }
        // Another method is another route.
        assert!(matches!(
            route("GET", "/Accounts/AC1/Calls/CA1"),
            Ok(RouteMatch::None)
        ));
    }

    #[test]
    fn lookalikes_are_refused() {
        for (method, path) in [
            ("POST", "/orders/o1/exchanges.json"),
            ("POST", "/orders/o1/exchanges.JSON/"),
            ("POST", "/mcp.json"),
            ("HEAD", "/confirm/c1"),
        ] {
            assert!(route(method, path, false).is_err(), "{method} {path}");
        }
        // A form body on the policy route itself is the strict body rules' business.
        assert!(matches!(
            route("POST", "/orders/o1/exchanges", true),
            Ok(RouteMatch::Policy(..))
        ));
        assert!(route("POST", "/confirm/c1", true).is_err());
        assert!(route("GET", "/confirm/c1.json", false).is_err());
        assert!(matches!(
            route("GET", "/confirm/c1", false),
            Ok(RouteMatch::Policy(..))
        ));
        assert!(matches!(
            route("POST", "/orders/o1.json/exchanges", false),
            Ok(RouteMatch::Policy(..))
        ));
    }
}
