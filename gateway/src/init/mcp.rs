//! Drafts from an MCP server's `tools/list`: a `[[tool]]` for every tool whose annotations do
//! not say `readOnlyHint: true`, a term per `inputSchema` property, `optional = true` for one
//! with a `default` or not in `required` (a model leaves those out). A tool listed twice is
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
        for (property, shape) in properties.into_iter().flatten() {
            // A required argument with a default is one a model may leave out all the same.
            let optional = !required.contains(&property.as_str()) || shape.get("default").is_some();
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
        assert!(text.contains("note = { argument = \"$.note\", optional = true }\n"));
        assert!(
            text.contains("summary = \"Exchange an item: item id {item_id}, order id {order_id}{?note}, note {note}{/note}.\""),
            "{text}"
        );
        assert!(
            text.contains("same_action = [\"item_id\", \"order_id\"]"),
            "{text}"
        );
        // A tool without arguments is held all the same, on a constant naming it.
        assert_eq!(outcomes[1].commented, None, "{text}");
        assert!(text.contains("action = { value = \"ping\" }\n"), "{text}");
    }

    /// What a model leaves out is optional: an argument with a default, or not required. A
    /// tool whose arguments are all optional is held all the same, and the file loads.
    #[test]
    fn defaults_and_unrequired_arguments_are_optional_terms() {
        let tools = vec![
            json!({"name": "read_graph_and_tag", "description": "Tag entities.",
                   "inputSchema": {"type": "object", "required": ["names", "tag"],
                     "properties": {"names": {"type": "array"},
                                    "tag": {"type": "string", "default": "todo"}}}}),
            json!({"name": "git_log", "description": "Shows the log",
                   "inputSchema": {"type": "object",
                     "properties": {"max_count": {"type": "integer", "default": 10}}}}),
        ];
        let (drafts, _) = drafts(&tools);
        let (text, outcomes) = render("test", drafts);
        assert!(outcomes.iter().all(|o| o.commented.is_none()), "{text}");
        assert!(text.contains("tag = { argument = \"$.tag\", optional = true }"));
        assert!(
            text.contains("summary = \"Tag entities: names {names}{?tag}, tag {tag}{/tag}.\""),
            "{text}"
        );
        assert!(
            text.contains(
                "summary = \"Shows the log{?max_count}; max count {max_count}{/max_count}.\""
            ),
            "{text}"
        );
        assert!(text.contains("a call may leave them out"), "{text}");
        let loaded = crate::config::parse_policy_file(std::path::Path::new("t.toml"), &text);
        assert_eq!(loaded.map(|p| p.len()).map_err(|e| e.to_string()), Ok(2));
    }

    /// A server whose tools are all read-only: a file that says so, and loads.
    #[test]
    fn only_read_only_tools_give_a_file_that_loads() {
        let tools = vec![
            json!({"name": "get_time", "annotations": {"readOnlyHint": true},
                                "inputSchema": {"type": "object"}}),
        ];
        let (drafts, skipped) = drafts(&tools);
        assert_eq!(skipped.len(), 1);
        let (text, _) = render("test", drafts);
        assert!(text.contains("\nnothing_to_approve = \""), "{text}");
        let loaded = crate::config::parse_policy_file(std::path::Path::new("t.toml"), &text);
        assert_eq!(loaded.map(|p| p.len()).map_err(|e| e.to_string()), Ok(0));
    }
}
