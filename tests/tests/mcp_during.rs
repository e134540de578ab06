//! What real MCP servers do *during* an approved call (issue 27), through the gateway to the
//! Python SDK's server (tests/deps/mcp/upstream.py, `mcp` 2.x), counting executions there,
//! on both stores:
//!
//! - a cancellation of an approved call in flight (what the Python SDK sends on every
//!   request timeout) is not forwarded: the call is performed once, and its retry gets the
//!   real result; a cancelled answer that reaches the gateway anyway (from another replica's
//!   forward, here sent to the server directly) is an unknown outcome, never "failed";
//! - a 2026-07-28 multi-round call (`input_required`) is not finished by its first answer:
//!   the SDK answers the question and calls again under the same approval, performed once;
//!   a follow-up is bound to its round (a forged `requestState` goes nowhere), a replay
//!   during the rounds is "in progress", and after them the final result;
//! - a server that asks the client a question during an approved call (`elicitation/create`
//!   over SSE, 2025-11-25) gets its answer: the call's stream reaches the client as it comes,
//!   the response once recorded;
//! - a server that closes an approved call's stream after the priming event (SEP-1699) is
//!   resumed by the gateway itself (GET, `Last-Event-ID`, the call's MCP session): the call
//!   gets its result, a replay gets it under its own id and nothing of the first call's.
//!
//! The SDK flows run tests/deps/mcp/during.py (the Python SDK) and
//! tests/deps/node/mcp-ts/during.mjs (the TypeScript SDK). Needs `bash tests/deps/install.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use poppy_e2e::mcp_client::{MCP_PATH, assert_rpc_error, rpc_response};
use poppy_e2e::python_mcp::PythonMcpServer;
use poppy_e2e::thirdparty::{self, deps_dir, node_project, python};
use poppy_e2e::wait::until_some;
use poppy_e2e::{
    Answer, Gateway, GatewayBuilder, RedisServer, Request, Session, Store, store_tests,
};
use serde_json::{Value, json};

const SCRIPT_LIMIT: Duration = Duration::from_secs(120);
const APPROVAL_KEY: &str = "personalagentprotocol.org/approval";
const RETRY_KEY: &str = "personalagentprotocol.org/retry";
const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// The held tools: `exchange_item` (gated at the server) and `confirm_exchange` (asks the
/// user first).
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
name = "restream_tool"
tool = "restream_exchange"
id_prefix = "rsx"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku}."

[tool.terms]
order_id = { argument = "$.order_id" }
item_id = { argument = "$.item_id" }
replacement_sku = { argument = "$.replacement_sku" }

[[tool]]
name = "standalone_tool"
tool = "standalone_confirm_exchange"
id_prefix = "sgx"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku}, once confirmed."

[tool.terms]
order_id = { argument = "$.order_id" }
item_id = { argument = "$.item_id" }
replacement_sku = { argument = "$.replacement_sku" }

[[tool]]
name = "confirm_tool"
tool = "confirm_exchange"
id_prefix = "cfx"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku}, once confirmed."

[tool.terms]
order_id = { argument = "$.order_id" }
item_id = { argument = "$.item_id" }
replacement_sku = { argument = "$.replacement_sku" }
"#;

/// The server, the store and the gateway of one test.
struct World {
    gateway: Gateway,
    server: PythonMcpServer,
    _redis: Option<RedisServer>,
}

fn world(store: Store, json: bool, upstream_timeout: Option<&str>) -> World {
    let redis = (store == Store::Redis).then(RedisServer::start);
    let server = PythonMcpServer::start(json);
    let mut builder = GatewayBuilder::new(&server.url())
        .policy("tools.toml", POLICIES)
        .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\""));
    if let Some(timeout) = upstream_timeout {
        builder = builder.upstream_timeout(timeout);
    }
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    World {
        gateway: builder.start(),
        server,
        _redis: redis,
    }
}

/// The client an SDK scenario runs with.
#[derive(Clone, Copy, Debug)]
enum Sdk {
    /// `mcp` 2.3.0: tests/deps/mcp/during.py.
    Python,
    /// `@modelcontextprotocol/sdk` 1.32.2: tests/deps/node/mcp-ts/during.mjs.
    TypeScript,
}

