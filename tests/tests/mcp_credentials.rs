//! Credentials, one reading, over MCP (issue 37): with `[approval_page.agents] clients`, a
//! `tools/call` of a held tool without a `Poppy-Session` is an agent's when any place a
//! resource server reads a token from holds a listed client's token, and an `Authorization`
//! the gateway can't read one way is refused `400` naming the header, never forwarded as the
//! Company's own call.
//!
//! Behind the gateway, the Python SDK's MCP server (tests/deps/mcp/upstream.py, `mcp` 2.x),
//! which runs every call that reaches it and counts executions; tokens are real JWTs of the
//! test provider (tests/deps/node/oidc): `agent` (listed) and `company-web` (the Company's
//! own front end). Each spelling, sent raw in an MCP session (2025-11-25), is held (the
//! page's link in a tool error) or refused, with nothing executed; the Company's own token
//! in the same session executes once, so a spelling that slipped through would have. Both
//! stores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::frameworks::body_of;
use poppy_e2e::mcp_client::{MCP_PATH, sse_messages};
use poppy_e2e::mcp_stack::agents_mcp_stack;
use poppy_e2e::page::PageProvider;
use poppy_e2e::python_mcp::PythonMcpServer;
use poppy_e2e::rawhttp::{self, RawResponse, bearer_line as bearer, header_line as header};
use poppy_e2e::{Gateway, RedisServer, Store, store_tests};
use serde_json::{Value, json};

const ACCOUNT: &str = "acct-1";
const VERSION: &str = "2025-11-25";

/// The provider, the MCP server and the gateway (`exchange_item` approvable on the page,
/// only `agent`'s tokens agents').
struct World {
    provider: PageProvider,
    server: PythonMcpServer,
    gateway: Gateway,
    _redis: Option<RedisServer>,
}

impl World {
    fn start(store: Store) -> World {
        let (gateway, server, provider, _page, redis) = agents_mcp_stack(store);
        World {
            provider,
            server,
            gateway,
            _redis: redis,
        }
    }

    /// POST `message` to the endpoint (`query`: after `?`), in `mcp_session` if any, with
    /// these header lines (raw bytes, as a hostile agent writes them), no `Poppy-Session`.
    fn post(
        &self,
        query: &str,
        mcp_session: Option<&str>,
        headers: &[Vec<u8>],
        message: &Value,
    ) -> RawResponse {
        let body = message.to_string();
        let target = if query.is_empty() {
            MCP_PATH.to_owned()
        } else {
            format!("{MCP_PATH}?{query}")
        };
        // The SDK's server checks `Host` (DNS rebinding): the address it was reached at.
        let host = self.gateway.listen_addr();
        let mut request = format!(
            "POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {VERSION}\r\n"
        )
        .into_bytes();
        if let Some(id) = mcp_session {
            request.extend_from_slice(format!("Mcp-Session-Id: {id}\r\n").as_bytes());
        }
        for line in headers {
            request.extend_from_slice(line);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(
            format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        rawhttp::exchange(
            self.gateway.listen_addr(),
            &request,
            Duration::from_secs(30),
        )
        .unwrap_or_else(|e| panic!("POST {target}: {e}"))
    }

    /// An MCP session opened with the Company's own token (passed through to the server).
    async fn open(&self, company: &str) -> String {
        let auth = vec![bearer(b" ", company)];
        let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}});
        let answer = self.post("", None, &auth, &init);
        assert_eq!(answer.status, 200, "initialize: {}", answer.head);
        let id = answer
            .head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("initialize gives an Mcp-Session-Id: {}", answer.head));
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = self.post("", Some(&id), &auth, &initialized);
        assert_eq!(answer.status, 202, "initialized: {}", answer.head);
        id
    }

    async fn executed(&self) -> u64 {
        self.server.count("exchange_item").await
    }
}

