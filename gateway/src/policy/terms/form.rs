//! Form terms: a field of a form body by its name, or the group of fields it holds as one
//! value.

use serde_json::Value;

use super::super::form_name::{FormKey, FormName};

/// A form term's value: the field of that name (a string, or a list for `name[]`), or the
/// group of fields it holds as one value (`metadata[k]=v` → `{"k": "v"}`, `items[0][price]=p`
/// → `[{"price": "p"}]`, `expand[]=a` under `expand` → `["a"]`). `form` holds every field by
/// its name, already read strictly: one shape per name, indices dense and in order.
pub(super) fn form_value(form: &Value, name: &str) -> Option<Value> {
    if let Some(value) = form.get(name) {
        return Some(value.clone());
    }
    let group = FormName::parse(name).ok()?;
    let mut out: Option<Value> = None;
    for (field, value) in form.as_object()? {
        let Ok(field) = FormName::parse(field) else {
            continue;
        };
        if field.is_within(&group) {
            let rest = &field.parts()[group.parts().len()..];
            place(&mut out, rest, value)?;
        }
    }
    out
}

/// Put `value` at `path` in the tree being built. `None` if the names disagree on a shape,
/// which the strict form reader already refused.
fn place(node: &mut Option<Value>, path: &[FormKey], value: &Value) -> Option<()> {
    let Some((first, rest)) = path.split_first() else {
        return node.replace(value.clone()).is_none().then_some(());
    };
    match first {
        // `value` is already the list of a `name[]` field.
        FormKey::Append => node.replace(value.clone()).is_none().then_some(()),
        FormKey::Name(key) => {
            let map = node.get_or_insert_with(|| Value::Object(Default::default()));
            let Value::Object(map) = map else { return None };
            let mut child = map.remove(key);
            place(&mut child, rest, value)?;
            map.insert(key.clone(), child?);
            Some(())
        }
        FormKey::Index(index) => {
            let list = node.get_or_insert_with(|| Value::Array(Vec::new()));
            let Value::Array(items) = list else {
                return None;
            };
            if *index == items.len() {
                items.push(Value::Null);
            }
            let slot = items.get_mut(*index)?;
            let mut child = (!slot.is_null()).then(|| slot.take());
            place(&mut child, rest, value)?;
            *slot = child?;
            Some(())
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{Captures, RequestParts, TermSource, extract};

    fn form_request<'a>(
        captures: &'a Captures,
        headers: &'a http::HeaderMap,
        form: &'a serde_json::Value,
    ) -> RequestParts<'a> {
        RequestParts {
            captures,
            query: None,
            headers,
            body: None,
            form: Some(form),
            arguments: None,
        }
    }

    #[test]
    fn form_terms_by_field_name() {
        let captures = vec![];
        let headers = http::HeaderMap::new();
        let form = json!({"To": "+1555", "tags[]": ["a", "b"]});
        let terms = vec![
            ("to".to_owned(), TermSource::Form("To".into())),
            ("tags".to_owned(), TermSource::Form("tags[]".into())),
        ];
        let request = form_request(&captures, &headers, &form);
        let got = extract(&terms, &[], &request).unwrap();
        assert_eq!(got["to"], "+1555");
        assert_eq!(got["tags"], json!(["a", "b"]));
        let missing = vec![("to".to_owned(), TermSource::Form("to".into()))];
        let err = extract(&missing, &[], &request).unwrap_err();
        assert_eq!(
            err.to_string(),
            "term `to` is missing from the request (it comes from form field `to`)"
        );
    }

    /// A form term naming a group is the group's fields as one value.
    #[test]
    fn form_groups_are_one_value() {
        let captures = vec![];
        let headers = http::HeaderMap::new();
        let form = json!({
            "metadata[order_id]": "1",
            "metadata[note][x]": "y",
            "items[0][price]": "p1",
            "items[1][price]": "p2",
            "items[0][quantity]": "2",
            "expand[]": ["customer", "invoice"],
            "t[a][]": ["1"],
        });
        let terms = vec![
            ("metadata".to_owned(), TermSource::Form("metadata".into())),
            ("items".to_owned(), TermSource::Form("items".into())),
            ("expand".to_owned(), TermSource::Form("expand".into())),
            ("listed".to_owned(), TermSource::Form("expand[]".into())),
            ("t".to_owned(), TermSource::Form("t".into())),
            ("first".to_owned(), TermSource::Form("items[0]".into())),
            ("address".to_owned(), TermSource::Form("address".into())),
        ];
        let request = form_request(&captures, &headers, &form);
        let got = extract(&terms, &["address".to_owned()], &request).unwrap();
        assert_eq!(
            got["metadata"],
            json!({"order_id": "1", "note": {"x": "y"}})
        );
        assert_eq!(
            got["items"],
            json!([{"price": "p1", "quantity": "2"}, {"price": "p2"}])
        );
        assert_eq!(got["expand"], json!(["customer", "invoice"]));
        assert_eq!(got["listed"], got["expand"]);
        assert_eq!(got["t"], json!({"a": ["1"]}));
        assert_eq!(got["first"], json!({"price": "p1", "quantity": "2"}));
        assert!(!got.contains_key("address"));
    }
}
