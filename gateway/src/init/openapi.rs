//! Drafts from an OpenAPI description (3.0 or 3.1, already parsed from JSON or YAML): one per
//! write operation the selection keeps, with terms from its path, query and required header
//! parameters and its request body (JSON members, form fields and `deepObject` groups),
//! `optional = true` unless the description requires them; `$ref`s resolved in the document.
//!
//! Walked as a `serde_json::Value`: no maintained crate reads both 3.0 and 3.1 (`openapiv3`
//! is 3.0 only, `oas3` 3.1 only), and the few keys read here are the same in both but for
//! `nullable` (3.0) and type arrays (3.1).
//!
//! Here the walk over paths and operations, and each operation's path, query and header
//! terms; [`body`] drafts its request body ([`form`] the form fields), reading schemas with
//! [`schema`].

mod body;
mod form;
mod schema;

use serde_json::Value;

pub(crate) use self::body::member_path;
use self::body::request_body;
use self::schema::resolve;
use super::draft::{Draft, Source, Target};

/// The methods drafted: those that change something.
const WRITES: [&str; 4] = ["post", "put", "patch", "delete"];
const ALL_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Headers a policy never binds or names as terms (docs/ingress.md), so never drafted.
const UNBOUND_HEADERS: [&str; 7] = [
    "authorization",
    "content-type",
    "accept",
    "accept-language",
    "user-agent",
    "idempotency-key",
    "cookie",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum OpenApiError {
    #[error(
        "not an OpenAPI 3 description: no `openapi` version (Swagger 2.0 needs converting to OpenAPI 3 first)"
    )]
    NoVersion,
    #[error("OpenAPI {0} is not supported: 3.0 and 3.1 are")]
    Version(String),
    #[error("the description has no `paths` object")]
    NoPaths,
}

/// Which operations to draft. Patterns are globs matched against the operationId and the
/// path (either may match; `*` crosses `/`).
#[derive(Debug, Default)]
pub(crate) struct Selection {
    pub(crate) include: Vec<glob::Pattern>,
    pub(crate) exclude: Vec<glob::Pattern>,
    pub(crate) tags: Vec<String>,
    /// `x-name` (present and not `false`/null), or `x-name=value` (equal, as text).
    pub(crate) extensions: Vec<(String, Option<String>)>,
}

/// An operation not drafted, and why, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skipped {
    pub(crate) what: String,
    pub(crate) reason: String,
}

/// The drafts, the operations left out, and the header line saying where they come from.
pub(crate) fn drafts(
    doc: &Value,
    selection: &Selection,
) -> Result<(Vec<Draft>, Vec<Skipped>, String), OpenApiError> {
    let version = doc
        .get("openapi")
        .and_then(Value::as_str)
        .ok_or(OpenApiError::NoVersion)?;
    if !(version.starts_with("3.0") || version.starts_with("3.1")) {
        return Err(OpenApiError::Version(version.to_owned()));
    }
    let paths = doc
        .get("paths")
        .and_then(Value::as_object)
        .ok_or(OpenApiError::NoPaths)?;
    let base = base_path(doc);
    let title = doc
        .pointer("/info/title")
        .and_then(Value::as_str)
        .unwrap_or("an API");
    let header =
        format!("Draft policies for {title} (OpenAPI {version}), by `poppy-gateway init`.");
    let mut drafts = Vec::new();
    let mut skipped = Vec::new();
    for (path, item) in paths {
        let Ok(item) = resolve(doc, item) else {
            skipped.push(Skipped {
                what: path.clone(),
                reason: "its path item is a $ref outside the document".to_owned(),
            });
            continue;
        };
        for method in ALL_METHODS {
            let Some(op) = item.get(method) else { continue };
            let what = format!("{} {base}{path}", method.to_uppercase());
            if let Some(reason) = left_out(method, op, path, selection) {
                skipped.push(Skipped { what, reason });
                continue;
            }
            drafts.push(draft(doc, &base, path, method, item, op));
        }
    }
    Ok((drafts, skipped, header))
}

/// Why the selection leaves an operation out, if it does.
fn left_out(method: &str, op: &Value, path: &str, selection: &Selection) -> Option<String> {
    if !WRITES.contains(&method) {
        return Some("not a write (POST, PUT, PATCH, DELETE)".to_owned());
    }
    let id = op.get("operationId").and_then(Value::as_str).unwrap_or("");
    let hit = |patterns: &[glob::Pattern]| {
        patterns
            .iter()
            .any(|p| p.matches(path) || (!id.is_empty() && p.matches(id)))
    };
    if !selection.include.is_empty() && !hit(&selection.include) {
        return Some("not matched by --include".to_owned());
    }
    if hit(&selection.exclude) {
        return Some("matched by --exclude".to_owned());
    }
    if !selection.tags.is_empty() {
        let tags: Vec<&str> = op
            .get("tags")
            .and_then(Value::as_array)
            .map(|t| t.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !selection.tags.iter().any(|t| tags.contains(&t.as_str())) {
            return Some("none of the --tag tags".to_owned());
        }
    }
    for (name, wanted) in &selection.extensions {
        let found = op.get(name);
        let ok = match (found, wanted) {
            (None | Some(Value::Null) | Some(Value::Bool(false)), _) => false,
            (Some(_), None) => true,
            (Some(Value::String(s)), Some(w)) => s == w,
            (Some(v), Some(w)) => serde_json::to_string(v).ok().as_deref() == Some(w.as_str()),
        };
        if !ok {
            return Some(format!("no {name} as --extension asks"));
        }
    }
    None
}

/// The path of the first server URL (`https://api.x.com/v1` → `/v1`), which requests carry.
fn base_path(doc: &Value) -> String {
    let Some(url) = doc.pointer("/servers/0/url").and_then(Value::as_str) else {
        return String::new();
    };
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map(|i| &rest[i..]).unwrap_or(""),
        None => url,
    };
    if rest.contains('{') {
        return String::new();
    }
    rest.trim_end_matches('/').to_owned()
}

