//! Drafts from an MCP server's `tools/list`: a `[[tool]]` for every tool whose annotations do
//! not say `readOnlyHint: true`, a term per `inputSchema` property. A tool listed twice is
//! drafted once (two `[[tool]]`s of one tool don't load).

use serde_json::Value;

use super::draft::{Draft, Source, Target};
use super::openapi::Skipped;

/// The drafts and the tools left out (read-only), from the tools of every page.
pub(crate) fn drafts(tools: &[Value]) -> (Vec<Draft>, Vec<Skipped>) {
    let mut drafts = Vec::new();
    let mut skipped = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for tool in tools {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
        if seen.contains(&name) {
            skipped.push(Skipped {
                what: format!("tool {name}"),
                reason: "listed again by the server: drafted from its first listing only"
                    .to_owned(),
            });
            continue;
        }
        seen.push(name);
        if tool.pointer("/annotations/readOnlyHint") == Some(&Value::Bool(true)) {
            skipped.push(Skipped {
                what: format!("tool {name}"),
                reason: "readOnlyHint: true".to_owned(),
            });
            continue;
        }
        let title = tool
            .pointer("/annotations/title")
            .or_else(|| tool.get("title"))
            .or_else(|| tool.get("description"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut draft = Draft::new(
            name,
            title,
            Target::Tool {
                tool: name.to_owned(),
            },
        );
        if name.is_empty() {
            draft.refuse("the tool has no name".to_owned());
        }
        let schema = tool.get("inputSchema").unwrap_or(&Value::Null);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let properties = schema.get("properties").and_then(Value::as_object);
        for property in properties.into_iter().flat_map(|p| p.keys()) {
            let optional = !required.contains(&property.as_str());
            draft.add_term(property, Source::Argument(member_path(property)), optional);
        }
        if schema
            .get("additionalProperties")
            .is_some_and(|a| a != &Value::Bool(false))
        {
            draft.notes.push(
                "the tool takes other arguments too: a call with one is refused (an argument outside the terms)"
                    .to_owned(),
            );
        }
        drafts.push(draft);
    }
    (drafts, skipped)
}

/// `$.name`, or `$['odd name']`.
fn member_path(name: &str) -> String {
    super::openapi::member_path(name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::init::draft::render;
    use serde_json::json;

    #[test]
    fn a_tool_listed_twice_is_drafted_once() {
        let tool = json!({"name": "send", "inputSchema": {"type": "object",
                          "properties": {"to": {"type": "string"}}}});
        let (drafts, skipped) = drafts(&[tool.clone(), tool]);
        assert_eq!(drafts.len(), 1);
        assert_eq!(skipped[0].what, "tool send");
        assert!(skipped[0].reason.contains("listed again"), "{skipped:?}");
    }

    #[test]
    fn tools_not_read_only_are_drafted_with_a_term_per_argument() {
        let tools = vec![
            json!({"name": "exchange_item", "description": "Exchange an item",
                   "inputSchema": {"type": "object", "required": ["order_id", "item_id"],
                     "properties": {"order_id": {"type": "string"}, "item_id": {"type": "string"},
                                    "note": {"type": "string"}}}}),
            json!({"name": "lookup_order", "annotations": {"readOnlyHint": true},
                   "inputSchema": {"type": "object", "properties": {"order_id": {}}}}),
            json!({"name": "ping", "inputSchema": {"type": "object"}}),
        ];
        let (drafts, skipped) = drafts(&tools);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].what, "tool lookup_order");
        let (text, outcomes) = render("test", drafts);
        assert_eq!(outcomes[0].commented, None, "{text}");
        assert!(text.contains("[[tool]]\nname = \"exchange_item\"\ntool = \"exchange_item\""));
        assert!(text.contains("note = { argument = \"$.note\" }  # optional"));
        assert!(
            text.contains("same_action = [\"item_id\", \"order_id\"]"),
            "{text}"
        );
        // A tool without arguments is held all the same, on a constant naming it.
        assert_eq!(outcomes[1].commented, None, "{text}");
        assert!(text.contains("action = { value = \"ping\" }\n"), "{text}");
    }
}
