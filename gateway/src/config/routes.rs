//! Routes: the default route (`[upstream]` with the top-level `policies` and `[mcp]`) and
//! `[[route]]` tables, each an upstream with its own policies and MCP endpoint, chosen by host
//! and/or path prefix.

use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::duration::parse_duration;
use super::edge;
use super::edge::Passthrough;
use super::error::{At, ConfigError};
use super::file::{GatewayFile, McpFile, UpstreamFile};
use super::policy_file::load_policy_file;
use super::tool_policy::{Mcp, check_tools, compile_mcp};
use crate::policy::{Policy, PolicySet};

/// The default route's name (access log, logs).
pub const DEFAULT_ROUTE: &str = "default";

/// One route, validated.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    pub name: String,
    /// Lower case, without a port. `None`: any host.
    pub host: Option<String>,
    /// `/a/b` (no trailing `/`): matches `/a/b` and `/a/b/…`. `None`: any path.
    pub path_prefix: Option<String>,
    pub upstream: Upstream,
    pub policies: PolicySet,
    /// The policy files that were loaded, for `check`.
    pub policy_files: Vec<PathBuf>,
    /// `[mcp]` / `[route.mcp]`: the MCP endpoint whose tool calls `[[tool]]` policies hold.
    pub mcp: Option<Mcp>,
}

impl RouteConfig {
    /// Whether this is the default route (`[upstream]`): it matches what no other route does.
    pub fn is_default(&self) -> bool {
        self.host.is_none() && self.path_prefix.is_none()
    }

    /// How specific a match on this route is: a host beats no host, then the longer prefix.
    pub fn rank(&self) -> (bool, usize) {
        (
            self.host.is_some(),
            self.path_prefix.as_ref().map_or(0, String::len),
        )
    }
}

/// What compiling a route needs from the file being loaded.
pub(super) struct Loading<'a> {
    pub path: &'a Path,
    pub source: &'a str,
    pub folder: &'a Path,
    pub at: At<'a>,
}

/// The default route and every `[[route]]`, `[[route]]`s first in file order.
pub(super) fn compile_routes(
    file: &GatewayFile,
    loading: &Loading<'_>,
    errors: &mut Vec<ConfigError>,
) -> Vec<RouteConfig> {
    let at = loading.at;
    let mut routes = Vec::new();
    for route in &file.route {
        let span = route.span();
        let route = route.get_ref();
        let name = route.name.get_ref();
        let table = format!("route `{name}`");
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            errors.push(at(
                route.name.span(),
                format!("route.name: `{name}` must be 1 to 64 of A-Z a-z 0-9 - _"),
            ));
        }
        let host = route.host.as_ref().and_then(|h| {
            let text = h.get_ref().to_ascii_lowercase();
            let valid = !text.is_empty()
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if !valid {
                errors.push(at(
                    h.span(),
                    format!("{table}: host `{}` must be a host name without port (letters, digits, - and .)", h.get_ref()),
                ));
            }
            valid.then_some(text)
        });
        let path_prefix = route.path_prefix.as_ref().and_then(|p| {
            let text = p.get_ref();
            match check_prefix(text) {
                Ok(()) => Some(text.clone()),
                Err(why) => {
                    errors.push(at(p.span(), format!("{table}: path_prefix `{text}` {why}")));
                    None
                }
            }
        });
        if route.host.is_none() && route.path_prefix.is_none() {
            errors.push(at(
                span.clone(),
                format!("{table}: give host, path_prefix or both ([upstream] is the route for everything else)"),
            ));
        }
        let upstream = compile_upstream(
            &route.upstream,
            &format!("{table}: upstream"),
            loading,
            errors,
        );
        let (policies, policy_files) = load_policies(
            &route.policies,
            &format!("{table}: policies"),
            loading,
            errors,
        );
        let mcp = compile_route_mcp(route.mcp.as_ref(), &policies, loading, errors);
        routes.push(RouteConfig {
            name: name.clone(),
            host,
            path_prefix,
            upstream,
            policies: PolicySet::new(policies),
            policy_files,
            mcp,
        });
    }

    match (&file.upstream, &file.policies) {
        (Some(upstream), Some(patterns)) => {
            let compiled = compile_upstream(upstream.get_ref(), "upstream", loading, errors);
            let (policies, policy_files) = load_policies(patterns, "policies", loading, errors);
            let mcp = compile_route_mcp(file.mcp.as_ref(), &policies, loading, errors);
            routes.push(RouteConfig {
                name: DEFAULT_ROUTE.to_owned(),
                host: None,
                path_prefix: None,
                upstream: compiled,
                policies: PolicySet::new(policies),
                policy_files,
                mcp,
            });
        }
        (Some(upstream), None) => errors.push(at(
            upstream.span(),
            "policies: required with [upstream] (the default route's policy files or globs)".into(),
        )),
        (None, _) if file.route.is_empty() => errors.push(ConfigError::whole_file(
            loading.path,
            "give an [upstream] table, or one or more [[route]] tables",
        )),
        (None, patterns) => {
            if let Some(p) = patterns {
                errors.push(at(
                    p.span(),
                    "policies: the top-level list belongs to [upstream] (the default route); each [[route]] has its own".into(),
                ));
            }
            if let Some(m) = &file.mcp {
                errors.push(at(
                    m.path.span(),
                    "mcp: the top-level [mcp] belongs to [upstream] (the default route); use [route.mcp] in a [[route]]".into(),
                ));
            }
        }
    }
    check_unique(file, &routes, loading, errors);
    routes
}

