//! The tools of a running MCP server (Streamable HTTP): `initialize`,
//! `notifications/initialized`, then `tools/list` page by page (`nextCursor`), each answer
//! read as JSON or as an event stream. Plain JSON-RPC over reqwest, as the gateway speaks to
//! MCP servers elsewhere.
//!
//! The operator's `--header`s (credentials) go to the URL's origin only: a redirect within it
//! is followed, one to another origin (scheme, host, port) is refused, since reqwest would
//! carry every header but `Authorization` and `Cookie` along.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

/// The protocol version asked for; the server answers the one it speaks.
const PROTOCOL_VERSION: &str = "2025-06-18";
/// Pages of `tools/list` followed at most.
const MAX_PAGES: usize = 100;
/// Redirects within the origin followed at most.
const MAX_REDIRECTS: usize = 5;
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
    #[error(
        "{step}: redirected to {location}, another origin than the URL's: refused, so that no --header value goes there (give that URL to --mcp if you trust it)"
    )]
    OtherOrigin {
        step: &'static str,
        location: String,
    },
    #[error("{step}: redirected more than {MAX_REDIRECTS} times")]
    Redirects { step: &'static str },
}

/// Tools and what the listing noticed on the way (a repeated cursor), for stderr.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) tools: Vec<Value>,
    pub(crate) notes: Vec<String>,
    /// The server's `serverInfo` name and version, as it says them (`memory-server 0.6.3`).
    pub(crate) server: Option<String>,
}

/// Scheme, host and port, the origin credentials are for.
fn origin(url: &reqwest::Url) -> (String, Option<String>, Option<u16>) {
    (
        url.scheme().to_owned(),
        url.host_str().map(str::to_ascii_lowercase),
        url.port_or_known_default(),
    )
}

/// Every tool the server lists, across pages. `headers` go on every request (credentials).
pub(crate) async fn list_tools(url: &str, headers: &[String]) -> Result<Listing, FetchError> {
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
    // Redirects within the origin are followed; any other stops, and `call` refuses the
    // answer (a 3xx): the request with the headers never goes to the other origin.
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        let same = attempt
            .previous()
            .first()
            .is_some_and(|first| origin(first) == origin(attempt.url()));
        if same && attempt.previous().len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    });
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(redirects)
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
    let mut listing = Listing::default();
    let info = |key: &str| {
        init.pointer(&format!("/serverInfo/{key}"))
            .and_then(Value::as_str)
    };
    listing.server = info("name").map(|name| match info("version") {
        Some(version) => format!("{name} {version}"),
        None => name.to_owned(),
    });
    let mut cursor: Option<String> = None;
    let mut cursors: Vec<String> = Vec::new();
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = session.call("tools/list", params).await?;
        if let Some(list) = page.get("tools").and_then(Value::as_array) {
            listing.tools.extend(list.iter().cloned());
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            // A cursor seen before would list the same pages again, without end.
            Some(next) if cursors.iter().any(|c| c == next) => {
                listing.notes.push(format!(
                    "tools/list: the server gave the cursor `{next}` again; stopped there"
                ));
                return Ok(listing);
            }
            Some(next) => {
                cursors.push(next.to_owned());
                cursor = Some(next.to_owned());
            }
            None => return Ok(listing),
        }
    }
    Err(FetchError::Answer {
        step: "tools/list",
        detail: format!("more than {MAX_PAGES} pages"),
    })
}

/// A redirect the policy did not follow: to another origin, or past the hops allowed.
fn refuse_other_origin(step: &'static str, response: &reqwest::Response) -> Result<(), FetchError> {
    if !response.status().is_redirection() {
        return Ok(());
    }
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("(no Location)");
    match response.url().join(location) {
        Ok(target) if origin(&target) == origin(response.url()) => {
            Err(FetchError::Redirects { step })
        }
        Ok(target) => Err(FetchError::OtherOrigin {
            step,
            location: target.to_string(),
        }),
        Err(_) => Err(FetchError::OtherOrigin {
            step,
            location: location.to_owned(),
        }),
    }
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
        refuse_other_origin(method, &response)?;
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
        refuse_other_origin(method, &response)?;
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
        let listing = list_tools(&url, &["X-Test: 1".to_owned()]).await.unwrap();
        let names: Vec<&str> = listing
            .tools
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
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

    /// A server answering every request with a redirect to `location`.
    async fn redirect_all(listener: TcpListener, location: String) {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let _ = read_request(&mut stream).await;
            let response = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            stream.write_all(response.as_bytes()).await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_redirect_to_another_origin_is_refused_before_anything_goes_there() {
        use futures_util::FutureExt as _;
        let first = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let other = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", first.local_addr().unwrap());
        let elsewhere = format!("http://{}/mcp", other.local_addr().unwrap());
        let server = tokio::spawn(redirect_all(first, elsewhere.clone()));
        let error = list_tools(&url, &["X-Api-Key: secret".to_owned()])
            .await
            .unwrap_err();
        assert!(
            matches!(&error, FetchError::OtherOrigin { location, .. } if location == &elsewhere),
            "{error}"
        );
        assert!(error.to_string().contains("another origin"), "{error}");
        // Had the client gone there, its connection would wait in the other's queue.
        assert!(
            other.accept().now_or_never().is_none(),
            "a connection to the other origin"
        );
        server.abort();
    }

    #[tokio::test]
    async fn a_bad_header_line_is_refused() {
        let error = list_tools("http://127.0.0.1:9/mcp", &["no colon".to_owned()])
            .await
            .unwrap_err();
        assert!(error.to_string().contains("not `Name: value`"), "{error}");
    }
}
