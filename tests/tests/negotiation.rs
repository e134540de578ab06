//! `Poppy-Extensions`: operations are used only with a request that declares
//! `"operations";v="2"`; anything else on a policy route is refused and nothing is forwarded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::{Request, Session, Stack, Store, store_tests};
use serde_json::Value;

fn exchange() -> Request {
    Request::exchange(&Session::signed_out("ses_neg"), "o1", "i1", "s1")
}

async fn missing_or_other_version_is_extension_required(store: Store) {
    let stack = Stack::start(store);
    let cases: Vec<(&str, Request)> = vec![
        (
            "no Poppy-Extensions",
            exchange().without_header("Poppy-Extensions"),
        ),
        ("v=\"1\"", exchange().extensions("\"operations\";v=\"1\"")),
        ("no version", exchange().extensions("\"operations\"")),
        ("v=\"3\"", exchange().extensions("\"operations\";v=\"3\"")),
        (
            "another extension only",
            exchange().extensions("\"other\";v=\"2\""),
        ),
    ];
    for (what, request) in cases {
        let body = stack
            .gateway
            .send(&request)
            .await
            .assert_error(400, "extension_required", what);
        assert_eq!(
            body.get("extension").and_then(Value::as_str),
            Some("operations"),
            "{what}: extension_required must name `operations`: {body}"
        );
        assert!(
            body.get("operation").is_none(),
            "{what}: a request that does not declare the extension must not get an operation"
        );
    }
    stack.assert_executions(0, "requests without operations v2");
}

/// Even an approval is not forwarded when the request does not declare the extension.
async fn approval_without_declaration_is_not_forwarded(store: Store) {
    let stack = Stack::start(store);
    let request = exchange();
    let operation = stack.gateway.send(&request).await.operation();
    for extensions in [None, Some("\"operations\";v=\"1\"")] {
        let approved = request.clone().approve(&operation);
        let approved = match extensions {
            None => approved.without_header("Poppy-Extensions"),
            Some(value) => approved.extensions(value),
        };
        stack.gateway.send(&approved).await.assert_error(
            400,
            "extension_required",
            "an approval in a request without operations v2",
        );
    }
    stack.assert_executions(0, "approvals without the declaration");
    // The approval itself is still good.
    stack
        .gateway
        .send(&request.approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
}

async fn malformed_extensions_header_is_invalid_header(store: Store) {
    let stack = Stack::start(store);
    for value in [
        "\"operations\";v=",
        "((",
        "\"operations",
        "operations;;v=\"2\"",
        "\"operations\";v=\"2\",,",
    ] {
        stack
            .gateway
            .send(&exchange().extensions(value))
            .await
            .assert_error(400, "invalid_header", &format!("Poppy-Extensions: {value}"));
    }
    stack.assert_executions(0, "malformed Poppy-Extensions");
}

async fn operations_v2_among_other_entries_is_accepted(store: Store) {
    let stack = Stack::start(store);
    for value in [
        "\"operations\";v=\"2\"",
        "\"other\";v=\"1\", \"operations\";v=\"2\"",
        "\"operations\";v=\"2\", \"other\"",
        "\"operations\";v=\"1\", \"operations\";v=\"2\"",
        "\"operations\";v=\"2\";future=?1",
    ] {
        let operation = stack
            .gateway
            .send(&exchange().extensions(value))
            .await
            .operation_in(&format!("Poppy-Extensions: {value}"));
        operation.assert_prefix("exc");
    }
    stack.assert_executions(0, "unapproved requests");
}

store_tests!(
    missing_or_other_version_is_extension_required,
    approval_without_declaration_is_not_forwarded,
    malformed_extensions_header_is_invalid_header,
    operations_v2_among_other_entries_is_accepted,
);
