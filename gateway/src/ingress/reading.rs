//! The canonical reading of a Personal Agent request to a policy route: its terms, and the
//! fingerprint its revision covers, or a refusal.
//!
//! **What is approved is what is sent.** The gateway forwards the request's own bytes (target,
//! body, headers), and the fingerprint covers those bytes, not a re-serialization of them: the
//! method, the target exactly as received, `Content-Type`, every header that carries a term,
//! and the body byte for byte. A retry that differs in any of them, even by a duplicate key
//! or a key order, gets a new revision. Together with the strict rules (one reading of the
//! target, query and body by every common framework), this makes what the upstream executes
//! the request the User approved.

use http::HeaderMap;
use serde_json::Value;

use crate::policy::{
    Captures, Policy, RequestParts, TermSource, Terms, extract, extract_from_request,
    request_fingerprint,
};

use super::fields::check_fields;
use super::headers::{check_operation_request, is_json_content_type, single_value};
use super::json::{check_value, has_elided, parse_strict, parse_strict_eliding};
use super::query;
use super::{Refusal, Target};

/// A Personal Agent request to a policy route, as received.
#[derive(Debug, Clone, Copy)]
pub struct HttpRequest<'a> {
    pub method: &'a str,
    pub target: &'a Target,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// What the operation flow needs from the request.
#[derive(Debug, Clone)]
pub struct PolicyReading {
    /// Every term but `lookup` ones (the caller reads those from the upstream).
    pub terms: Terms,
    /// What the revision covers: exactly the bytes that are forwarded.
    pub fingerprint: Vec<u8>,
}

/// Read a request to `policy`'s route strictly.
pub fn read_policy_request(
    policy: &Policy,
    captures: &Captures,
    request: &HttpRequest<'_>,
) -> Result<PolicyReading, Refusal> {
    check_operation_request(request.headers)?;

    let parameters = query::parse_strict(request.target.query.as_deref())?;
    for (name, _) in &parameters {
        let is_term = policy
            .terms
            .iter()
            .any(|(_, source)| matches!(source, TermSource::Query(q) if q == name));
        if !is_term && !policy.ignore_query.iter().any(|ignored| ignored == name) {
            return Err(Refusal::new(
                400,
                "unexpected_parameter",
                format!("the query parameter `{name}` is not a term of this action, so it is not in the summary the user approves: leave it out (or the company lists it in the policy's `ignore_query`)"),
            )
            .naming("parameter", name.as_str()));
        }
    }

    // A JSONPath without a filter selects by the body's structure alone, so long string values
    // need no copy unless a term is one: a large ignored field (a note, an attachment) is then
    // held once, in the body that is forwarded, not twice.
    let filtered = policy
        .terms
        .iter()
        .filter_map(|(_, source)| match source {
            TermSource::Body(path) => Some(path),
            _ => None,
        })
        .chain(&policy.ignore)
        .any(|path| path.contains('?'));
    let elide = (!filtered).then_some(COPY_STRINGS_UP_TO);
    let body = read_body(policy, request, elide)?;

    let mut bound_headers = Vec::new();
    for (term, source) in &policy.terms {
        if let TermSource::Header(name) = source {
            let value = single_value(request.headers, name)
                .map_err(|refusal| refusal.naming("term", term.as_str()))?;
            bound_headers.push((name.as_str(), value.unwrap_or_default().as_bytes()));
        }
    }
    let content_type = request
        .headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    bound_headers.push(("content-type", content_type));

    let extract = |body: Option<&Value>| {
        let parts = RequestParts {
            captures,
            query: request.target.query.as_deref(),
            headers: request.headers,
            body,
            arguments: None,
        };
        extract_from_request(&policy.terms, &parts)
            .map_err(|e| Refusal::new(400, "missing_term", e.to_string()).naming("term", e.term()))
    };
    let mut terms = extract(body.as_ref())?;
    if elide.is_some() && terms.values().any(has_elided) {
        // A term is one of the long strings: read them all.
        terms = extract(read_body(policy, request, None)?.as_ref())?;
    }
    let fingerprint = request_fingerprint(
        request.method,
        &request.target.path_and_query(),
        &bound_headers,
        request.body,
    );
    Ok(PolicyReading { terms, fingerprint })
}

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
        arguments: Some(arguments),
    };
    extract(&policy.terms, &parts)
        .map_err(|e| Refusal::new(400, "missing_term", e.to_string()).naming("term", e.term()))
}

