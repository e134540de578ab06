//! A Personal Agent on MCP: a real MCP client (rmcp, Streamable HTTP) of the gateway, raw
//! JSON-RPC POSTs for what a well-behaved client never sends, and the assertions on what
//! comes back.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::ServiceExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ClientJsonRpcMessage, MetaObject,
    ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use serde_json::{Map, Value, json};
use sse_stream::Sse;

use crate::agent::{OPERATIONS_V2, Request, Session};
use crate::answer::{Answer, Operation, is_id};
use crate::gateway::Client;
use crate::rfc3339;

/// The MCP endpoint, behind the gateway as on the server.
pub const MCP_PATH: &str = "/mcp";

/// Where the approval goes in a tool call's `_meta`.
pub const APPROVAL_KEY: &str = "personalagentprotocol.org/approval";

/// The text before the summary in a held call's tool error (spec section 4, "MCP").
pub const HELD_TEXT: &str = "Not done yet. This needs the user's approval: ";

/// An rmcp client, initialized.
pub type McpClient = RunningService<RoleClient, ClientConfig>;

/// Connect an rmcp client to `base_url` + `/mcp` as a Personal Agent in `session`, declaring
/// `"operations";v="2"` when `declare`.
pub async fn connect(base_url: &str, session: &Session, declare: bool) -> McpClient {
    let mut headers = HashMap::new();
    let mut add = |name: &'static str, value: &str| {
        headers.insert(
            http::HeaderName::from_static(name),
            http::HeaderValue::from_str(value).expect("header value"),
        );
    };
    // Poppy-Session: signed for every request by [`ResigningClient`].
    add("poppy-version", "0.4");
    if declare {
        add("poppy-extensions", OPERATIONS_V2);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("{base_url}{MCP_PATH}"))
        .custom_headers(headers);
    if let Some(authorization) = session.authorization() {
        let token = authorization.trim_start_matches("Bearer ").to_owned();
        config = config.auth_header(token);
    }
    let transport =
        StreamableHttpClientTransport::with_client(ResigningClient::new(session), config);
    // 2025-06-18: the initialize handshake and plain JSON-RPC requests, as MCP servers
    // deployed today speak it.
    let info = ClientConfig::default().with_protocol_version(ProtocolVersion::V_2025_06_18);
    tokio::time::timeout(crate::gateway::HTTP_TIMEOUT, info.serve(transport))
        .await
        .expect("the MCP client connects in time")
        .expect("the MCP client connects")
}

/// rmcp's reqwest client, adding a new `Poppy-Session` JWT of `session` (signed for the
/// request's method and path) to every request it sends, as a real agent does.
#[derive(Clone)]
pub struct ResigningClient {
    http: reqwest_mcp::Client,
    session: Session,
}

impl ResigningClient {
    /// Like rmcp's default client (no idle pooling, no redirects), and no proxy.
    pub fn new(session: &Session) -> ResigningClient {
        ResigningClient {
            http: reqwest_mcp::Client::builder()
                .pool_max_idle_per_host(0)
                .redirect(reqwest_mcp::redirect::Policy::none())
                .no_proxy()
                .build()
                .expect("build the MCP client's HTTP client"),
            session: session.clone(),
        }
    }

    fn signed(
        &self,
        method: &str,
        uri: &str,
        mut headers: HashMap<HeaderName, HeaderValue>,
    ) -> HashMap<HeaderName, HeaderValue> {
        let after_scheme = uri.split_once("://").map_or(uri, |(_, rest)| rest);
        let path = after_scheme
            .find('/')
            .map_or("/", |start| &after_scheme[start..]);
        let value = self.session.signed_header(method, path);
        headers.insert(
            HeaderName::from_static("poppy-session"),
            HeaderValue::from_str(&value).expect("a Session JWT is a header value"),
        );
        headers
    }
}

type McpHttpError = StreamableHttpError<reqwest_mcp::Error>;

