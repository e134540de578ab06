//! The front door: every check a request for an operation passes before the operation core,
//! written once for every interface (the HTTP API, the MCP endpoint, the conversations
//! service, and `explain`), in the spec's order:
//!
//! 1. [`route`]: the header rules, the target read once, the Personal Agent rules, the route;
//! 2. [`via`]: the operations extension is declared (spec 2), or else the policy lets the
//!    User approve on the Company's page (issue 29; docs/approval-page.md);
//! 3. who may approve (the Session and token: `identity`, the one step with I/O, which the
//!    runner makes between 2 and 4);
//! 4. [`body_size`] (or the body read within the same limit);
//! 5. [`admit`]: the approval's syntax, wherever it travels (the header, an MCP call's
//!    `_meta`, a conversation message), then the one strict reading of the request (terms
//!    and the fingerprint the revision covers), and what is forwarded once approved, built
//!    here so that what is approved is what can be sent.
//!
//! Every step is pure and returns one typed refusal ([`Refused`]); each interface only
//! renders it in its own wire form.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use super::credentials::{self, Token};
use super::forward::{ForwardRequest, forwarded_headers};
use super::reading::{HttpRequest, bound_headers, read_policy_request, read_tool_call};
use super::route::{RouteMatch, match_route};
use super::{Refusal, Target, check_target, headers};
use crate::identity::{Approver, ApproverError};
use crate::mcp::{MCP_CONNECTION_HEADERS, call_fingerprint};
use crate::policy::{Captures, PathTemplate, Policy, PolicySet, Terms};
use crate::protocol::{
    ApprovalError, ApprovalHeader, Declared, ErrorBody, ExtensionsError, approval,
    declared_operations,
};

/// Why a request for an operation was refused before the core: nothing decided, nothing
/// forwarded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// `Poppy-Extensions` can't be read.
    #[error("{0}")]
    UnreadableExtensions(ExtensionsError),
    /// The operations extension is not declared: the Personal Agent gets no operations.
    #[error("the operations extension is not declared")]
    ExtensionRequired,
    /// The Session or the token.
    #[error("{0}")]
    Approver(ApproverError),
    /// An approval that is not one.
    #[error("{0}")]
    Approval(ApprovalError),
    /// The request itself: its body, target, headers, query or terms.
    #[error("{0}")]
    Request(Refusal),
}

impl Refused {
    /// The HTTP status of the refusal as a JSON error (the HTTP API's and the conversations
    /// service's form; MCP renders some refusals as tool errors instead).
    pub(crate) fn status(&self) -> u16 {
        match self {
            Refused::Approver(e) => e.status(),
            Refused::Request(refusal) => refusal.status,
            _ => 400,
        }
    }

    /// The JSON error body: `error`, a readable `detail`, and what it names.
    pub(crate) fn error_body(&self) -> ErrorBody {
        match self {
            Refused::UnreadableExtensions(e) => ErrorBody::new("invalid_header", e.to_string())
                .with("header", "Poppy-Extensions"),
            Refused::ExtensionRequired => ErrorBody::new(
                "extension_required",
                "this action needs the user's approval, and operations go only to a Personal Agent that declares Poppy-Extensions: \"operations\";v=\"2\" (spec 2); nothing was performed",
            )
            .with("extension", "operations"),
            Refused::Approver(e) => ErrorBody::new(e.code(), e.to_string()),
            Refused::Approval(e) if e.place() == approval::HEADER => {
                ErrorBody::new("invalid_header", e.to_string()).with("header", approval::HEADER)
            }
            Refused::Approval(e) => ErrorBody::new("invalid_request", e.to_string()),
            Refused::Request(refusal) => refusal.to_error_body(),
        }
    }

    /// Seconds to wait before sending the same request again, when the refusal is one to
    /// retry (the identity provider could not be asked, the gateway is busy).
    pub(crate) fn retry_after(&self) -> Option<u32> {
        match self {
            Refused::Approver(e) => e.retry_after(),
            Refused::Request(refusal) if refusal.status == 503 => Some(1),
            _ => None,
        }
    }
}

impl From<Refusal> for Refused {
    fn from(refusal: Refusal) -> Refused {
        Refused::Request(refusal)
    }
}

/// Who sent a request the front door routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sender {
    /// A Personal Agent (it sent a `Poppy-Session`), or a Company Agent describing its request.
    PersonalAgent,
    /// A request without a `Poppy-Session` that `[approval_page.agents]` may make an agent's
    /// ([`Agents::unsigned`]): the Personal Agent rules wait until it is known to be one
    /// ([`Agents::check`]), so that the Company's own clients pass through as they are.
    WithoutSession,
}

