//! Policies: which requests need approval, and what their terms and summary are.
//! Pure code: no pingora, no store.

mod compute;
mod fingerprint;
mod form_name;
mod index;
mod jsonpath;
mod live;
mod lookup;
mod overlap;
mod placeholders;
mod route;
mod summary;
mod terms;
mod visible;

pub(crate) use compute::is_operand;
pub use compute::{Condition, EvalError, Expression, SyntaxError as ExpressionError};
pub(crate) use fingerprint::request_fingerprint;
pub(crate) use form_name::{FormKey, FormName, MAX_LIST, METHOD_OVERRIDE_NAMES};
pub(crate) use jsonpath::query as query_json_path;
pub(crate) use live::LivePolicies;
pub use lookup::LookupTemplateError;
pub(crate) use lookup::{AnswerError, extract_from_answer};
pub use lookup::{Lookup, LookupTemplate};
pub(crate) use overlap::conflicts;
pub(crate) use terms::compute_terms;

pub use route::{PathTemplate, percent_decode};

pub(crate) use route::Captures;

pub use route::TemplateError;
pub use summary::SummaryError;
pub use summary::{SummaryTemplate, escape_value};
pub(crate) use terms::{
    RequestParts, canonical_json, extract, extract_from_request, is_valid_json_path,
};
pub use terms::{TermSource, Terms};
pub(crate) use visible::{is_hidden, push_name, shown};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use index::RouteIndex;

/// One `[[operation]]` (or `[[tool]]`) of a policy file, validated.
#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    /// `None` for MCP tools.
    pub route: Option<Route>,
    /// The MCP tool name, for `[[tool]]`.
    pub tool: Option<String>,
    pub id_prefix: String,
    pub expires_in: Duration,
    pub same_action: Vec<String>,
    pub summary: SummaryTemplate,
    pub terms: Vec<(String, TermSource)>,
    /// The terms a request may leave out (`optional = true`): absent, they are absent from
    /// the terms (so a request that adds one later has other terms, another revision).
    pub optional: Vec<String>,
    /// Where the policy was written, for `check` and logs.
    pub source: String,
    /// `[operation.lookup]` and `[operation.lookups.NAME]`: the upstream records (and quotes)
    /// that `lookup` terms are read from, in the order they are fetched.
    pub lookups: Vec<Lookup>,
    /// JSONPaths of body fields (tool arguments, for `[[tool]]`) that are not terms: the
    /// policy says they do not affect the action. Any other field is refused.
    pub ignore: Vec<String>,
    /// Query parameters that are not terms and do not affect the action.
    pub ignore_query: Vec<String>,
    /// Header names (lower case) that do not affect the action: not bound to the approval.
    pub ignore_headers: Vec<String>,
    /// Policies of the same route this more specific one wins over where both match
    /// (`overrides`); any other two that can match one request are refused.
    pub overrides: Vec<String>,
    /// How the User may approve this action (`approval` in the policy file).
    pub approval: ApprovalVia,
    /// `needs_approval_when`: the action needs approval only when this holds for the
    /// request's terms; false, the request passes through as if no policy named it. Not
    /// bound into any revision: the terms and the summary are what is approved.
    pub condition: Option<Condition>,
}

/// How the User may approve an action (`approval` and `proof` in the policy file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApprovalVia {
    /// A request without the extension gets the approval page's link, and is performed once
    /// its account approved it there (`approval = "either"` or `"company_page"`).
    pub page: bool,
    /// A Poppy agent's approval counts only once the account it acts for approved the same
    /// revision on the page, signed in (`proof = "company_page"`, or `approval =
    /// "company_page"`).
    pub page_proof: bool,
}

impl Policy {
    /// Whether a request with these terms needs approval: always without a condition;
    /// `Err`: the condition has no value for them (a term missing or not a decimal, a
    /// division by zero), and the request is held as without one.
    pub(crate) fn needs_approval(&self, terms: &Terms) -> Result<bool, EvalError> {
        match &self.condition {
            None => Ok(true),
            Some(condition) => condition.evaluate(terms),
        }
    }
}

