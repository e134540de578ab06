//! The official MCP SDKs as Personal Agents, end to end: the Python SDK (`mcp` 2.x in its
//! default stateless 2026-07-28 mode and in its initialize-handshake mode, and the last
//! `mcp` 1.x) and the TypeScript SDK (`@modelcontextprotocol/sdk`), each driven by a small
//! agent script (tests/deps/mcp/agent.py, tests/deps/node/mcp-ts/agent.mjs), through the
//! gateway to an MCP server built with the Python SDK (tests/deps/mcp/upstream.py), answering
//! JSON or SSE, on both stores.
//!
//! Each script walks the steps of issue 13 and prints what its SDK returned, one JSON line
//! per step; this file asserts on them: the tools listed (held tools' outputSchema admits the
//! operation), an unheld call, a held call (operation visible to the SDK), approval (one
//! execution), a replay (still one), 20 concurrent retries while the call is performed (one
//! execution, each retry an in-progress result the SDK accepts, the client session still
//! usable), a replay from another MCP session (each keeps its own session), changed
//! arguments before performance (a new revision) and a client without the extension (an
//! ordinary tool error). Needs `bash tests/deps/install.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use poppy_e2e::gateway::{HTTP_TIMEOUT, http_client};
use poppy_e2e::mcp_client::{MCP_PATH, rpc_response};
use poppy_e2e::mcp_stack::TOOL_POLICIES;
use poppy_e2e::python_mcp::PythonMcpServer;
use poppy_e2e::thirdparty::{self, ScriptOutput, deps_dir, node_project, python, run_script};
use poppy_e2e::{Gateway, GatewayBuilder, RedisServer, Request, Session, Store, store_tests};
use serde_json::{Value, json};

/// Long enough for a slow CI machine to run a whole script; a hung SDK fails the test.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);
const RETRY_KEY: &str = "personalagentprotocol.org/retry";

#[derive(Clone, Copy, Debug)]
enum Sdk {
    /// `mcp` 2.x, default mode: `server/discover`, then stateless 2026-07-28 requests.
    Python2,
    /// `mcp` 2.x with `mode="legacy"`: the initialize handshake, 2025-11-25, MCP sessions.
    Python2Handshake,
    /// The last `mcp` 1.x: initialize, 2025-11-25, MCP sessions.
    Python1,
    /// `@modelcontextprotocol/sdk`: initialize, 2025-11-25, MCP sessions.
    TypeScript,
}

impl Sdk {
    fn has_sessions(self) -> bool {
        !matches!(self, Sdk::Python2)
    }

    fn command(self, gateway_mcp: &str, upstream: &str, session: &str) -> Command {
        let (mut command, mode) = match self {
            Sdk::Python2 => (Command::new(python("mcp2")), Some("auto")),
            Sdk::Python2Handshake => (Command::new(python("mcp2")), Some("legacy")),
            Sdk::Python1 => (Command::new(python("mcp1")), None),
            Sdk::TypeScript => {
                let dir = node_project("mcp-ts");
                let mut command = Command::new("node");
                command.current_dir(&dir).arg(dir.join("agent.mjs"));
                (command, None)
            }
        };
        if !matches!(self, Sdk::TypeScript) {
            command.arg(deps_dir().join("mcp/agent.py"));
        }
        command.args([gateway_mcp, upstream, session]);
        if let Some(mode) = mode {
            command.arg(mode);
        }
        command
    }
}

/// What one script printed: its steps by name.
struct Run {
    sdk: Sdk,
    steps: HashMap<String, Value>,
    output: String,
}

impl Run {
    fn step(&self, name: &str) -> &Value {
        self.steps.get(name).unwrap_or_else(|| {
            panic!(
                "{:?}: the script printed no `{name}` step:\n{}",
                self.sdk, self.output
            )
        })
    }

    fn context(&self, step: &str) -> String {
        format!("{:?}, step {step}: {}", self.sdk, self.step(step))
    }
}