/// String values of a body up to this many bytes are copied while it is read; longer ones only
/// when a term needs them.
const COPY_STRINGS_UP_TO: usize = 4096;

/// The body: empty, or JSON by its `Content-Type`, strictly parsed, every field covered.
/// String values longer than `elide_over` are checked but read as [`super::json::ELIDED`].
fn read_body(
    policy: &Policy,
    request: &HttpRequest<'_>,
    elide_over: Option<usize>,
) -> Result<Option<Value>, Refusal> {
    if request.body.is_empty() {
        if policy.needs_body() {
            return Err(Refusal::body(
                "this action's terms come from a JSON request body, and the request has none",
            ));
        }
        return Ok(None);
    }
    if !is_json_content_type(request.headers) {
        return Err(Refusal::body(
            "a request to this action with a body must send it as JSON, with `Content-Type: application/json` (UTF-8): other types are read differently by different frameworks",
        )
        .naming("header", "content-type"));
    }
    let body = match elide_over {
        Some(over) => parse_strict_eliding(request.body, over)?,
        None => parse_strict(request.body)?,
    };
    let covering = policy
        .terms
        .iter()
        .filter_map(|(_, source)| match source {
            TermSource::Body(path) => Some(path.as_str()),
            _ => None,
        })
        .chain(policy.ignore.iter().map(String::as_str));
    check_fields(&body, covering, "body")?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::{RouteMatch, check_target, match_route};
    use crate::policy::PolicySet;

    fn read(policy_text: &str, body: &str) -> Result<PolicyReading, Refusal> {
        let file = std::path::Path::new("t.toml");
        let policies = PolicySet::new(crate::config::parse_policy_file(file, policy_text).unwrap());
        let target = check_target(b"/orders/o1/notes").unwrap();
        let Ok(RouteMatch::Policy(policy, captures)) =
            match_route(&policies, None, "POST", &target.path, false)
        else {
            panic!("the route matches");
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            "application/json".parse().unwrap(),
        );
        let request = HttpRequest {
            method: "POST",
            target: &target,
            headers: &headers,
            body: body.as_bytes(),
        };
        read_policy_request(&policy, &captures, &request)
    }

    fn policy(terms: &str) -> String {
        format!(
            "[[operation]]\nname = \"note\"\nmethod = \"POST\"\npath = \"/orders/{{order}}/notes\"\nid_prefix = \"not\"\nexpires_in = \"15m\"\nsame_action = [\"order\"]\nsummary = \"Note {{text}} on {{order}}.\"\nignore = [\"$.attachment\", \"$.parts[*].kind\"]\n[operation.terms]\norder = {{ path = \"order\" }}\n{terms}\n"
        )
    }

    #[test]
    fn long_strings_read_the_same_whether_copied_or_not() {
        let long = "x".repeat(COPY_STRINGS_UP_TO + 1);
        let plain = policy("text = { body = \"$.text\" }");
        // An ignored long field is not a term: the terms are the short ones.
        let reading = read(&plain, &format!(r#"{{"text":"hi","attachment":"{long}"}}"#)).unwrap();
        assert_eq!(reading.terms["text"], "hi");
        // A long term is read whole.
        let reading = read(
            &plain,
            &format!(r#"{{"text":"{long}","attachment":"{long}"}}"#),
        )
        .unwrap();
        assert_eq!(reading.terms["text"], long.as_str());
        // A long field outside the terms is refused as any other.
        let refused = read(&plain, &format!(r#"{{"text":"hi","other":"{long}"}}"#)).unwrap_err();
        assert_eq!(refused.names, Some(("field", "$.other".to_owned())));
        // A filter reads string contents: nothing is left out for it.
        let filtered = policy(&format!(
            "text = {{ body = \"$.parts[?(@.kind == '{long}')].text\" }}"
        ));
        let body = format!(r#"{{"parts":[{{"kind":"{long}","text":"a"}},{{"kind":"y"}}]}}"#);
        let reading = read(&filtered, &body).unwrap();
        assert_eq!(reading.terms["text"], "a");
    }
}
