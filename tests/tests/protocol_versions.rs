//! Operations versions (issue 42): `[protocol] operations_versions` is what poppy.json
//! advertises, only versions the gateway implements may be listed, and
//! `poppy_declared_operations_versions_total` counts what agents declare, so an operator
//! sees v3 agents arrive before the gateway serves v3.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::{GatewayBuilder, Request, Session, Stack, Store, Upstream, store_tests};
use serde_json::json;

const DECLARED: &str = "poppy_declared_operations_versions_total";

fn exchange(session: &str) -> Request {
    Request::exchange(&Session::signed_out(session), "o1", "i1", "s1")
}

async fn declared_versions_are_served_as_configured_and_counted(store: Store) {
    let stack = Stack::start_with(store, |gateway| {
        gateway.extra_config("[protocol]\noperations_versions = [\"2\"]")
    });
    let before = stack.gateway.metrics().await;
    for version in ["2", "other", "none"] {
        assert_eq!(
            before.get(DECLARED, &[("version", version)]),
            Some(0.0),
            "{DECLARED}{{version=\"{version}\"}} is exported from the start"
        );
    }

    let document = stack
        .gateway
        .send(&Request::plain("GET", "/.well-known/poppy.json"))
        .await;
    document.assert_status(200, "poppy.json");
    assert_eq!(
        document.json()["extensions"]["operations"],
        json!([{"version": "2"}]),
        "poppy.json lists the configured versions"
    );

    // v2 is served: the action is held for approval, and approved it runs once.
    let request = exchange("ses_v2").extensions("\"operations\";v=\"2\"");
    let operation = stack.gateway.send(&request).await.operation();
    stack
        .gateway
        .send(&request.approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");

    // A v3 agent (and one listing v3 with v2 unknown to it) gets today's refusal.
    for (what, declared) in [
        ("v=\"3\"", "\"operations\";v=\"3\""),
        ("no version", "\"operations\""),
    ] {
        stack
            .gateway
            .send(&exchange("ses_v3").extensions(declared))
            .await
            .assert_error(400, "extension_required", what);
    }
    stack
        .gateway
        .send(&exchange("ses_none").without_header("Poppy-Extensions"))
        .await
        .assert_error(400, "extension_required", "no Poppy-Extensions");
    stack.assert_executions(1, "only the approved v2 request");

    let after = stack.gateway.metrics().await;
    for (version, count) in [("2", 2.0), ("other", 2.0), ("none", 1.0)] {
        assert_eq!(
            after.value(DECLARED, &[("version", version)]),
            count,
            "{DECLARED}{{version=\"{version}\"}}"
        );
    }
}

store_tests!(declared_versions_are_served_as_configured_and_counted);

/// A version the gateway does not implement is refused by `check`, at its place in the file,
/// and the gateway does not start with it.
#[test]
fn a_version_the_gateway_does_not_implement_is_refused() {
    let upstream = Upstream::start();
    let config = GatewayBuilder::new(&upstream.url())
        .extra_config("[protocol]\noperations_versions = [\"2\", \"3\"]")
        .write();
    let check = config.run("check", &[]);
    check.assert_code(1, "check with operations_versions = [\"2\", \"3\"]");
    let output = check.output();
    assert!(
        output.contains("protocol.operations_versions")
            && output.contains("\"3\" is not an operations version this gateway implements"),
        "check names the key and the version:\n{}",
        check.describe()
    );
    let at = format!("{}:", config.config.display());
    assert!(
        output
            .lines()
            .any(|line| line.contains(&at) && line.contains("protocol.operations_versions")),
        "check says file:line:column:\n{}",
        check.describe()
    );
}
