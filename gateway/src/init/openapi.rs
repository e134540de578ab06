//! Drafts from an OpenAPI description (3.0 or 3.1, already parsed from JSON or YAML): one per
//! write operation the selection keeps, with terms from its path, query and required header
//! parameters and its request body (JSON members, form fields and `deepObject` groups),
//! `optional = true` unless the description requires them; `$ref`s resolved in the document.
//!
//! Walked as a `serde_json::Value`: no maintained crate reads both 3.0 and 3.1 (`openapiv3`
//! is 3.0 only, `oas3` 3.1 only), and the few keys read here are the same in both but for
//! `nullable` (3.0) and type arrays (3.1).

use serde_json::Value;

use super::draft::{Draft, Source, Target};
use crate::policy::FormName;

/// The methods drafted: those that change something.
const WRITES: [&str; 4] = ["post", "put", "patch", "delete"];
const ALL_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// `$ref` hops and schema nesting followed at most (a recursive schema stops here).
const MAX_DEPTH: usize = 24;
/// Schemas visited at most for one object: `allOf`s that refer back to themselves branch
/// without end within [`MAX_DEPTH`].
const MAX_SCHEMAS: usize = 2000;

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

/// Follows `$ref`s within the document.
fn resolve<'a>(doc: &'a Value, mut value: &'a Value) -> Result<&'a Value, String> {
    for _ in 0..MAX_DEPTH {
        let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
            return Ok(value);
        };
        let Some(pointer) = reference.strip_prefix('#') else {
            return Err(format!(
                "$ref `{reference}` points outside the document: bundle it first"
            ));
        };
        value = doc
            .pointer(pointer)
            .ok_or_else(|| format!("$ref `{reference}` names nothing in the document"))?;
    }
    Err("a $ref chain that does not end".to_owned())
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

/// The body's media type: JSON (`application/json`, `application/*+json`), else a form.
fn request_body(doc: &Value, body: &Value, draft: &mut Draft) {
    let body = match resolve(doc, body) {
        Ok(body) => body,
        Err(reason) => {
            return draft.hold_refusing(format!(
                "a request with a body: the description's body can't be read ({reason})"
            ));
        }
    };
    let Some(content) = body.get("content").and_then(Value::as_object) else {
        return;
    };
    let essence = |t: &str| {
        t.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    let json = content.iter().find(|(t, _)| {
        let t = essence(t);
        t == "application/json" || (t.starts_with("application/") && t.ends_with("+json"))
    });
    let form = content
        .iter()
        .find(|(t, _)| essence(t) == "application/x-www-form-urlencoded");
    let others: Vec<&str> = content
        .keys()
        .map(String::as_str)
        .filter(|t| {
            Some(*t) != json.map(|j| j.0.as_str()) && Some(*t) != form.map(|f| f.0.as_str())
        })
        .collect();
    let chosen = json.map(|j| (j, true)).or(form.map(|f| (f, false)));
    let Some(((media, media_value), is_json)) = chosen else {
        let types: Vec<&str> = content.keys().map(String::as_str).collect();
        if !types.is_empty() {
            draft.hold_refusing(format!(
                "a {} body: a policy reads JSON and form bodies only, so the gateway refuses it (400 invalid_body) rather than pass it on unread",
                types.join(", ")
            ));
        }
        return;
    };
    if !others.is_empty() || (json.is_some() && form.is_some()) {
        let mut also: Vec<&str> = others;
        if json.is_some() {
            if let Some((f, _)) = form {
                also.push(f);
            }
        }
        draft.notes.push(format!(
            "drafted for {media} bodies; the route then refuses {} bodies",
            also.join(", ")
        ));
    }
    let schema = media_value.get("schema").cloned().unwrap_or(Value::Null);
    let encoding = media_value.get("encoding").cloned().unwrap_or(Value::Null);
    let before = draft.terms.len();
    let body_required = body.get("required").and_then(Value::as_bool) == Some(true);
    if is_json {
        json_terms(doc, &schema, body_required, draft);
    } else {
        form_terms(doc, &schema, &encoding, draft);
    }
    // A body with no required term may be left out; with one, it can't.
    let needs_body = draft.terms[before..].iter().any(|t| !t.optional);
    if !body_required && needs_body {
        draft
            .notes
            .push("the description makes the body optional, but not its required fields: a request without one is refused (400 missing_term)".to_owned());
    }
}

/// An object's fields (name, schema, required) and whether it allows others.
type Fields = (Vec<(String, Value, bool)>, bool);

/// An object schema's fields: (name, resolved schema, required), with `allOf` merged and the
/// fields of every `oneOf`/`anyOf` shape (optional unless the object requires them); `None`
/// when the schema is not an object with properties.
fn object_fields(
    doc: &Value,
    schema: &Value,
    depth: usize,
    budget: &mut usize,
) -> Result<Option<Fields>, String> {
    *budget = budget.saturating_sub(1);
    if depth > MAX_DEPTH || *budget == 0 {
        return Err("the schema nests too deep or refers to itself (a recursive $ref)".to_owned());
    }
    let schema = resolve(doc, schema)?;
    let mut fields: Vec<(String, Value, bool)> = Vec::new();
    let mut any = false;
    let mut open = schema
        .get("additionalProperties")
        .is_some_and(|a| a != &Value::Bool(false));
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let merge =
        |fields: &mut Vec<(String, Value, bool)>, name: &str, value: Value, req: bool| match fields
            .iter_mut()
            .find(|(n, _, _)| n == name)
        {
            Some(field) => field.2 |= req,
            None => fields.push((name.to_owned(), value, req)),
        };
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        any = true;
        for (name, value) in props {
            let resolved = resolve(doc, value)?;
            if resolved.get("readOnly").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            merge(
                &mut fields,
                name,
                resolved.clone(),
                required.contains(&name.as_str()),
            );
        }
    }
    for (key, all) in [("allOf", true), ("oneOf", false), ("anyOf", false)] {
        for part in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some((inner, inner_open)) = object_fields(doc, part, depth + 1, budget)? {
                any = true;
                open |= inner_open;
                for (name, value, req) in inner {
                    let req = (all && req) || required.contains(&name.as_str());
                    merge(&mut fields, &name, value, req);
                }
            }
        }
    }
    Ok(any.then_some((fields, open)))
}