/// Step 1: where a Personal Agent's request goes. The header rules every request gets, the
/// target read once (`raw_target` as received), the rules for Personal Agent requests (as
/// `sender` says), then the route: a policy, the MCP endpoint, or none.
pub(crate) fn route(
    policies: &PolicySet,
    mcp: Option<&PathTemplate>,
    method: &str,
    raw_target: &[u8],
    request_headers: &HeaderMap,
    sender: Sender,
) -> Result<(Target, RouteMatch), Refusal> {
    headers::check_all(request_headers)?;
    let target = check_target(raw_target)?;
    if sender == Sender::PersonalAgent {
        headers::check_personal_agent(request_headers)?;
    }
    let matched = match_route(
        policies,
        mcp,
        method,
        &target.path,
        headers::is_form_content_type(request_headers),
    )?;
    Ok((target, matched))
}

/// How the User approves the request (step 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// Through the Personal Agent, which declares the operations extension.
    Agent,
    /// On the Company's approval page: the request declares no extension, on a policy that
    /// allows it (`approval = "either"`), and the gateway has a page. Such a request never
    /// gets an operation (spec 2) and its approval is never read from the request.
    Page,
}

/// Step 2: the request declares the operations extension (`declared`, [`declared`]), or
/// else it may be approved on the Company's page (`page_offered`: the gateway has one).
pub(crate) fn via(declared: Declared, policy: &Policy, page_offered: bool) -> Result<Via, Refused> {
    match declared {
        // The one version implemented (and so the one `[protocol] operations_versions` can
        // list): a request that declares only another major is served as one without it.
        Declared::V2 => Ok(Via::Agent),
        Declared::Other | Declared::None => page_only(policy, page_offered),
    }
}

/// Step 2 for a request without the extension (or an agent's without a `Poppy-Session`,
/// which can't hold an operation): the page, if the policy allows it and the gateway has
/// one; else `extension_required`, never passthrough.
pub(crate) fn page_only(policy: &Policy, page_offered: bool) -> Result<Via, Refused> {
    if page_offered && policy.approval.allows_page() {
        Ok(Via::Page)
    } else {
        Err(Refused::ExtensionRequired)
    }
}

/// `[approval_page.agents]`: which requests without a `Poppy-Session` are an agent's (issue
/// 29). Without it none is: they pass through, as the Company's own clients' must.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Agents {
    /// A bearer token, verified, issued to one of these OAuth clients (its `client_id`, else
    /// `azp`) makes the request an agent's; any other client's passes through.
    pub(crate) clients: Vec<String>,
    /// Every request without a `Poppy-Session` is an agent's (an API only agents call).
    pub(crate) every_request: bool,
}

/// What the rule makes of a request without a `Poppy-Session`, its token found
/// ([`credentials`]) but not yet verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsigned {
    /// An agent's (`every_request`).
    Agent,
    /// An agent's if its verified token's client is listed ([`Agents::lists`]).
    IfListed,
    /// Not an agent's: it passes through untouched (no token anywhere, with `clients`).
    NotAnAgent,
}

impl Agents {
    /// Whether a request without a `Poppy-Session` may be an agent's, from its head alone
    /// (`query`: the raw query): then it is routed, and on a route a policy names its
    /// credentials are read ([`credentials`]: a token anywhere a resource server reads one,
    /// and any value read two ways, are never let through as the Company's). Otherwise it
    /// passes through unread.
    pub(crate) fn may_be_agents(&self, request_headers: &HeaderMap, query: Option<&str>) -> bool {
        // A head read two ways is routed too, to be refused on a policy's route.
        self.every_request
            || match credentials::in_head(request_headers, query) {
                Ok(found) => found.may_carry(),
                Err(_) => true,
            }
    }

    /// Step 2's first half for a request without a `Poppy-Session`, its one `token` found:
    /// an agent's, one if the token's client is listed, or none.
    pub(crate) fn unsigned(&self, token: Option<&Token>) -> Unsigned {
        if self.every_request {
            Unsigned::Agent
        } else if token.is_some() {
            Unsigned::IfListed
        } else {
            Unsigned::NotAnAgent
        }
    }

    /// After step 3, for [`Unsigned::IfListed`]: whether the verified token's client
    /// (`None`: not verified, which `load` rules out with `clients`) makes it an agent's.
    /// Fails closed: a client that can't be told is taken as an agent's.
    pub(crate) fn lists(&self, client: Option<&str>) -> bool {
        client.is_none_or(|client| self.clients.iter().any(|c| c == client))
    }

