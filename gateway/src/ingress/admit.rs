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

mod agents;
mod refused;

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use super::forward::{ForwardRequest, forwarded_headers};
use super::reading::{HttpRequest, bound_headers, read_policy_request, read_tool_call};
use super::route::{RouteMatch, match_route};
use super::{Refusal, Target, check_target, headers};
use crate::identity::Approver;
use crate::mcp::{MCP_CONNECTION_HEADERS, call_fingerprint};
use crate::policy::{Captures, PathTemplate, Policy, PolicySet, Terms};
use crate::protocol::{ApprovalError, ApprovalHeader, Declared, declared_operations};

pub(crate) use self::agents::{Agents, Unsigned};
pub(crate) use self::refused::Refused;

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
