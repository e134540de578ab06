//! Schemas in a description: `$ref`s followed within the document, and an object's fields
//! with `allOf`, `oneOf` and `anyOf` merged, within bounds a recursive schema can't escape.

use serde_json::Value;

/// `$ref` hops and schema nesting followed at most (a recursive schema stops here).
const MAX_DEPTH: usize = 24;
/// Schemas visited at most for one object: `allOf`s that refer back to themselves branch
/// without end within [`MAX_DEPTH`].
pub(super) const MAX_SCHEMAS: usize = 2000;

/// Follows `$ref`s within the document.
pub(super) fn resolve<'a>(doc: &'a Value, mut value: &'a Value) -> Result<&'a Value, String> {
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

/// An object's fields (name, schema, required) and whether it allows others.
type Fields = (Vec<(String, Value, bool)>, bool);

/// An object schema's fields: (name, resolved schema, required), with `allOf` merged and the
/// fields of every `oneOf`/`anyOf` shape (optional unless the object requires them); `None`
/// when the schema is not an object with properties.
pub(super) fn object_fields(
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
