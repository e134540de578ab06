//! One MCP test's world: a counting MCP server, the store, and a gateway with `[mcp]` and
//! `[[tool]]` policies in front of it.

use crate::gateway::{Gateway, GatewayBuilder};
use crate::mcp_client::{self, MCP_PATH, McpClient};
use crate::mcp_server::{AnswerMode, McpServer};
use crate::page::{PAGE_CLIENT_SECRET, PAGE_SECRET_ENV, PageProvider};
use crate::python_mcp::PythonMcpServer;
use crate::redis::RedisServer;
use crate::{Session, Store};

/// `exchange_item` (the spec's example) and `cancel_order` need approval; `lookup_order`
/// does not.
pub const TOOL_POLICIES: &str = r#"
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
name = "cancel_tool"
tool = "cancel_order"
id_prefix = "can"
expires_in = "15m"
same_action = ["order_id"]
summary = "Cancel order {order_id}."

[tool.terms]
order_id = { argument = "$.order_id" }
"#;

/// Gateway, MCP server and Redis of one test. Dropped in that order.
pub struct McpStack {
    pub gateway: Gateway,
    pub server: McpServer,
    pub redis: Option<RedisServer>,
    pub store: Store,
}

impl McpStack {
    pub fn start(store: Store, mode: AnswerMode) -> McpStack {
        McpStack::start_with(store, mode, |builder| builder)
    }

    /// With the gateway's config changed by `configure` (the tool policies and `[mcp]` are
    /// there already).
    pub fn start_with(
        store: Store,
        mode: AnswerMode,
        configure: impl FnOnce(GatewayBuilder) -> GatewayBuilder,
    ) -> McpStack {
        let redis = match store {
            Store::Memory => None,
            Store::Redis => Some(RedisServer::start()),
        };
        let server = McpServer::start(mode);
        let mut builder = GatewayBuilder::new(&server.url())
            .policy("tools.toml", TOOL_POLICIES)
            .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\""));
        if let Some(redis) = &redis {
            builder = builder.store_url(&redis.url());
        }
        let gateway = configure(builder).start();
        McpStack {
            gateway,
            server,
            redis,
            store,
        }
    }

    /// An rmcp client of the gateway, declaring the extension.
    pub async fn agent(&self, session: &Session) -> McpClient {
        mcp_client::connect(&self.gateway.base_url(), session, true).await
    }

    /// An rmcp client of the gateway that does not declare the extension.
    pub async fn undeclared_agent(&self, session: &Session) -> McpClient {
        mcp_client::connect(&self.gateway.base_url(), session, false).await
    }

    /// Raw JSON-RPC through the gateway, in a new MCP session.
    pub async fn raw(&self, session: &Session) -> mcp_client::RawMcp {
        mcp_client::RawMcp::open(self.gateway.client(), session).await
    }
}

/// What [`agents_mcp_stack`] starts: the gateway, the Python SDK's MCP server, the OpenID
/// provider, the approval page's URL and Redis (with [`Store::Redis`]).
pub type AgentsMcpStack = (
    Gateway,
    PythonMcpServer,
    PageProvider,
    String,
    Option<RedisServer>,
);

/// A gateway in front of the Python SDK's MCP server (upstream.py), `exchange_item`
/// approvable on the page, only the client `agent`'s tokens agents'
/// (`[approval_page.agents] clients`).
pub fn agents_mcp_stack(store: Store) -> AgentsMcpStack {
    let redis = match store {
        Store::Memory => None,
        Store::Redis => Some(RedisServer::start()),
    };
    let upstream = PythonMcpServer::start(false);
    let (provider, table) = PageProvider::with_page();
    let table = table.agents("clients = [\"agent\"]");
    let policies = TOOL_POLICIES.replacen(
        "id_prefix = \"exc\"\n",
        "id_prefix = \"exc\"\napproval = \"either\"\n",
        1,
    );
    let mut builder = GatewayBuilder::new(&upstream.url())
        .policy("tools.toml", &policies)
        .session(&provider.verified_tokens())
        .env(PAGE_SECRET_ENV, PAGE_CLIENT_SECRET)
        .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\"\n\n{}", table.toml()));
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    let gateway = builder.start();
    let page = table.url();
    (gateway, upstream, provider, page, redis)
}
