//! A Company Agent's description of the request it would make, turned into the request the
//! proxy would receive (its headers, with the Personal Agent's credentials and declaration;
//! its target and body) and routed by the front door's first step, as the proxy routes one.
//! The runner then takes it through the rest of the front door and the executor, as for the
//! proxy (`seam.rs`): a description the gateway and the upstream could read differently is
//! refused the same way, and what the upstream executes is what the User approved.
//!
//! **The operation is the conversation's** (spec 6, check 3): the conversation ID is bound
//! into the fingerprint the revision covers, so a revision returned in one conversation
//! approves nothing in another (nor through the API or MCP), and a retry of another
//! conversation's approval is answered with a new revision for this one.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};

use super::wire::{Answer, Context, Description};
use crate::ingress::admit::{self, Action};
use crate::ingress::{Refusal, RouteMatch};
use crate::policy::PolicySet;
use crate::protocol::ErrorBody;

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

/// A description routed by the front door's first step (`ingress::admit::route`), as the
/// proxy routes a request: the action it names, its headers (with the Personal Agent's
/// credentials and declaration) and its body. The rest of the front door (extension,
/// Session, body size, approval, terms) is the runner's, as for the proxy.
pub(crate) struct Described {
    pub(crate) action: Action,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// What a description is read against.
pub(crate) struct Limits<'a> {
    pub(crate) policies: &'a PolicySet,
    /// `Host` of the request sent upstream (the upstream's `host:port`).
    pub(crate) upstream_host: &'a str,
}

/// Route `description` for `context`'s conversation, or refuse it.
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
    let raw_target = match &description.query {
        Some(query) => format!("{}?{query}", description.path),
        None => description.path.clone(),
    };
    let refused = |refusal: Refusal| Answer::error(refusal.status, &refusal.to_error_body());
    let (target, route) = admit::route(
        limits.policies,
        None,
        method.as_str(),
        raw_target.as_bytes(),
        &headers,
        admit::Sender::PersonalAgent,
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
    Ok(Described {
        action: Action::Http {
            policy,
            captures,
            method,
            target,
        },
        headers,
        body: Bytes::from(description.body.clone().unwrap_or_default()),
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
    // An empty one is none: a request of an agent without Poppy support, which the
    // front door holds as `[approval_page.agents]` says (or refuses without it).
    if !context.poppy_session.is_empty() {
        headers.insert(
            "poppy-session",
            value("poppy_session", context.poppy_session)?,
        );
    }
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
pub(crate) fn bound_to_conversation(conversation_id: &str, fingerprint: &[u8]) -> Vec<u8> {
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
