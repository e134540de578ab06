//! `[[tool]]` policies (MCP tools that need approval) and the `[mcp]` table they need.

use std::path::Path;

use toml::Spanned;

use super::action::{ActionKeys, Table, approval_via, compile_action};
use super::error::ConfigError;
use super::file::{McpFile, ToolFile};
use crate::policy::{PathTemplate, Policy};

/// The longest MCP tool name accepted (the MCP spec suggests 1 to 128 characters).
const MAX_TOOL_NAME: usize = 128;

/// `[mcp]`, validated.
#[derive(Debug, Clone)]
pub struct Mcp {
    /// The MCP endpoint, as written (e.g. `/mcp`).
    pub path: String,
    /// The same, for matching request paths as forgivingly as policy routes are matched.
    pub template: PathTemplate,
}

/// Compile one `[[tool]]`.
pub(super) fn compile_tool(
    path: &Path,
    source: &str,
    tool: &ToolFile,
    errors: &mut Vec<ConfigError>,
) -> Option<Policy> {
    let start = errors.len();
    let tool_name = tool.tool.get_ref();
    // Compared byte for byte with `params.name`: white space or control characters would
    // make a policy that looks right but never matches.
    if tool_name.is_empty()
        || tool_name.len() > MAX_TOOL_NAME
        || tool_name
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
    {
        errors.push(ConfigError::at(
            path,
            source,
            Some(tool.tool.span()),
            format!(
                "tool `{}`: tool: `{tool_name}` is not an MCP tool name (1 to {MAX_TOOL_NAME} characters, no white space)",
                tool.name.get_ref()
            ),
        ));
    }
    let keys = ActionKeys {
        table: Table::Tool,
        name: &tool.name,
        id_prefix: &tool.id_prefix,
        expires_in: &tool.expires_in,
        same_action: &tool.same_action,
        summary: &tool.summary,
        terms: &tool.terms,
        ignore: tool.ignore.as_ref(),
        condition: tool.needs_approval_when.as_ref(),
    };
    let action = compile_action(path, source, &keys, None, errors);
    let mut problems = Vec::new();
    // A Poppy agent's MCP client is shown the page's link in the held call's tool error
    // (`mcp::answer::approval_required_result`), so `proof` holds on a tool as on an operation.
    let approval = approval_via(tool.approval.as_ref(), tool.proof.as_ref(), &mut problems);
    for (span, problem) in problems {
        errors.push(ConfigError::at(
            path,
            source,
            Some(span),
            format!("tool `{}`: {problem}", tool.name.get_ref()),
        ));
    }
    if errors.len() > start {
        return None;
    }
    Some(Policy {
        tool: Some(tool_name.clone()),
        ..action?.into_policy(approval)
    })
}

/// Validate `[mcp]`.
pub(super) fn compile_mcp(
    config: &Path,
    source: &str,
    mcp: &McpFile,
    errors: &mut Vec<ConfigError>,
) -> Option<Mcp> {
    let text = mcp.path.get_ref();
    let at = |message: String| ConfigError::at(config, source, Some(mcp.path.span()), message);
    if text.contains(['?', '#', '{', '}']) {
        errors.push(at(format!(
            "mcp.path: `{text}` must be a plain path like \"/mcp\" (no query, fragment or captures)"
        )));
        return None;
    }
    match PathTemplate::parse(text) {
        Ok(template) => Some(Mcp {
            path: text.clone(),
            template,
        }),
        Err(e) => {
            errors.push(at(format!("mcp.path: {e}")));
            None
        }
    }
}

/// Checks across all policies: a `[[tool]]` needs `[mcp]`, a tool has one policy, and no
/// `[[operation]]` claims the MCP endpoint (its calls would never be seen as tool calls).
pub(super) fn check_tools(
    config: &Path,
    mcp: Option<&Mcp>,
    mcp_file: Option<&Spanned<String>>,
    source: &str,
    policies: &[Policy],
    errors: &mut Vec<ConfigError>,
) {
    for (i, policy) in policies.iter().enumerate() {
        let Some(tool) = &policy.tool else {
            continue;
        };
        if mcp_file.is_none() {
            errors.push(ConfigError::whole_file(
                config,
                format!(
                    "tool `{}` ({}): [[tool]] policies need an [mcp] table with the MCP server's path, e.g. [mcp] path = \"/mcp\"",
                    policy.name, policy.source
                ),
            ));
        }
        if let Some(first) = policies[..i]
            .iter()
            .find(|p| p.tool.as_deref() == Some(tool.as_str()))
        {
            errors.push(ConfigError::whole_file(
                config,
                format!(
                    "MCP tool `{tool}` has two policies: `{}` ({}) and `{}` ({})",
                    first.name, first.source, policy.name, policy.source
                ),
            ));
        }
    }
    let (Some(mcp), Some(span)) = (mcp, mcp_file) else {
        return;
    };
    for policy in policies {
        let Some(route) = &policy.route else {
            continue;
        };
        if route.method == "POST" && route.path.matches(&mcp.path).is_some() {
            errors.push(ConfigError::at(
                config,
                source,
                Some(span.span()),
                format!(
                    "mcp.path: operation `{}` ({}) is POST {}, the MCP endpoint; write MCP tools as [[tool]] policies",
                    policy.name, policy.source, route.path
                ),
            ));
        }
    }
}