fn exchange(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "exchange_item", "arguments": {
            "order_id": "ord_c1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}}})
}

/// The JSON-RPC response in an answer (a JSON body, or an SSE body's response event).
fn response_of(answer: &RawResponse) -> Value {
    let body = body_of(answer);
    serde_json::from_slice(&body).unwrap_or_else(|_| {
        sse_messages(&String::from_utf8_lossy(&body))
            .into_iter()
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
            .unwrap_or(Value::Null)
    })
}

/// What the gateway may answer an agent's spelling: held (the page's link in a tool error),
/// or refused `400` naming what to fix (the member and its value).
enum Expect {
    Held,
    Refused(&'static str, &'static str),
}

async fn an_agents_mcp_call_is_never_executed_unapproved(store: Store) {
    let world = World::start(store);
    let agent = world.provider.token("agent", ACCOUNT).await;
    let company = world.provider.token("company-web", ACCOUNT).await;
    let session = world.open(&company).await;
    let mut first = b"\xa0Bearer ".to_vec();
    first.extend_from_slice(agent.as_bytes());
    let cases: Vec<(&str, String, Vec<Vec<u8>>, Expect)> = vec![
        (
            "no-break space",
            String::new(),
            vec![bearer(b"\xa0", &agent)],
            Expect::Refused("header", "authorization"),
        ),
        (
            "NEL",
            String::new(),
            vec![bearer(b"\x85", &agent)],
            Expect::Refused("header", "authorization"),
        ),
        (
            "such a byte first",
            String::new(),
            vec![header("Authorization", &first)],
            Expect::Refused("header", "authorization"),
        ),
        (
            "two Authorization headers",
            String::new(),
            vec![header("Authorization", b"Basic dTpw"), bearer(b" ", &agent)],
            Expect::Refused("header", "authorization"),
        ),
        (
            "two schemes",
            String::new(),
            vec![header(
                "Authorization",
                format!("Basic dTpw, Bearer {agent}").as_bytes(),
            )],
            Expect::Refused("header", "authorization"),
        ),
        (
            "the query",
            format!("access_token={agent}"),
            vec![],
            Expect::Held,
        ),
        (
            "lower case",
            String::new(),
            vec![header(
                "Authorization",
                format!("bearer {agent}").as_bytes(),
            )],
            Expect::Held,
        ),
        (
            "the Company's header and the agent's query",
            format!("access_token={agent}"),
            vec![bearer(b" ", &company)],
            Expect::Refused("parameter", "access_token"),
        ),
    ];
    for (what, query, headers, expect) in &cases {
        let answer = world.post(query, Some(&session), headers, &exchange(what));
        match expect {
            Expect::Held => {
                assert_eq!(answer.status, 200, "{what}: {}", answer.head);
                let response = response_of(&answer);
                assert_eq!(response["id"], *what, "{what}: {response}");
                assert_eq!(response["result"]["isError"], true, "{what}: {response}");
                let text = response["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default();
                assert!(
                    text.contains("/approve/exc_"),
                    "{what}: the page's link: {response}"
                );
            }
            Expect::Refused(member, value) => {
                let json: Value = serde_json::from_slice(&body_of(&answer)).unwrap_or_default();
                assert_eq!(answer.status, 400, "{what}: {} {json}", answer.head);
                assert!(
                    json["error"].is_string() && json["detail"].is_string(),
                    "{what}: {json}"
                );
                assert_eq!(json[member], *value, "{what}: names what to fix: {json}");
            }
        }
        assert_eq!(world.executed().await, 0, "{what}: executed unapproved");
    }
    // The Company's own client, in the same session: its call is forwarded and executed, so
    // any spelling above that had slipped through would have been too.
    let own = world.post(
        "",
        Some(&session),
        &[bearer(b" ", &company)],
        &exchange("own"),
    );
    assert_eq!(own.status, 200, "the Company's call: {}", own.head);
    let response = response_of(&own);
    assert_eq!(response["result"]["isError"], false, "{response}");
    assert_eq!(world.executed().await, 1, "the Company's call executed");
}

store_tests!(an_agents_mcp_call_is_never_executed_unapproved);
