//! Nothing outside the summary: every field of a policy route's JSON body (or of a held tool
//! call's arguments) is a term, or inside one, or listed by the policy's `ignore` as not
//! affecting the action. Anything else could change what the upstream does without appearing
//! in what the User approved.

use std::collections::HashSet;

use serde_json::Value;

use super::Refusal;
use crate::protocol::json::{PathPart, json_path};

/// Check `document` against the JSONPaths that cover it: the policy's body (or argument) terms
/// and its `ignore` list. `what` names the document in the detail ("body", "arguments").
pub(crate) fn check_fields<'p>(
    document: &Value,
    covering: impl IntoIterator<Item = &'p str>,
    what: &str,
) -> Result<(), Refusal> {
    let mut covered: HashSet<*const Value> = HashSet::new();
    for path in covering {
        if let Some(found) = crate::policy::query_json_path(document, path) {
            covered.extend(found.into_iter().map(|v| v as *const Value));
        }
    }
    walk(document, &covered, &mut Vec::new(), what)
}

/// A step of the walk's path, borrowed from the document: names are copied only for the
/// error that names the field.
#[derive(Clone, Copy)]
enum Step<'a> {
    Name(&'a str),
    Index(usize),
}

fn walk<'d>(
    node: &'d Value,
    covered: &HashSet<*const Value>,
    path: &mut Vec<Step<'d>>,
    what: &str,
) -> Result<(), Refusal> {
    if covered.contains(&(node as *const Value)) {
        return Ok(());
    }
    match node {
        Value::Object(map) if !map.is_empty() || path.is_empty() => {
            for (name, member) in map {
                path.push(Step::Name(name));
                walk(member, covered, path, what)?;
                path.pop();
            }
            Ok(())
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                path.push(Step::Index(i));
                walk(item, covered, path, what)?;
                path.pop();
            }
            Ok(())
        }
        _ => {
            let parts: Vec<PathPart> = path
                .iter()
                .map(|step| match *step {
                    Step::Name(name) => PathPart::Name(name.to_owned()),
                    Step::Index(i) => PathPart::Index(i),
                })
                .collect();
            let at = json_path(&parts);
            Err(Refusal::new(
                400,
                "unexpected_field",
                format!(
                    "`{at}` in the {what} is not a term of this action, so it is not in the summary the user approves: leave it out (or the company lists it in the policy's `ignore`)"
                ),
            )
            .naming("field", at))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(document: Value, covering: &[&str]) -> Result<(), Option<String>> {
        check_fields(&document, covering.iter().copied(), "body")
            .map_err(|r| r.names.map(|(_, v)| v))
    }

    #[test]
    fn terms_and_ignored_fields_cover_the_body() {
        let covering = ["$.item_id", "$.replacement", "$.note"];
        assert_eq!(
            check(
                json!({"item_id": "i", "replacement": {"sku": "s", "size": "M"}, "note": "x"}),
                &covering
            ),
            Ok(())
        );
        assert_eq!(check(json!({}), &[]), Ok(()));
        assert_eq!(check(json!({"anything": [1]}), &["$"]), Ok(()));
        assert_eq!(
            check(
                json!({"items": [{"sku": "a"}, {"sku": "b"}]}),
                &["$.items[*].sku"]
            ),
            Ok(())
        );
    }

    #[test]
    fn anything_else_is_named() {
        assert_eq!(
            check(json!({"item_id": "i", "refund_to": "x"}), &["$.item_id"]),
            Err(Some("$.refund_to".into()))
        );
        assert_eq!(
            check(
                json!({"items": [{"sku": "a", "qty": 9}]}),
                &["$.items[*].sku"]
            ),
            Err(Some("$.items[0].qty".into()))
        );
        assert_eq!(
            check(json!({"item_id": "i", "opts": {}}), &["$.item_id"]),
            Err(Some("$.opts".into()))
        );
        assert_eq!(check(json!([1]), &[]), Err(Some("$[0]".into())));
        assert_eq!(check(json!("x"), &[]), Err(Some("$".into())));
    }
}
