//! A Company Agent's description of the request it would make, read exactly as the proxy
//! reads a Personal Agent's request (the ingress: target, headers, route, query, JSON body,
//! terms), into what the operation flow needs. A description the gateway and the upstream
//! could read differently is refused, as for the proxy: what the upstream executes is what
//! the User approved.
//!
//! **The operation is the conversation's** (spec 6, check 3): the conversation ID is bound
//! into the fingerprint the revision covers, so a revision returned in one conversation
//! approves nothing in another (nor through the API or MCP), and a retry of another
//! conversation's approval is answered with a new revision for this one.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};

use super::wire::{Answer, Context, Description};
use crate::ingress::{self, PolicyReading, RouteMatch, reading::HttpRequest};
use crate::policy::{Policy, PolicySet};
use crate::protocol::ErrorBody;
use crate::proxy::{ForwardRequest, forwarded_headers};

/// Headers the service sets itself (or that describe a connection, not a request): a
/// description may not carry them.
const SET_BY_THE_SERVICE: [&str; 15] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "proxy-connection",
    "proxy-authorization",
    "authorization",
    "poppy-session",
    "poppy-approval",
    "poppy-extensions",
];

/// A description read strictly: the policy, the terms and the fingerprint the revision
/// covers (bound to the conversation), and the request that is sent once approved.
pub(crate) struct Described {
    pub(crate) policy: Arc<Policy>,
    pub(crate) reading: PolicyReading,
    /// The request's headers, for a policy's lookup.
    pub(crate) headers: HeaderMap,
    pub(crate) forward: ForwardRequest,
}

/// What a description is read against.
pub(crate) struct Limits<'a> {
    pub(crate) policies: &'a PolicySet,
    pub(crate) max_body_bytes: usize,
    /// `Host` of the request sent upstream (the upstream's `host:port`).
    pub(crate) upstream_host: &'a str,
}

/// Read `description` for `context`'s conversation, or refuse it.
pub(crate) fn describe(
    description: &Description,
    context: &Context<'_>,
    limits: &Limits<'_>,
) -> Result<Described, Answer> {
    let method = http::Method::from_bytes(description.method.as_bytes()).map_err(|_| {
        Answer::invalid(format!(
            "request.method `{}` is not an HTTP method",
            description.method
        ))
    })?;
    let headers = headers(description, context, limits.upstream_host)?;
    let refused =
        |refusal: ingress::Refusal| Answer::error(refusal.status, &refusal.to_error_body());
    ingress::headers::check_all(&headers).map_err(refused)?;
    ingress::headers::check_personal_agent(&headers).map_err(refused)?;

    let raw_target = match &description.query {
        Some(query) => format!("{}?{query}", description.path),
        None => description.path.clone(),
    };
    let target = ingress::check_target(raw_target.as_bytes()).map_err(refused)?;
    let route = ingress::match_route(
        limits.policies,
        None,
        method.as_str(),
        &target.path,
        ingress::headers::is_form_content_type(&headers),
    )
    .map_err(refused)?;
    let RouteMatch::Policy(policy, captures) = route else {
        return Err(Answer::error(
            404,
            &ErrorBody::new(
                "no_action",
                format!(
                    "no policy names {method} {}: the request needs no approval, so it is not an operation; make it directly",
                    target.path
                ),
            ),
        ));
    };

    let body = description.body.clone().unwrap_or_default().into_bytes();
    if body.len() > limits.max_body_bytes {
        return Err(Answer::error(
            413,
            &ErrorBody::new(
                "body_too_large",
                format!(
                    "request.body has {} bytes; at most server.max_body_bytes = {}",
                    body.len(),
                    limits.max_body_bytes
                ),
            ),
        ));
    }
    let mut reading = ingress::read_policy_request(
        &policy,
        &captures,
        &HttpRequest {
            method: method.as_str(),
            target: &target,
            headers: &headers,
            body: &body,
        },
    )
    .map_err(refused)?;
    reading.fingerprint = bound_to_conversation(context.conversation_id, &reading.fingerprint);

    let forward = ForwardRequest {
        method,
        path_and_query: target.path_and_query(),
        headers: forwarded_headers(&headers),
        body: Bytes::from(body),
    };
    Ok(Described {
        policy,
        reading,
        headers,
        forward,
    })
}

