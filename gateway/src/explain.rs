//! `poppy-gateway explain`: what the gateway would do with one Personal Agent request, without
//! running it. Which policy matches, the terms it extracts, the summary, and the operation the
//! agent would receive; or why nothing matches, or which term is missing.
//!
//! Pure: config, policy and protocol code only. It never calls the upstream, so a policy's
//! lookup is shown as the URL it would fetch, filled from a given answer or with placeholders.
//! Operation IDs and revisions are MACs, computed here with a throwaway key: their shape is
//! real, their values are not the gateway's.

pub mod cli;
mod render;

pub use render::render;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::config::{Config, SessionClaims};
use crate::identity::{Approver, ApproverError};
use crate::ingress::admit::{self, Action, ApprovalSource, Refused};
use crate::ingress::{Refusal, RouteMatch, Target};
use crate::mcp::{approval_required_result, tool_error_result};
use crate::operation::{self, Minted, OperationRequest, Prepared};
use crate::policy::{Captures, Policy, TermSource, Terms, compute_terms, extract_from_answer};
use crate::protocol::{ErrorBody, Keys, Operation, SigningKey, json};
use crate::store::ActionState;

/// The request to explain, as a Personal Agent would send it.
#[derive(Debug, Clone, Default)]
pub struct ExplainRequest {
    pub method: String,
    /// Without the query.
    pub path: String,
    pub query: Option<String>,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
    /// Without an `Authorization` header: pretend a bearer token for a made-up account.
    pub signed_in: bool,
    /// The upstream's answers the user gave, by lookup name (`""`: `[operation.lookup]`).
    pub lookup_answers: std::collections::BTreeMap<String, Vec<u8>>,
    /// An MCP `tools/call` to explain instead of an HTTP request: the tool and its arguments.
    pub tool: Option<(String, Vec<u8>)>,
}

/// One extracted term and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ExplainedTerm {
    pub name: String,
    /// `None`: an optional term the request leaves out.
    pub value: Option<Value>,
    pub source: String,
}

/// A policy's `needs_approval_when`, and what it comes to for the request.
#[derive(Debug, Clone, PartialEq)]
pub struct ExplainedCondition {
    pub text: String,
    /// `Ok(false)`: the request passes through unheld; `Ok(true)`: held; `Err(why)`: it
    /// has no value, and the request is held.
    pub holds: Result<bool, String>,
}

/// What the gateway would do.
#[derive(Debug, Clone, PartialEq)]
pub enum Explanation {
    /// No policy names this method and path: the request passes through untouched.
    NoMatch {
        /// `METHOD /template  (name)` of every HTTP policy.
        routes: Vec<String>,
    },
    /// A call of a tool no `[[tool]]` names (or no `[mcp]` endpoint): it passes through to the
    /// MCP server untouched. Also the answer for the endpoint itself without `--tool`.
    McpPassThrough {
        /// The endpoint (`[mcp] path`), if configured.
        endpoint: Option<String>,
        /// The tool asked about, if any.
        tool: Option<String>,
        /// The tools whose calls are held.
        held: Vec<String>,
    },
    /// Refused before any policy is matched (e.g. an ambiguous path).
    Refused { status: u16, body: Value },
    /// A policy matches, but the gateway would refuse the request (a missing term, a body
    /// that isn't JSON, a lookup answer without a term) and forward nothing.
    Rejected {
        policy: String,
        source: String,
        status: u16,
        body: Value,
    },
    /// A policy matches: the agent would get `403 approval_required` with this operation.
    Operation {
        policy: String,
        source: String,
        route: String,
        captures: Captures,
        terms: Vec<ExplainedTerm>,
        /// `GET path?query` of the lookup, if the policy has one.
        lookup: Option<String>,
        /// The lookup terms are placeholders: no answer was given.
        lookup_placeholders: bool,
        summary: String,
        /// The whole `403` body, or for a tool call, the tool result.
        answer: Value,
        /// A held MCP tool call (answered as a tool result), not an HTTP request.
        tool_call: bool,
        /// `needs_approval_when`, if the policy has one.
        condition: Option<ExplainedCondition>,
    },
}

impl Explanation {
    /// Whether a Personal Agent would receive an operation.
    pub(crate) fn is_operation(&self) -> bool {
        matches!(self, Explanation::Operation { .. })
    }
}

