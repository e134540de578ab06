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

mod bound_headers;
#[cfg(test)]
mod tests;
mod tool_call;

use http::HeaderMap;
use serde_json::Value;

use crate::policy::{
    Captures, FormName, Policy, RequestParts, TermSource, Terms, extract_from_request,
    request_fingerprint,
};

use super::fields::check_fields;
use super::form;
use super::headers::{
    check_operation_request, is_json_content_type, is_urlencoded_form_content_type, single_value,
};
use super::json::{has_elided, parse_strict, parse_strict_eliding};
use super::query;
use super::{Refusal, Target};

pub use self::bound_headers::UNBOUND_HEADERS;
pub(crate) use self::bound_headers::bound_headers;
pub(crate) use self::tool_call::read_tool_call;

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
    let form = policy.reads_form();
    let elide = (!filtered && !form).then_some(COPY_STRINGS_UP_TO);
    let (body, form) = if form {
        (None, read_form(policy, request)?)
    } else {
        (read_body(policy, request, elide)?, None)
    };

    let mut term_headers = Vec::new();
    for (term, source) in &policy.terms {
        if let TermSource::Header(name) = source {
            single_value(request.headers, name)
                .map_err(|refusal| refusal.naming("term", term.as_str()))?;
            term_headers.push(name.to_ascii_lowercase());
        }
    }
    let bound_headers = bound_headers(policy, &term_headers, &[], request.headers);

    let extract = |body: Option<&Value>| {
        let parts = RequestParts {
            captures,
            query: request.target.query.as_deref(),
            headers: request.headers,
            body,
            form: form.as_ref(),
            arguments: None,
        };
        extract_from_request(&policy.terms, &policy.optional, &parts)
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

/// A form body (the policy [reads a form](Policy::reads_form)): empty, or a form by its
/// `Content-Type`, strictly read, every field a `form` term or within an `ignore`d name.
/// The fields by name, for the terms.
fn read_form(policy: &Policy, request: &HttpRequest<'_>) -> Result<Option<Value>, Refusal> {
    if request.body.is_empty() {
        if policy.needs_body() {
            return Err(Refusal::body(
                "this action's terms come from a form request body (application/x-www-form-urlencoded), and the request has none",
            ));
        }
        return Ok(None);
    }
    if !is_urlencoded_form_content_type(request.headers) {
        return Err(Refusal::body(
            "a request to this action sends its body as a form, with `Content-Type: application/x-www-form-urlencoded` in UTF-8 (no charset, or charset=utf-8): other types and charsets are read differently by different frameworks",
        )
        .naming("header", "content-type"));
    }
    let read = form::parse_strict(request.body)?;
    let names = |entries: &mut dyn Iterator<Item = &String>| -> Vec<FormName> {
        entries
            .filter_map(|name| FormName::parse(name).ok())
            .collect()
    };
    let ignored = names(&mut policy.ignore.iter());
    // A term names a field, or a group whose fields are its value (`metadata`, `items`).
    let terms = names(
        &mut policy.terms.iter().filter_map(|(_, source)| match source {
            TermSource::Form(name) => Some(name),
            _ => None,
        }),
    );
    for (name, _) in &read.fields {
        let is_term = terms.iter().any(|term| name.is_within(term));
        if !is_term && !ignored.iter().any(|group| name.is_within(group)) {
            return Err(Refusal::new(
                400,
                "unexpected_field",
                format!(
                    "the form field `{name}` is not a term of this action, so it is not in the summary the user approves: leave it out (or the company lists it in the policy's `ignore`)"
                ),
            )
            .naming("field", name.as_str()));
        }
    }
    Ok(Some(read.to_object()))
}