impl StreamableHttpClient for ResigningClient {
    type Error = reqwest_mcp::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, McpHttpError>> + Send + '_ {
        let headers = self.signed("POST", &uri, custom_headers);
        self.http
            .post_message(uri, message, session_id, auth_header, headers)
    }

    fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, McpHttpError>> + Send + '_ {
        let headers = self.signed("POST", &uri, custom_headers);
        self.http.post_message_with_max_sse_event_size(
            uri,
            message,
            session_id,
            auth_header,
            headers,
            max_sse_event_size,
        )
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, McpHttpError>> + Send + '_ {
        let headers = self.signed("POST", &uri, custom_headers);
        self.http.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            headers,
            limits,
        )
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<(), McpHttpError>> + Send + '_ {
        let headers = self.signed("DELETE", &uri, custom_headers);
        self.http
            .delete_session(uri, session_id, auth_header, headers)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Sse, SseError>>, McpHttpError>> + Send + '_
    {
        let headers = self.signed("GET", &uri, custom_headers);
        self.http
            .get_stream(uri, session_id, last_event_id, auth_header, headers)
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Sse, SseError>>, McpHttpError>> + Send + '_
    {
        let headers = self.signed("GET", &uri, custom_headers);
        self.http.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            headers,
            max_sse_event_size,
        )
    }
}

/// `tools/call` of `tool` with `arguments`.
pub fn call(tool: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("tool arguments are an object");
    };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)
}

/// The same call with the approval of `operation` in `_meta`.
pub fn approved(mut params: CallToolRequestParams, operation: &Operation) -> CallToolRequestParams {
    let mut meta = params.meta.take().unwrap_or_default();
    meta.0
        .0
        .insert(APPROVAL_KEY.to_owned(), approval(operation));
    params.meta = Some(meta);
    params
}

/// `_meta` with only `members`.
pub fn meta(members: Value) -> RequestMetaObject {
    let Value::Object(members) = members else {
        panic!("_meta is an object");
    };
    RequestMetaObject(MetaObject(members))
}

/// `{"operation_id", "revision"}` of `operation`.
pub fn approval(operation: &Operation) -> Value {
    json!({"operation_id": operation.operation_id, "revision": operation.revision})
}

/// Call a tool, within the harness's HTTP timeout; `Err` is the client's error text.
pub async fn try_call(client: &McpClient, params: CallToolRequestParams) -> Result<Value, String> {
    match tokio::time::timeout(crate::gateway::HTTP_TIMEOUT, client.call_tool(params)).await {
        Err(_) => Err(format!(
            "no answer within {:?}",
            crate::gateway::HTTP_TIMEOUT
        )),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(result)) => Ok(result_json(&result)),
    }
}

/// Call a tool; panics on a protocol or transport error.
pub async fn call_ok(client: &McpClient, params: CallToolRequestParams) -> Value {
    let tool = params.name.to_string();
    try_call(client, params)
        .await
        .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"))
}

pub fn result_json(result: &CallToolResult) -> Value {
    serde_json::to_value(result).expect("a tool result is JSON")
}

/// The text of a tool result's first content block.
pub fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool result with a text block: {result}"))
        .to_owned()
}

/// Assert a held call's tool error (spec section 4, "MCP") and return its operation.
pub fn held_operation(result: &Value, context: &str) -> Operation {
    assert_eq!(
        result.get("isError"),
        Some(&Value::Bool(true)),
        "{context}: a held call is a tool error: {result}"
    );
    let operation = result
        .get("structuredContent")
        .and_then(|s| s.get("operation"))
        .unwrap_or_else(|| panic!("{context}: no structuredContent.operation: {result}"));
    let field = |name: &str| -> String {
        operation
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{context}: operation.{name} must be a string: {result}"))
            .to_owned()
    };
    let (operation_id, revision) = (field("operation_id"), field("revision"));
    assert!(
        is_id(&operation_id) && is_id(&revision),
        "{context}: {result}"
    );
    let summary = field("summary");
    let text = text_of(result);
    assert!(
        text.ends_with(&summary) && text.starts_with("Not done yet."),
        "{context}: the text is the summary after \"Not done yet.\": {text:?}"
    );
    let expires_at = field("expires_at");
    let expires_at_unix = rfc3339::parse(&expires_at)
        .unwrap_or_else(|e| panic!("{context}: operation.expires_at: {e}"));
    let terms = operation.get("terms").cloned().unwrap_or(Value::Null);
    assert!(terms.is_object(), "{context}: operation.terms: {result}");
    Operation {
        operation_id,
        revision,
        summary,
        terms,
        expires_at,
        expires_at_unix,
    }
}