/// Names, matches and policy names are unique across routes; upstream CA files agree
/// (pingora's passthrough connector has one).
fn check_unique(
    file: &GatewayFile,
    routes: &[RouteConfig],
    loading: &Loading<'_>,
    errors: &mut Vec<ConfigError>,
) {
    let at = loading.at;
    for (i, route) in routes.iter().enumerate() {
        let span = file.route.get(i).map(Spanned::span);
        let here = |message: String| match &span {
            Some(span) => at(span.clone(), message),
            None => ConfigError::whole_file(loading.path, message),
        };
        for earlier in &routes[..i] {
            if earlier.name == route.name {
                errors.push(here(format!("route name `{}` is used twice", route.name)));
            } else if earlier.host == route.host && earlier.path_prefix == route.path_prefix {
                errors.push(here(format!(
                    "route `{}` matches exactly what route `{}` matches (host and path_prefix): a request could not choose",
                    route.name, earlier.name
                )));
            }
            for policy in route.policies.iter() {
                if earlier.policies.iter().any(|p| p.name == policy.name) {
                    errors.push(here(format!(
                        "policy name `{}` is used by routes `{}` and `{}`: policy names are unique across routes (they label metrics and operation IDs)",
                        policy.name, earlier.name, route.name
                    )));
                }
            }
            if earlier.upstream.passthrough.ca_file.is_some()
                && route.upstream.passthrough.ca_file.is_some()
                && earlier.upstream.passthrough.ca_file != route.upstream.passthrough.ca_file
            {
                errors.push(here(format!(
                    "route `{}`: upstream.ca_file differs from route `{}`'s: every upstream must use the same ca_file",
                    route.name, earlier.name
                )));
            }
        }
    }
}

/// `/a/b`: starts with `/`, no trailing `/`, segments of unreserved characters, no `.`/`..`.
fn check_prefix(text: &str) -> Result<(), &'static str> {
    let Some(rest) = text.strip_prefix('/') else {
        return Err("must start with `/`");
    };
    if rest.is_empty() {
        return Err("must name at least one segment (for every path, leave path_prefix out)");
    }
    for segment in rest.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err("has an empty, `.` or `..` segment, or ends with `/`");
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
        {
            return Err("may contain only letters, digits, - . _ ~ and /");
        }
    }
    Ok(())
}