async fn run_agent(sdk: Sdk, gateway: &Gateway, upstream: &PythonMcpServer) -> Run {
    let session = Session::signed_out(&format!("ses_sdk_{}", std::process::id()));
    let gateway_mcp = format!("{}{MCP_PATH}", gateway.base_url());
    let command = sdk.command(&gateway_mcp, &upstream.url(), &session.header());
    let ScriptOutput { stdout, text } =
        run_script(command, &format!("{sdk:?}: the agent script"), SCRIPT_LIMIT).await;
    let steps = thirdparty::steps(&stdout);
    Run {
        sdk,
        steps,
        output: text,
    }
}

fn operation(result: &Value) -> &Value {
    &result["structuredContent"]["operation"]
}

fn no_raise(run: &Run, step: &str, result: &Value) {
    assert!(
        result.get("raised").is_none(),
        "the SDK raised: {}",
        run.context(step)
    );
}

fn assert_run(run: &Run) {
    assert!(
        run.steps.contains_key("done"),
        "{:?}:\n{}",
        run.sdk,
        run.output
    );

    // Tools listed: the held tool's outputSchema admits the operation too, its own schema
    // at the top (only `required` moved into the alternatives); others unchanged.
    let list = run.step("list");
    let exchange_schema = &list["tools"]["exchange_item"];
    assert_eq!(exchange_schema["type"], "object", "{}", run.context("list"));
    assert!(exchange_schema["properties"]["exchange_id"].is_object());
    assert!(exchange_schema["required"].is_null());
    let branches = exchange_schema["oneOf"].as_array().expect("widened");
    assert_eq!(branches.len(), 2, "{}", run.context("list"));
    assert!(branches[0]["required"].is_array());
    assert!(branches[1]["properties"]["operation"].is_object());
    assert!(list["tools"]["lookup_order"]["oneOf"].is_null());

    let unheld = &run.step("unheld")["result"];
    no_raise(run, "unheld", unheld);
    assert_eq!(unheld["structuredContent"]["order_id"], "ord_1");
    assert_eq!(run.step("unheld")["executions"], 1);

    // The held call: the operation reaches the agent through the SDK's validation.
    let held = run.step("held");
    no_raise(run, "held", &held["result"]);
    assert_eq!(held["result"]["isError"], true, "{}", run.context("held"));
    let op1 = operation(&held["result"]);
    assert!(
        op1["operation_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("exc_")),
        "{}",
        run.context("held")
    );
    assert!(
        op1["summary"]
            .as_str()
            .is_some_and(|s| s.contains("itm_4Qa"))
    );
    assert_eq!(held["executions"], 0, "held: nothing performed");

    let approve = run.step("approve");
    no_raise(run, "approve", &approve["result"]);
    assert_eq!(
        approve["result"]["isError"],
        false,
        "{}",
        run.context("approve")
    );
    assert_eq!(
        approve["result"]["structuredContent"]["exchange_id"],
        "exg_1"
    );
    assert_eq!(approve["executions"], 1, "approved: performed once");

    // The SDK matched the replay to its own request: it carries the retry's JSON-RPC id.
    let replay = run.step("replay");
    no_raise(run, "replay", &replay["result"]);
    assert_eq!(
        replay["result"]["structuredContent"],
        approve["result"]["structuredContent"],
        "{}",
        run.context("replay")
    );
    assert_eq!(replay["executions"], 1, "a replay performs nothing");

    let concurrent = run.step("concurrent");
    assert_eq!(concurrent["started"], true, "{}", run.context("concurrent"));
    assert_eq!(
        concurrent["executions_during"],
        2,
        "{}",
        run.context("concurrent")
    );
    let retries = concurrent["retries"].as_array().expect("retries");
    assert_eq!(retries.len(), 20);
    for retry in retries {
        no_raise(run, "concurrent", retry);
        let in_progress = retry["isError"] == true
            && retry["_meta"][RETRY_KEY]["error"] == "operation_in_progress";
        let recorded = retry["structuredContent"]["exchange_id"] == "exg_2";
        assert!(
            in_progress || recorded,
            "each retry: in progress or the recorded result: {retry}"
        );
    }
    assert_eq!(
        concurrent["first"]["structuredContent"]["exchange_id"],
        "exg_2"
    );
    assert_eq!(
        concurrent["after"]["structuredContent"],
        concurrent["first"]["structuredContent"]
    );
    assert_eq!(concurrent["executions"], 2, "20 retries, one execution");
    let after = &run.step("session_after_in_progress")["result"];
    no_raise(run, "session_after_in_progress", after);
    assert_eq!(after["structuredContent"]["order_id"], "ord_2");

    // Another MCP session replays the approval; each session keeps its own id.
    let other = run.step("other_session");
    no_raise(run, "other_session", &other["result"]);
    assert_eq!(
        other["result"]["structuredContent"],
        approve["result"]["structuredContent"],
        "{}",
        run.context("other_session")
    );
    assert_eq!(
        other["a_before"],
        other["a_after"],
        "{}",
        run.context("other_session")
    );
    assert_eq!(
        other["b_before"],
        other["b_after"],
        "{}",
        run.context("other_session")
    );
    if run.sdk.has_sessions() && !matches!(run.sdk, Sdk::Python2Handshake) {
        assert!(other["a_before"].is_string() && other["b_before"].is_string());
        assert_ne!(other["a_before"], other["b_before"]);
    }
    for works in ["a_works", "b_works"] {
        no_raise(run, "other_session", &other[works]);
        assert_eq!(
            other[works]["isError"],
            false,
            "{works}: {}",
            run.context("other_session")
        );
    }
    assert_eq!(other["executions"], 2);

    let changed = run.step("changed");
    no_raise(run, "changed", &changed["result"]);
    let new = operation(&changed["result"]);
    assert_eq!(
        new["operation_id"],
        changed["first"]["operation_id"],
        "{}",
        run.context("changed")
    );
    assert_ne!(
        new["revision"], changed["first"]["revision"],
        "a new revision"
    );
    assert!(new["terms"]["replacement_sku"] == "stormline-insulated-l");
    assert_eq!(
        changed["executions"], 2,
        "changed arguments perform nothing"
    );

    let plain = run.step("no_extension");
    no_raise(run, "no_extension", &plain["result"]);
    assert_eq!(
        plain["result"]["isError"],
        true,
        "{}",
        run.context("no_extension")
    );
    assert!(
        plain["result"]["structuredContent"].is_null(),
        "no operation"
    );
    assert_eq!(plain["executions"], 2);
}

async fn drive(sdk: Sdk, json: bool, store: Store) {
    let redis = match store {
        Store::Memory => None,
        Store::Redis => Some(RedisServer::start()),
    };
    let upstream = PythonMcpServer::start(json);
    let mut builder = GatewayBuilder::new(&upstream.url())
        .policy("tools.toml", TOOL_POLICIES)
        .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\""));
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    let gateway = builder.start();
    let run = run_agent(sdk, &gateway, &upstream).await;
    if std::env::var_os("POPPY_E2E_SDK_OUTPUT").is_some() {
        // What the SDK saw, for docs/mcp.md and for debugging an SDK upgrade.
        println!("{sdk:?} json={json}:\n{}", run.output);
    }
    assert_run(&run);
    // Clients closing their GET streams and sessions is routine, not an ERROR. (pingora's
    // connection pool logs a lost race for an idle upstream connection at ERROR, harmlessly:
    // it then opens a new one.)
    let log = gateway.log();
    let errors: Vec<&str> = log
        .lines()
        .filter(|line| {
            line.contains(" ERROR ") && !line.contains("failed to acquire reusable stream")
        })
        .collect();
    assert!(
        errors.is_empty(),
        "{sdk:?}: no ERROR in the gateway's log: {errors:#?}\n{log}"
    );
    drop(gateway);
    drop(redis);
}