impl ApprovalVia {
    /// Only through a Personal Agent with the operations extension (the default).
    pub const POPPY: ApprovalVia = ApprovalVia {
        page: false,
        page_proof: false,
    };

    /// Whether a request without the extension gets the approval page's link.
    pub(crate) fn allows_page(self) -> bool {
        self.page
    }

    /// Whether the page is needed (`approval = "company_page"` or `proof`): a gateway
    /// without `[approval_page]` can't load such a policy.
    pub fn needs_page(self) -> bool {
        self.page || self.page_proof
    }
}

/// The method and path an HTTP policy applies to.
#[derive(Debug, Clone)]
pub struct Route {
    /// Upper case.
    pub method: String,
    pub path: PathTemplate,
}

impl Policy {
    /// Whether a required term is read from the body (JSON, or a form): a request without a
    /// body can't give it.
    pub(crate) fn needs_body(&self) -> bool {
        self.terms
            .iter()
            .any(|(name, source)| source.needs_body() && !self.is_optional(name))
    }

    /// Whether the request may leave term `name` out.
    pub fn is_optional(&self, name: &str) -> bool {
        self.optional.iter().any(|optional| optional == name)
    }

    /// Whether the route's body is a form: a term is a `form` field, or `ignore` lists form
    /// field names (JSONPaths start with `$`). `check` refuses a policy that mixes them.
    pub fn reads_form(&self) -> bool {
        self.tool.is_none()
            && (self
                .terms
                .iter()
                .any(|(_, source)| matches!(source, TermSource::Form(_)))
                || self.ignore.iter().any(|entry| !entry.starts_with('$')))
    }

    /// What a request to this policy may carry besides its path, for `check`: every other body
    /// field and query parameter is refused (`unexpected_field`, `unexpected_parameter`).
    pub fn accepted_parts(&self) -> String {
        let list = |items: Vec<String>| {
            if items.is_empty() {
                "none".to_owned()
            } else {
                items.join(", ")
            }
        };
        // An optional term's field is marked `?`: a request may leave it out.
        let of = |wanted: fn(&TermSource) -> Option<&str>| {
            self.terms
                .iter()
                .filter_map(|(name, s)| {
                    let field = wanted(s)?;
                    Some(match self.is_optional(name) {
                        true => format!("{field}?"),
                        false => field.to_owned(),
                    })
                })
                .collect::<Vec<_>>()
        };
        let names = |items: &[String]| list(items.to_vec());
        let (document, fields) = if self.tool.is_some() {
            (
                "arguments",
                of(|s| match s {
                    TermSource::Argument(p) => Some(p.as_str()),
                    _ => None,
                }),
            )
        } else if self.reads_form() {
            (
                "form",
                of(|s| match s {
                    TermSource::Form(name) => Some(name.as_str()),
                    _ => None,
                }),
            )
        } else {
            (
                "body",
                of(|s| match s {
                    TermSource::Body(p) => Some(p.as_str()),
                    _ => None,
                }),
            )
        };
        let ignored = names(&self.ignore);
        if self.tool.is_some() {
            return format!(
                "accepts {document}: terms {}; ignored {ignored}",
                list(fields)
            );
        }
        let query = of(|s| match s {
            TermSource::Query(q) => Some(q.as_str()),
            _ => None,
        });
        format!(
            "accepts {document}: terms {}; ignored {ignored} | query: terms {}; ignored {}",
            list(fields),
            list(query),
            names(&self.ignore_query)
        )
    }

    /// The canonical bytes of the `same_action` values, which identify the action.
    pub(crate) fn action_material(&self, terms: &Terms) -> Vec<Vec<u8>> {
        self.same_action
            .iter()
            .map(|name| {
                terms
                    .get(name)
                    .map(canonical_json)
                    .unwrap_or_default()
                    .into_bytes()
            })
            .collect()
    }
}