fn draft(doc: &Value, base: &str, path: &str, method: &str, item: &Value, op: &Value) -> Draft {
    let id = op.get("operationId").and_then(Value::as_str).unwrap_or("");
    let title = op
        .get("summary")
        .or_else(|| op.get("description"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut draft = Draft::new(
        id,
        title,
        Target::Operation {
            method: method.to_uppercase(),
            path: format!("{base}{path}"),
        },
    );
    // A query in the description's path (`/v1/x?beta=true`) can't be in a policy's path,
    // which would then never match: its parameters become query terms instead.
    let (path, fixed_query) = match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path, None),
    };
    let mut policy_path = format!("{base}{path}");
    let params = parameters(doc, item, op).unwrap_or_else(|reason| {
        draft.hold_refusing(format!(
            "a request with any query parameter: the description's parameters can't be read ({reason})"
        ));
        Vec::new()
    });
    for capture in captures(path) {
        let declared = params
            .iter()
            .any(|(n, at, _)| n == &capture && at == "path");
        if !declared {
            draft.notes.push(format!(
                "path parameter `{capture}` is not declared by the description"
            ));
        }
        // A capture name is `A-Z a-z 0-9 _`; others are renamed in the policy's path.
        let valid = capture
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
        let name = if valid {
            capture.clone()
        } else {
            super::draft::term_name(&capture)
        };
        if !valid {
            policy_path = policy_path.replace(&format!("{{{capture}}}"), &format!("{{{name}}}"));
        }
        draft.add_term(&capture, Source::Path(name), false);
    }
    draft.target = Target::Operation {
        method: method.to_uppercase(),
        path: policy_path,
    };
    for name in fixed_query.map(query_names).unwrap_or_default() {
        if !params.iter().any(|(n, at, _)| n == &name && at == "query") {
            draft.add_term(&name, Source::Query(name.clone()), false);
        }
        draft.notes.push(format!(
            "the description's path carries the query parameter `{name}`: it is a term, which the User sees"
        ));
    }
    for (name, at, required) in &params {
        let unbound = UNBOUND_HEADERS.contains(&name.to_ascii_lowercase().as_str());
        match (at.as_str(), required) {
            ("path", _) => {}
            ("query", required) => {
                draft.add_term(name, Source::Query(name.clone()), !required);
            }
            ("header", _) if unbound => draft.notes.push(format!(
                "header `{name}` is not a term: the gateway never binds it (credentials, content negotiation, idempotency keys)"
            )),
            ("header", true) => {
                draft.add_term(name, Source::Header(name.clone()), false);
            }
            ("header", false) => draft.notes.push(format!(
                "header `{name}` (optional) is not a term: the approval is bound to it all the same (a new value gets a new revision); make it a term to show it in the summary"
            )),
            ("cookie", _) => draft.notes.push(format!(
                "cookie `{name}` is not a term: cookies are credentials, never bound"
            )),
            _ => {}
        }
    }
    if let Some(body) = op.get("requestBody") {
        request_body(doc, body, &mut draft);
    }
    draft
}

/// The names of a query string's parameters, form-decoded, each once.
fn query_names(query: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (name, _) in form_urlencoded::parse(query.as_bytes()) {
        if !name.is_empty() && !names.iter().any(|n| n == &name) {
            names.push(name.into_owned());
        }
    }
    names
}

/// `{name}`s of an OpenAPI path, in order.
fn captures(path: &str) -> Vec<String> {
    path.split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
}

/// The operation's parameters merged over the path item's: (name, in, required).
fn parameters(
    doc: &Value,
    item: &Value,
    op: &Value,
) -> Result<Vec<(String, String, bool)>, String> {
    let mut out: Vec<(String, String, bool)> = Vec::new();
    for list in [item.get("parameters"), op.get("parameters")] {
        for param in list.and_then(Value::as_array).into_iter().flatten() {
            let param = resolve(doc, param)?;
            let name = param.get("name").and_then(Value::as_str).unwrap_or("");
            let at = param.get("in").and_then(Value::as_str).unwrap_or("");
            let required = param.get("required").and_then(Value::as_bool) == Some(true);
            out.retain(|(n, a, _)| !(n == name && a == at));
            out.push((name.to_owned(), at.to_owned(), required || at == "path"));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod tests;
