//! The keys `[[operation]]` and `[[tool]]` share (name, id_prefix, expires_in, same_action,
//! summary, terms, ignore), validated once for both.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::duration::parse_duration;
use super::error::ConfigError;
use super::expressions::{compile_condition, compute_problems};
use super::file::TermFile;
use crate::policy::{
    ApprovalVia, Condition, Expression, FormName, PathTemplate, Policy, SummaryTemplate,
    TermSource, is_valid_json_path,
};

/// The longest approval window a policy may ask for: records are kept that long.
const MAX_EXPIRES_IN: Duration = Duration::from_secs(30 * 86_400);

/// Which kind of table a policy is written in: they share most keys, not every term source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Table {
    Operation,
    Tool,
}

impl Table {
    fn word(self) -> &'static str {
        match self {
            Table::Operation => "operation",
            Table::Tool => "tool",
        }
    }
}

/// `approval`, on either table: how the User approves (`Err`: the value's span and what is
/// wrong with it).
pub(super) fn approval_via(
    approval: Option<&Spanned<String>>,
    proof: Option<&Spanned<String>>,
    errors: &mut Vec<(std::ops::Range<usize>, String)>,
) -> ApprovalVia {
    let mut via = match approval.map(|a| (a.get_ref().as_str(), a.span())) {
        None | Some(("poppy", _)) => ApprovalVia::POPPY,
        Some(("either", _)) => ApprovalVia {
            page: true,
            page_proof: false,
        },
        // On the page only: a Poppy agent still gets the operation, but its approval alone
        // never suffices (as with `proof = "company_page"`).
        Some(("company_page", _)) => ApprovalVia {
            page: true,
            page_proof: true,
        },
        Some((other, span)) => {
            errors.push((
                span,
                format!(
                    "approval: `{other}` is not one of \"poppy\" (the default), \"either\" and \"company_page\""
                ),
            ));
            ApprovalVia::POPPY
        }
    };
    match proof.map(|p| (p.get_ref().as_str(), p.span())) {
        None => {}
        Some(("company_page", _)) => via.page_proof = true,
        Some((other, span)) => errors.push((
            span,
            format!(
                "proof: `{other}` is not \"company_page\" (the User approves each revision on the Company's approval page too)"
            ),
        )),
    }
    via
}

/// The keys `[[operation]]` and `[[tool]]` share.
pub(super) struct ActionKeys<'a> {
    pub table: Table,
    pub name: &'a Spanned<String>,
    pub id_prefix: &'a Spanned<String>,
    pub expires_in: &'a Spanned<String>,
    pub same_action: &'a Spanned<Vec<String>>,
    pub summary: &'a Spanned<String>,
    pub terms: &'a BTreeMap<Spanned<String>, Spanned<TermFile>>,
    /// `ignore`: JSONPaths of fields that are not terms (body, or tool arguments).
    pub ignore: Option<&'a Spanned<Vec<String>>>,
    /// `needs_approval_when`: a condition over the terms (`policy::Condition`).
    pub condition: Option<&'a Spanned<String>>,
}

/// The shared keys, validated.
pub(super) struct Action {
    pub name: String,
    pub id_prefix: String,
    pub expires_in: Duration,
    pub same_action: Vec<String>,
    pub summary: SummaryTemplate,
    pub terms: Vec<(String, TermSource)>,
    /// The terms declared `optional = true`.
    pub optional: Vec<String>,
    pub ignore: Vec<String>,
    /// `file:line:column` of the table's name.
    pub source: String,
    pub condition: Option<Condition>,
}

impl Action {
    /// The policy of these keys, approved `approval`, with nothing of a table's own (no
    /// route or tool, lookups, ignored query or headers, overrides): its compiler adds those.
    pub(super) fn into_policy(self, approval: ApprovalVia) -> Policy {
        Policy {
            name: self.name,
            route: None,
            tool: None,
            id_prefix: self.id_prefix,
            expires_in: self.expires_in,
            same_action: self.same_action,
            summary: self.summary,
            terms: self.terms,
            optional: self.optional,
            source: self.source,
            lookups: Vec::new(),
            ignore: self.ignore,
            ignore_query: Vec::new(),
            ignore_headers: Vec::new(),
            overrides: Vec::new(),
            approval,
            condition: self.condition,
        }
    }
}