/// A JSON path to a top-level member: `$.name`, or `$['odd name']`.
pub(crate) fn member_path(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        format!("$.{name}")
    } else {
        format!("$['{}']", name.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// Each top-level member a term, optional unless the schema requires it (a nested object or
/// array is one term: its whole value, whatever optional members it holds).
fn json_terms(doc: &Value, schema: &Value, body_required: bool, draft: &mut Draft) {
    match object_fields(doc, schema, 0, &mut MAX_SCHEMAS.clone()) {
        Err(reason) => draft.hold_refusing(format!(
            "a JSON body with any member: the body's schema can't be read ({reason})"
        )),
        Ok(Some((fields, open))) if !fields.is_empty() => {
            for (name, _, required) in fields {
                draft.add_term(&name, Source::Body(member_path(&name)), !required);
            }
            if open {
                draft.notes.push(
                    "the schema allows other members: a request with one is refused (400 unexpected_field)"
                        .to_owned(),
                );
            }
        }
        Ok(_) => {
            draft.add_term("body", Source::Body("$".to_owned()), !body_required);
            draft.notes.push(
                "the body has no declared members: it is one term, the whole body".to_owned(),
            );
        }
    }
}

/// What a schema holds, for form fields.
enum Kind {
    Scalar,
    Array,
    Object,
}

fn kind(doc: &Value, schema: &Value) -> Kind {
    let Ok(schema) = resolve(doc, schema) else {
        return Kind::Object;
    };
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => Vec::new(),
    };
    if types.contains(&"array") {
        Kind::Array
    } else if types.contains(&"object") || schema.get("properties").is_some() {
        Kind::Object
    } else {
        Kind::Scalar
    }
}

/// How a form field is sent, as its encoding object says (OpenAPI's defaults: `style: form`,
/// `explode: true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FormStyle {
    /// `deepObject`: `name[key]=…`, `name[0][key]=…`, `name[]=…`.
    Deep,
    /// `form` exploded: an array as the same field repeated, an object's members as fields.
    Exploded,
    /// One field (`form` unexploded, `spaceDelimited`, `pipeDelimited`): `name=a,b`.
    Single,
}

fn form_style(encoding: &Value, name: &str) -> FormStyle {
    let at = encoding.get(name);
    let style = at.and_then(|e| e.get("style")).and_then(Value::as_str);
    let explode = at.and_then(|e| e.get("explode")).and_then(Value::as_bool);
    match style {
        Some("deepObject") => FormStyle::Deep,
        None | Some("form") if explode != Some(false) => FormStyle::Exploded,
        _ => FormStyle::Single,
    }
}

/// Form fields as terms, optional unless the description requires them. A field sent as a
/// group (`style: deepObject`: `metadata[k]`, `items[0][price]`, `expand[]`) is one term, the
/// group's fields as one value; so is one sent as a single field. A list sent as the same field
/// repeated (OpenAPI's default) is a term that holds one value: several are refused by the
/// gateway (form readers read a repeated field differently). An object spread into fields, or
/// a name no form reader reads alike, can't be a term: left out (optional) or refused (required).
fn form_terms(doc: &Value, schema: &Value, encoding: &Value, draft: &mut Draft) {
    let fields = match object_fields(doc, schema, 0, &mut MAX_SCHEMAS.clone()) {
        Err(reason) => {
            return draft.hold_refusing(format!(
                "a form body with any field: the body's schema can't be read ({reason})"
            ));
        }
        Ok(Some((fields, _))) if !fields.is_empty() => fields,
        Ok(_) => {
            return draft.notes.push(
                "the description declares a form body without fields: a request sends none (one with a body is refused)"
                    .to_owned(),
            );
        }
    };
    for (name, schema, required) in fields {
        let style = form_style(encoding, &name);
        let problem = match (FormName::parse(&name), kind(doc, &schema), style) {
            (Err(e), _, _) => Some(format!("the name {e}")),
            (Ok(_), Kind::Object, FormStyle::Exploded) => Some(
                "an object sent as its members' fields (not `style: deepObject`), which a policy can't name"
                    .to_owned(),
            ),
            (Ok(_), kind, style) => {
                let term = draft.add_term(&name, Source::Form(name.clone()), !required);
                let repeated = matches!(kind, Kind::Array)
                    && style == FormStyle::Exploded
                    && !name.ends_with("[]");
                if repeated {
                    draft.hold_refusing(format!(
                        "a request with several values of form field `{name}` (term `{term}`): a list sent as the same field repeated, which form readers read differently; one value is held as any term"
                    ));
                }
                None
            }
        };
        match problem {
            None => {}
            Some(reason) if required => draft.hold_refusing(format!(
                "a request with form field `{name}`, which the description requires: {reason}; until the upstream takes it another way, this action can't be performed through the gateway"
            )),
            Some(reason) => draft.notes.push(format!(
                "form field `{name}` (optional) is not a term: {reason}; a request that sends it is refused (400)"
            )),
        }
    }
}

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod tests;