/// One SDK scenario's steps, by name.
async fn scenario(sdk: Sdk, name: &str, world: &World) -> HashMap<String, Value> {
    let session = Session::signed_out(&format!("ses_during_{}", std::process::id()));
    let mut command = match sdk {
        Sdk::Python => {
            let mut command = tokio::process::Command::new(python("mcp2"));
            command.arg(deps_dir().join("mcp/during.py"));
            command
        }
        Sdk::TypeScript => {
            let dir = node_project("mcp-ts");
            let mut command = tokio::process::Command::new("node");
            command.current_dir(&dir).arg(dir.join("during.mjs"));
            command
        }
    };
    let child = command
        .args([
            name,
            &format!("{}{MCP_PATH}", world.gateway.base_url()),
            &world.server.url(),
            &session.header(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the scenario");
    let output = tokio::time::timeout(SCRIPT_LIMIT, child.wait_with_output())
        .await
        .expect("the scenario finishes")
        .expect("its output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let text = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    if std::env::var_os("POPPY_E2E_SDK_OUTPUT").is_some() {
        println!("{sdk:?} {name}:\n{text}");
    }
    assert!(output.status.success(), "{sdk:?} {name} failed:\n{text}");
    let steps: HashMap<String, Value> = thirdparty::steps(&stdout);
    assert!(steps.contains_key("done"), "{sdk:?} {name}:\n{text}");
    steps
}

/// The SDK (Python, then TypeScript) times an approved call out and sends
/// `notifications/cancelled`: the gateway takes it (nothing reaches the server), the call is
/// performed to the end, and the retry with the same approval gets its real result. One
/// execution.
async fn a_timed_out_approved_call_is_not_cancelled(store: Store) {
    for sdk in [Sdk::Python, Sdk::TypeScript] {
        let world = world(store, false, None);
        let steps = scenario(sdk, "cancel", &world).await;
        timed_out_and_retried(sdk, &steps);
    }
}

fn timed_out_and_retried(sdk: Sdk, steps: &HashMap<String, Value>) {
    let timed_out = &steps["timed_out"];
    assert!(
        timed_out["result"]["raised"].is_string(),
        "{sdk:?}: the SDK gave up: {timed_out}"
    );
    assert_eq!(steps["cancellation_answered"]["status"], 202);
    assert_eq!(
        timed_out["counts"]["cancel_received"],
        Value::Null,
        "{sdk:?}: the cancellation was not forwarded: {timed_out}"
    );
    assert_eq!(timed_out["counts"]["exchange_item"], 1);
    let retried = &steps["retried"]["result"];
    assert_eq!(
        retried["structuredContent"]["exchange_id"], "exg_1",
        "{sdk:?}: the retry gets the real result: {retried}"
    );
    assert_eq!(retried["isError"], false);
    let after = &steps["after"];
    assert_eq!(
        after["result"]["structuredContent"],
        retried["structuredContent"]
    );
    assert_eq!(after["counts"]["exchange_item"], 1, "performed once");
    assert_eq!(after["counts"]["cancelled"], Value::Null, "never cancelled");
}

/// A raw JSON-RPC client of the gateway in an MCP session (2025-11-25).
struct Raw<'a> {
    gateway: &'a Gateway,
    session: Session,
    version: &'static str,
    mcp_session: Option<String>,
}

impl<'a> Raw<'a> {
    async fn open(gateway: &'a Gateway, version: &'static str) -> Raw<'a> {
        let session = Session::signed_out(&format!("ses_raw_{}", version.replace('-', "")));
        Raw::open_as(gateway, version, session).await
    }

    /// [`Raw::open`] with this Session.
    async fn open_as(gateway: &'a Gateway, version: &'static str, session: Session) -> Raw<'a> {
        let mut raw = Raw {
            gateway,
            session,
            version,
            mcp_session: None,
        };
        if version < "2026-07-28" {
            let init = raw
                .send(
                    &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                    "protocolVersion": version, "capabilities": {"elicitation": {}},
                    "clientInfo": {"name": "raw", "version": "1"}}}),
                )
                .await;
            raw.mcp_session = init.header("mcp-session-id").map(str::to_owned);
            assert!(raw.mcp_session.is_some(), "{}", init.describe());
            raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await;
        }
        raw
    }

    fn request(&self, body: &Value) -> Request {
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
        request
    }

    async fn send(&self, body: &Value) -> Answer {
        self.gateway.send(&self.request(body)).await
    }

    /// A `tools/call` message: `extra` goes into `params` (a follow-up's members).
    fn call(
        &self,
        id: &str,
        tool: &str,
        order: &str,
        approval: Option<&Value>,
        extra: Value,
    ) -> Value {
        let mut params = json!({"name": tool, "arguments":
            {"order_id": order, "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}});
        if let Some(op) = approval {
            params["_meta"][APPROVAL_KEY] =
                json!({"operation_id": op["operation_id"], "revision": op["revision"]});
        }
        if self.version >= "2026-07-28" {
            params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(self.version);
            params["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
                json!({"elicitation": {"form": {}}});
            params["_meta"]["io.modelcontextprotocol/clientInfo"] =
                json!({"name": "raw", "version": "1"});
        }
        if let Value::Object(extra) = extra {
            for (key, value) in extra {
                params[key] = value;
            }
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    }

    /// The JSON-RPC response to `message`, checked to carry its `id`.
    async fn response(&self, message: &Value) -> Value {
        let answer = self.send(message).await;
        answer.assert_status(200, "an MCP answer");
        let response = rpc_response(&answer);
        assert_eq!(response["id"], message["id"], "{}", answer.describe());
        response
    }
}

fn retry_error(response: &Value) -> Option<&str> {
    response["result"]["_meta"][RETRY_KEY]["error"].as_str()
}

/// A `-32800` from the server (a cancellation that reached it another way: here sent to it
/// directly, as another replica might forward it) is not the operation's answer: the call
/// and every retry are told the outcome is not known, never that it failed, and the action
/// is never performed again. One execution.
async fn a_cancelled_answer_is_an_unknown_outcome(store: Store) {
    let world = world(store, false, Some("3s"));
    let raw = Raw::open(&world.gateway, "2025-11-25").await;
    let held = raw
        .response(&raw.call("h", "exchange_item", "ord_u1", None, json!({})))
        .await;
    let op = held["result"]["structuredContent"]["operation"].clone();
    assert!(op["operation_id"].is_string(), "{held}");
    world.server.hold().await;
    let first = {
        let request =
            raw.request(&raw.call("first", "exchange_item", "ord_u1", Some(&op), json!({})));
        let client = world.gateway.client();
        tokio::spawn(async move { client.send(&request).await })
    };
    let reached = until_some(Duration::from_secs(15), || async {
        (world.server.count("exchange_item").await == 1).then_some(())
    })
    .await;
    assert!(reached.is_some(), "the approved call reached the server");
    // The server's own session, as the gateway forwarded the call in it.
    let cancel = poppy_e2e::gateway::http_client(Duration::from_secs(10))
        .post(format!("{}/mcp", world.server.url()))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", raw.mcp_session.as_deref().unwrap())
        .body(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "first", "reason": "another replica forwarded it"}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 202);
    let first = first.await.unwrap();
    first.assert_status(200, "the cancelled call's answer");
    let first = rpc_response(&first);
    assert_eq!(first["id"], "first");
    assert!(first.get("error").is_none(), "never a failure: {first}");
    assert_eq!(
        retry_error(&first),
        Some("operation_outcome_unknown"),
        "{first}"
    );
    assert_eq!(
        world.server.count("cancelled").await,
        1,
        "the server did cancel"
    );
    world.server.release().await;
    // Retries: in progress while the claim's lease runs, then unknown; never the -32800.
    let unknown = until_some(Duration::from_secs(20), || async {
        let retry = raw
            .response(&raw.call("retry", "exchange_item", "ord_u1", Some(&op), json!({})))
            .await;
        assert!(retry.get("error").is_none(), "never a failure: {retry}");
        match retry_error(&retry) {
            Some("operation_in_progress") => None,
            Some("operation_outcome_unknown") => Some(retry),
            _ => panic!("a retry: in progress or unknown, got {retry}"),
        }
    })
    .await;
    assert!(
        unknown.is_some(),
        "the outcome turns unknown when the lease runs out"
    );
    let counts = world.server.counts().await;
    assert_eq!(counts["exchange_item"], 1, "{counts}");
}

/// The Python SDK (2026-07-28) calls a held tool that asks the user a question: approved,
/// the server answers `input_required`; the SDK answers the question and calls again with
/// the server's `requestState` and the same approval; the gateway forwards that under the
/// same claim and records only the final result, which a replay gets. One execution.
async fn input_required_rounds_complete_under_one_approval(store: Store) {
    let world = world(store, true, None);
    let steps = scenario(Sdk::Python, "rounds", &world).await;
    let held = &steps["held"];
    assert!(
        held["result"]["structuredContent"]["operation"].is_object(),
        "{held}"
    );
    assert_eq!(
        held["counts"],
        json!({}),
        "held: nothing reached the server"
    );
    let approve = &steps["approve"];
    assert_eq!(
        steps["asked"]["message"],
        "Exchange an item of order ord_r1?"
    );
    assert_eq!(
        approve["result"]["structuredContent"]["exchange_id"], "exg_c1",
        "the final result: {approve}"
    );
    assert_eq!(approve["counts"]["confirm_exchange"], 1);
    let replay = &steps["replay"];
    assert_eq!(
        replay["result"]["structuredContent"],
        approve["result"]["structuredContent"]
    );
    assert_eq!(
        replay["counts"], approve["counts"],
        "a replay reaches nothing"
    );
}

/// The SDK (Python in an MCP session, `mode="legacy"`, then TypeScript; 2025-11-25) calls
/// the held tool that asks the user a question: approved, the server sends `elicitation/create` on the call's SSE stream and
/// waits; the gateway passes the stream on as it comes, the SDK answers (its POST forwarded
/// to the same session), the server finishes, and the result is recorded and delivered; a
/// replay gets it. One execution.
async fn a_question_during_an_approved_call_reaches_the_client(store: Store) {
    for sdk in [Sdk::Python, Sdk::TypeScript] {
        let world = world(store, false, Some("10s"));
        let steps = scenario(sdk, "elicit", &world).await;
        asked_and_performed(sdk, &steps);
    }
}

fn asked_and_performed(sdk: Sdk, steps: &HashMap<String, Value>) {
    let held = &steps["held"];
    assert!(
        held["result"]["structuredContent"]["operation"].is_object(),
        "{held}"
    );
    let approve = &steps["approve"];
    assert_eq!(
        approve["result"]["structuredContent"]["exchange_id"], "exg_c1",
        "{sdk:?}: the final result: {approve}"
    );
    assert_eq!(
        steps.get("asked").map(|a| &a["message"]),
        Some(&json!("Exchange an item of order ord_r1?"))
    );
    assert_eq!(approve["counts"]["confirm_exchange"], 1);
    assert_eq!(approve["counts"]["confirm_exchange:asked"], 1, "asked once");
    let replay = &steps["replay"];
    assert_eq!(
        replay["result"]["structuredContent"],
        approve["result"]["structuredContent"]
    );
    assert_eq!(
        replay["counts"], approve["counts"],
        "a replay reaches nothing"
    );
}

/// A follow-up is bound to its round: a retry without the server's `requestState`, with
/// another one, or with other arguments, is "in progress" and reaches nothing; the follow-up with the server's own
/// goes through once; a replay then gets the final result under its own id.
async fn a_follow_up_is_bound_to_its_round(store: Store) {
    let world = world(store, true, None);
    let raw = Raw::open(&world.gateway, "2026-07-28").await;
    let tool = "confirm_exchange";
    let held = raw
        .response(&raw.call("h", tool, "ord_b1", None, json!({})))
        .await;
    let op = held["result"]["structuredContent"]["operation"].clone();
    assert!(op["operation_id"].is_string(), "{held}");

    let asked = raw
        .response(&raw.call("a1", tool, "ord_b1", Some(&op), json!({})))
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();
    let key = asked["result"]["inputRequests"]
        .as_object()
        .and_then(|requests| requests.keys().next().cloned())
        .expect("one input request");
    let yes = json!({key.clone(): {"action": "accept", "content": {"confirm": true}}});
    let asked_before = world.server.count("confirm_exchange:asked").await;

    let replay = raw
        .response(&raw.call("r1", tool, "ord_b1", Some(&op), json!({})))
        .await;
    assert_eq!(
        retry_error(&replay),
        Some("operation_in_progress"),
        "{replay}"
    );
    let forged = raw
        .response(&raw.call(
            "f1",
            tool,
            "ord_b1",
            Some(&op),
            json!({"requestState": format!("{state}x"), "inputResponses": yes}),
        ))
        .await;
    assert_eq!(
        retry_error(&forged),
        Some("operation_in_progress"),
        "{forged}"
    );
    let other_order = raw
        .response(&raw.call(
            "o1",
            tool,
            "ord_b2",
            Some(&op),
            json!({"requestState": state, "inputResponses": yes}),
        ))
        .await;
    assert_eq!(
        retry_error(&other_order),
        Some("operation_in_progress"),
        "other arguments under the approval: not the round's: {other_order}"
    );
    assert_eq!(
        world.server.count("confirm_exchange:asked").await,
        asked_before,
        "nothing of these reached the server"
    );

    let done = raw
        .response(&raw.call(
            "d1",
            tool,
            "ord_b1",
            Some(&op),
            json!({"requestState": state, "inputResponses": yes}),
        ))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(done["result"]["structuredContent"]["exchange_id"], "exg_c1");
    let again = raw
        .response(&raw.call(
            "d2",
            tool,
            "ord_b1",
            Some(&op),
            json!({"requestState": state, "inputResponses": yes}),
        ))
        .await;
    assert_eq!(
        again["result"]["structuredContent"], done["result"]["structuredContent"],
        "the same follow-up again is a replay"
    );
    let replay = raw
        .response(&raw.call("r2", tool, "ord_b1", Some(&op), json!({})))
        .await;
    assert_eq!(
        replay["result"]["structuredContent"],
        done["result"]["structuredContent"]
    );
    assert_eq!(
        world.server.count("confirm_exchange").await,
        1,
        "performed once"
    );
}

/// A follow-up carries answers into the approved call, so only the approver may send it (the
/// rule a replay has): the same follow-up (the server's `requestState`, the same approval and
/// arguments) from the same Session ID signed with another delegated key, from another
/// Session and from a signed-in account gets a JSON-RPC error, and the server sees none of
/// their answers; the round is left for the approver's own follow-up, performed once.
async fn a_follow_up_from_another_session_reaches_nothing(store: Store) {
    let world = world(store, true, None);
    let raw = Raw::open(&world.gateway, "2026-07-28").await;
    let tool = "confirm_exchange";
    let (state, yes, op) = asked(&raw, tool, "ord_s1").await;
    let asked_before = world.server.count("confirm_exchange:asked").await;
    let follow_up = json!({"requestState": state, "inputResponses": yes});
    let others = [
        (
            "same sid, another key",
            raw.session.clone().with_new_delegated_key(),
        ),
        ("another Session", Session::signed_out("ses_raw_attacker")),
        (
            "an account",
            Session::signed_in("ses_raw_attacker", "acct-attacker"),
        ),
    ];
    for (who, session) in others {
        let other = Raw::open_as(&world.gateway, "2026-07-28", session).await;
        let answer = other
            .send(&other.call("x", tool, "ord_s1", Some(&op), follow_up.clone()))
            .await;
        answer.assert_status(200, who);
        let response = rpc_response(&answer);
        assert_eq!(response["error"]["code"], -32600, "{who}: {response}");
        let message = response["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("only the Session that approved the operation"),
            "{who}: {response}"
        );
    }
    assert_eq!(
        world.server.count("confirm_exchange:asked").await,
        asked_before,
        "none of their answers reached the server"
    );
    assert_eq!(world.server.count(tool).await, 0, "nothing performed");
    let done = raw
        .response(&raw.call("d", tool, "ord_s1", Some(&op), follow_up))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(world.server.count(tool).await, 1, "performed once");
}

/// The server closes the approved call's stream right after its priming event (SEP-1699)
/// and answers on the resumed stream: the gateway resumes it itself (the answer comes while
/// the resumed stream is open, and, for a second operation, from the server's event store
/// on resuming), records the result, and a replay carries only the retry's id. One execution
/// each.
async fn a_stream_closed_early_is_resumed(store: Store) {
    let world = world(store, false, None);
    let raw = Raw::open(&world.gateway, "2025-11-25").await;
    let tool = "restream_exchange";
    let held = raw
        .response(&raw.call("h", tool, "ord_s1", None, json!({})))
        .await;
    let op = held["result"]["structuredContent"]["operation"].clone();
    assert!(op["operation_id"].is_string(), "{held}");

    // The result comes after the stream closed, on the resumed one.
    world.server.hold().await;
    let first = {
        let request = raw.request(&raw.call("first", tool, "ord_s1", Some(&op), json!({})));
        let client = world.gateway.client();
        tokio::spawn(async move { client.send(&request).await })
    };
    let resumed = until_some(Duration::from_secs(15), || async {
        (world.server.count("resumed").await >= 1).then_some(())
    })
    .await;
    assert!(resumed.is_some(), "the gateway resumed the stream");
    world.server.release().await;
    let first = first.await.unwrap();
    let response = rpc_response(&first);
    assert_eq!(response["id"], "first", "{}", first.describe());
    assert_eq!(
        response["result"]["structuredContent"]["exchange_id"],
        "exg_s1"
    );
    let replay = raw
        .send(&raw.call("again", tool, "ord_s1", Some(&op), json!({})))
        .await;
    assert_eq!(rpc_response(&replay)["result"], response["result"]);
    assert!(
        !replay.text().contains("\"first\""),
        "nothing of the first call: {}",
        replay.describe()
    );
    assert_eq!(world.server.count(tool).await, 1);

    // The result is in the server's event store by the time the gateway resumes.
    let held = raw
        .response(&raw.call("h2", tool, "ord_s2", None, json!({})))
        .await;
    let op = held["result"]["structuredContent"]["operation"].clone();
    let done = raw
        .response(&raw.call("second", tool, "ord_s2", Some(&op), json!({})))
        .await;
    assert_eq!(
        done["result"]["structuredContent"]["exchange_id"], "exg_s2",
        "{done}"
    );
    assert_eq!(world.server.count(tool).await, 2, "once per approval");
}

/// A server that closes an approved call's stream after its priming event and refuses to
/// resume it (405 to the GET with `Last-Event-ID`, as a server or proxy without resumption
/// answers): the call's outcome is unknown, never failed and never sent again; every retry
/// gets the unknown answer (in progress while the claim's lease runs). One execution.
async fn a_stream_the_server_will_not_resume_is_an_unknown_outcome(store: Store) {
    let redis = (store == Store::Redis).then(RedisServer::start);
    let server = PythonMcpServer::start_script("mcp2", "upstream.py", &["--refuse-resume"]);
    let mut builder = GatewayBuilder::new(&server.url())
        .policy("tools.toml", POLICIES)
        .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\""))
        .upstream_timeout("3s");
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    let gateway = builder.start();
    let raw = Raw::open(&gateway, "2025-11-25").await;
    let tool = "restream_exchange";
    let held = raw
        .response(&raw.call("h", tool, "ord_n1", None, json!({})))
        .await;
    let op = held["result"]["structuredContent"]["operation"].clone();
    assert!(op["operation_id"].is_string(), "{held}");
    let first = raw
        .response(&raw.call("first", tool, "ord_n1", Some(&op), json!({})))
        .await;
    assert!(first.get("error").is_none(), "never a failure: {first}");
    assert_eq!(
        retry_error(&first),
        Some("operation_outcome_unknown"),
        "{first}"
    );
    assert!(
        server.count("resume_refused").await >= 1,
        "the gateway tried to resume"
    );
    let unknown = until_some(Duration::from_secs(20), || async {
        let retry = raw
            .response(&raw.call("retry", tool, "ord_n1", Some(&op), json!({})))
            .await;
        assert!(retry.get("error").is_none(), "never a failure: {retry}");
        match retry_error(&retry) {
            Some("operation_in_progress") => None,
            Some("operation_outcome_unknown") => Some(retry),
            _ => panic!("a retry: in progress or unknown, got {retry}"),
        }
    })
    .await;
    assert!(unknown.is_some(), "retries get the unknown answer");
    let again = raw
        .response(&raw.call("again", tool, "ord_n1", Some(&op), json!({})))
        .await;
    assert_eq!(retry_error(&again), Some("operation_outcome_unknown"));
    assert_eq!(server.count(tool).await, 1, "never sent again");
}

/// A server that asks its question on the session's separate GET stream during an approved
/// call (an `elicitation/create` not related to the call): the agent's GET stream is proxied
/// as it is (not an operation), so the question reaches the agent as it comes; its answer,
/// a JSON-RPC response POSTed to the endpoint, is forwarded to the same MCP session; the
/// server finishes, and the call gets its result, recorded and replayed. One execution.
async fn a_question_on_the_get_stream_reaches_the_agent(store: Store) {
    let world = world(store, false, Some("20s"));
    let raw = Raw::open(&world.gateway, "2025-11-25").await;
    let tool = "standalone_confirm_exchange";
    let held = raw
        .response(&raw.call("h", tool, "ord_g1", None, json!({})))
        .await;
    let op = held["result"]["structuredContent"]["operation"].clone();
    assert!(op["operation_id"].is_string(), "{held}");

    let mut stream = get_stream(&world.gateway, &raw).await;
    let first = {
        let request = raw.request(&raw.call("first", tool, "ord_g1", Some(&op), json!({})));
        let client = world.gateway.client();
        tokio::spawn(async move { client.send(&request).await })
    };
    let question = question_on(&mut stream).await;
    assert_eq!(
        question["params"]["message"],
        "Exchange an item of order ord_g1?"
    );
    let answered = raw
        .send(&json!({"jsonrpc": "2.0", "id": question["id"],
            "result": {"action": "accept", "content": {"confirm": true}}}))
        .await;
    answered.assert_status(202, "the answer to the server's question, forwarded");

    let first = first.await.unwrap();
    let response = rpc_response(&first);
    assert_eq!(response["id"], "first", "{}", first.describe());
    assert_eq!(
        response["result"]["structuredContent"]["exchange_id"], "exg_g1",
        "{response}"
    );
    let replay = raw
        .response(&raw.call("again", tool, "ord_g1", Some(&op), json!({})))
        .await;
    assert_eq!(replay["result"], response["result"]);
    assert_eq!(world.server.count(tool).await, 1, "performed once");
    assert_eq!(
        world
            .server
            .count("standalone_confirm_exchange:asked")
            .await,
        1
    );
}

/// The agent's GET stream of its MCP session, through the gateway.
async fn get_stream(gateway: &Gateway, raw: &Raw<'_>) -> reqwest::Response {
    let stream = poppy_e2e::gateway::http_client(Duration::from_secs(30))
        .get(format!("{}{MCP_PATH}", gateway.base_url()))
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", raw.version)
        .header("mcp-session-id", raw.mcp_session.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200, "the GET stream is open");
    stream
}

/// Read a GET stream until the server's `elicitation/create` (bounded by 15 s per chunk, and
/// by the number of bytes).
async fn question_on(stream: &mut reqwest::Response) -> Value {
    let mut seen = String::new();
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(15), stream.chunk())
            .await
            .expect("the question within 15 s")
            .unwrap()
            .expect("the GET stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        let found = seen
            .split("\n\n")
            .filter_map(|event| {
                let data: String = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                serde_json::from_str::<Value>(&data).ok()
            })
            .find(|message| message["method"] == "elicitation/create");
        if let Some(found) = found {
            return found;
        }
        assert!(seen.len() < 1 << 20, "no question in {seen}");
    }
}

