//! What drafts make of paths and their parameters: a query in a described path, query and
//! header parameters as terms, and routes the drafts cannot hold listed as unheld.

use super::*;

#[test]
fn a_query_in_a_described_path_becomes_query_terms() {
    let d = doc(
        "3.1.0",
        json!({"/v1/messages?beta=true": {"post": {"operationId": "beta_create",
                 "requestBody": {"content": {"application/json": {"schema": {"type": "object",
                   "properties": {"model": {"type": "string"}}}}}}}},
               "/v1/messages": {"post": {"operationId": "create"}},
               "/v1/things/{id}?mode=a&mode=b&x%5B%5D=1": {"delete": {"operationId": "drop",
                 "parameters": [{"in": "query", "name": "mode", "required": true}]}}}),
        json!({}),
    );
    let (text, outcomes, _) = draft_all(&d);
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start_matches("# ").starts_with("path = ") && l.contains('?')),
        "no query in a policy's path:\n{text}"
    );
    for line in [
        "path = \"/v1/messages\"",
        "beta = { query = \"beta\" }",
        "path = \"/v1/things/{id}\"",
        "mode = { query = \"mode\" }",
        "x = { query = \"x[]\" }",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert_eq!(text.matches("{ query = \"mode\" }").count(), 1, "{text}");
    // Two descriptions of one route (paths in order): the later is held by the first, not
    // left unheld.
    let second = &outcomes[1];
    assert_eq!(second.name, "beta_create");
    assert_eq!(second.held_by.as_deref(), Some("create"), "{text}");
    assert!(!second.unheld() && !text.contains("UNAPPROVED"), "{text}");
}

#[test]
fn routes_left_unheld_are_listed_at_the_top_of_the_file() {
    let d = doc(
        "3.0.0",
        json!({"/files/{name}.{ext}": {"delete": {"operationId": "remove"}},
               "/a/{x}/c": {"post": {"operationId": "cross_a"}},
               "/a/b/{y}": {"post": {"operationId": "cross_b"}}}),
        json!({}),
    );
    let (text, outcomes, _) = draft_all(&d);
    let unheld: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.unheld())
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(unheld, ["cross_a", "remove"], "{text}");
    let top = &text[..text.find("\n[[").unwrap_or(text.len())];
    assert!(
        top.contains(
            "# WARNING: 2 write route(s) below are commented out, so they PASS THROUGH UNAPPROVED"
        ),
        "{top}"
    );
    assert!(
        top.contains("#   DELETE /files/{name}.{ext} (remove): the draft does not load"),
        "{top}"
    );
    assert!(
        top.contains("#   POST /a/{x}/c (cross_a): can match the same requests"),
        "{top}"
    );
    assert!(
        text.contains("# NOT DRAFTED, so this route PASSES THROUGH UNAPPROVED"),
        "{text}"
    );
}

#[test]
fn two_captures_in_one_segment_are_commented_out_with_the_loader_s_reason() {
    let d = doc(
        "3.0.0",
        json!({"/files/{name}.{ext}": {"delete": {"operationId": "remove"}}}),
        json!({}),
    );
    let (_, outcomes, _) = draft_all(&d);
    let reason = outcomes[0].commented.clone().unwrap();
    assert!(
        reason.contains("the draft does not load") && reason.contains("capture"),
        "{reason}"
    );
}

#[test]
fn parameters_are_terms_optional_or_not_and_unbound_ones_notes() {
    let d = doc(
        "3.0.0",
        json!({"/orders/{id}": {"delete": {"operationId": "cancel", "parameters": [
            {"name": "id", "in": "path", "required": true},
            {"name": "reason", "in": "query", "required": true},
            {"name": "notify", "in": "query"},
            {"name": "X-Store", "in": "header", "required": true},
            {"name": "X-Trace", "in": "header"},
            {"name": "Idempotency-Key", "in": "header", "required": true},
            {"name": "session", "in": "cookie"}]}}}),
        json!({}),
    );
    let (text, outcomes, _) = draft_all(&d);
    assert_eq!(outcomes[0].commented, None, "{text}");
    for line in [
        "reason = { query = \"reason\" }",
        "x_store = { header = \"X-Store\" }",
        "notify = { query = \"notify\", optional = true }",
        "# header `X-Trace` (optional) is not a term: the approval is bound to it all the same",
        "# header `Idempotency-Key` is not a term: the gateway never binds it",
        "# cookie `session` is not a term",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}
