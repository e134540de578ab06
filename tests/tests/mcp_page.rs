//! The approval page over MCP (issue 29): a Personal Agent that does not declare the
//! operations extension calls a held tool whose policy says `approval = "either"`, through
//! the real binary with `[approval_page]`, on both stores.
//!
//! - Each SDK (the Python SDK `mcp` 1.x, and 2.x with the initialize handshake and in its
//!   default 2026-07-28 mode; the TypeScript SDK; FastMCP's client in both modes), driven by
//!   tests/deps/mcp/page_agent.py and tests/deps/node/mcp-ts/page_agent.mjs, gets the page's
//!   link in a tool error, and, where it declared URL-mode elicitation, as a URL elicitation
//!   (2025-11-25: `elicitation/create` on the call's stream; 2026-07-28: an `input_required`
//!   round); never the operation. The counting MCP server executed nothing. A client with the
//!   extension still gets the operation.
//! - On the wire: the two forms exactly, the client's answer to the gateway's elicitation
//!   never reaching the MCP server, no elicitation to a client that did not declare the mode,
//!   and (Redis) the declaration in `initialize` known to another replica.
//! - The approved call completes once: the User approves on the page (signed in at a real
//!   OpenID provider, `tests/src/page.rs`), and the same call is performed once, then replayed.
//!
//! Needs `bash tests/deps/install.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use poppy_e2e::mcp_client::{self, MCP_PATH, rpc_response, sse_messages};
use poppy_e2e::mcp_server::{AnswerMode, McpServer};
use poppy_e2e::mcp_stack::TOOL_POLICIES;
use poppy_e2e::page::{
    PAGE_CLIENT_SECRET, PAGE_SECRET_ENV, PageProvider, PageTable, approve_on_page,
};
use poppy_e2e::ports::free_port;
use poppy_e2e::python_mcp::PythonMcpServer;
use poppy_e2e::thirdparty::{self, ScriptOutput, deps_dir, node_project, python, run_script};
use poppy_e2e::{
    Answer, Gateway, GatewayBuilder, RedisServer, Request, Session, Store, store_tests,
};
use serde_json::{Value, json};

/// Long enough for a slow CI machine to run a whole script; a hung SDK fails the test.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);
const SECRET_ENV: &str = PAGE_SECRET_ENV;
const RETRY_KEY: &str = "personalagentprotocol.org/retry";
const PAGE_INPUT_KEY: &str = "personalagentprotocol.org/approval_page";
const ARGUMENTS: fn() -> Value = || json!({"order_id": "ord_p1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"});

/// The tool policies with `exchange_item` approvable on the page too.
fn policies() -> String {
    TOOL_POLICIES.replacen(
        "id_prefix = \"exc\"\n",
        "id_prefix = \"exc\"\napproval = \"either\"\n",
        1,
    )
}

/// An approval page on a free port: its base URL, and the gateway's `[approval_page]` table
/// for it (the OpenID provider is none: nothing here signs in).
fn approval_page() -> (String, String) {
    let table = PageTable::new(free_port(), "http://127.0.0.1:1");
    (table.url(), table.toml())
}

/// A gateway in front of `upstream` with `[mcp]`, the policies and `page_table` (its
/// `[approval_page]`), on `store_url` (`None`: `memory://`).
fn gateway(upstream: &str, page_table: &str, store_url: Option<&str>) -> Gateway {
    gateway_with(&policies(), upstream, page_table, store_url)
}

/// [`gateway`] with these tool policies.
fn gateway_with(
    policies: &str,
    upstream: &str,
    page_table: &str,
    store_url: Option<&str>,
) -> Gateway {
    let mut builder = GatewayBuilder::new(upstream)
        .policy("tools.toml", policies)
        .env(SECRET_ENV, PAGE_CLIENT_SECRET)
        .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\"\n\n{page_table}"));
    if let Some(url) = store_url {
        builder = builder.store_url(url);
    }
    builder.start()
}

fn redis_for(store: Store) -> Option<RedisServer> {
    match store {
        Store::Memory => None,
        Store::Redis => Some(RedisServer::start()),
    }
}

