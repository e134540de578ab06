//! `explain`'s text: what the gateway would do with the request, for a person.

use serde_json::Value;

use super::{ExplainRequest, ExplainedCondition, Explanation};

/// The explanation as text for a terminal.
pub fn render(explanation: &Explanation, request: &ExplainRequest) -> String {
    let target = match (&request.tool, &request.query) {
        (Some((tool, _)), _) => format!("tools/call {tool}"),
        (None, Some(query)) => format!("{} {}?{query}", request.method, request.path),
        (None, None) => format!("{} {}", request.method, request.path),
    };
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let mut out = String::new();
    match explanation {
        Explanation::NoMatch { routes } => {
            out.push_str(&format!(
                "no policy matches {target}: a Personal Agent's request passes through to the upstream untouched, without approval.\n"
            ));
            if routes.is_empty() {
                out.push_str("The config has no HTTP routes.\n");
            } else {
                out.push_str("Routes that need approval:\n");
                for route in routes {
                    out.push_str(&format!("  {route}\n"));
                }
            }
        }
        Explanation::McpPassThrough {
            endpoint,
            tool,
            held,
        } => {
            match (endpoint, tool) {
                (None, _) => out.push_str(
                    "the config has no [mcp] endpoint: MCP messages pass through to the upstream untouched.\n",
                ),
                (Some(path), Some(tool)) => out.push_str(&format!(
                    "no [[tool]] policy names `{tool}`: a call of it to {path} passes through to the MCP server untouched, without approval.\n"
                )),
                (Some(path), None) => out.push_str(&format!(
                    "{target} is the MCP endpoint ({path}): calls of held tools are answered by the gateway (explain one with --tool NAME --arguments JSON); every other message passes through to the MCP server.\n"
                )),
            }
            if !held.is_empty() {
                out.push_str("Tools whose calls need approval:\n");
                for tool in held {
                    out.push_str(&format!("  {tool}\n"));
                }
            }
        }
        Explanation::Refused { status, body } => {
            out.push_str(&format!(
                "the gateway would refuse {target} before matching a policy, forwarding nothing:\n{status} {}\n",
                pretty(body)
            ));
        }
        Explanation::Rejected {
            policy,
            source,
            status,
            body,
        } => {
            let why = match body.get("term").and_then(Value::as_str) {
                Some(term) => format!("term `{term}` is missing or unusable"),
                None => "the request can't give its terms".to_owned(),
            };
            out.push_str(&format!(
                "policy `{policy}` ({source}) matches {target}, but {why}.\nThe gateway would answer, forwarding nothing:\n{status} {}\n",
                pretty(body)
            ));
        }
        Explanation::Operation {
            policy,
            source,
            route,
            captures,
            terms,
            lookup,
            lookup_placeholders,
            summary,
            answer,
            tool_call,
            condition,
        } => {
            out.push_str(&format!(
                "policy `{policy}` ({source}) matches {target}\n  route: {route}\n"
            ));
            for (name, value) in captures {
                out.push_str(&format!("  capture {name} = {value:?}\n"));
            }
            if let Some(url) = lookup {
                out.push_str(&format!(
                    "\nlookup: the gateway would {url} from the upstream (with the request's Authorization, Cookie and Poppy-Session)\n"
                ));
                if *lookup_placeholders {
                    out.push_str("  explain does not call the upstream: lookup terms are shown as ⟨lookup …⟩; give --lookup-answer @answer.json (or NAME=@answer.json for [operation.lookups.NAME]) to read them from an answer\n");
                }
            }
            out.push_str("\nterms:\n");
            for term in terms {
                out.push_str(&format!(
                    "  {:<20} = {:<30} from {}\n",
                    term.name,
                    term.value
                        .as_ref()
                        .map_or_else(|| "(absent: optional)".to_owned(), Value::to_string),
                    term.source
                ));
            }
            out.push_str(&format!(
                "\nsummary (Markdown; request values escaped):\n  {summary}\n"
            ));
            if let Some(condition) = condition {
                out.push_str(&condition_text(condition));
                if condition.holds == Ok(false) {
                    return out;
                }
            }
            let status = if *tool_call {
                "200, the JSON-RPC result of the call:"
            } else {
                "403"
            };
            out.push_str(&format!(
                "\nthe Personal Agent would receive (operation_id and revision computed with a throwaway key, not this gateway's: their values differ on every run and in the real gateway):\n{status} {}\n",
                pretty(answer)
            ));
        }
    }
    out
}

/// `needs_approval_when` and its value for the request.
fn condition_text(condition: &ExplainedCondition) -> String {
    let outcome = match &condition.holds {
        Ok(true) => "true: held for approval".to_owned(),
        Ok(false) => "false: passes through to the upstream as if no policy named it (no operation, nothing recorded; counted in poppy_unheld_requests_total as condition_false)".to_owned(),
        Err(why) => format!("cannot be evaluated: held for approval, because {why}"),
    };
    format!("\nneeds_approval_when: {}\n  {outcome}\n", condition.text)
}