/// All loaded policies, in file order. A request is held by the first that matches in
/// precedence order: file order, except that a policy comes before those it `overrides`.
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    policies: Vec<Arc<Policy>>,
    /// The policies in precedence order (a policy that `overrides` another comes first).
    precedence: Vec<Arc<Policy>>,
    /// Their routes as a trie, by precedence: a request's policy is found without trying
    /// each (index.rs).
    routes: RouteIndex,
    /// Their tools by name (the first in file order).
    tools: HashMap<String, usize>,
    /// The format suffixes routes end in (`.json` of `/Calls/{Sid}.json`), each once.
    format_suffixes: Vec<String>,
}

impl PolicySet {
    pub fn new(policies: Vec<Policy>) -> PolicySet {
        let mut order = overlap::precedence(&policies);
        // A cycle of `overrides` (which config refuses) is tried last, in file order.
        let mut ordered = vec![false; policies.len()];
        for i in &order {
            ordered[*i] = true;
        }
        order.extend((0..policies.len()).filter(|i| !ordered[*i]));
        let policies: Vec<Arc<Policy>> = policies.into_iter().map(Arc::new).collect();
        let precedence: Vec<Arc<Policy>> =
            order.iter().map(|i| Arc::clone(&policies[*i])).collect();
        let routes = RouteIndex::new(precedence.iter().enumerate().filter_map(|(rank, policy)| {
            let route = policy.route.as_ref()?;
            Some((rank, route.method.as_str(), &route.path))
        }));
        let mut tools = HashMap::new();
        for (i, policy) in policies.iter().enumerate() {
            if let Some(tool) = &policy.tool {
                tools.entry(tool.clone()).or_insert(i);
            }
        }
        let mut format_suffixes: Vec<String> = Vec::new();
        for policy in &policies {
            let suffix = policy
                .route
                .as_ref()
                .and_then(|route| route.path.format_suffix());
            if let Some(suffix) = suffix
                && !format_suffixes.iter().any(|s| s == suffix)
            {
                format_suffixes.push(suffix.to_owned());
            }
        }
        PolicySet {
            precedence,
            routes,
            tools,
            policies,
            format_suffixes,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Policy>> {
        self.policies.iter()
    }

    /// The HTTP policy for this method and path (without query), with its captures.
    pub fn find_route(&self, method: &str, path: &str) -> Option<(Arc<Policy>, Captures)> {
        self.matched(self.routes.find(method, path)?, path)
    }

    /// The HTTP policy of `method` whose route ends in a format suffix (`/Calls/{Sid}.json`)
    /// and is this path with that suffix added (`/Calls/CA1`): frameworks that read format
    /// suffixes run its handler for the path without one. Costs a lookup per distinct suffix.
    pub(crate) fn find_route_without_suffix(
        &self,
        method: &str,
        path: &str,
    ) -> Option<Arc<Policy>> {
        let path = path.trim_end_matches('/');
        self.format_suffixes.iter().find_map(|suffix| {
            let (policy, _) = self.find_route(method, &format!("{path}{suffix}"))?;
            let declared = policy.route.as_ref()?.path.format_suffix();
            (declared == Some(suffix.as_str())).then_some(policy)
        })
    }

    /// The HTTP policy whose path this is, whatever its method (the first by precedence).
    pub(crate) fn find_route_any_method(&self, path: &str) -> Option<(Arc<Policy>, Captures)> {
        self.matched(self.routes.find_any_method(path)?, path)
    }

    /// The policy of precedence `rank`, with its captures.
    fn matched(&self, rank: usize, path: &str) -> Option<(Arc<Policy>, Captures)> {
        let policy = self.precedence.get(rank)?;
        let captures = policy.route.as_ref()?.path.matches(path)?;
        Some((Arc::clone(policy), captures))
    }

    /// The policy of an MCP tool.
    pub fn find_tool(&self, tool: &str) -> Option<Arc<Policy>> {
        self.policies.get(*self.tools.get(tool)?).cloned()
    }

    pub fn has_tools(&self) -> bool {
        self.policies.iter().any(|p| p.tool.is_some())
    }
}
