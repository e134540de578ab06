//! The strict reading of a held MCP tool call's arguments (the MCP adapter's and `explain`'s).

use http::HeaderMap;
use serde_json::Value;

use crate::ingress::Refusal;
use crate::ingress::fields::check_fields;
use crate::ingress::json::check_value;
use crate::policy::{Policy, RequestParts, TermSource, Terms, extract};

/// Read a held tool call's arguments strictly: every parser reads them as the gateway does
/// (no case-folded twin names, integers within ±(2^53 − 1)), nothing in them is outside the
/// terms and `ignore`, and every term is there. The MCP adapter and `explain` share it.
pub(crate) fn read_tool_call(
    policy: &Policy,
    headers: &HeaderMap,
    arguments: &Value,
) -> Result<Terms, Refusal> {
    let covering = policy
        .terms
        .iter()
        .filter_map(|(_, source)| match source {
            TermSource::Argument(path) => Some(path.as_str()),
            _ => None,
        })
        .chain(policy.ignore.iter().map(String::as_str));
    check_value(arguments)?;
    check_fields(arguments, covering, "arguments")?;
    let no_captures = Vec::new();
    let parts = RequestParts {
        captures: &no_captures,
        query: None,
        headers,
        body: None,
        form: None,
        arguments: Some(arguments),
    };
    extract(&policy.terms, &policy.optional, &parts)
        .map_err(|e| Refusal::new(400, "missing_term", e.to_string()).naming("term", e.term()))
}
