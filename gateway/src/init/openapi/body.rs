//! A request body as terms: JSON members, else form fields ([`super::form`]), as its media
//! types and schema say; a body that can't be read is held and refused.

use serde_json::Value;

use super::form::form_terms;
use super::schema::{MAX_SCHEMAS, object_fields, resolve};
use crate::init::draft::{Draft, Source};

/// The body's media type: JSON (`application/json`, `application/*+json`), else a form.
pub(super) fn request_body(doc: &Value, body: &Value, draft: &mut Draft) {
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