/// Explain `request` against the loaded config. `now` is unix seconds (for `expires_at`).
/// The request goes through the same ingress as in the gateway: the same refusals, the same
/// terms, the same fingerprint.
pub fn explain(config: &Config, request: &ExplainRequest, now: i64) -> Explanation {
    let refused = |refusal: Refusal| Explanation::Refused {
        status: refusal.status,
        body: body(&refusal.to_error_body()),
    };
    if let Some((tool, arguments)) = &request.tool {
        return explain_tool(config, request, tool, arguments, now);
    }
    let raw_target = match &request.query {
        Some(query) => format!("{}?{query}", request.path),
        None => request.path.clone(),
    };
    let method = request.method.to_ascii_uppercase();
    let route = admit::route(
        &config.policies,
        config.first_mcp().map(|mcp| &mcp.template),
        &method,
        raw_target.as_bytes(),
        &request.headers,
        admit::Sender::PersonalAgent,
    );
    let (target, policy, captures) = match route {
        Err(refusal) => return refused(refusal),
        Ok((target, RouteMatch::Policy(policy, captures))) => (target, policy, captures),
        Ok((_, RouteMatch::Mcp)) => return mcp_pass_through(config, None),
        Ok((_, RouteMatch::None)) => {
            return Explanation::NoMatch {
                routes: config
                    .policies
                    .iter()
                    .filter_map(|p| {
                        let route = p.route.as_ref()?;
                        Some(format!("{:<7} {}  ({})", route.method, route.path, p.name))
                    })
                    .collect(),
            };
        }
    };
    match explain_policy(config, &policy, captures, target, request, now) {
        Ok(explanation) => explanation,
        Err((status, error)) => Explanation::Rejected {
            policy: policy.name.clone(),
            source: policy.source.clone(),
            status,
            body: body(&error),
        },
    }
}

fn explain_policy(
    config: &Config,
    policy: &Arc<Policy>,
    captures: Captures,
    target: Target,
    request: &ExplainRequest,
    now: i64,
) -> Result<Explanation, (u16, ErrorBody)> {
    let approver = approver(request, &config.session.unverified())
        .map_err(|e| (e.status(), ErrorBody::new(e.code(), e.to_string())))?;
    let method =
        http::Method::from_bytes(request.method.to_ascii_uppercase().as_bytes()).map_err(|_| {
            (
                400,
                ErrorBody::new("invalid_request", "the method is not an HTTP method"),
            )
        })?;
    // The front door's reading, as the gateway's (ingress/admit.rs).
    let admitted = admit::admit(
        Action::Http {
            policy: Arc::clone(policy),
            captures: captures.clone(),
            method,
            target,
        },
        request.headers.clone(),
        Bytes::from(request.body.clone()),
        ApprovalSource::Header,
        approver,
        admit::Via::Agent,
    )
    .map_err(|refused| (refused.status(), refused.error_body()))?;
    let approver = admitted.approver;
    let fingerprint = admitted.fingerprint;
    let mut terms = admitted.terms;

    let mut lookup = None;
    let mut lookup_placeholders = false;
    let mut asked = Vec::new();
    for each in &policy.lookups {
        let url = each.url.fill(&terms).map_err(|e| {
            (
                400,
                ErrorBody::new("invalid_term", e.to_string()).with("term", e.term()),
            )
        })?;
        let method = if each.quote { "POST" } else { "GET" };
        match request.lookup_answers.get(&each.name) {
            Some(answer) => extract_from_answer(&each.name, &policy.terms, answer, &mut terms)
                .map_err(|e| {
                    (
                        502,
                        ErrorBody::new(
                            "lookup_failed",
                            format!("{method} {url} on the upstream: {e}"),
                        ),
                    )
                })?,
            None => {
                lookup_placeholders = true;
                for (name, source) in &policy.terms {
                    if let TermSource::Lookup { lookup, path } = source
                        && *lookup == each.name
                    {
                        terms.insert(name.clone(), Value::from(format!("⟨lookup {path}⟩")));
                    }
                }
            }
        }
        let body = if each.quote {
            " (with the request's body)"
        } else {
            ""
        };
        asked.push(format!("{method} {url}{body}"));
    }
    if !asked.is_empty() {
        lookup = Some(asked.join(", then "));
    }
    if lookup_placeholders {
        for (name, source) in &policy.terms {
            if let TermSource::Compute(expression) = source {
                terms.insert(name.clone(), Value::from(format!("⟨compute {expression}⟩")));
            }
        }
    } else {
        compute_terms(&policy.terms, &mut terms).map_err(|failure| {
            let status = if failure.from_lookup { 502 } else { 400 };
            let code = if failure.from_lookup {
                "lookup_failed"
            } else {
                "invalid_term"
            };
            (
                status,
                ErrorBody::new(code, failure.to_string()).with("term", failure.named_term()),
            )
        })?;
    }

    let summary = policy.summary.render(&terms);
    let operation = mint(policy, &approver, &terms, &fingerprint, now);
    let answer = body(&ErrorBody::approval_required(
        &operation,
        "this action needs the user's approval of these terms; retry the same request with a Poppy-Approval header",
    ));
    Ok(Explanation::Operation {
        policy: policy.name.clone(),
        source: policy.source.clone(),
        route: policy
            .route
            .as_ref()
            .map(|r| format!("{} {}", r.method, r.path))
            .unwrap_or_default(),
        captures,
        terms: explained_terms(policy, &terms),
        lookup,
        lookup_placeholders,
        summary,
        answer,
        tool_call: false,
        condition: condition(policy, &terms, lookup_placeholders),
    })
}