/// Issue 37: the server asks its question during an approved call (on the session's GET
/// stream, 2025-11-25), and another user's Session POSTs an answer into the MCP session,
/// with its ID: refused (403, a JSON-RPC error naming why), never forwarded, whoever sends
/// it (another Session, the same one with another key, an account; a plain response, an
/// error response, a batch); the server still waits, and takes the answer of the Session
/// that opened the session: the call's result is the opener's "accept", not the intruder's
/// "decline". One execution.
async fn only_the_sessions_opener_answers_the_servers_question(store: Store) {
    let world = world(store, false, Some("30s"));
    let raw = Raw::open(&world.gateway, "2025-11-25").await;
    let tool = "standalone_confirm_exchange";
    let held = raw
        .response(&raw.call("h", tool, "ord_x1", None, json!({})))
        .await;
    let op = held["result"]["structuredContent"]["operation"].clone();
    assert!(op["operation_id"].is_string(), "{held}");
    let mut stream = get_stream(&world.gateway, &raw).await;
    let first = {
        let request = raw.request(&raw.call("first", tool, "ord_x1", Some(&op), json!({})));
        let client = world.gateway.client();
        tokio::spawn(async move { client.send(&request).await })
    };
    let question = question_on(&mut stream).await;
    let id = &question["id"];
    let declined = json!({"jsonrpc": "2.0", "id": id, "result": {"action": "decline"}});
    let failed = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -1, "message": "no"}});
    let batch = json!([declined.clone()]);
    let others = [
        (
            "same sid, another key",
            raw.session.clone().with_new_delegated_key(),
        ),
        ("another Session", Session::signed_out("ses_raw_intruder")),
        (
            "an account",
            Session::signed_in("ses_raw_intruder", "acct-intruder"),
        ),
    ];
    for (who, session) in others {
        let other = Raw::open_as(&world.gateway, "2025-11-25", session).await;
        let intruder = Raw {
            mcp_session: raw.mcp_session.clone(),
            ..other
        };
        for answer in [&declined, &failed, &batch] {
            let refused = intruder.send(answer).await;
            let message = assert_rpc_error(&refused, 403, -32600, who);
            assert!(
                message.contains("another Session opened")
                    && message.contains("nothing was forwarded"),
                "{who}: {message}"
            );
        }
    }
    // Without the MCP session's ID: nothing it could answer.
    let sessionless = Raw {
        gateway: &world.gateway,
        session: raw.session.clone(),
        version: raw.version,
        mcp_session: None,
    };
    assert_rpc_error(
        &sessionless.send(&declined).await,
        400,
        -32600,
        "an answer outside an MCP session",
    );
    // The opener's own answer: forwarded, and the server takes it (it would have taken the
    // first answer to reach it).
    let accepted = raw
        .send(&json!({"jsonrpc": "2.0", "id": id,
            "result": {"action": "accept", "content": {"confirm": true}}}))
        .await;
    accepted.assert_status(202, "the opener's answer, forwarded");
    let first = first.await.unwrap();
    let response = rpc_response(&first);
    assert_eq!(response["id"], "first", "{}", first.describe());
    assert_eq!(
        response["result"]["structuredContent"]["exchange_id"], "exg_g1",
        "the opener's answer, not an intruder's: {response}"
    );
    assert_eq!(world.server.count(tool).await, 1, "performed once");
    assert_eq!(world.server.count(&format!("{tool}:asked")).await, 1);
}