/// The link in a tool error's text: the page's, for an `exc` operation.
fn link_in(text: &str, page: &str, context: &str) -> String {
    let start = text
        .find(&format!("{page}/approve/exc_"))
        .unwrap_or_else(|| panic!("{context}: no page link in {text:?}"));
    text[start..].split_whitespace().next().unwrap().to_owned()
}

/// The link's page (`/approve/{operation}`): the same call is the same operation; its
/// revision, in the query, may be a newer one a second later.
fn page_of(link: &str) -> &str {
    link.split('?').next().unwrap()
}

/// A page tool error as a client read it (`text`, `_meta`, `structuredContent`, `isError`):
/// the link, the same in `_meta`, and no operation. Returns the link.
fn assert_page_tool_error(result: &Value, page: &str, context: &str) -> String {
    assert_eq!(result["isError"], true, "{context}: {result}");
    let text = result["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("Not done yet. This needs the user's approval: "),
        "{context}: {result}"
    );
    let link = link_in(text, page, context);
    assert_eq!(
        result["_meta"][RETRY_KEY]["approval_url"], link,
        "{context}: {result}"
    );
    assert!(
        result["structuredContent"].is_null(),
        "{context}: no operation for a client without the extension: {result}"
    );
    assert!(
        !result.to_string().contains("operation_id"),
        "{context}: {result}"
    );
    link
}

// ---------------------------------------------------------------------------------------
// The SDKs.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sdk {
    /// The last `mcp` 1.x: initialize, 2025-11-25.
    Python1,
    /// `mcp` 2.x, `mode="legacy"`: initialize, 2025-11-25.
    Python2Handshake,
    /// `mcp` 2.x, default mode: 2026-07-28.
    Python2,
    /// `@modelcontextprotocol/sdk`: initialize, 2025-11-25.
    TypeScript,
    /// FastMCP's client, `mode="legacy"`.
    FastMcpHandshake,
    /// FastMCP's client, default mode: 2026-07-28.
    FastMcp,
}

const SDKS: [Sdk; 6] = [
    Sdk::Python1,
    Sdk::Python2Handshake,
    Sdk::Python2,
    Sdk::TypeScript,
    Sdk::FastMcpHandshake,
    Sdk::FastMcp,
];

impl Sdk {
    /// The protocol version it ends up speaking with the gateway (upstream.py has both).
    fn version(self) -> &'static str {
        match self {
            Sdk::Python2 | Sdk::FastMcp => "2026-07-28",
            _ => "2025-11-25",
        }
    }

    /// `session`: its `Poppy-Session`; `authorization`: the user's token (the page is approved
    /// by the account it is for).
    fn command(
        self,
        gateway_mcp: &str,
        upstream: &str,
        session: &str,
        authorization: &str,
    ) -> Command {
        let script = deps_dir().join("mcp/page_agent.py");
        let mut command = match self {
            Sdk::TypeScript => {
                let dir = node_project("mcp-ts");
                let mut command = Command::new("node");
                command.current_dir(&dir).arg(dir.join("page_agent.mjs"));
                command
            }
            Sdk::Python1 => {
                let mut command = Command::new(python("mcp1"));
                command.arg(script).args(["sdk", "legacy"]);
                command
            }
            Sdk::Python2Handshake | Sdk::Python2 => {
                let mut command = Command::new(python("mcp2"));
                let mode = if self == Sdk::Python2 {
                    "auto"
                } else {
                    "legacy"
                };
                command.arg(script).args(["sdk", mode]);
                command
            }
            Sdk::FastMcpHandshake | Sdk::FastMcp => {
                let mut command = Command::new(python("fastmcp"));
                let mode = if self == Sdk::FastMcp {
                    "auto"
                } else {
                    "legacy"
                };
                command.arg(script).args(["fastmcp", mode]);
                command
            }
        };
        command.args([gateway_mcp, upstream, session, authorization]);
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
        format!("{:?}, step {step}", self.sdk)
    }
}

