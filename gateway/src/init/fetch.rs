//! The tools of a running MCP server (Streamable HTTP): `initialize`,
//! `notifications/initialized`, then `tools/list` page by page (`nextCursor`), each answer
//! read as JSON or as an event stream. Plain JSON-RPC over reqwest, as the gateway speaks to
//! MCP servers elsewhere.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

/// The protocol version asked for; the server answers the one it speaks.
const PROTOCOL_VERSION: &str = "2025-06-18";
/// Pages of `tools/list` followed at most (a server repeating a cursor stops here).
const MAX_PAGES: usize = 100;
const TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    #[error("`{0}`: {1}")]
    Header(String, String),
    #[error("{step}: {source}")]
    Http {
        step: &'static str,
        source: reqwest::Error,
    },
    #[error("{step}: HTTP {status}: {body}")]
    Status {
        step: &'static str,
        status: u16,
        body: String,
    },
    #[error("{step}: {detail}")]
    Answer { step: &'static str, detail: String },
}

/// Every tool the server lists, across pages. `headers` go on every request (credentials).
pub(crate) async fn list_tools(url: &str, headers: &[String]) -> Result<Vec<Value>, FetchError> {
    let mut fixed = HeaderMap::new();
    for line in headers {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| FetchError::Header(line.clone(), "not `Name: value`".to_owned()))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|e| FetchError::Header(line.clone(), e.to_string()))?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|e| FetchError::Header(line.clone(), e.to_string()))?;
        fixed.insert(name, value);
    }
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|source| FetchError::Http {
            step: "client",
            source,
        })?;
    let mut session = Session {
        client,
        url: url.to_owned(),
        headers: fixed,
        next_id: 1,
    };
    let init = session
        .call(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "poppy-gateway-init", "version": env!("CARGO_PKG_VERSION")},
            }),
        )
        .await?;
    if let Some(version) = init.get("protocolVersion").and_then(Value::as_str) {
        if let Ok(value) = HeaderValue::from_str(version) {
            session.headers.insert("mcp-protocol-version", value);
        }
    }
    session.notify("notifications/initialized").await?;
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = session.call("tools/list", params).await?;
        if let Some(list) = page.get("tools").and_then(Value::as_array) {
            tools.extend(list.iter().cloned());
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) if Some(next) != cursor.as_deref() => cursor = Some(next.to_owned()),
            _ => return Ok(tools),
        }
    }
    Err(FetchError::Answer {
        step: "tools/list",
        detail: format!("more than {MAX_PAGES} pages"),
    })
}

struct Session {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    next_id: u64,
}

impl Session {
    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        self.client
            .post(&self.url)
            .headers(self.headers.clone())
            .header("accept", "application/json, text/event-stream")
            .json(body)
    }

    /// A request and its result (an error answer is an error).
    async fn call(&mut self, method: &'static str, params: Value) -> Result<Value, FetchError> {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let http = |source| FetchError::Http {
            step: method,
            source,
        };
        let response = self.post(&body).send().await.map_err(http)?;
        let status = response.status().as_u16();
        if let Some(sid) = response.headers().get("mcp-session-id") {
            self.headers.insert("mcp-session-id", sid.clone());
        }
        let stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let text = response.text().await.map_err(http)?;
        if !(200..300).contains(&status) {
            return Err(FetchError::Status {
                step: method,
                status,
                body: text.chars().take(300).collect(),
            });
        }
        let answer = if stream {
            crate::mcp::sse_events(&text)
                .into_iter()
                .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
                .find(|m| m.get("id") == Some(&json!(id)))
        } else {
            serde_json::from_str::<Value>(&text).ok()
        };
        let answer = answer.ok_or_else(|| FetchError::Answer {
            step: method,
            detail: "no JSON-RPC response in the answer".to_owned(),
        })?;
        if let Some(error) = answer.get("error") {
            return Err(FetchError::Answer {
                step: method,
                detail: error.to_string(),
            });
        }
        answer
            .get("result")
            .cloned()
            .ok_or_else(|| FetchError::Answer {
                step: method,
                detail: "a response without a result".to_owned(),
            })
    }

    async fn notify(&self, method: &'static str) -> Result<(), FetchError> {
        let body = json!({"jsonrpc": "2.0", "method": method});
        let response = self
            .post(&body)
            .send()
            .await
            .map_err(|source| FetchError::Http {
                step: method,
                source,
            })?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(FetchError::Status {
                step: method,
                status,
                body: String::new(),
            })
        }
    }
}