/// Lint the shared keys; `None` (with the problems in `errors`) if any is wrong.
pub(super) fn compile_action(
    path: &Path,
    source: &str,
    op: &ActionKeys<'_>,
    template: Option<&PathTemplate>,
    errors: &mut Vec<ConfigError>,
) -> Option<Action> {
    let start = errors.len();
    let name = op.name.get_ref();
    let table = op.table.word();
    let at = |span: std::ops::Range<usize>, message: String| {
        ConfigError::at(
            path,
            source,
            Some(span),
            format!("{table} `{name}`: {message}"),
        )
    };

    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        errors.push(at(
            op.name.span(),
            "name: use A-Z a-z 0-9 _ - (it labels metrics)".into(),
        ));
    }
    let prefix = op.id_prefix.get_ref();
    if prefix.is_empty() || prefix.len() > 16 || !prefix.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        errors.push(at(
            op.id_prefix.span(),
            "id_prefix: 1 to 16 characters of A-Z a-z 0-9".into(),
        ));
    }
    let expires_in = match parse_duration(op.expires_in.get_ref()) {
        Ok(d) if d >= Duration::from_secs(1) && d <= MAX_EXPIRES_IN => d,
        Ok(_) => {
            errors.push(at(
                op.expires_in.span(),
                "expires_in: must be from 1s to 30d".into(),
            ));
            Duration::ZERO
        }
        Err(e) => {
            errors.push(at(op.expires_in.span(), format!("expires_in: {e}")));
            Duration::ZERO
        }
    };

    let mut terms = Vec::new();
    let mut optional = Vec::new();
    for (term_name, term) in op.terms {
        let tn = term_name.get_ref();
        if tn.is_empty() || !tn.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            errors.push(at(
                term_name.span(),
                format!("terms.{tn}: a term name uses A-Z a-z 0-9 _"),
            ));
        }
        match term_source(term.get_ref()) {
            Ok(source) => {
                if let Some(problem) = source_problem(op.table, &source, template) {
                    errors.push(at(term.span(), format!("terms.{tn}: {problem}")));
                }
                if let Some(flag) = &term.get_ref().optional
                    && *flag.get_ref()
                {
                    match optional_problem(&source) {
                        Some(problem) => {
                            errors.push(at(flag.span(), format!("terms.{tn}: optional: {problem}")))
                        }
                        None => optional.push(tn.clone()),
                    }
                }
                terms.push((tn.clone(), source));
            }
            Err(e) => errors.push(at(term.span(), format!("terms.{tn}: {e}"))),
        }
    }
    if terms.is_empty() {
        errors.push(at(
            op.name.span(),
            format!("no [{table}.terms]: the terms are what the User approves"),
        ));
    }
    for (term_name, problem) in compute_problems(&terms, &optional) {
        let span = op
            .terms
            .iter()
            .find(|(n, _)| n.get_ref() == &term_name)
            .map(|(_, t)| t.span())
            .unwrap_or_else(|| op.name.span());
        errors.push(at(span, format!("terms.{term_name}: {problem}")));
    }

    let condition = op.condition.and_then(|text| {
        compile_condition(text, source, &terms)
            .map_err(|(span, problem)| errors.push(at(span, problem)))
            .ok()
    });

    let summary = SummaryTemplate::parse(op.summary.get_ref())
        .map_err(|e| errors.push(at(op.summary.span(), format!("summary: {e}"))))
        .ok();
    if let Some(summary) = &summary {
        // The spec: everything that affects the action MUST be in the summary. `{...}` shows
        // every term the rest of the summary does not.
        for (term_name, _) in &terms {
            if !summary.has_rest() && !summary.placeholders().any(|p| p == term_name) {
                errors.push(at(op.summary.span(), format!("summary leaves out term `{term_name}`: everything that affects the action must be in the summary (add {{{term_name}}}, or {{...}} for every term not written out)")));
            }
        }
        // An optional term is written where its section says it is there, never as a blank.
        for (placeholder, section) in summary.placeholders_in_sections() {
            if optional.iter().any(|o| o == placeholder) && section != Some(placeholder) {
                errors.push(at(op.summary.span(), format!("summary writes optional term `{{{placeholder}}}` outside `{{?{placeholder}}}…{{/{placeholder}}}`: a request may leave it out, and the summary would then show a blank")));
            }
        }
        for section in summary.sections() {
            if !terms.iter().any(|(n, _)| n == section) {
                errors.push(at(
                    op.summary.span(),
                    format!("summary section `{{?{section}}}` names no term"),
                ));
            }
        }
        for placeholder in summary.placeholders() {
            if !terms.iter().any(|(n, _)| n == placeholder) {
                errors.push(at(
                    op.summary.span(),
                    format!("summary placeholder `{{{placeholder}}}` names no term"),
                ));
            }
        }
    }
    if op.same_action.get_ref().is_empty() {
        errors.push(at(
            op.same_action.span(),
            "same_action: name the terms that identify the action (e.g. the order and item)".into(),
        ));
    }
    for identifying in op.same_action.get_ref() {
        if !terms.iter().any(|(n, _)| n == identifying) {
            errors.push(at(
                op.same_action.span(),
                format!("same_action names `{identifying}`, which is not a term"),
            ));
        }
    }

    if errors.len() > start {
        return None;
    }
    let (line, column) = {
        let e = ConfigError::at(path, source, Some(op.name.span()), "");
        (e.line, e.column)
    };
    let ignore = op
        .ignore
        .map(|paths| paths.get_ref().clone())
        .unwrap_or_default();
    let ignore_span = op.ignore.map(Spanned::span).unwrap_or_default();
    let body_kind = body_kind(op.table, &terms, &ignore).map_err(|problem| {
        errors.push(at(ignore_span.clone(), problem));
    });
    for ignored in &ignore {
        let problem = match body_kind {
            Ok(BodyKind::Form) => FormName::parse(ignored)
                .err()
                .map(|e| format!("ignore: the form field name `{ignored}` {e}")),
            _ => is_valid_json_path(ignored)
                .err()
                .map(|e| format!("ignore: `{ignored}` is not a JSONPath: {e}")),
        };
        if let Some(problem) = problem {
            errors.push(at(ignore_span.clone(), problem));
        }
    }
    if errors.len() > start {
        return None;
    }
    Some(Action {
        ignore,
        name: name.clone(),
        id_prefix: prefix.clone(),
        expires_in,
        same_action: op.same_action.get_ref().clone(),
        summary: summary?,
        terms,
        optional,
        source: format!("{}:{line}:{column}", path.display()),
        condition,
    })
}