async fn run_agent(sdk: Sdk, gateway: &Gateway, upstream: &PythonMcpServer) -> Run {
    let session = Session::signed_in(&format!("ses_page_{sdk:?}"), "acct-1");
    let gateway_mcp = format!("{}{MCP_PATH}", gateway.base_url());
    let command = sdk.command(
        &gateway_mcp,
        &upstream.url(),
        &session.header(),
        &session.authorization().unwrap_or_default(),
    );
    let ScriptOutput { stdout, text } =
        run_script(command, &format!("{sdk:?}: the script"), SCRIPT_LIMIT).await;
    let steps = thirdparty::steps(&stdout);
    Run {
        sdk,
        steps,
        output: text,
    }
}

/// Each SDK without the extension sees the link: in the tool error, and as a URL elicitation
/// where it declared the mode; nothing is executed; with the extension, the operation.
async fn sdks_without_the_extension_see_the_page_link(store: Store) {
    let redis = redis_for(store);
    let upstream = PythonMcpServer::start(false);
    let (page, table) = approval_page();
    let gateway = gateway(
        &upstream.url(),
        &table,
        redis.as_ref().map(|r| r.url()).as_deref(),
    );
    for sdk in SDKS {
        let run = run_agent(sdk, &gateway, &upstream).await;
        eprintln!("{sdk:?}: {}", run.step("sdk"));
        let first = run.step("page");
        let context = run.context("page");
        assert_eq!(first["version"], sdk.version(), "{context}: {first}");
        let link = assert_page_tool_error(&first["result"], &page, &context);
        let asked = first["elicitations"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{context}: one URL elicitation: {first}");
        assert_eq!(asked[0]["mode"], "url", "{context}: {first}");
        // The same operation's page; in a 2026-07-28 round the tool error comes from the
        // follow-up, whose revision may be a second newer.
        assert_eq!(
            page_of(asked[0]["url"].as_str().unwrap()),
            page_of(&link),
            "{context}: the same page: {first}"
        );
        assert!(
            asked[0]["message"]
                .as_str()
                .unwrap()
                .contains("Exchange item **itm_4Qa**"),
            "{context}: the summary: {first}"
        );
        if sdk.version() == "2025-11-25" {
            assert!(
                asked[0]["elicitationId"]
                    .as_str()
                    .is_some_and(|id| !id.is_empty()),
                "{context}: 2025-11-25 elicitations have an ID: {first}"
            );
        }
        assert_eq!(first["executions"], 0, "{context}");

        let again = run.step("again");
        let context = run.context("again");
        let again_link = assert_page_tool_error(&again["result"], &page, &context);
        assert_eq!(
            page_of(&again_link),
            page_of(&link),
            "{context}: the same call, the same operation"
        );
        assert_eq!(
            page_of(again["elicitations"][0]["url"].as_str().unwrap()),
            page_of(&again_link),
            "{context}: {again}"
        );
        let works = run.step("session_works");
        assert!(
            works["result"]["isError"] == false && works["result"]["raised"].is_null(),
            "{}: the client goes on after the elicitation: {works}",
            run.context("session_works")
        );

        let plain = run.step("no_handler");
        let context = run.context("no_handler");
        assert_eq!(
            page_of(&assert_page_tool_error(&plain["result"], &page, &context)),
            page_of(&link),
            "{context}: without URL-mode elicitation, the tool error alone"
        );

        let poppy = run.step("with_extension");
        let operation = &poppy["result"]["structuredContent"]["operation"];
        assert!(
            operation["operation_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("exc_")),
            "{}: a client with the extension gets the operation: {poppy}",
            run.context("with_extension")
        );
        assert_eq!(
            run.step("done")["executions"],
            0,
            "{sdk:?}: nothing executed"
        );
    }
    assert_eq!(upstream.count("exchange_item").await, 0);
}

// ---------------------------------------------------------------------------------------
// The wire.

/// Raw JSON-RPC through a gateway, as a client without the extension.
struct Raw<'a> {
    gateway: &'a Gateway,
    session: Session,
    version: &'static str,
    mcp_session: Option<String>,
}

impl<'a> Raw<'a> {
    /// A client of `version` declaring `capabilities` (in `initialize` before 2026-07-28).
    async fn open(gateway: &'a Gateway, version: &'static str, capabilities: Value) -> Raw<'a> {
        let mut raw = Raw {
            gateway,
            session: Session::signed_in("ses_raw_page", "acct-1"),
            version,
            mcp_session: None,
        };
        if version < "2026-07-28" {
            raw.initialize(capabilities).await;
        }
        raw
    }

    async fn initialize(&mut self, capabilities: Value) {
        self.mcp_session = None;
        let init = self
            .send(
                &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                "protocolVersion": self.version, "capabilities": capabilities,
                "clientInfo": {"name": "raw", "version": "1"}}}),
            )
            .await;
        self.mcp_session = init.header("mcp-session-id").map(str::to_owned);
        assert!(self.mcp_session.is_some(), "{}", init.describe());
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .assert_status(202, "initialized");
    }

    /// The same MCP session, through another gateway.
    fn through(&self, gateway: &'a Gateway) -> Raw<'a> {
        Raw {
            gateway,
            session: self.session.clone(),
            version: self.version,
            mcp_session: self.mcp_session.clone(),
        }
    }

    fn request(&self, body: &Value) -> Request {
        let mut request = Request::agent("POST", MCP_PATH, &self.session)
            .without_header("Poppy-Extensions")
            .json(body)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", self.version);
        if let Some(id) = &self.mcp_session {
            request = request.header("Mcp-Session-Id", id);
        }
        request
    }

    async fn send(&self, body: &Value) -> Answer {
        self.gateway.send(&self.request(body)).await
    }

    /// `exchange_item` with [`ARGUMENTS`]; `extra` goes into `params`.
    async fn call(&self, id: &str, extra: Value) -> Answer {
        let mut params = json!({"name": "exchange_item", "arguments": ARGUMENTS()});
        for (key, value) in extra.as_object().unwrap() {
            params[key] = value.clone();
        }
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
            .await
    }
}