    /// Step 1's Personal Agent rules, for a request now known to be an agent's (one
    /// `Authorization`, one `Host`, no method overrides...).
    pub(crate) fn check(request_headers: &HeaderMap) -> Result<(), Refused> {
        headers::check_personal_agent(request_headers).map_err(Refused::Request)
    }
}

/// What the request's `Poppy-Extensions` declares of operations (read once: step 2 and
/// the metric of declared versions both use it).
pub(crate) fn declared(request_headers: &HeaderMap) -> Result<Declared, Refused> {
    let values = request_headers
        .get_all("poppy-extensions")
        .iter()
        .map(|v| v.as_bytes());
    declared_operations(values).map_err(Refused::UnreadableExtensions)
}

/// Step 4, for a body the interface already holds whole: at most `max_body_bytes`.
pub(crate) fn body_size(length: usize, max_body_bytes: usize) -> Result<(), Refusal> {
    if length > max_body_bytes {
        return Err(body_too_large(max_body_bytes));
    }
    Ok(())
}

/// The refusal of a body larger than `max_body_bytes`, however it arrived.
pub(crate) fn body_too_large(max_body_bytes: usize) -> Refusal {
    Refusal::new(
        413,
        "body_too_large",
        format!(
            "the request body is larger than this gateway's limit of {max_body_bytes} bytes (server.max_body_bytes)"
        ),
    )
}

/// Where the approval travels.
pub(crate) enum ApprovalSource<'a> {
    /// The `Poppy-Approval` header of the request's headers.
    Header,
    /// JSON (an MCP call's `_meta`, a conversation message), named by `place` in errors.
    Json {
        value: Option<&'a Value>,
        place: &'static str,
    },
}

/// What the request asks to be done, as routed.
pub(crate) enum Action {
    /// A request to a policy route: the HTTP API's, or one a Company Agent describes.
    Http {
        policy: Arc<Policy>,
        captures: Captures,
        method: http::Method,
        target: Target,
    },
    /// A held `tools/call` to the MCP endpoint at `path_and_query`.
    Tool {
        policy: Arc<Policy>,
        tool: String,
        arguments: Value,
        path_and_query: String,
    },
}

impl Action {
    pub(crate) fn policy(&self) -> &Arc<Policy> {
        match self {
            Action::Http { policy, .. } | Action::Tool { policy, .. } => policy,
        }
    }

    /// The raw query of the request's target, without `?`.
    pub(crate) fn query(&self) -> Option<&str> {
        match self {
            Action::Http { target, .. } => target.query.as_deref(),
            Action::Tool { path_and_query, .. } => {
                path_and_query.split_once('?').map(|(_, query)| query)
            }
        }
    }
}

/// A request the front door let in: everything the runner needs, read once.
pub(crate) struct Admitted {
    pub(crate) policy: Arc<Policy>,
    pub(crate) approver: Approver,
    pub(crate) approval: Option<ApprovalHeader>,
    /// How the User approves it: through the agent, or on the Company's page.
    pub(crate) via: Via,
    /// Every term but a lookup's.
    pub(crate) terms: Terms,
    /// What the revision covers.
    pub(crate) fingerprint: Vec<u8>,
    /// The request's headers, for a policy's lookup.
    pub(crate) headers: HeaderMap,
    /// What is sent upstream once approved: the bytes the fingerprint covers.
    pub(crate) forward: ForwardRequest,
}