/// `[mcp]` or `[route.mcp]`, and the `[[tool]]` policies that need it.
fn compile_route_mcp(
    mcp: Option<&McpFile>,
    policies: &[Policy],
    loading: &Loading<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<Mcp> {
    let compiled = mcp.and_then(|m| compile_mcp(loading.path, loading.source, m, errors));
    check_tools(
        loading.path,
        compiled.as_ref(),
        mcp.map(|m| &m.path),
        loading.source,
        policies,
        errors,
    );
    compiled
}

/// Policy files or globs, relative to gateway.toml's folder; names unique.
fn load_policies(
    patterns: &Spanned<Vec<String>>,
    key: &str,
    loading: &Loading<'_>,
    errors: &mut Vec<ConfigError>,
) -> (Vec<Policy>, Vec<PathBuf>) {
    let at = loading.at;
    let mut policy_files = Vec::new();
    for pattern in patterns.get_ref() {
        let full = loading.folder.join(pattern);
        let full_text = full.to_string_lossy().into_owned();
        match glob::glob(&full_text) {
            Err(e) => errors.push(at(
                patterns.span(),
                format!("{key}: `{pattern}` is not a valid glob: {e}"),
            )),
            Ok(paths) => {
                let mut found: Vec<PathBuf> = paths.filter_map(Result::ok).collect();
                found.sort();
                if found.is_empty() {
                    errors.push(at(
                        patterns.span(),
                        format!("{key}: `{pattern}` matches no file (looked for {full_text})"),
                    ));
                }
                policy_files.extend(found);
            }
        }
    }
    if patterns.get_ref().is_empty() {
        errors.push(at(
            patterns.span(),
            format!("{key}: name at least one policy file"),
        ));
    }
    let mut policies = Vec::new();
    for policy_path in &policy_files {
        match load_policy_file(policy_path) {
            Ok(mut loaded) => policies.append(&mut loaded),
            Err(mut e) => errors.append(&mut e.0),
        }
    }
    // Names must be unique across files: they label metrics and operation IDs.
    for (i, policy) in policies.iter().enumerate() {
        if policies[..i].iter().any(|p: &Policy| p.name == policy.name) {
            errors.push(ConfigError::whole_file(
                loading.path,
                format!(
                    "policy name `{}` is used twice (again at {})",
                    policy.name, policy.source
                ),
            ));
        }
    }
    // Two policies that can hold one request: the first would hold it under its own terms.
    for conflict in crate::policy::conflicts(&policies) {
        errors.push(at_policy(
            &policies[conflict.at],
            loading.path,
            conflict.message,
        ));
    }
    (policies, policy_files)
}

/// An error at a policy's own place (`file:line:column` of its `name`), as `source` says.
fn at_policy(policy: &Policy, config: &Path, message: String) -> ConfigError {
    let mut parts = policy.source.rsplitn(3, ':');
    let (column, line, file) = (parts.next(), parts.next(), parts.next());
    match (
        file,
        line.and_then(|l| l.parse().ok()),
        column.and_then(|c| c.parse().ok()),
    ) {
        (Some(file), Some(line), Some(column)) => ConfigError {
            file: PathBuf::from(file),
            line,
            column,
            message,
        },
        _ => ConfigError::whole_file(config, message),
    }
}

/// `[upstream]` or a route's `[route.upstream]`; `table` names it in errors.
fn compile_upstream(
    file: &UpstreamFile,
    table: &str,
    loading: &Loading<'_>,
    errors: &mut Vec<ConfigError>,
) -> Upstream {
    let at = loading.at;
    let mut duration = |value: &Option<Spanned<String>>, default: Duration, key: &str| match value {
        None => default,
        Some(v) => parse_duration(v.get_ref()).unwrap_or_else(|e| {
            errors.push(at(v.span(), format!("{table}.{key}: {e}")));
            default
        }),
    };
    let connect_timeout = duration(
        &file.connect_timeout,
        Duration::from_secs(2),
        "connect_timeout",
    );
    let timeout = duration(&file.timeout, Duration::from_secs(30), "timeout");
    let passthrough =
        edge::compile_passthrough(file.passthrough_keys(), table, loading.folder, at, errors);
    let approval_header = file
        .approval_header
        .as_ref()
        .and_then(|h| super::approval_header::compile(h, table, loading.folder, at, errors));
    let (tls, host, port) = match parse_upstream_url(file.url.get_ref()) {
        Ok(parsed) => parsed,
        Err(e) => {
            errors.push(at(file.url.span(), format!("{table}.url: {e}")));
            Default::default()
        }
    };
    let release_statuses = match &file.release_statuses {
        None => vec![401, 429],
        Some(list) => {
            if let Some(bad) = list
                .get_ref()
                .iter()
                .find(|s| !(100..=599).contains(*s) || (200..=299).contains(*s))
            {
                errors.push(at(list.span(), format!("{table}.release_statuses: {bad} is not an error status (a 2xx answer means the action was performed)")));
            }
            list.get_ref().clone()
        }
    };
    Upstream {
        url: file.url.get_ref().clone(),
        tls,
        address: format!("{host}:{port}"),
        host,
        connect_timeout,
        timeout,
        release_statuses,
        release_503_with_retry_after: file.release_503_with_retry_after.unwrap_or(true),
        passthrough,
        approval_header,
    }
}

#[derive(Debug, Clone)]
pub struct Upstream {
    pub url: String,
    pub tls: bool,
    /// `host:port`.
    pub address: String,
    pub host: String,
    pub connect_timeout: Duration,
    /// How long an approved execution may take to answer.
    pub timeout: Duration,
    /// Statuses that prove the upstream performed nothing: the claim is released.
    pub release_statuses: Vec<u16>,
    pub release_503_with_retry_after: bool,
    /// Passthrough timeouts, `Host`, and TLS to the upstream.
    pub passthrough: Passthrough,
    /// `[upstream.approval_header]`: approved forwards carry what was approved, signed.
    pub(crate) approval_header: Option<std::sync::Arc<crate::protocol::approved::ApprovalSigner>>,
}

impl Upstream {
    /// What the operation core's expiry and release rules read of these settings.
    pub(crate) fn forward_rules(&self) -> crate::operation::ForwardRules {
        crate::operation::ForwardRules {
            connect_timeout: self.connect_timeout,
            timeout: self.timeout,
            release_statuses: self.release_statuses.clone(),
            release_503_with_retry_after: self.release_503_with_retry_after,
        }
    }
}

/// `http://host[:port]` or `https://host[:port]`, with no path.
fn parse_upstream_url(url: &str) -> Result<(bool, String, u16), String> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else {
        return Err(format!("`{url}` must start with http:// or https://"));
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['/', '?', '#', '@']) || authority.is_empty() {
        return Err(format!(
            "`{url}`: give only scheme, host and port (no path, query or credentials)"
        ));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
            let port = port
                .parse::<u16>()
                .map_err(|_| format!("`{url}`: port `{port}` is not a number"))?;
            (host.to_owned(), port)
        }
        _ => (authority.to_owned(), if tls { 443 } else { 80 }),
    };
    Ok((tls, host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls() {
        assert_eq!(
            parse_upstream_url("http://127.0.0.1:9000"),
            Ok((false, "127.0.0.1".into(), 9000))
        );
        assert_eq!(
            parse_upstream_url("https://api.example.com/"),
            Ok((true, "api.example.com".into(), 443))
        );
        assert_eq!(
            parse_upstream_url("http://[::1]:8080"),
            Ok((false, "[::1]".into(), 8080))
        );
        assert!(parse_upstream_url("ftp://x").is_err());
        assert!(parse_upstream_url("http://x/api").is_err());
        assert!(parse_upstream_url("http://x:port").is_err());
    }
}