/// Assert the MCP server's own result for execution `execution` of `tool`.
pub fn assert_performed(result: &Value, execution: usize, tool: &str, context: &str) {
    assert_ne!(
        result.get("isError"),
        Some(&Value::Bool(true)),
        "{context}: expected the server's result, got a tool error: {result}"
    );
    assert_eq!(
        result["structuredContent"]["execution"],
        json!(execution),
        "{context}: expected execution #{execution}: {result}"
    );
    assert_eq!(
        result["structuredContent"]["tool"],
        json!(tool),
        "{context}"
    );
    assert_eq!(text_of(result), format!("{tool} #{execution}"), "{context}");
}

/// Raw JSON-RPC over HTTP, for what an MCP client library would not send.
pub struct RawMcp {
    client: Client,
    session: Session,
    declare: bool,
    /// The `Mcp-Session-Id` the server gave.
    pub mcp_session: String,
}

impl RawMcp {
    /// `initialize` and `notifications/initialized` through the gateway.
    pub async fn open(client: Client, session: &Session) -> RawMcp {
        let mut raw = RawMcp {
            client,
            session: session.clone(),
            declare: true,
            mcp_session: String::new(),
        };
        let answer = raw
            .post_without_session(&json!({
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "raw", "version": "1"}}
            }))
            .await;
        answer.assert_status(200, "initialize");
        raw.mcp_session = answer
            .header("mcp-session-id")
            .unwrap_or_else(|| panic!("initialize gives an Mcp-Session-Id:\n{}", answer.describe()))
            .to_owned();
        raw.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .assert_status(202, "notifications/initialized");
        raw
    }

    /// From now on, without `Poppy-Extensions`.
    pub fn undeclared(mut self) -> RawMcp {
        self.declare = false;
        self
    }

    pub fn with_session(mut self, session: &Session) -> RawMcp {
        self.session = session.clone();
        self
    }

    /// A POST of `body` to the endpoint, as this agent, in this MCP session.
    pub fn request(&self, body: &Value) -> Request {
        self.request_bytes(body.to_string().into_bytes())
    }

    /// The same with any bytes as the body.
    pub fn request_bytes(&self, body: Vec<u8>) -> Request {
        let request = Request::agent("POST", MCP_PATH, &self.session)
            .body(body, "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18");
        let request = if self.mcp_session.is_empty() {
            request
        } else {
            request.header("Mcp-Session-Id", &self.mcp_session)
        };
        if self.declare {
            request
        } else {
            request.without_header("Poppy-Extensions")
        }
    }

    pub async fn post(&self, body: &Value) -> Answer {
        self.client.send(&self.request(body)).await
    }

    /// A POST of any bytes.
    pub async fn post_bytes(&self, body: Vec<u8>) -> Answer {
        self.client.send(&self.request_bytes(body)).await
    }

    pub async fn send(&self, request: &Request) -> Answer {
        self.client.send(request).await
    }

    async fn post_without_session(&self, body: &Value) -> Answer {
        let request = self.request(body).without_header("Mcp-Session-Id");
        self.client.send(&request).await
    }
}

/// `{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name", "arguments"}}`
pub fn tools_call(id: Value, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
}

/// The same message with `_meta` set to `meta`.
pub fn with_meta(mut message: Value, meta: Value) -> Value {
    message["params"]["_meta"] = meta;
    message
}

/// The JSON-RPC response in an answer: the JSON body, or the response event of an SSE body.
pub fn rpc_response(answer: &Answer) -> Value {
    let content_type = answer.header("content-type").unwrap_or_default();
    if content_type.starts_with("text/event-stream") {
        sse_messages(&answer.text())
            .into_iter()
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
            .unwrap_or_else(|| panic!("no response event:\n{}", answer.describe()))
    } else {
        answer.json()
    }
}

/// The JSON data of each event of an SSE body.
pub fn sse_messages(text: &str) -> Vec<Value> {
    text.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty()).then(|| serde_json::from_str(&data.join("\n")).ok())?
        })
        .collect()
}

/// Assert a JSON-RPC error answer with `code` (and the HTTP `status`); returns its message.
pub fn assert_rpc_error(answer: &Answer, status: u16, code: i64, context: &str) -> String {
    answer.assert_status(status, context);
    let message = rpc_response(answer);
    assert_eq!(
        message["error"]["code"],
        json!(code),
        "{context}: expected JSON-RPC error {code}:\n{}",
        answer.describe()
    );
    let text = message["error"]["message"].as_str().unwrap_or_default();
    assert!(!text.trim().is_empty(), "{context}: a readable message");
    text.to_owned()
}

/// An empty JSON object, for calls without arguments.
pub fn no_arguments() -> Value {
    Value::Object(Map::new())
}
