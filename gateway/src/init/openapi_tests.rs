//! The drafting of OpenAPI operations: terms, $refs, forms, and what can't be drafted.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::*;
use crate::init::draft::render;

#[path = "openapi_tests/arbitrary_tests.rs"]
mod arbitrary_tests;
#[path = "openapi_tests/form_tests.rs"]
mod form_tests;
#[path = "openapi_tests/paths_tests.rs"]
mod paths_tests;

fn doc(version: &str, paths: Value, components: Value) -> Value {
    json!({"openapi": version, "info": {"title": "Test", "version": "1"},
           "paths": paths, "components": components})
}

fn draft_all(doc: &Value) -> (String, Vec<crate::init::draft::Outcome>, Vec<Skipped>) {
    let (drafts, skipped, header) = drafts(doc, &Selection::default()).unwrap();
    let (text, outcomes) = render(&header, drafts);
    (text, outcomes, skipped)
}

#[test]
fn json_bodies_with_refs_become_body_terms_and_path_captures_same_action() {
    let d = doc(
        "3.1.0",
        json!({"/emails/{email_id}": {
            "parameters": [{"$ref": "#/components/parameters/EmailId"}],
            "patch": {"operationId": "emails/update", "summary": "Update a single email",
              "requestBody": {"required": true, "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Update"}}}}},
            "get": {"operationId": "emails/get"}}}),
        json!({"parameters": {"EmailId": {"name": "email_id", "in": "path", "required": true,
                                          "schema": {"type": "string"}}},
               "schemas": {"Update": {"type": "object", "required": ["scheduled_at"],
                 "allOf": [{"$ref": "#/components/schemas/Base"}],
                 "properties": {"scheduled_at": {"type": ["string", "null"]},
                                "id": {"type": "string", "readOnly": true}}},
                 "Base": {"type": "object", "properties": {"tags": {"type": "array",
                   "items": {"type": "object"}}, "reply-to": {"type": "string"}}}}}),
    );
    let (text, outcomes, skipped) = draft_all(&d);
    assert_eq!(outcomes.len(), 1, "{text}");
    assert_eq!(outcomes[0].commented, None, "{text}");
    assert_eq!(skipped[0].what, "GET /emails/{email_id}");
    for line in [
        "name = \"emails_update\"",
        "method = \"PATCH\"",
        "path = \"/emails/{email_id}\"",
        "email_id = { path = \"email_id\" }",
        "scheduled_at = { body = \"$.scheduled_at\" }\n",
        "tags = { body = \"$.tags\", optional = true }",
        "reply_to = { body = \"$['reply-to']\", optional = true }",
        "same_action = [\"email_id\"]",
        "summary = \"Update a single email: email id {email_id}, scheduled at {scheduled_at}{?reply_to}, reply to {reply_to}{/reply_to}{?tags}, tags {tags}{/tags}.\"",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(
        !text.contains("$.id"),
        "a readOnly field is not sent: {text}"
    );
}

/// Live drafts only, and every write route held: what the file leaves for the operator is a
/// TODO, never a route that passes through.
fn assert_all_held(text: &str, outcomes: &[crate::init::draft::Outcome]) {
    for outcome in outcomes {
        assert_eq!(outcome.commented, None, "{}:\n{text}", outcome.what);
    }
    assert!(!text.contains("UNAPPROVED"), "{text}");
}