/// The policy's condition over `terms`, as the flow evaluates it (`Policy::needs_approval`).
/// `placeholders`: the lookup terms are not known.
fn condition(policy: &Policy, terms: &Terms, placeholders: bool) -> Option<ExplainedCondition> {
    let text = policy.condition.as_ref()?.to_string();
    let holds = policy.needs_approval(terms).map_err(|e| {
        if placeholders {
            format!("{e}: the lookup's answer decides it (give --lookup-answer)")
        } else {
            e.to_string()
        }
    });
    Some(ExplainedCondition { text, holds })
}

/// Each term the policy extracted, with its value and where it came from, in policy order;
/// an optional term the request leaves out, as absent.
fn explained_terms(policy: &Policy, terms: &Terms) -> Vec<ExplainedTerm> {
    policy
        .terms
        .iter()
        .filter_map(|(name, source)| {
            let value = terms.get(name).cloned();
            (value.is_some() || policy.is_optional(name)).then(|| ExplainedTerm {
                name: name.clone(),
                value,
                source: source.describe(),
            })
        })
        .collect()
}

fn mcp_pass_through(config: &Config, tool: Option<&str>) -> Explanation {
    Explanation::McpPassThrough {
        endpoint: config.first_mcp().map(|mcp| mcp.path.clone()),
        tool: tool.map(str::to_owned),
        held: config
            .policies
            .iter()
            .filter_map(|p| Some(format!("{}  ({})", p.tool.as_ref()?, p.name)))
            .collect(),
    }
}