/// Raw JSON-RPC through the gateway in one protocol version: an MCP session from
/// `initialize` before 2026-07-28, the version in each request's `_meta` from then on.
struct RawVersion<'a> {
    gateway: &'a Gateway,
    session: Session,
    version: &'static str,
    mcp_session: Option<String>,
    next_id: std::cell::Cell<u64>,
}

impl<'a> RawVersion<'a> {
    async fn open(gateway: &'a Gateway, version: &'static str) -> RawVersion<'a> {
        let mut raw = RawVersion {
            gateway,
            session: Session::signed_out(&format!("ses_v{}", version.replace('-', ""))),
            version,
            mcp_session: None,
            next_id: std::cell::Cell::new(1),
        };
        if version < "2026-07-28" {
            let init = raw
                .send(
                    "initialize",
                    json!({"protocolVersion": version, "capabilities": {},
                        "clientInfo": {"name": "raw", "version": "1"}}),
                    true,
                )
                .await;
            raw.mcp_session = init.header("mcp-session-id").map(str::to_owned);
            assert!(raw.mcp_session.is_some(), "{}", init.describe());
            raw.notify("notifications/initialized").await;
        }
        raw
    }

    fn request(&self, body: &Value, extension: bool) -> Request {
        let mut request = Request::agent("POST", MCP_PATH, &self.session)
            .json(body)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", self.version);
        if let Some(id) = &self.mcp_session {
            request = request.header("Mcp-Session-Id", id);
        }
        if let Some(method) = body["method"].as_str() {
            request = request.header("Mcp-Method", method);
        }
        if let Some(name) = body["params"]["name"].as_str() {
            request = request.header("Mcp-Name", name);
        }
        if extension {
            request
        } else {
            request.without_header("Poppy-Extensions")
        }
    }

    async fn notify(&self, method: &str) {
        let body = json!({"jsonrpc": "2.0", "method": method});
        self.gateway.send(&self.request(&body, true)).await;
    }

    async fn send(&self, method: &str, mut params: Value, extension: bool) -> poppy_e2e::Answer {
        if self.version >= "2026-07-28" {
            params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(self.version);
            params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
            params["_meta"]["io.modelcontextprotocol/clientInfo"] =
                json!({"name": "raw", "version": "1"});
        }
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.gateway.send(&self.request(&body, extension)).await
    }

    /// The result of a call, asserting a JSON-RPC result for its id.
    async fn result(&self, method: &str, params: Value, extension: bool) -> Value {
        let id = self.next_id.get();
        let answer = self.send(method, params, extension).await;
        answer.assert_status(200, "an MCP answer");
        let message = rpc_response(&answer);
        assert_eq!(message["id"], id, "{}", answer.describe());
        message
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("a result: {}", answer.describe()))
    }

    async fn call(&self, arguments: Value, approval: Option<&Value>, extension: bool) -> Value {
        let mut params = json!({"name": "exchange_item", "arguments": arguments});
        if let Some(op) = approval {
            params["_meta"][APPROVAL_KEY] =
                json!({"operation_id": op["operation_id"], "revision": op["revision"]});
        }
        self.result("tools/call", params, extension).await
    }
}

