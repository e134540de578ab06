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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Reads one HTTP/1.1 request (head and Content-Length body): its headers and body.
    async fn read_request(stream: &mut tokio::net::TcpStream) -> (String, Value) {
        let mut data = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client closed early");
            data.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&data).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let head = text[..end].to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if data.len() >= end + 4 + length {
                    let body = serde_json::from_slice(&data[end + 4..end + 4 + length])
                        .unwrap_or(Value::Null);
                    return (head, body);
                }
            }
        }
    }

    /// An MCP server answering `initialize` as an event stream, then two pages of tools as
    /// JSON, and checking that every request after `initialize` carries its session.
    async fn serve(listener: TcpListener) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let (head, body) = read_request(&mut stream).await;
            let method = body["method"].as_str().unwrap_or("").to_owned();
            if method != "initialize" {
                assert!(head.contains("mcp-session-id: s1"), "{head}");
                assert!(head.contains("mcp-protocol-version: 2025-03-26"), "{head}");
            }
            let id = body["id"].clone();
            let (content_type, payload) = match (method.as_str(), body["params"]["cursor"].as_str())
            {
                ("initialize", _) => (
                    "text/event-stream",
                    format!(
                        "event: message\ndata: {}\n\n",
                        json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-03-26"}})
                    ),
                ),
                ("notifications/initialized", _) => ("application/json", String::new()),
                ("tools/list", None) => (
                    "application/json",
                    json!({"jsonrpc": "2.0", "id": id,
                    "result": {"tools": [{"name": "a"}], "nextCursor": "p2"}})
                    .to_string(),
                ),
                ("tools/list", Some("p2")) => (
                    "application/json",
                    json!({"jsonrpc": "2.0", "id": id,
                    "result": {"tools": [{"name": "b"}]}})
                    .to_string(),
                ),
                other => panic!("unexpected {other:?}"),
            };
            let status = if payload.is_empty() {
                "202 Accepted"
            } else {
                "200 OK"
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\nmcp-session-id: s1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{payload}",
                payload.len()
            );
            stream.write_all(response.as_bytes()).await.unwrap();
            seen.push(method.clone());
            if method == "tools/list" && body["params"]["cursor"] == "p2" {
                return seen;
            }
        }
    }

    #[tokio::test]
    async fn tools_are_listed_across_pages_in_one_session() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let server = tokio::spawn(serve(listener));
        let tools = list_tools(&url, &["X-Test: 1".to_owned()]).await.unwrap();
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            server.await.unwrap(),
            [
                "initialize",
                "notifications/initialized",
                "tools/list",
                "tools/list"
            ]
        );
    }

    #[tokio::test]
    async fn a_bad_header_line_is_refused() {
        let error = list_tools("http://127.0.0.1:9/mcp", &["no colon".to_owned()])
            .await
            .unwrap_err();
        assert!(error.to_string().contains("not `Name: value`"), "{error}");
    }
}