/// Why a term of this source can't be optional, if it can't: only what a request sends may
/// be left out.
fn optional_problem(source: &TermSource) -> Option<&'static str> {
    match source {
        TermSource::Path(_) => Some("a path capture is always in the request"),
        TermSource::Value(_) | TermSource::Lookup { .. } | TermSource::Compute(_) => Some(
            "only a term the request sends (body, form, query, header, argument) can be left out",
        ),
        TermSource::Body(_)
        | TermSource::Form(_)
        | TermSource::Query(_)
        | TermSource::Header(_)
        | TermSource::Argument(_) => None,
    }
}

/// What an operation's body is: JSON, or a form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    Json,
    Form,
}

/// The body an action reads: a form when a term is a `form` field or `ignore` names form
/// fields (not JSONPaths, which start with `$`); JSON otherwise. Never both: the upstream
/// reads one of them, and a field of the other would be approved and never acted on.
fn body_kind(
    table: Table,
    terms: &[(String, TermSource)],
    ignore: &[String],
) -> Result<BodyKind, String> {
    let json_terms = terms
        .iter()
        .any(|(_, source)| matches!(source, TermSource::Body(_)));
    let form_terms = terms
        .iter()
        .any(|(_, source)| matches!(source, TermSource::Form(_)));
    let form_ignored = ignore.iter().any(|entry| !entry.starts_with('$'));
    let json_ignored = ignore.iter().any(|entry| entry.starts_with('$'));
    if table == Table::Tool || !(form_terms || form_ignored) {
        return Ok(BodyKind::Json);
    }
    if json_terms || json_ignored {
        return Err(
            "a body is JSON or a form, not both: `body` terms and JSONPaths in `ignore` are for a JSON body; `form` terms and field names in `ignore` for a form"
                .into(),
        );
    }
    Ok(BodyKind::Form)
}

