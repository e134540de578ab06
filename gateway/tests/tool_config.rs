//! `[mcp]` and `[[tool]]` policies: what loads, and the errors, with their file and line.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on setup errors"
)]

use poppy_e2e::config_files::{ConfigFiles as Files, assert_error_at};
use poppy_gateway::config;
use poppy_gateway::policy::TermSource;

/// With `[mcp]`, which a `[[tool]]` needs.
const GATEWAY: &str = concat!(
    poppy_e2e::minimal_gateway_toml!(),
    "\n[mcp]\npath = \"/mcp\"\n\n[session]\nverify = \"off\"\n"
);

const TOOL: &str = r#"[[tool]]
name = "exchange_tool"
tool = "exchange_item"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku} ({channel})."

[tool.terms]
order_id = { argument = "$.order_id" }
item_id = { argument = "$.item_id" }
replacement_sku = { argument = "$.replacement_sku" }
channel = { value = "mcp" }
"#;

#[test]
fn a_tool_policy_loads_with_its_endpoint() {
    let config = Files::new(GATEWAY, TOOL).load_with(config::load).unwrap();
    assert_eq!(config.first_mcp().unwrap().path, "/mcp");
    let policy = config.policies.find_tool("exchange_item").unwrap();
    assert_eq!(policy.name, "exchange_tool");
    assert!(policy.route.is_none());
    assert_eq!(
        policy.terms[1],
        (
            "item_id".to_owned(),
            TermSource::Argument("$.item_id".into())
        )
    );
    assert!(config.policies.find_tool("exchange_tool").is_none());
    assert!(config.policies.has_tools());
}

#[test]
fn tools_need_an_mcp_table() {
    let files = Files::new(&GATEWAY.replace("[mcp]\npath = \"/mcp\"\n", ""), TOOL);
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        0,
        &["exchange_tool", "[mcp]"],
    );
    // An [mcp] table alone (no tool yet) is fine.
    let operation_only = r#"[[operation]]
name = "cancel"
method = "POST"
path = "/orders/{order_id}/cancel"
id_prefix = "can"
expires_in = "1h"
same_action = ["order_id"]
summary = "Cancel {order_id}."

[operation.terms]
order_id = { path = "order_id" }
"#;
    assert!(
        Files::new(GATEWAY, operation_only)
            .load_with(config::load)
            .is_ok()
    );
}

#[test]
fn term_sources_belong_to_their_table() {
    let files = Files::new(
        GATEWAY,
        &TOOL.replace(
            r#"item_id = { argument = "$.item_id" }"#,
            r#"item_id = { body = "$.item_id" }"#,
        ),
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        11,
        &["item_id", "argument"],
    );

    let files = Files::new(
        GATEWAY,
        &TOOL.replace(
            r#"item_id = { argument = "$.item_id" }"#,
            r#"item_id = { argument = "$.[[" }"#,
        ),
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        11,
        &["JSONPath"],
    );

    let operation = r#"[[operation]]
name = "cancel"
method = "POST"
path = "/orders/{order_id}/cancel"
id_prefix = "can"
expires_in = "1h"
same_action = ["order_id"]
summary = "Cancel {order_id}."

[operation.terms]
order_id = { argument = "$.order_id" }
"#;
    let files = Files::new(GATEWAY, operation);
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        11,
        &["[[tool]]"],
    );
}

#[test]
fn tools_are_linted_like_operations() {
    let files = Files::new(GATEWAY, &TOOL.replace(" ({channel})", ""));
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        7,
        &["tool `exchange_tool`", "leaves out term `channel`"],
    );
    let files = Files::new(
        GATEWAY,
        &TOOL.replace(r#"["order_id", "item_id"]"#, r#"["order"]"#),
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        6,
        &["same_action", "order"],
    );
    let files = Files::new(
        GATEWAY,
        &TOOL.replace(r#"tool = "exchange_item""#, r#"tool = "exchange item""#),
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        3,
        &["MCP tool name"],
    );
    let files = Files::new(
        GATEWAY,
        &TOOL.replace("name = ", "method = \"POST\"\nname = "),
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        2,
        &["method"],
    );
}

#[test]
fn one_policy_per_tool() {
    let twice = format!(
        "{TOOL}\n{}",
        TOOL.replace("exchange_tool", "exchange_again")
    );
    let files = Files::new(GATEWAY, &twice);
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        0,
        &["exchange_item", "two policies"],
    );
}

#[test]
fn the_mcp_path_is_checked() {
    let files = Files::new(&GATEWAY.replace("\"/mcp\"", "\"mcp\""), TOOL);
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        10,
        &["mcp.path"],
    );
    let files = Files::new(&GATEWAY.replace("\"/mcp\"", "\"/mcp?x=1\""), TOOL);
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        10,
        &["mcp.path"],
    );

    let claims_the_endpoint = format!(
        "{TOOL}\n{}",
        r#"[[operation]]
name = "mcp_post"
method = "POST"
path = "/MCP/"
id_prefix = "m"
expires_in = "1h"
same_action = ["x"]
summary = "{x}"

[operation.terms]
x = { value = 1 }
"#
    );
    let files = Files::new(GATEWAY, &claims_the_endpoint);
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        10,
        &["mcp_post", "[[tool]]"],
    );
}

/// `approval` on a `[[tool]]`, as on an `[[operation]]`: `"either"` with `[approval_page]`,
/// an unknown value refused at its line.
#[test]
fn a_tool_may_be_approved_on_the_page() {
    let page = "\n[approval_page]\nlisten = \"127.0.0.1:8091\"\npublic_url = \"https://approve.shop.example/\"\ncompany_name = \"Shop\"\nissuer = \"https://id.shop.example\"\nclient_id = \"page\"\nclient_secret_file = \"page.secret\"\n";
    let either = TOOL.replacen("expires_in", "approval = \"either\"\nexpires_in", 1);
    let files = Files::new(&format!("{GATEWAY}{page}"), &either);
    std::fs::write(files.dir().join("page.secret"), "s3cret\n").unwrap();
    let config = files.load_with(config::load).unwrap();
    let policy = config.policies.find_tool("exchange_item").unwrap();
    assert!(policy.approval.page && !policy.approval.page_proof);
    // Page only, and proof, as on an operation: a Poppy agent's MCP client is shown the link.
    for (key, page_only) in [
        ("approval = \"company_page\"", true),
        ("proof = \"company_page\"", false),
    ] {
        let tool = TOOL.replacen("expires_in", &format!("{key}\nexpires_in"), 1);
        let files = Files::new(&format!("{GATEWAY}{page}"), &tool);
        std::fs::write(files.dir().join("page.secret"), "s3cret\n").unwrap();
        let config = files.load_with(config::load).unwrap();
        let policy = config.policies.find_tool("exchange_item").unwrap();
        assert!(policy.approval.page_proof, "{key}");
        assert_eq!(policy.approval.page, page_only, "{key}");
    }
    // Without a page, a tool that needs one is refused, as an operation is.
    let proof = TOOL.replacen("expires_in", "proof = \"company_page\"\nexpires_in", 1);
    let files = Files::new(GATEWAY, &proof);
    assert!(files.load_with(config::load).is_err());
    // Line 5 of the policy is the key.
    let wrong = TOOL.replacen("expires_in", "approval = \"page\"\nexpires_in", 1);
    let files = Files::new(&format!("{GATEWAY}{page}"), &wrong);
    std::fs::write(files.dir().join("page.secret"), "s3cret\n").unwrap();
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        5,
        &["exchange_tool", "is not one of"],
    );
}