/// A JSON-RPC tool result as [`assert_page_tool_error`] reads it.
fn as_read(result: &Value) -> Value {
    json!({
        "isError": result["isError"],
        "text": result["content"][0]["text"],
        "_meta": result["_meta"],
        "structuredContent": result["structuredContent"],
    })
}

const URL_MODE: fn() -> Value = || json!({"elicitation": {"form": {}, "url": {}}});

/// 2025-11-25: the elicitation request on the call's stream, then the tool error; the
/// client's answer is taken by the gateway; a client without the mode (or of 2025-06-18)
/// gets the tool error alone, as JSON. 2026-07-28: one `input_required` round, then the tool
/// error. The MCP server saw none of it, and executed nothing.
async fn the_page_on_the_wire(store: Store) {
    let redis = redis_for(store);
    let server = McpServer::start(AnswerMode::Json);
    let (page, table) = approval_page();
    let gateway = gateway(
        &server.url(),
        &table,
        redis.as_ref().map(|r| r.url()).as_deref(),
    );

    let client = Raw::open(&gateway, "2025-11-25", URL_MODE()).await;
    let answer = client.call("c1", json!({})).await;
    answer.assert_status(200, "2025-11-25 call");
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream")),
        "{}",
        answer.describe()
    );
    assert_eq!(
        answer.header("mcp-session-id"),
        client.mcp_session.as_deref()
    );
    let messages = sse_messages(&answer.text());
    assert_eq!(messages.len(), 2, "{}", answer.describe());
    let (asked, response) = (&messages[0], &messages[1]);
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let request_id = asked["id"].as_str().expect("a string id").to_owned();
    assert_eq!(response["id"], "c1", "{response}");
    let link = assert_page_tool_error(&as_read(&response["result"]), &page, "2025-11-25");
    assert_eq!(asked["params"]["mode"], "url");
    assert_eq!(asked["params"]["url"], link);
    assert!(asked["params"]["elicitationId"].as_str().is_some());
    assert!(!answer.text().contains("operation_id") && !answer.text().contains("revision"));

    let posts_before = server.posts().len();
    let accepted = client
        .send(&json!({"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept"}}))
        .await;
    accepted.assert_status(202, "the client's answer to the gateway's elicitation");
    assert_eq!(
        accepted.header("mcp-session-id"),
        client.mcp_session.as_deref()
    );
    assert_eq!(
        server.posts().len(),
        posts_before,
        "the answer to the gateway's request never reaches the MCP server"
    );

    // Form mode only, and a version without URL mode: the tool error alone, as JSON.
    for (version, capabilities) in [
        ("2025-11-25", json!({"elicitation": {}})),
        ("2025-06-18", URL_MODE()),
    ] {
        let context = format!("{version} with {capabilities}");
        let client = Raw::open(&gateway, version, capabilities).await;
        let answer = client.call("c2", json!({})).await;
        assert!(
            answer
                .header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{context}: {}",
            answer.describe()
        );
        let response = rpc_response(&answer);
        assert_eq!(
            page_of(&assert_page_tool_error(
                &as_read(&response["result"]),
                &page,
                &context
            )),
            page_of(&link)
        );
    }

    // 2026-07-28: the mode declared in the call's _meta.
    let modern = Raw::open(&gateway, "2026-07-28", Value::Null).await;
    let declared = json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": URL_MODE()}});
    let round = rpc_response(&modern.call("m1", declared.clone()).await);
    let result = &round["result"];
    assert_eq!(result["resultType"], "input_required", "{round}");
    let input = &result["inputRequests"][PAGE_INPUT_KEY];
    assert_eq!(input["method"], "elicitation/create", "{round}");
    assert_eq!(input["params"]["mode"], "url");
    let asked_link = input["params"]["url"].as_str().unwrap();
    assert_eq!(page_of(asked_link), page_of(&link));
    assert!(result.get("content").is_none() && !round.to_string().contains("operation_id"));
    let mut follow_up = declared.clone();
    follow_up["inputResponses"] = json!({PAGE_INPUT_KEY: {"action": "accept"}});
    follow_up["requestState"] = result["requestState"].clone();
    let done = rpc_response(&modern.call("m2", follow_up).await);
    assert_eq!(done["id"], "m2");
    assert_eq!(
        done["result"]["resultType"], "complete",
        "one round only: {done}"
    );
    assert_eq!(
        page_of(&assert_page_tool_error(
            &as_read(&done["result"]),
            &page,
            "2026-07-28 follow-up"
        )),
        page_of(&link)
    );
    let undeclared = rpc_response(&modern.call("m3", json!({})).await);
    assert_eq!(
        undeclared["result"]["resultType"], "complete",
        "{undeclared}"
    );

    assert!(
        server
            .posts()
            .iter()
            .all(|p| p.method() != Some("tools/call")),
        "no held call reached the MCP server"
    );
    server.assert_executions(0, "nothing is approved on the page");
}