/// The rounds of an approved call live in the store (Redis: `memory://`'s die with their
/// process, as its records do): the follow-up of an `input_required` answer given by one
/// gateway goes on through another sharing the store, and through the same gateway after a
/// restart (killed between the rounds), under the approved claim; a replay during the
/// rounds is "in progress" on either, and after them the final result; the same follow-up
/// again is a replay. One execution per approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_goes_on_on_another_replica_and_after_a_restart() {
    let redis = RedisServer::start();
    let server = PythonMcpServer::start(true);
    let gateway = || {
        GatewayBuilder::new(&server.url())
            .policy("tools.toml", POLICIES)
            .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\""))
            .store_url(&redis.url())
            .upstream_timeout("1s")
            .env("POPPY_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
            .start()
    };
    let mut a = gateway();
    let b = gateway();
    let tool = "confirm_exchange";

    // Asked through A, answered through B.
    let (state, yes, op) = {
        let on_a = Raw::open(&a, "2026-07-28").await;
        asked(&on_a, tool, "ord_m1").await
    };
    // While the round waits, its claim is leased for the round (15 minutes), not only for
    // the forward (here 2 s + 1 s + 1 s): an operator cannot resolve it, a retry is "in
    // progress" rather than unknown.
    let resolve = poppy_e2e::gateway::http_client(Duration::from_secs(10))
        .post(format!(
            "{}/operations/{}/resolve",
            a.admin_url(),
            op["operation_id"].as_str().unwrap()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"performed": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolve.status(), 409);
    let resolve: Value = resolve.json().await.unwrap();
    assert_eq!(resolve["error"], "in_flight", "{resolve}");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        resolve["lease_until_ms"].as_i64().unwrap() > now_ms + 14 * 60 * 1000,
        "leased for the round: {resolve}"
    );
    let on_b = Raw::open(&b, "2026-07-28").await;
    let replay = on_b
        .response(&on_b.call("r1", tool, "ord_m1", Some(&op), json!({})))
        .await;
    assert_eq!(
        retry_error(&replay),
        Some("operation_in_progress"),
        "{replay}"
    );
    let follow_up = json!({"requestState": state, "inputResponses": yes});
    let done = on_b
        .response(&on_b.call("d1", tool, "ord_m1", Some(&op), follow_up.clone()))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(done["result"]["structuredContent"]["exchange_id"], "exg_c1");
    {
        let on_a = Raw::open(&a, "2026-07-28").await;
        let replay = on_a
            .response(&on_a.call("r2", tool, "ord_m1", Some(&op), json!({})))
            .await;
        assert_eq!(
            replay["result"]["structuredContent"],
            done["result"]["structuredContent"]
        );
        let again = on_a
            .response(&on_a.call("d2", tool, "ord_m1", Some(&op), follow_up))
            .await;
        assert_eq!(
            again["result"]["structuredContent"], done["result"]["structuredContent"],
            "the same follow-up again is a replay"
        );
    }
    assert_eq!(server.count(tool).await, 1, "performed once");

    // Asked through A, which restarts before the answer.
    let (state, yes, op) = {
        let on_a = Raw::open(&a, "2026-07-28").await;
        asked(&on_a, tool, "ord_m2").await
    };
    a.restart();
    let on_a = Raw::open(&a, "2026-07-28").await;
    let follow_up = json!({"requestState": state, "inputResponses": yes});
    let done = on_a
        .response(&on_a.call("d3", tool, "ord_m2", Some(&op), follow_up.clone()))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let again = on_b
        .response(&on_b.call("d4", tool, "ord_m2", Some(&op), follow_up))
        .await;
    assert_eq!(
        again["result"]["structuredContent"],
        done["result"]["structuredContent"]
    );
    assert_eq!(server.count(tool).await, 2, "once per approval");
}