/// A `tools/call` of `tool` with `arguments` (JSON), as the MCP endpoint would take it.
fn explain_tool(
    config: &Config,
    request: &ExplainRequest,
    tool: &str,
    arguments: &[u8],
    now: i64,
) -> Explanation {
    let policy = match (&config.first_mcp(), config.policies.find_tool(tool)) {
        (Some(_), Some(policy)) => policy,
        _ => return mcp_pass_through(config, Some(tool)),
    };
    let rejected = |status: u16, answer: Value| Explanation::Rejected {
        policy: policy.name.clone(),
        source: policy.source.clone(),
        status,
        body: answer,
    };
    // Read as the MCP endpoint reads a call: a member twice is refused, not read last-wins.
    let arguments: Value = match json::from_slice(arguments) {
        Ok(value) => value,
        Err(e @ json::ReadError::Duplicate(_)) => {
            return rejected(400, body(&ErrorBody::new("invalid_params", e.to_string())));
        }
        Err(e) => {
            let detail = format!("the arguments are not JSON: {e}");
            return rejected(400, body(&ErrorBody::new("invalid_params", detail)));
        }
    };
    let approver = match approver(request, &config.session.unverified()) {
        Ok(approver) => approver,
        Err(e) => {
            return rejected(e.status(), body(&ErrorBody::new(e.code(), e.to_string())));
        }
    };
    // The front door's reading of a held call, as the MCP endpoint's (ingress/admit.rs).
    let admitted = admit::admit(
        Action::Tool {
            policy: Arc::clone(&policy),
            tool: tool.to_owned(),
            arguments,
            path_and_query: config
                .first_mcp()
                .map(|mcp| mcp.path.clone())
                .unwrap_or_default(),
        },
        request.headers.clone(),
        Bytes::new(),
        ApprovalSource::Json {
            value: None,
            place: "the approval",
        },
        approver,
        admit::Via::Agent,
    );
    let (approver, mut terms, fingerprint) = match admitted {
        Ok(admitted) => (admitted.approver, admitted.terms, admitted.fingerprint),
        Err(Refused::Request(refusal)) => {
            let text = format!("Not done: {}. Nothing was performed.", refusal.detail);
            return rejected(200, tool_error_result(&text));
        }
        Err(refused) => return rejected(refused.status(), body(&refused.error_body())),
    };
    if let Err(failure) = compute_terms(&policy.terms, &mut terms) {
        let text = format!("Not done: {failure}. Nothing was performed.");
        return rejected(200, tool_error_result(&text));
    }
    let summary = policy.summary.render(&terms);
    let operation = mint(&policy, &approver, &terms, &fingerprint, now);
    Explanation::Operation {
        policy: policy.name.clone(),
        source: policy.source.clone(),
        route: format!("TOOL {tool}"),
        captures: Vec::new(),
        terms: explained_terms(&policy, &terms),
        lookup: None,
        lookup_placeholders: false,
        summary,
        answer: approval_required_result(&operation, false, None),
        tool_call: true,
        condition: condition(&policy, &terms, false),
    }
}

/// Who would approve: the request's own `Poppy-Session` (and `Authorization`), or a made-up
/// Session, signed in to a made-up account with `signed_in`.
fn approver(request: &ExplainRequest, claims: &SessionClaims) -> Result<Approver, ApproverError> {
    let session = match request.headers.get("poppy-session") {
        Some(value) => value.as_bytes().to_vec(),
        None => unsigned_jwt(&json!({
            claims.session_claim.as_str(): "ses_explain",
            claims.agent_claim.as_str(): "explain-agent",
            claims.user_claim.as_str(): "explain-user",
        }))
        .into_bytes(),
    };
    let authorization = match request.headers.get(http::header::AUTHORIZATION) {
        Some(value) => Some(value.as_bytes().to_vec()),
        None if request.signed_in => Some(
            format!(
                "Bearer {}",
                unsigned_jwt(&json!({ claims.account_claim.as_str(): "explain-account" }))
            )
            .into_bytes(),
        ),
        None => None,
    };
    Approver::from_headers(&session, authorization.as_deref(), claims)
}

fn unsigned_jwt(payload: &Value) -> String {
    use base64::Engine as _;
    let encode = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.x", encode(&json!({"alg": "none"})), encode(payload))
}

/// The operation the gateway would mint (the operation core's [`operation::mint`]), at
/// generation 0, with a throwaway key.
fn mint(
    policy: &Policy,
    approver: &Approver,
    terms: &Terms,
    fingerprint: &[u8],
    now: i64,
) -> Operation {
    let keys = Keys::new(vec![SigningKey::random()]);
    let prepared = Prepared::new(OperationRequest {
        policy: Arc::new(policy.clone()),
        approver: approver.clone(),
        approval: None,
        terms: terms.clone(),
        fingerprint: fingerprint.to_vec(),
    });
    let minted = keys.map(|keys| {
        operation::mint(
            &keys,
            &prepared,
            &ActionState::default(),
            now.saturating_mul(1000),
        )
    });
    match minted {
        Some(Minted::Hold(operation)) => operation,
        // A new action has nothing in flight, and one key always makes a key set.
        _ => Operation {
            operation_id: String::new(),
            revision: String::new(),
            summary: prepared.summary,
            terms: None,
            expires_at: String::new(),
        },
    }
}

fn body(error: &ErrorBody) -> Value {
    serde_json::from_slice(&error.to_bytes()).unwrap_or(Value::Null)
}