/// What a client declared in `initialize` through one gateway is known to another sharing
/// the store: the call through B gets the elicitation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_declaration_is_known_to_every_replica() {
    let redis = RedisServer::start();
    let server = McpServer::start(AnswerMode::Json);
    let a = gateway(&server.url(), &approval_page().1, Some(&redis.url()));
    let b = gateway(&server.url(), &approval_page().1, Some(&redis.url()));
    let on_a = Raw::open(&a, "2025-11-25", URL_MODE()).await;
    let on_b = on_a.through(&b);
    let answer = on_b.call("r1", json!({})).await;
    let messages = sse_messages(&answer.text());
    assert_eq!(messages.len(), 2, "{}", answer.describe());
    assert_eq!(messages[0]["method"], "elicitation/create");
    // Another MCP session, initialized without the mode: B knows that too.
    let plain = Raw::open(&a, "2025-11-25", json!({})).await;
    let answer = plain.through(&b).call("r2", json!({})).await;
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{}",
        answer.describe()
    );
    server.assert_executions(0, "nothing approved");
}

// ---------------------------------------------------------------------------------------
// Approved on the page.

/// The approved call completes once: a client without the extension gets the link, the User
/// approves on the page, and the same call (same arguments, same account) is performed once;
/// every retry gets the recorded answer.
async fn mcp_page_approved_call_executes_once(store: Store) {
    let redis = redis_for(store);
    let server = McpServer::start(AnswerMode::Json);
    let (_provider, table) = PageProvider::with_page();
    let page = table.url();
    let table = table.toml();
    let gateway = gateway(
        &server.url(),
        &table,
        redis.as_ref().map(|r| r.url()).as_deref(),
    );
    let client = Raw::open(&gateway, "2025-11-25", json!({})).await;
    let held = rpc_response(&client.call("a1", json!({})).await);
    let link = assert_page_tool_error(&as_read(&held["result"]), &page, "held");
    server.assert_executions(0, "held");

    let approved = approve_on_page(&link, "acct-1", "approve").await;
    assert_eq!(
        approved.status, 200,
        "the page took the approval: {}",
        approved.html
    );

    let done = rpc_response(&client.call("a2", json!({})).await);
    assert_eq!(done["id"], "a2");
    assert_eq!(
        done["result"]["content"][0]["text"], "exchange_item #1",
        "performed: {done}"
    );
    server.assert_executions(1, "approved on the page: performed once");
    let again = rpc_response(&client.call("a3", json!({})).await);
    assert_eq!(again["id"], "a3");
    assert_eq!(again["result"], done["result"], "the recorded answer");
    // From another MCP session of the same agent and account, too.
    let other = Raw::open(&gateway, "2025-11-25", json!({})).await;
    let replay = rpc_response(&other.call("a4", json!({})).await);
    assert_eq!(replay["result"], done["result"]);
    server.assert_executions(1, "every retry: the recorded answer");
}

