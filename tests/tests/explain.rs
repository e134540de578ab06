//! `poppy-gateway explain`: the policy that matches a request, its terms, summary and the
//! operation a Personal Agent would receive; or why nothing matches, or which term is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use poppy_e2e::gateway::ConfigDir;
use poppy_e2e::{GatewayBuilder, Run};
use serde_json::Value;

/// Run `poppy-gateway explain --config <config> args…`.
fn explain(config: &ConfigDir, args: &[&str]) -> Run {
    config.run("explain", args)
}

/// The JSON the agent would receive: everything after the line `403 {`.
fn answer_json(run: &Run) -> Value {
    let at = run
        .stdout
        .find("403 {")
        .unwrap_or_else(|| panic!("no `403 {{` in the output:\n{}", run.describe()));
    serde_json::from_str(&run.stdout[at + 4..])
        .unwrap_or_else(|e| panic!("the 403 body is not JSON ({e}):\n{}", run.describe()))
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    format!("@{}", path.display())
}

#[test]
fn a_matching_request_shows_terms_summary_and_operation() {
    let config = GatewayBuilder::new("http://127.0.0.1:1").write();
    let body = write(
        config.dir.path(),
        "req.json",
        r#"{"item_id": "itm_4Qa", "replacement_sku": "stormline-m"}"#,
    );
    let run = explain(
        &config,
        &[
            "--method",
            "POST",
            "--path",
            "/orders/ord_7Hk2/exchanges",
            "--body",
            &body,
        ],
    );
    run.assert_code(0, "a matching request");
    for shown in [
        "policy `exchange`",
        "shop.toml:",
        "POST /orders/{order_id}/exchanges",
        "from path capture `order_id`",
        "from body `$.item_id`",
        "Exchange item **itm_4Qa** on order ord_7Hk2 for stormline-m.",
        "throwaway key",
    ] {
        assert!(
            run.stdout.contains(shown),
            "shows `{shown}`:\n{}",
            run.describe()
        );
    }
    let answer = answer_json(&run);
    assert_eq!(answer["error"], "approval_required");
    let operation = &answer["operation"];
    assert!(
        operation["operation_id"]
            .as_str()
            .unwrap()
            .starts_with("exc_s"),
        "a signed-out operation: {operation}"
    );
    assert!(operation["revision"].as_str().unwrap().contains('-'));
    assert_eq!(
        operation["terms"],
        serde_json::json!({"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-m"})
    );

    let run = explain(
        &config,
        &[
            "--path",
            "/orders/ord_7Hk2/exchanges",
            "--body",
            &body,
            "--signed-in",
        ],
    );
    run.assert_code(0, "signed in");
    let id = answer_json(&run)["operation"]["operation_id"].clone();
    assert!(
        id.as_str().unwrap().starts_with("exc_a"),
        "an account's operation: {id}"
    );
}

#[test]
fn query_and_header_terms_come_from_the_flags() {
    let policy = r#"
[[operation]]
name = "return"
method = "POST"
path = "/returns"
id_prefix = "ret"
expires_in = "15m"
same_action = ["store"]
summary = "Return at {store} because {reason}."

[operation.terms]
store = { header = "X-Store" }
reason = { query = "reason" }
"#;
    let config = GatewayBuilder::new("http://127.0.0.1:1")
        .policy("returns.toml", policy)
        .write();
    let run = explain(
        &config,
        &[
            "--path",
            "/returns?reason=too+small",
            "--header",
            "X-Store: north",
        ],
    );
    run.assert_code(0, "query and header terms");
    assert!(
        run.stdout.contains("Return at north because too small."),
        "{}",
        run.describe()
    );
    let run = explain(&config, &["--path", "/returns", "--query", "reason=big"]);
    run.assert_code(1, "the header term is missing");
    assert!(run.stdout.contains("term `store`"), "{}", run.describe());
}

#[test]
fn no_match_lists_the_routes() {
    let config = GatewayBuilder::new("http://127.0.0.1:1").write();
    let run = explain(&config, &["--method", "GET", "--path", "/orders/ord_7Hk2"]);
    run.assert_code(1, "no policy matches");
    assert!(
        run.stdout
            .contains("no policy matches GET /orders/ord_7Hk2"),
        "{}",
        run.describe()
    );
    for route in [
        "/orders/{order_id}/exchanges",
        "/orders/{order_id}/cancel",
        "/orders/{order_id}/refunds",
    ] {
        assert!(
            run.stdout.contains(route),
            "lists {route}:\n{}",
            run.describe()
        );
    }
}

