//! The reading of requests to policy routes, through its front door: the headers an approval
//! is bound to, form and JSON bodies, optional and structured terms, long strings.

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
        let refused = read_form_request(&policy, content_type, b"Body=x&customer[to]=y&tags[]=a")
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
    let reading = read(
        &text,
        r#"{"shipping":{"address":{"city":"Paris"},"lines":[{"sku":"a"},{"sku":"b","qty":2}]}}"#,
    )
    .unwrap();
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
