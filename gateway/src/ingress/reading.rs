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
    Captures, FormName, Policy, RequestParts, TermSource, Terms, extract, extract_from_request,
    request_fingerprint,
};

use super::fields::check_fields;
use super::form;
use super::headers::{
    check_operation_request, is_json_content_type, is_urlencoded_form_content_type, single_value,
};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::{RouteMatch, check_target, match_route};
    use crate::policy::PolicySet;

    fn read(policy_text: &str, body: &str) -> Result<PolicyReading, Refusal> {
        read_with_headers(policy_text, body, &[])
    }

    /// [`read`], with `extra` headers after `Content-Type: application/json`.
    fn read_with_headers(
        policy_text: &str,
        body: &str,
        extra: &[(&str, &str)],
    ) -> Result<PolicyReading, Refusal> {
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
        for (name, value) in extra {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        let request = HttpRequest {
            method: "POST",
            target: &target,
            headers: &headers,
            body: body.as_bytes(),
        };
        read_policy_request(&policy, &captures, &request)
    }

    /// The fingerprint of `{"text":"hi"}` with `extra` headers.
    fn read_with(policy_text: &str, extra: &[(&str, &str)]) -> Vec<u8> {
        read_with_headers(policy_text, r#"{"text":"hi"}"#, extra)
            .unwrap()
            .fingerprint
    }

    /// An approval is bound to every header but those that can't affect the action: a tenant
    /// header that changes is another revision; a new trace, Session or idempotency key is not.
    #[test]
    fn headers_that_can_affect_the_action_are_bound() {
        let plain = policy("text = { body = \"$.text\" }");
        let tenant_a = read_with(&plain, &[("x-tenant", "a")]);
        assert_ne!(tenant_a, read_with(&plain, &[("x-tenant", "b")]));
        assert_ne!(tenant_a, read_with(&plain, &[]));
        assert_ne!(
            tenant_a,
            read_with(&plain, &[("cookie", "t=a"), ("x-tenant", "a")])
        );
        // Order of names does not matter; what rides along unbound does not either.
        assert_eq!(
            read_with(&plain, &[("x-b", "1"), ("x-tenant", "a")]),
            read_with(&plain, &[("x-tenant", "a"), ("x-b", "1")])
        );
        assert_eq!(
            tenant_a,
            read_with(
                &plain,
                &[
                    ("x-tenant", "a"),
                    ("poppy-session", "a.new.jwt"),
                    ("poppy-approval", "operation_id=\"x\", revision=\"y\""),
                    (
                        "traceparent",
                        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                    ),
                    ("idempotency-key", "k2"),
                    ("user-agent", "agent/2"),
                    ("authorization", "Bearer other"),
                    ("x-request-id", "r2"),
                ]
            )
        );
        // The policy may say a header does not affect the action.
        let ignoring = plain.replace("ignore = [", "ignore_headers = [\"X-Tenant\"]\nignore = [");
        assert_eq!(
            read_with(&ignoring, &[("x-tenant", "a")]),
            read_with(&ignoring, &[("x-tenant", "b")])
        );
    }

    fn policy(terms: &str) -> String {
        format!(
            "[[operation]]\nname = \"note\"\nmethod = \"POST\"\npath = \"/orders/{{order}}/notes\"\nid_prefix = \"not\"\nexpires_in = \"15m\"\nsame_action = [\"order\"]\nsummary = \"Note {{text}} on {{order}}.\"\nignore = [\"$.attachment\", \"$.parts[*].kind\"]\n[operation.terms]\norder = {{ path = \"order\" }}\n{terms}\n"
        )
    }

    /// A form policy's request: `content_type`, `body`, to `POST /orders/o1/notes`.
    fn read_form_request(
        policy_text: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<PolicyReading, Refusal> {
        let file = std::path::Path::new("t.toml");
        let policies = PolicySet::new(crate::config::parse_policy_file(file, policy_text).unwrap());
        let target = check_target(b"/orders/o1/notes").unwrap();
        let Ok(RouteMatch::Policy(policy, captures)) =
            match_route(&policies, None, "POST", &target.path, true)
        else {
            panic!("the route matches");
        };
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, content_type.parse().unwrap());
        let request = HttpRequest {
            method: "POST",
            target: &target,
            headers: &headers,
            body,
        };
        read_policy_request(&policy, &captures, &request)
    }

    fn form_policy() -> String {
        "[[operation]]\nname = \"note\"\nmethod = \"POST\"\npath = \"/orders/{order}/notes\"\nid_prefix = \"not\"\nexpires_in = \"15m\"\nsame_action = [\"order\"]\nsummary = \"Note {text} ({tags}) to {to} on {order}.\"\nignore = [\"metadata\", \"Callback\"]\n[operation.terms]\norder = { path = \"order\" }\ntext = { form = \"Body\" }\nto = { form = \"customer[to]\" }\ntags = { form = \"tags[]\" }\n".to_owned()
    }

    const FORM: &str = "application/x-www-form-urlencoded";

    /// Form terms by field name; `ignore` names fields and groups; anything else, and any
    /// other body type or charset, is refused naming what to change.
    #[test]
    fn form_bodies_read_by_field_name() {
        let policy = form_policy();
        let body = b"Body=Hi+there&customer%5Bto%5D=%2B1555&tags[]=a&tags[]=b&metadata[x][y]=1&Callback=https%3A%2F%2Fx";
        let reading = read_form_request(&policy, FORM, body).unwrap();
        assert_eq!(reading.terms["text"], "Hi there");
        assert_eq!(reading.terms["to"], "+1555");
        assert_eq!(reading.terms["tags"], serde_json::json!(["a", "b"]));
        assert_eq!(reading.terms["order"], "o1");
        // The revision covers the bytes: `%20` for `+` reads the same and is another revision.
        let spaced = b"Body=Hi%20there&customer%5Bto%5D=%2B1555&tags[]=a&tags[]=b";
        let other = read_form_request(&policy, FORM, spaced).unwrap();
        assert_eq!(other.terms, reading.terms);
        assert_ne!(other.fingerprint, reading.fingerprint);
        assert!(
            read_form_request(
                &policy,
                "application/x-www-form-urlencoded; charset=UTF-8",
                spaced
            )
            .is_ok()
        );

        let refused =
            read_form_request(&policy, FORM, b"Body=x&customer[to]=y&tags[]=a&fee=0").unwrap_err();
        assert_eq!((refused.status, refused.error), (400, "unexpected_field"));
        assert_eq!(refused.names, Some(("field", "fee".into())));
        let refused = read_form_request(
            &policy,
            FORM,
            b"Body=x&customer[to]=y&tags[]=a&customer[fee]=0",
        )
        .unwrap_err();
        assert_eq!(refused.names, Some(("field", "customer[fee]".into())));
        let refused = read_form_request(&policy, FORM, b"Body=x&tags[]=a").unwrap_err();
        assert_eq!(
            (refused.error, refused.names),
            ("missing_term", Some(("term", "to".into())))
        );
        let refused =
            read_form_request(&policy, FORM, b"Body=x&Body=y&customer[to]=y&tags[]=a").unwrap_err();
        assert_eq!(
            (refused.error, refused.names),
            ("invalid_body", Some(("field", "Body".into())))
        );
        let refused = read_form_request(&policy, FORM, b"").unwrap_err();
        assert_eq!(refused.error, "invalid_body");
        for content_type in [
            "application/x-www-form-urlencoded; charset=latin1",
            "application/x-www-form-urlencoded; charset=iso-8859-1",
            "multipart/form-data; boundary=x",
            "application/json",
            "text/plain",
        ] {
            let refused =
                read_form_request(&policy, content_type, b"Body=x&customer[to]=y&tags[]=a")
                    .unwrap_err();
            assert_eq!(
                (refused.status, refused.error, refused.names),
                (400, "invalid_body", Some(("header", "content-type".into()))),
                "{content_type}"
            );
        }
        // A JSON policy still takes JSON only.
        let json = policy_with_text();
        let refused = read_form_request(&json, FORM, b"text=hi").unwrap_err();
        assert_eq!(refused.names, Some(("header", "content-type".into())));
    }

    /// Optional and structured form terms, as payment SDKs send them: a request with the
    /// required fields only (or no body at all when none is required) is read; a group term
    /// takes the fields it holds; a field outside every term is still refused.
    #[test]
    fn optional_and_structured_form_terms() {
        let policy = "[[operation]]\nname = \"pay\"\nmethod = \"POST\"\npath = \"/orders/{order}/notes\"\nid_prefix = \"pay\"\nexpires_in = \"15m\"\nsame_action = [\"order\"]\nsummary = \"Pay {order}.{?amount} {amount}{/amount}{?metadata} {metadata}{/metadata}{?items} {items}{/items}{?expand} {expand}{/expand}\"\n[operation.terms]\norder = { path = \"order\" }\namount = { form = \"amount\", optional = true }\nmetadata = { form = \"metadata\", optional = true }\nitems = { form = \"items\", optional = true }\nexpand = { form = \"expand\", optional = true }\n";
        let reading = read_form_request(policy, FORM, b"").unwrap();
        assert_eq!(
            reading.terms,
            crate::testkit::terms(&[("order", "o1".into())])
        );
        let reading = read_form_request(
            policy,
            FORM,
            b"amount=2000&metadata[order_id]=1&items[0][price]=p1&items[0][quantity]=2&items[1][price]=p2&expand[]=customer",
        )
        .unwrap();
        assert_eq!(
            serde_json::Value::Object(reading.terms.into_iter().collect()),
            serde_json::json!({
                "order": "o1",
                "amount": "2000",
                "metadata": {"order_id": "1"},
                "items": [{"price": "p1", "quantity": "2"}, {"price": "p2"}],
                "expand": ["customer"],
            })
        );
        for (body, field) in [
            (&b"amount=1&fee=0"[..], "fee"),
            (b"items[0]price=1", "items[0]price"),
            (b"expand[]=a&expand[0]=b", "expand[0]"),
            (b"metadata[b]=1&metadata=2", "metadata"),
            (b"items[1][price]=1", "items[1][price]"),
            (b"items[0][a]=1&items[2][a]=1", "items[2][a]"),
            (
                b"metadata[a][b][c][d][e][f]=1",
                "metadata[a][b][c][d][e][f]",
            ),
        ] {
            let refused = read_form_request(policy, FORM, body).unwrap_err();
            assert_eq!(
                refused.names,
                Some(("field", field.to_owned())),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// A JSON body whose terms are all optional may be empty; a nested object or array of
    /// objects is one term, whatever optional members it holds.
    #[test]
    fn optional_and_nested_json_terms() {
        let text = policy(
            "text = { body = \"$.text\", optional = true }\nshipping = { body = \"$.shipping\", optional = true }",
        )
        .replace(
            "summary = \"Note {text} on {order}.\"",
            "summary = \"Note on {order}.{?text} {text}{/text}{?shipping} {shipping}{/shipping}\"",
        );
        assert_eq!(read(&text, "").unwrap().terms.len(), 1);
        let reading = read(&text, r#"{"shipping":{"address":{"city":"Paris"},"lines":[{"sku":"a"},{"sku":"b","qty":2}]}}"#).unwrap();
        assert_eq!(
            reading.terms["shipping"]["lines"][1],
            serde_json::json!({"sku": "b", "qty": 2})
        );
        assert!(!reading.terms.contains_key("text"));
        let refused = read(&text, r#"{"other":1}"#).unwrap_err();
        assert_eq!(refused.names, Some(("field", "$.other".to_owned())));
    }

    fn policy_with_text() -> String {
        policy("text = { body = \"$.text\" }")
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
