//! FastMCP (PyPI `fastmcp` 4.2.3, the most common way MCP servers and clients are written) on
//! both sides of the gateway, on both stores: a FastMCP server (tests/deps/mcp/
//! fastmcp_upstream.py) counting executions, FastMCP's client (fastmcp_agent.py) in front.
//!
//! Held tools' widened `outputSchema` keeps their typed results typed: the approved call's
//! `data` is the object FastMCP's type builder makes from the schema (not a plain dict), and a
//! primitive result is the primitive (not `None`). The default `call_tool` raises on the held
//! call; with `raise_on_error=False` the operation is read, approved in `meta`, performed once.
//! And docs/mcp.md's FastMCP snippet runs as written. Needs `bash tests/deps/install.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use poppy_e2e::mcp_client::MCP_PATH;
use poppy_e2e::python_mcp::PythonMcpServer;
use poppy_e2e::thirdparty::{self, deps_dir, python};
use poppy_e2e::{GatewayBuilder, RedisServer, Session, Store, store_tests};
use serde_json::{Value, json};

const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

const POLICIES: &str = r#"
[[tool]]
name = "exchange_tool"
tool = "exchange_item"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku}."

[tool.terms]
order_id = { argument = "$.order_id" }
item_id = { argument = "$.item_id" }
replacement_sku = { argument = "$.replacement_sku" }

[[tool]]
name = "count_tool"
tool = "count_exchanges"
id_prefix = "cnt"
expires_in = "15m"
same_action = ["order_id"]
summary = "Count the exchanges of order {order_id}."

[tool.terms]
order_id = { argument = "$.order_id" }
"#;

/// Run `script` (a path) with the fastmcp environment; its stdout, after asserting success.
async fn run(script: &Path, args: &[&str]) -> String {
    let child = tokio::process::Command::new(python("fastmcp"))
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the FastMCP client");
    let output = tokio::time::timeout(SCRIPT_LIMIT, child.wait_with_output())
        .await
        .expect("the FastMCP client finishes")
        .expect("its output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let text = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    if std::env::var_os("POPPY_E2E_SDK_OUTPUT").is_some() {
        println!("{}:\n{text}", script.display());
    }
    assert!(
        output.status.success(),
        "{} failed:\n{text}",
        script.display()
    );
    stdout
}

/// docs/mcp.md's ```python block.
fn docs_snippet() -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/mcp.md"))
        .unwrap();
    doc.split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("a python block in docs/mcp.md")
        .to_owned()
}

async fn fastmcp_through_the_gateway(store: Store) {
    let redis = (store == Store::Redis).then(RedisServer::start);
    let server = PythonMcpServer::start_fastmcp();
    let mut builder = GatewayBuilder::new(&server.url())
        .policy("tools.toml", POLICIES)
        .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\""));
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    let gateway = builder.start();
    let session = Session::signed_out(&format!("ses_fastmcp_{}", std::process::id()));
    let url = format!("{}{MCP_PATH}", gateway.base_url());

    let stdout = run(
        &deps_dir().join("mcp/fastmcp_agent.py"),
        &[&url, &server.url(), &session.header()],
    )
    .await;
    let steps: HashMap<String, Value> = thirdparty::steps(&stdout);
    assert!(steps.contains_key("done"), "{stdout}");

    let raised = steps["default_raises"]["raised"]
        .as_str()
        .unwrap_or_default();
    assert!(
        raised.starts_with("ToolError: Not done yet. This needs the user's approval"),
        "{raised}"
    );
    let held = &steps["held"];
    assert_eq!(held["is_error"], true);
    assert!(held["operation"]["operation_id"].is_string(), "{held}");
    assert_eq!(held["counts"], json!({}), "nothing performed");

    // Typed as without the gateway (FastMCP's dataclass for the schema), never a dict.
    let direct = &steps["direct"];
    assert_ne!(direct["exchange"]["type"], "dict", "{direct}");
    assert_eq!(direct["primitive"]["type"], "int", "{direct}");
    let approve = &steps["approve"];
    assert_eq!(
        approve["data"]["type"], direct["exchange"]["type"],
        "{approve}"
    );
    assert_eq!(approve["data"]["value"]["exchange_id"], "exg_1");
    assert_eq!(approve["counts"]["exchange_item"], 1);
    let replay = &steps["replay"];
    assert_eq!(replay["data"], approve["data"]);
    assert_eq!(
        replay["counts"]["exchange_item"], 1,
        "a replay performs nothing"
    );

    let primitive = &steps["primitive"];
    assert_eq!(
        primitive["data"],
        json!({"type": "int", "value": 2}),
        "{primitive}"
    );
    assert_eq!(primitive["counts"]["count_exchanges"], 1);

    // What made them typed: the tools' own schemas stay at the top.
    let schema = &steps["list"]["tools"]["exchange_item"];
    assert_eq!(schema["type"], "object", "{schema}");
    assert!(
        schema["properties"]["exchange_id"].is_object(),
        "at the top: {schema}"
    );
    assert!(schema["oneOf"][1]["properties"]["operation"].is_object());
    let wrapped = &steps["list"]["tools"]["count_exchanges"];
    assert_eq!(
        wrapped["x-fastmcp-wrap-result"], true,
        "at the top: {wrapped}"
    );

    // docs/mcp.md's snippet, as written.
    let snippet = tempfile::Builder::new().suffix(".py").tempfile().unwrap();
    std::fs::write(snippet.path(), docs_snippet()).unwrap();
    let printed = run(snippet.path(), &[&url, &session.header()]).await;
    assert!(
        printed.starts_with("approve? Exchange item **itm_4Qa** on order ord_d1"),
        "{printed}"
    );
    // exg_2 was the direct call's.
    assert!(printed.contains("done: exg_3"), "{printed}");
    assert_eq!(server.count("exchange_item").await, 3, "once per approval");
}

store_tests!(fastmcp_through_the_gateway);
