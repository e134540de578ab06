//! `GET /.well-known/poppy.json`: the upstream's document, with the extension advertised.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::{Request, Session, Stack, Store, store_tests};
use serde_json::json;

async fn well_known_advertises_operations_v2(store: Store) {
    let stack = Stack::start(store);
    for (what, request) in [
        (
            "without a Session",
            Request::plain("GET", "/.well-known/poppy.json"),
        ),
        (
            "with a Session",
            Request::agent(
                "GET",
                "/.well-known/poppy.json",
                &Session::signed_out("ses_wk"),
            ),
        ),
    ] {
        let answer = stack.gateway.send(&request).await;
        answer.assert_status(200, what);
        assert!(
            answer
                .header("content-type")
                .is_some_and(|ct| ct.starts_with("application/json")),
            "{what}: poppy.json is JSON:\n{}",
            answer.describe()
        );
        let document = answer.json();
        assert_eq!(
            document["extensions"]["operations"],
            json!([{"version": "2"}]),
            "{what}: extensions.operations must list version 2: {document}"
        );
        assert_eq!(
            document["name"], "Counting Co",
            "{what}: the upstream's members stay"
        );
        assert_eq!(document["version"], "0.4", "{what}");
        assert_eq!(
            document["extensions"]["other"],
            json!([{"version": "1"}]),
            "{what}: the upstream's other extensions stay: {document}"
        );
    }
    stack.assert_executions(0, "poppy.json is not an execution");
}

store_tests!(well_known_advertises_operations_v2);