/// What is wrong with a term's source, if anything.
fn source_problem(
    table: Table,
    source: &TermSource,
    template: Option<&PathTemplate>,
) -> Option<String> {
    match (table, source) {
        (
            Table::Tool,
            TermSource::Path(_) | TermSource::Body(_) | TermSource::Form(_) | TermSource::Query(_),
        ) => Some(
            "a tool's terms come from its call: use { argument = \"$.…\" }, header or value".into(),
        ),
        (Table::Operation, TermSource::Argument(_)) => Some(
            "`argument` terms are for [[tool]] tables; use path, body, form, query, header or value"
                .into(),
        ),
        (_, TermSource::Path(capture)) => template
            .filter(|t| !t.capture_names().any(|c| c == capture))
            .map(|t| format!("path `{{{capture}}}` is not a capture of `{t}`")),
        (_, TermSource::Body(path)) => is_valid_json_path(path)
            .err()
            .map(|e| format!("body `{path}` is not a JSONPath: {e}")),
        (_, TermSource::Form(name)) => FormName::parse(name)
            .err()
            .map(|e| format!("form `{name}` {e}")),
        (_, TermSource::Argument(path)) => is_valid_json_path(path)
            .err()
            .map(|e| format!("argument `{path}` is not a JSONPath: {e}")),
        (_, TermSource::Header(name)) => http::HeaderName::from_bytes(name.as_bytes())
            .is_err()
            .then(|| format!("`{name}` is not a header name")),
        (Table::Tool, TermSource::Lookup { .. }) => {
            Some("`lookup` terms are for [[operation]] tables (tools have no lookups yet)".into())
        }
        (_, TermSource::Lookup { path, .. }) => is_valid_json_path(path)
            .err()
            .map(|e| format!("lookup `{path}` is not a JSONPath: {e}")),
        (_, TermSource::Query(_) | TermSource::Value(_) | TermSource::Compute(_)) => None,
    }
}

fn term_source(term: &TermFile) -> Result<TermSource, String> {
    let mut sources = Vec::new();
    if let Some(p) = &term.path {
        sources.push(TermSource::Path(p.clone()));
    }
    if let Some(p) = &term.body {
        sources.push(TermSource::Body(p.clone()));
    }
    if let Some(name) = &term.form {
        sources.push(TermSource::Form(name.clone()));
    }
    if let Some(q) = &term.query {
        sources.push(TermSource::Query(q.clone()));
    }
    if let Some(h) = &term.header {
        sources.push(TermSource::Header(h.to_ascii_lowercase()));
    }
    if let Some(v) = &term.value {
        let json = serde_json::to_value(v).map_err(|e| format!("value cannot be JSON: {e}"))?;
        sources.push(TermSource::Value(json));
    }
    match (&term.lookup, &term.at) {
        (Some(path), None) if path.starts_with('$') => sources.push(TermSource::Lookup {
            lookup: String::new(),
            path: path.clone(),
        }),
        (Some(name), None) => {
            return Err(format!(
                "{{ lookup = \"{name}\" }} names a lookup: say where in its answer with at = \"$.…\" (a JSONPath alone reads [operation.lookup])"
            ));
        }
        (Some(name), Some(path)) => {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!(
                    "lookup `{name}` with `at` names one of [operation.lookups.NAME] (A-Z a-z 0-9 _)"
                ));
            }
            sources.push(TermSource::Lookup {
                lookup: name.clone(),
                path: path.clone(),
            });
        }
        (None, Some(_)) => {
            return Err(
                "`at` goes with lookup = \"NAME\": the JSONPath into that lookup's answer".into(),
            );
        }
        (None, None) => {}
    }
    if let Some(text) = &term.compute {
        let expression = Expression::parse(text).map_err(|e| format!("compute `{text}`: {e}"))?;
        sources.push(TermSource::Compute(expression));
    }
    if let Some(a) = &term.argument {
        sources.push(TermSource::Argument(a.clone()));
    }
    match sources.len() {
        1 => Ok(sources.remove(0)),
        0 => Err(
            "give exactly one source: path, body, form, query, header, value, lookup, compute or argument"
                .into(),
        ),
        _ => Err("give exactly one source, not several".into()),
    }
}

#[cfg(test)]
#[path = "action_tests.rs"]
mod tests;
