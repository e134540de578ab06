//! Form fields as terms: how each is sent (its encoding's style), and which the policy
//! language can name.

use serde_json::Value;

use super::schema::{MAX_SCHEMAS, object_fields, resolve};
use crate::init::draft::{Draft, Source};
use crate::policy::FormName;

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
pub(super) fn form_terms(doc: &Value, schema: &Value, encoding: &Value, draft: &mut Draft) {
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