/// `proof = "company_page"` on a `[[tool]]`: a Poppy agent's MCP client (rmcp, the extension
/// declared, a new Session JWT per request) gets the held call's operation with the page's
/// link (`structuredContent.operation.approval_url`; the text stays the summary); its
/// approval in `_meta` is held until the account approved that revision on the page, then
/// performed once and replayed.
async fn mcp_proof_holds_a_poppy_approval_until_the_page_approval(store: Store) {
    let redis = redis_for(store);
    let server = McpServer::start(AnswerMode::Json);
    let (_provider, table) = PageProvider::with_page();
    let page = table.url();
    let policies = TOOL_POLICIES.replacen(
        "id_prefix = \"exc\"\n",
        "id_prefix = \"exc\"\nproof = \"company_page\"\n",
        1,
    );
    let gateway = gateway_with(
        &policies,
        &server.url(),
        &table.toml(),
        redis.as_ref().map(|r| r.url()).as_deref(),
    );
    let session = Session::signed_in("ses_mcp_proof", "acct-1");
    let client = mcp_client::connect(&gateway.base_url(), &session, true).await;
    let first = mcp_client::call_ok(&client, mcp_client::call("exchange_item", ARGUMENTS())).await;
    let operation = mcp_client::held_operation(&first, "first call");
    let link = first["structuredContent"]["operation"]["approval_url"]
        .as_str()
        .unwrap_or_else(|| panic!("no approval_url on the operation: {first}"))
        .to_owned();
    assert!(link.starts_with(&format!("{page}/approve/exc_")), "{link}");
    let approved =
        || mcp_client::approved(mcp_client::call("exchange_item", ARGUMENTS()), &operation);
    let held = mcp_client::call_ok(&client, approved()).await;
    let again = mcp_client::held_operation(&held, "no page approval yet");
    assert_eq!(again.revision, operation.revision, "{held}");
    server.assert_executions(0, "a Poppy approval alone is not enough");
    let decided = approve_on_page(&link, "acct-1", "approve").await;
    assert_eq!(decided.status, 200, "{}", decided.html);
    let done = mcp_client::call_ok(&client, approved()).await;
    mcp_client::assert_performed(&done, 1, "exchange_item", "approved on the page too");
    let replay = mcp_client::call_ok(&client, approved()).await;
    assert_eq!(replay["content"], done["content"], "the recorded answer");
    server.assert_executions(1, "performed once");
}

store_tests!(
    mcp_proof_holds_a_poppy_approval_until_the_page_approval,
    sdks_without_the_extension_see_the_page_link,
    the_page_on_the_wire,
    mcp_page_approved_call_executes_once,
);