#[test]
fn bodies_the_gateway_cannot_read_are_held_and_refused() {
    let d = doc(
        "3.0.3",
        json!({"/files": {"post": {"operationId": "upload", "requestBody": {"content": {
            "multipart/form-data": {"schema": {"type": "object"}}}}}},
               "/ping": {"post": {"operationId": "ping"}},
               "/x/{id}": {"post": {"operationId": "ext", "requestBody": {"$ref": "other.yaml#/B"}}}}),
        json!({}),
    );
    let (text, outcomes, _) = draft_all(&d);
    assert_all_held(&text, &outcomes);
    assert!(
        outcomes[0].refuses[0].contains("a multipart/form-data body"),
        "{text}"
    );
    assert!(outcomes[1].refuses.is_empty(), "{text}");
    assert!(
        outcomes[2].refuses[0].contains("outside the document"),
        "{text}"
    );
    for line in [
        "action = { value = \"POST /files\" }",
        "# HELD, BUT REFUSED (400, nothing forwarded): a multipart/form-data body",
        "action = { value = \"POST /ping\" }",
        "summary = \"Ping: action {action}.\"",
        "id = { path = \"id\" }",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn summaries_are_plain_text_of_the_description() {
    let d = doc(
        "3.0.0",
        json!({"/v1/customers": {"post": {"operationId": "PostCustomers",
            "description": "<p>Creates a new customer object. See <a href=\"/docs/connect\">Connect</a>.</p>",
            "requestBody": {"content": {"application/x-www-form-urlencoded": {"schema": {
              "type": "object", "required": ["email"],
              "properties": {"name": {"type": "string"}, "email": {"type": "string"}}}}}}}},
               "/gists": {"post": {"operationId": "gists/create",
            "summary": "Create a [gist](https://docs.github.com/x) &amp; **share** it",
            "requestBody": {"content": {"application/json": {"schema": {"type": "object",
              "properties": {"files": {"type": "object"}}}}}}}}}),
        json!({}),
    );
    let (text, _, _) = draft_all(&d);
    for line in [
        "summary = \"Creates a new customer object: email {email}{?name}, name {name}{/name}.\"",
        "# POST /v1/customers (operationId PostCustomers): Creates a new customer object. See Connect.",
        "summary = \"Create a gist & share it{?files}; files {files}{/files}.\"",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn recursive_refs_stop() {
    let d = doc(
        "3.1.0",
        json!({"/a": {"post": {"operationId": "a", "requestBody": {"content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Loop"}}}}}}}),
        json!({"schemas": {"Loop": {"$ref": "#/components/schemas/Loop"}}}),
    );
    let (text, outcomes, _) = draft_all(&d);
    assert_all_held(&text, &outcomes);
    assert!(outcomes[0].refuses[0].contains("does not end"), "{text}");
}

#[test]
fn selection_by_glob_tag_and_extension() {
    let d = doc(
        "3.0.0",
        json!({"/a/{id}": {"post": {"operationId": "a_create", "tags": ["A"], "x-risky": true},
                           "delete": {"operationId": "a_delete", "tags": ["B"]}},
               "/b/{id}": {"put": {"operationId": "b_put", "tags": ["A"], "x-risky": false}}}),
        json!({}),
    );
    let pick = |selection: Selection| {
        let (drafts, _, _) = drafts(&d, &selection).unwrap();
        drafts.into_iter().map(|d| d.key).collect::<Vec<_>>()
    };
    let glob = |p: &str| glob::Pattern::new(p).unwrap();
    assert_eq!(
        pick(Selection::default()),
        ["a_create", "a_delete", "b_put"]
    );
    assert_eq!(
        pick(Selection {
            include: vec![glob("/a/*")],
            ..Default::default()
        }),
        ["a_create", "a_delete"]
    );
    assert_eq!(
        pick(Selection {
            exclude: vec![glob("*_delete")],
            ..Default::default()
        }),
        ["a_create", "b_put"]
    );
    assert_eq!(
        pick(Selection {
            tags: vec!["A".into()],
            ..Default::default()
        }),
        ["a_create", "b_put"]
    );
    assert_eq!(
        pick(Selection {
            extensions: vec![("x-risky".into(), None)],
            ..Default::default()
        }),
        ["a_create"]
    );
}

#[test]
fn versions_other_than_3_0_and_3_1_are_refused() {
    assert_eq!(
        drafts(&json!({"swagger": "2.0"}), &Selection::default()).err(),
        Some(OpenApiError::NoVersion)
    );
    assert_eq!(
        drafts(
            &json!({"openapi": "4.0.0", "paths": {}}),
            &Selection::default()
        )
        .err(),
        Some(OpenApiError::Version("4.0.0".into()))
    );
}

#[test]
fn a_server_path_prefixes_the_policy_paths_and_odd_capture_names_are_renamed() {
    let d = json!({"openapi": "3.0.0", "servers": [{"url": "https://api.x.com/v1/"}],
        "paths": {"/keys/{api-key-id}": {"delete": {"operationId": "keys/remove"}}}});
    let (text, outcomes, _) = draft_all(&d);
    assert_eq!(outcomes[0].commented, None, "{text}");
    assert!(text.contains("path = \"/v1/keys/{api_key_id}\""), "{text}");
    assert!(
        text.contains("api_key_id = { path = \"api_key_id\" }"),
        "{text}"
    );
}

#[test]
fn self_referring_all_ofs_stop_early() {
    let d = doc(
        "3.0.0",
        json!({"/a": {"post": {"operationId": "a", "requestBody": {"content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Twice"}}}}}}}),
        json!({"schemas": {"Twice": {"allOf": [{"$ref": "#/components/schemas/Twice"},
                                               {"$ref": "#/components/schemas/Twice"}]}}}),
    );
    let (text, outcomes, _) = draft_all(&d);
    assert_all_held(&text, &outcomes);
    assert!(outcomes[0].refuses[0].contains("recursive"), "{text}");
}