/// Step 5: the approval's syntax, then the request read strictly, and what is forwarded.
/// `body`: the request's body (a tool call's: the call without its approval, as forwarded);
/// `via`: step 2's answer (a page request's approval is not read: the agent sends none, and
/// one it did send is not its to give).
pub(crate) fn admit(
    action: Action,
    request_headers: HeaderMap,
    body: Bytes,
    approval: ApprovalSource<'_>,
    approver: Approver,
    via: Via,
) -> Result<Admitted, Refused> {
    let approval = match via {
        Via::Agent => read_approval(&request_headers, approval).map_err(Refused::Approval)?,
        Via::Page => None,
    };
    let (policy, terms, fingerprint, forward) = match action {
        Action::Http {
            policy,
            captures,
            method,
            target,
        } => {
            let reading = read_policy_request(
                &policy,
                &captures,
                &HttpRequest {
                    method: method.as_str(),
                    target: &target,
                    headers: &request_headers,
                    body: &body,
                },
            )?;
            let forward = ForwardRequest {
                method,
                path_and_query: sendable(target.path_and_query())?,
                headers: forwarded_headers(&request_headers),
                body,
            };
            (policy, reading.terms, reading.fingerprint, forward)
        }
        Action::Tool {
            policy,
            tool,
            arguments,
            path_and_query,
        } => {
            let terms = read_tool_call(&policy, &request_headers, &arguments)?;
            let fingerprint = call_fingerprint(
                &tool,
                &arguments,
                &bound_headers(&policy, &[], MCP_CONNECTION_HEADERS, &request_headers),
            );
            let mut forward = ForwardRequest {
                method: http::Method::POST,
                path_and_query: sendable(path_and_query)?,
                headers: forwarded_headers(&request_headers),
                body,
            };
            // The answer is recorded and its `id` rewritten for replays: it must not come
            // back compressed.
            forward
                .headers
                .retain(|(name, _)| name != http::header::ACCEPT_ENCODING);
            (policy, terms, fingerprint, forward)
        }
    };
    Ok(Admitted {
        policy,
        approver,
        approval,
        via,
        terms,
        fingerprint,
        headers: request_headers,
        forward,
    })
}

/// The approval, wherever it travels, read by the one reader (`protocol::ApprovalHeader`).
fn read_approval(
    request_headers: &HeaderMap,
    source: ApprovalSource<'_>,
) -> Result<Option<ApprovalHeader>, ApprovalError> {
    match source {
        ApprovalSource::Header if request_headers.contains_key("poppy-approval") => {
            ApprovalHeader::parse(
                request_headers
                    .get_all("poppy-approval")
                    .iter()
                    .map(|v| v.as_bytes()),
            )
            .map(Some)
        }
        ApprovalSource::Header => Ok(None),
        ApprovalSource::Json { value, place } => value
            .map(|value| ApprovalHeader::from_json(value, place))
            .transpose(),
    }
}

/// The target as the forwarder sends it, or a refusal before anything is minted: a target
/// the request line can't carry would be approved and then never sent.
fn sendable(path_and_query: String) -> Result<String, Refusal> {
    match http::uri::PathAndQuery::try_from(path_and_query.as_str()) {
        Ok(parsed) if parsed.as_str() == path_and_query => Ok(path_and_query),
        _ => Err(Refusal::path(
            "the target can't be sent as it is (characters a request line can't carry); nothing was performed",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, http::HeaderValue::from_static(value));
        }
        map
    }

    /// With `clients`, only a token can name a listed client: a request with none anywhere
    /// is the Company's and passes unread; one with a token, a form body that may hold one,
    /// or a head read two ways is routed (and read, or refused, on a policy's route).
    #[test]
    fn which_requests_without_a_session_are_agents() {
        let clients = Agents {
            clients: vec!["agent".into()],
            every_request: false,
        };
        assert!(!clients.may_be_agents(&headers(&[]), None));
        assert!(!clients.may_be_agents(&headers(&[("authorization", "Basic dTpw")]), None));
        assert!(!clients.may_be_agents(
            &headers(&[("content-type", "application/json")]),
            Some("a=1")
        ));
        for head in [
            headers(&[("authorization", "Bearer t")]),
            headers(&[("authorization", "Bearer\tt")]),
            headers(&[
                ("authorization", "Basic dTpw"),
                ("authorization", "Bearer t"),
            ]),
            headers(&[("content-type", "application/x-www-form-urlencoded")]),
        ] {
            assert!(clients.may_be_agents(&head, None), "{head:?}");
        }
        assert!(clients.may_be_agents(&headers(&[]), Some("access_token=t")));
        let token = credentials::in_head(&headers(&[("authorization", "Bearer t")]), None)
            .unwrap()
            .token()
            .cloned();
        assert_eq!(clients.unsigned(token.as_ref()), Unsigned::IfListed);
        assert_eq!(clients.unsigned(None), Unsigned::NotAnAgent);
        let two = headers(&[
            ("authorization", "Basic dTpw"),
            ("authorization", "Bearer t"),
        ]);
        assert!(matches!(Agents::check(&two), Err(Refused::Request(_))));
        assert!(clients.lists(Some("agent")));
        assert!(!clients.lists(Some("company-web")));
        assert!(clients.lists(None), "a client that can't be told is held");
        let every = Agents {
            clients: Vec::new(),
            every_request: true,
        };
        assert!(every.may_be_agents(&headers(&[]), None));
        assert_eq!(every.unsigned(None), Unsigned::Agent);
    }
}