#[test]
fn a_missing_term_is_named() {
    let config = GatewayBuilder::new("http://127.0.0.1:1").write();
    let run = explain(
        &config,
        &[
            "--path",
            "/orders/o1/exchanges",
            "--body",
            r#"{"item_id": "i1"}"#,
        ],
    );
    run.assert_code(1, "a missing term");
    for shown in [
        "term `replacement_sku`",
        "missing_term",
        "$.replacement_sku",
        "400",
    ] {
        assert!(
            run.stdout.contains(shown),
            "shows `{shown}`:\n{}",
            run.describe()
        );
    }
    let run = explain(
        &config,
        &["--path", "/orders/o1/exchanges", "--body", "not json"],
    );
    run.assert_code(1, "a body that isn't JSON");
    assert!(run.stdout.contains("invalid_body"), "{}", run.describe());
}

#[test]
fn a_lookup_is_shown_and_can_be_fed_an_answer() {
    let policy = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/shop.toml"),
    )
    .unwrap();
    let config = GatewayBuilder::new("http://127.0.0.1:1")
        .policy("shop.toml", &policy)
        .extra_config(&poppy_e2e::shop::approval_page_config())
        .write();
    let body = r#"{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}"#;
    let args = ["--path", "/orders/ord_7Hk2/exchanges", "--body", body];
    let run = explain(&config, &args);
    run.assert_code(0, "a lookup without an answer");
    assert!(
        run.stdout.contains("GET /catalog/stormline-insulated-m")
            && run.stdout.contains("⟨lookup $.price.amount⟩"),
        "{}",
        run.describe()
    );

    let answer = write(
        config.dir.path(),
        "catalog.json",
        r#"{"sku": "stormline-insulated-m", "name": "Stormline Insulated Jacket (M)", "price": {"amount": "190.00", "currency": "USD"}}"#,
    );
    let mut with_answer = args.to_vec();
    with_answer.extend(["--lookup-answer", &answer]);
    let run = explain(&config, &with_answer);
    run.assert_code(0, "one lookup answered, the other not");
    assert!(
        run.stdout
            .contains("for ⟨compute replacement_price - item_price⟩")
            && run.stdout.contains("paid ⟨lookup $.price.amount⟩"),
        "{}",
        run.describe()
    );
    let item = r#"item={"item_id": "itm_4Qa", "name": "Stormline Jacket (M)", "price": {"amount": "120.00", "currency": "USD"}}"#;
    with_answer.extend(["--lookup-answer", item]);
    let run = explain(&config, &with_answer);
    run.assert_code(0, "both lookups answered");
    assert!(
        run.stdout.contains("**for 70.00 USD more**")
            && run.stdout.contains("GET /orders/ord_7Hk2/items/itm_4Qa"),
        "{}",
        run.describe()
    );

    let mut lacking = args.to_vec();
    lacking.extend(["--lookup-answer", r#"{"name": "x"}"#]);
    let run = explain(&config, &lacking);
    run.assert_code(1, "a lookup answer without the price");
    assert!(run.stdout.contains("lookup_failed"), "{}", run.describe());
}

/// An MCP tool call: a held tool shows its terms and the tool result with the operation; an
/// argument outside the terms is the gateway's own tool error; the endpoint itself and a tool
/// no policy names pass through (exit 1), as in the gateway.
#[test]
fn tool_calls_are_explained_as_the_mcp_endpoint_answers_them() {
    let config = GatewayBuilder::new("http://127.0.0.1:1")
        .policy("tools.toml", poppy_e2e::mcp_stack::TOOL_POLICIES)
        .extra_config("[mcp]\npath = \"/mcp\"")
        .write();
    let run = explain(
        &config,
        &[
            "--tool",
            "exchange_item",
            "--arguments",
            r#"{"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "m"}"#,
        ],
    );
    run.assert_code(0, "a held tool call");
    let at = run.stdout.find("call: {").expect("the tool result");
    let result: Value = serde_json::from_str(&run.stdout[at + 6..]).unwrap();
    assert_eq!(result["isError"], true, "{}", run.describe());
    let operation = &result["structuredContent"]["operation"];
    assert_eq!(operation["terms"]["order_id"], "ord_7Hk2");
    assert!(
        operation["operation_id"]
            .as_str()
            .unwrap()
            .starts_with("exc_")
    );

    let extra = explain(
        &config,
        &[
            "--tool",
            "cancel_order",
            "--arguments",
            r#"{"order_id": "o1", "refund_to": "elsewhere"}"#,
        ],
    );
    extra.assert_code(1, "an argument outside the terms");
    assert!(
        extra.stdout.contains("`$.refund_to`"),
        "{}",
        extra.describe()
    );

    for (args, says) in [
        (&["--path", "/mcp"][..], "is the MCP endpoint"),
        (
            &["--tool", "lookup_order"][..],
            "passes through to the MCP server untouched",
        ),
    ] {
        let passes = explain(&config, args);
        passes.assert_code(1, says);
        assert!(passes.stdout.contains(says), "{}", passes.describe());
        assert!(
            passes.stdout.contains("exchange_item  (exchange_tool)"),
            "{}",
            passes.describe()
        );
    }
}