/// The description's headers, then the Personal Agent's credentials and declaration (which
/// go upstream as they would through the proxy: the upstream verifies them), `Host`, and
/// `Content-Type: application/json` for a body that names none.
fn headers(
    description: &Description,
    context: &Context<'_>,
    upstream_host: &str,
) -> Result<HeaderMap, Answer> {
    let mut headers = HeaderMap::new();
    for (name, value) in &description.headers {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            Answer::invalid(format!("request.headers: `{name}` is not a header name"))
        })?;
        if SET_BY_THE_SERVICE.contains(&header.as_str()) {
            return Err(Answer::invalid(format!(
                "request.headers: `{name}` is set by the service (the Personal Agent's credentials go in poppy_session and authorization)"
            )));
        }
        let value = HeaderValue::from_str(value).map_err(|_| {
            Answer::invalid(format!(
                "request.headers: the value of `{name}` is not a header value"
            ))
        })?;
        headers.append(header, value);
    }
    let value = |member: &str, text: &str| {
        HeaderValue::from_str(text)
            .map_err(|_| Answer::invalid(format!("{member} is not a header value")))
    };
    headers.insert(
        "poppy-session",
        value("poppy_session", context.poppy_session)?,
    );
    if let Some(authorization) = context.authorization {
        headers.insert(
            http::header::AUTHORIZATION,
            value("authorization", authorization)?,
        );
    }
    headers.insert(
        "poppy-extensions",
        value("poppy_extensions", context.poppy_extensions)?,
    );
    headers.insert(
        http::header::HOST,
        value("the upstream's host", upstream_host)?,
    );
    if description.body.as_deref().is_some_and(|b| !b.is_empty())
        && !headers.contains_key(http::header::CONTENT_TYPE)
    {
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    Ok(headers)
}

/// The request's fingerprint, bound to the conversation: what the revision covers.
fn bound_to_conversation(conversation_id: &str, fingerprint: &[u8]) -> Vec<u8> {
    let mut hash = Sha256::new();
    for part in [
        b"poppy-conversation-v1".as_slice(),
        conversation_id.as_bytes(),
        fingerprint,
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().to_vec()
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
same_action = ["order_id", "item_id"]
summary = "Exchange {item_id} on {order_id} for {sku}."
[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
sku = { body = "$.sku" }
"#;
        PolicySet::new(parse_policy_file(std::path::Path::new("p.toml"), toml).unwrap())
    }

    fn context(conversation_id: &str) -> Context<'_> {
        Context {
            conversation_id,
            poppy_session: "a.b.c",
            authorization: None,
            poppy_extensions: "\"operations\";v=\"2\"",
            session_request: None,
        }
    }

    fn description(body: &str) -> Description {
        Description {
            method: "POST".into(),
            path: "/orders/o1/exchanges".into(),
            query: None,
            headers: Vec::new(),
            body: Some(body.into()),
        }
    }

    fn read(description: &Description, conversation: &str) -> Result<Described, Answer> {
        let policies = policies();
        let limits = Limits {
            policies: &policies,
            max_body_bytes: 1024,
            upstream_host: "127.0.0.1:9000",
        };
        describe(description, &context(conversation), &limits)
    }

    #[test]
    fn a_description_reads_like_a_request_and_is_the_conversation_s() {
        let body = r#"{"item_id":"i1","sku":"s1"}"#;
        let a = read(&description(body), "conv_a").unwrap();
        assert_eq!(a.policy.name, "exchange");
        assert_eq!(a.reading.terms.get("sku").unwrap(), "s1");
        assert_eq!(a.forward.body.as_ref(), body.as_bytes());
        let names: Vec<&str> = a.forward.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"poppy-session") && names.contains(&"content-type"));
        let again = read(&description(body), "conv_a").unwrap();
        assert_eq!(a.reading.fingerprint, again.reading.fingerprint);
        let other = read(&description(body), "conv_b").unwrap();
        assert_ne!(a.reading.fingerprint, other.reading.fingerprint);
    }

    #[test]
    fn what_the_proxy_refuses_is_refused() {
        let error = |d: &Description| {
            read(d, "c")
                .err()
                .map(|a| (a.status, a.body["error"].clone()))
        };
        assert_eq!(
            error(&description(r#"{"item_id":"i1","item_id":"i2","sku":"s"}"#)),
            Some((400, "invalid_body".into()))
        );
        assert_eq!(
            error(&description(
                r#"{"item_id":"i1","sku":"s","refund_to":"x"}"#
            )),
            Some((400, "unexpected_field".into()))
        );
        let mut other_route = description("{}");
        other_route.path = "/orders/o1".into();
        assert_eq!(error(&other_route), Some((404, "no_action".into())));
        let mut dotted = description("{}");
        dotted.path = "/orders/o1/exchanges.json".into();
        assert_eq!(error(&dotted), Some((400, "invalid_path".into())));
        let mut override_header = description(r#"{"item_id":"i1","sku":"s"}"#);
        override_header.headers = vec![("X-HTTP-Method-Override".into(), "DELETE".into())];
        assert_eq!(
            error(&override_header),
            Some((400, "invalid_header".into()))
        );
        let mut credentials = description(r#"{"item_id":"i1","sku":"s"}"#);
        credentials.headers = vec![("Authorization".into(), "Bearer x".into())];
        assert_eq!(error(&credentials), Some((400, "invalid_request".into())));
        let too_large = description(&format!(
            r#"{{"item_id":"{}","sku":"s"}}"#,
            "i".repeat(2000)
        ));
        assert_eq!(error(&too_large), Some((413, "body_too_large".into())));
    }
}