/// Hold `tool` for `order`, approve it: the server's `input_required` answer. Returns its
/// `requestState`, the answer "yes" to its question, and the operation.
async fn asked(raw: &Raw<'_>, tool: &str, order: &str) -> (String, Value, Value) {
    let held = raw
        .response(&raw.call("h", tool, order, None, json!({})))
        .await;
    let op = held["result"]["structuredContent"]["operation"].clone();
    assert!(op["operation_id"].is_string(), "{held}");
    let asked = raw
        .response(&raw.call("a", tool, order, Some(&op), json!({})))
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();
    let key = asked["result"]["inputRequests"]
        .as_object()
        .and_then(|requests| requests.keys().next().cloned())
        .expect("one input request");
    let yes = json!({key: {"action": "accept", "content": {"confirm": true}}});
    (state, yes, op)
}

store_tests!(
    a_question_on_the_get_stream_reaches_the_agent,
    only_the_sessions_opener_answers_the_servers_question,
    a_stream_the_server_will_not_resume_is_an_unknown_outcome,
    a_question_during_an_approved_call_reaches_the_client,
    a_stream_closed_early_is_resumed,
    a_timed_out_approved_call_is_not_cancelled,
    a_cancelled_answer_is_an_unknown_outcome,
    input_required_rounds_complete_under_one_approval,
    a_follow_up_is_bound_to_its_round,
    a_follow_up_from_another_session_reaches_nothing,
);