const APPROVAL_KEY: &str = "personalagentprotocol.org/approval";

/// Every result the gateway writes itself validates against the MCP specification's own
/// JSON Schema of the version the request speaks (tests/deps/mcp/schema): the widened
/// tools/list, the held call, a new revision, a missing term, no extension, a replay, and
/// "in progress".
async fn own_results_validate_for_each_version(store: Store) {
    let redis = (store == Store::Redis).then(RedisServer::start);
    let upstream = PythonMcpServer::start(true);
    let mut builder = GatewayBuilder::new(&upstream.url())
        .policy("tools.toml", TOOL_POLICIES)
        .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\""));
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    let gateway = builder.start();
    let http = http_client(HTTP_TIMEOUT);
    let mut checks: Vec<Value> = Vec::new();
    let mut executions = 0;
    for version in ["2025-06-18", "2025-11-25", "2026-07-28"] {
        let raw = RawVersion::open(&gateway, version).await;
        let mut check = |what: &str, kind: &str, value: Value| {
            checks.push(json!({"version": version, "type": kind, "what": what, "value": value}));
        };
        let tools = raw.result("tools/list", json!({}), true).await;
        let exchange_tool = tools["tools"]
            .as_array()
            .and_then(|tools| tools.iter().find(|t| t["name"] == "exchange_item"))
            .cloned()
            .expect("exchange_item listed");
        assert!(
            exchange_tool["outputSchema"]["oneOf"].is_array(),
            "{version}: {exchange_tool}"
        );
        check("tools/list", "ListToolsResult", tools);

        let order = format!("ord_{}", version.replace('-', ""));
        let arguments = |order: &str, sku: &str| json!({"order_id": order, "item_id": "itm_4Qa", "replacement_sku": sku});
        let held = raw.call(arguments(&order, "m"), None, true).await;
        let op = held["structuredContent"]["operation"].clone();
        assert!(op["operation_id"].is_string(), "{version}: {held}");
        check("held", "CallToolResult", held);
        let rejected = raw.call(arguments(&order, "l"), Some(&op), true).await;
        check("new revision", "CallToolResult", rejected);
        let missing = raw
            .call(
                json!({"order_id": order, "replacement_sku": "m"}),
                None,
                true,
            )
            .await;
        assert_eq!(missing["isError"], true, "{version}: {missing}");
        check("missing term", "CallToolResult", missing);
        let plain = raw.call(arguments(&order, "m"), None, false).await;
        check("no extension", "CallToolResult", plain);

        let performed = raw.call(arguments(&order, "m"), Some(&op), true).await;
        executions += 1;
        assert_eq!(
            performed["structuredContent"]["execution"], executions,
            "{version}"
        );
        let replayed = raw.call(arguments(&order, "m"), Some(&op), true).await;
        assert_eq!(
            replayed["structuredContent"],
            performed["structuredContent"]
        );
        check("replay", "CallToolResult", replayed);

        let busy_order = format!("{order}_busy");
        let busy = raw.call(arguments(&busy_order, "m"), None, true).await;
        let busy_op = busy["structuredContent"]["operation"].clone();
        http.post(format!("{}/hold", upstream.url()))
            .send()
            .await
            .unwrap();
        let first = {
            let request = raw.request(
                &json!({"jsonrpc": "2.0", "id": "first", "method": "tools/call", "params": {
                    "name": "exchange_item", "arguments": arguments(&busy_order, "m"),
                    "_meta": {
                        APPROVAL_KEY: {"operation_id": busy_op["operation_id"], "revision": busy_op["revision"]},
                        "io.modelcontextprotocol/protocolVersion": version,
                        "io.modelcontextprotocol/clientCapabilities": {},
                    }}}),
                true,
            );
            let client = gateway.client();
            tokio::spawn(async move { client.send(&request).await })
        };
        executions += 1;
        let count_url = format!("{}/count", upstream.url());
        let started = poppy_e2e::wait::until_some(Duration::from_secs(10), || async {
            let counts: Value = http.get(&count_url).send().await.ok()?.json().await.ok()?;
            (counts["exchange_item"] == executions).then_some(())
        })
        .await;
        assert!(
            started.is_some(),
            "{version}: the approved call reached the server"
        );
        let in_progress = raw
            .call(arguments(&busy_order, "m"), Some(&busy_op), true)
            .await;
        assert_eq!(
            in_progress["_meta"][RETRY_KEY]["error"], "operation_in_progress",
            "{version}: {in_progress}"
        );
        check("in progress", "CallToolResult", in_progress);
        http.post(format!("{}/release", upstream.url()))
            .send()
            .await
            .unwrap();
        first
            .await
            .unwrap()
            .assert_status(200, "the first call, once released");
    }

    let mut validate = tokio::process::Command::new(python("mcp1"))
        .arg(deps_dir().join("mcp/validate.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start validate.py");
    let lines: String = checks.iter().map(|c| format!("{c}\n")).collect();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = validate.stdin.take().unwrap();
        stdin.write_all(lines.as_bytes()).await.unwrap();
    }
    let output = tokio::time::timeout(SCRIPT_LIMIT, validate.wait_with_output())
        .await
        .expect("validate.py finishes")
        .unwrap();
    assert!(
        output.status.success(),
        "results that do not validate:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim(),
        format!("checked {}, 0 errors", checks.len())
    );
}

store_tests!(own_results_validate_for_each_version);

macro_rules! sdk_tests {
    ($($name:ident: $sdk:expr, $json:expr;)+) => {
        $(
            async fn $name(store: Store) {
                drive($sdk, $json, store).await
            }
        )+
        store_tests!($($name),+);
    };
}

sdk_tests! {
    python2_json: Sdk::Python2, true;
    python2_sse: Sdk::Python2, false;
    python2_handshake_json: Sdk::Python2Handshake, true;
    python2_handshake_sse: Sdk::Python2Handshake, false;
    python1_json: Sdk::Python1, true;
    python1_sse: Sdk::Python1, false;
    typescript_json: Sdk::TypeScript, true;
    typescript_sse: Sdk::TypeScript, false;
}
