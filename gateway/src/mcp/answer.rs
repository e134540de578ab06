//! The JSON-RPC responses and tool results the gateway answers MCP calls with.

use serde_json::{Value, json};

use crate::protocol::{ALREADY_PERFORMED, Operation};

/// `{"jsonrpc": "2.0", "id": …, "result": …}`
pub(crate) fn result_response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// `{"jsonrpc": "2.0", "id": …, "error": {"code": …, "message": …}}`
pub(crate) fn error_response(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A tool error result (`isError: true`) with one text block.
pub(crate) fn tool_error_result(text: &str) -> Value {
    json!({"isError": true, "content": [{"type": "text", "text": text}]})
}

/// The operation, as a tool error (spec section 4, "MCP"). `rejected`: the call carried an
/// approval that does not cover it; the operation is a new revision for what it asks.
pub(crate) fn approval_required_result(
    operation: &Operation,
    rejected: bool,
    page_url: Option<&str>,
) -> Value {
    let text = if rejected {
        format!(
            "Not done yet. The approval sent does not cover this call as it is now (or has expired, or is not this Session's to give). This needs the user's approval: {}",
            operation.summary
        )
    } else {
        format!(
            "Not done yet. This needs the user's approval: {}",
            operation.summary
        )
    };
    // `proof = "company_page"`: the User approves this revision on the Company's page too,
    // signed in, before the agent's approval counts (docs/approval-page.md). The link goes
    // in the operation, as over HTTP; the text stays the summary (spec 4, "MCP").
    let mut result = tool_error_result(&text);
    result["structuredContent"] = json!({"operation": operation.to_json(page_url)});
    result
}

/// The `_meta` key of the retry advice in [`retry_result`].
pub(crate) const RETRY_META_KEY: &str = "personalagentprotocol.org/retry";

/// The answer to an approval that can't be answered yet (being performed, outcome unknown,
/// store or MCP server unreachable): a tool error result, so that every SDK hands it to the
/// agent and keeps its MCP session (an HTTP 503 ends a `mcp` 1.x client session, and the
/// others show it as a bare transport error). Its text says that nothing failed and to send
/// the same approval again; `_meta` says the same for programs: `error` (the HTTP API's
/// error code), `retry_after` (seconds) and the `operation_id` when there is one.
pub(crate) fn retry_result(
    error: &str,
    operation_id: Option<&str>,
    retry_after: u32,
    detail: &str,
) -> Value {
    let text = format!(
        "Not failed, and not done yet: {detail}. Send the same call with the same approval again in {retry_after} s (do not ask the user to approve again)."
    );
    let mut advice = json!({"error": error, "retry_after": retry_after});
    if let Some(id) = operation_id {
        advice["operation_id"] = Value::from(id);
    }
    let mut result = tool_error_result(&text);
    result["_meta"] = json!({RETRY_META_KEY: advice});
    result
}

/// The answer to an approver's retry of a performed call whose credentials do not prove
/// they approved it: a tool error saying it was performed (never a new operation), with
/// `_meta` as in [`retry_result`] for programs.
pub(crate) fn already_performed_result(operation_id: &str) -> Value {
    let mut result = tool_error_result(&format!("Done before, not now: {ALREADY_PERFORMED}."));
    result["_meta"] =
        json!({RETRY_META_KEY: {"error": "already_performed", "operation_id": operation_id}});
    result
}

/// The tool error for a call of a held tool from a Personal Agent that did not declare the
/// extension: no operation may be returned to it (spec section 2), and an MCP server refuses
/// with `extension_required` only to refuse the agent entirely.
pub(crate) fn extension_required_result(tool: &str) -> Value {
    tool_error_result(&format!(
        "Not done. The tool `{tool}` needs the user's approval of its exact terms, and this client has not declared approval support (the Personal Agent Protocol's operations extension, version 2: Poppy-Extensions: \"operations\";v=\"2\"). Nothing was performed."
    ))
}

/// The tool error for a held call from a client without the extension, on a policy the User
/// may approve on the Company's page: the link and what it approves, as text the model can
/// pass to the User (no operation: spec section 2), and the link in `_meta` for programs.
pub(crate) fn page_approval_result(url: &str, summary: &str, expires_at: &str) -> Value {
    let mut result = tool_error_result(&format!(
        "Not done yet. This needs the user's approval: {summary} Ask the user to open {url} , sign in and approve (before {expires_at}), then make the same call again. Nothing was performed."
    ));
    result["_meta"] = json!({RETRY_META_KEY: {"error": "approval_required", "approval_url": url}});
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operation() -> Operation {
        Operation {
            operation_id: "exc_1".into(),
            revision: "1-a".into(),
            summary: "Exchange item **i1**.".into(),
            terms: Some(json!({"item_id": "i1"})),
            expires_at: "2026-10-08T19:20:00Z".into(),
        }
    }

    #[test]
    fn approval_required_has_the_spec_shape() {
        let result = approval_required_result(&operation(), false, None);
        assert_eq!(result["isError"], true);
        assert_eq!(
            result["content"],
            json!([{"type": "text", "text": "Not done yet. This needs the user's approval: Exchange item **i1**."}])
        );
        assert_eq!(
            result["structuredContent"]["operation"]["operation_id"],
            "exc_1"
        );
        assert_eq!(
            result["structuredContent"]["operation"]["terms"]["item_id"],
            "i1"
        );
        let rejected = approval_required_result(&operation(), true, None);
        assert!(
            rejected["content"][0]["text"]
                .as_str()
                .unwrap()
                .ends_with("This needs the user's approval: Exchange item **i1**.")
        );
        // `proof = "company_page"`: the page's link in the text and the operation.
        let url = "https://approve.shop.example/approve/exc_1?d=x";
        let page = approval_required_result(&operation(), false, Some(url));
        assert_eq!(page["structuredContent"]["operation"]["approval_url"], url);
        assert_eq!(
            page["content"], result["content"],
            "the text is the summary"
        );
        assert!(
            result["structuredContent"]["operation"]
                .get("approval_url")
                .is_none()
        );
    }

    #[test]
    fn retry_results_say_not_failed_and_when() {
        let result = retry_result(
            "operation_in_progress",
            Some("exc_1"),
            1,
            "this call is being performed",
        );
        assert_eq!(result["isError"], true);
        assert!(
            result.get("structuredContent").is_none(),
            "nothing for an outputSchema to refuse"
        );
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("Not failed, and not done yet: this call is being performed."),
            "{text}"
        );
        assert_eq!(
            result["_meta"][RETRY_META_KEY],
            json!({"error": "operation_in_progress", "retry_after": 1, "operation_id": "exc_1"})
        );
        let store = retry_result("store_unavailable", None, 1, "x");
        assert!(store["_meta"][RETRY_META_KEY].get("operation_id").is_none());
    }

    #[test]
    fn responses_carry_the_id() {
        assert_eq!(
            result_response(&json!("a"), json!({})),
            json!({"jsonrpc": "2.0", "id": "a", "result": {}})
        );
        assert_eq!(
            error_response(&Value::Null, -32700, "Parse error"),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}})
        );
        let no_extension = extension_required_result("exchange_item");
        assert_eq!(no_extension["isError"], true);
        assert!(no_extension.get("structuredContent").is_none());
        let text = no_extension["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("approval") && text.contains("\"operations\";v=\"2\""));
    }
}
