//! Forwarding MCP messages that need no approval, with the answer streamed back as it comes.
//!
//! A Personal Agent's POST to the MCP endpoint is read whole before the gateway knows whether
//! it is a held call, and pingora's proxy path cannot send a body that a filter has read. So
//! the gateway forwards these itself. It does not buffer the answer: a `text/event-stream`
//! answer (progress notifications, or the server's own requests such as elicitation, before
//! the result) reaches the client event by event, as it would through the proxy path. Each
//! read from the upstream may wait at most `[upstream] timeout`.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora::connectors::http::Connector;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;

use super::mcp_clients::{McpClients, Opened};
use super::reply::Reply;
use super::step::Step;
use crate::config::Upstream;
use crate::ingress::{ForwardRequest, HOP_BY_HOP};
use crate::mcp::{is_tools_list, widen_tools_list_body};
use crate::protocol::ErrorBody;
use crate::upstream::forwarded::ProxyContext;
use crate::upstream::head::{UpstreamHead, write_request};
use crate::upstream::{MAX_RECORDED_BODY, UpstreamClient};

/// The gateway's streaming client for MCP messages that need no approval.
pub(crate) struct StreamingForwarder {
    connector: Connector,
    peer: HttpPeer,
    timeout: Duration,
    /// The one upstream writer's settings for this upstream (no operation ID is sent here).
    head: UpstreamHead,
}

impl StreamingForwarder {
    pub(crate) fn new(client: &UpstreamClient, settings: &Upstream) -> StreamingForwarder {
        StreamingForwarder {
            connector: Connector::new(None),
            peer: client.peer().clone(),
            timeout: settings.timeout,
            head: client.head().clone(),
        }
    }

    /// Send `request` and stream the upstream's answer to `session`. A `tools/list` answer is
    /// read whole instead, to widen the `outputSchema` of the tools that `is_held` names
    /// (see `mcp::output_schema`). `opening`: the request is an `initialize`; what to note
    /// of the MCP session the answer starts, and where, before the client has the answer
    /// (`proxy::mcp_clients`).
    pub(crate) async fn stream(
        &self,
        session: &mut Session,
        request: ForwardRequest,
        proxy: &ProxyContext,
        is_held: impl Fn(&str) -> bool,
        opening: Option<(&McpClients, &Opened)>,
    ) -> Step {
        let lists_tools = is_tools_list(&request.body);
        // A fresh connection each time (never pooled): simple, and a stale pooled connection
        // can't turn a message into a 502.
        let mut upstream = match self.connector.get_http_session(&self.peer).await {
            Ok((upstream, _reused)) => upstream,
            Err(e) => return Step::Respond(unavailable(&e.to_string())),
        };
        upstream.set_read_timeout(Some(self.timeout));
        upstream.set_write_timeout(Some(self.timeout));
        // The head every other forward gets, proxy headers and request ID included.
        let sent = async {
            let header = self.head.build(&request, None, proxy)?;
            write_request(&mut upstream, header, &request.body).await
        };
        let head = match tokio::time::timeout(self.timeout, sent).await {
            Ok(Ok(())) => upstream.response_header().map(|h| {
                proxy.upstream_status(h.status.as_u16());
                downstream_header(h)
            }),
            Ok(Err(e)) => Some(Err(e.to_string())),
            Err(_) => Some(Err(format!("no answer within {:?}", self.timeout))),
        };
        if let Some((clients, opened)) = opening
            && let Some(started) = upstream
                .response_header()
                .filter(|h| h.status == 200)
                .and_then(|h| h.headers.get("mcp-session-id"))
        {
            clients.note_opened(started.as_bytes(), opened).await;
        }
        if lists_tools && upstream.response_header().is_some_and(|h| h.status == 200) {
            let content_type = upstream
                .response_header()
                .and_then(|h| h.headers.get(http::header::CONTENT_TYPE))
                .map(|v| v.as_bytes().to_vec());
            let read = async {
                let mut body = BytesMut::new();
                while let Some(chunk) = upstream.read_response_body().await? {
                    if body.len() + chunk.len() > MAX_RECORDED_BODY {
                        return Ok(None);
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok::<_, Box<pingora::Error>>(Some(body.freeze()))
            }
            .await;
            let head = head.map(|h| h.map(|h| (h, read)));
            upstream.shutdown().await;
            let (mut header, body) = match head {
                Some(Ok((header, Ok(Some(body))))) => (header, body),
                Some(Ok((_, Ok(None)))) => {
                    return Step::Respond(unavailable(&format!(
                        "its tools/list answer is larger than {MAX_RECORDED_BODY} bytes"
                    )));
                }
                Some(Ok((_, Err(e)))) => return Step::Respond(unavailable(&e.to_string())),
                Some(Err(e)) => return Step::Respond(unavailable(&e)),
                None => return Step::Respond(unavailable("no response header")),
            };
            let body = widen_tools_list_body(&body, content_type.as_deref(), is_held)
                .map(Bytes::from)
                .unwrap_or(body);
            return Step::Answered(write_whole(session, &mut header, body).await);
        }
        let header = match head {
            Some(Ok(header)) => header,
            Some(Err(e)) => {
                upstream.shutdown().await;
                return Step::Respond(unavailable(&e));
            }
            None => {
                upstream.shutdown().await;
                return Step::Respond(unavailable("no response header"));
            }
        };
        if let Err(e) = session.write_response_header(Box::new(header), false).await {
            upstream.shutdown().await;
            return Step::Answered(Err(e));
        }
        let streamed = async {
            while let Some(chunk) = upstream.read_response_body().await? {
                session.write_response_body(Some(chunk), false).await?;
            }
            session.write_response_body(None, true).await
        }
        .await;
        upstream.shutdown().await;
        if let Err(e) = &streamed {
            // The header is out: the client sees the answer cut short, never a complete one.
            tracing::warn!(error = %e, "MCP answer from the upstream cut short");
        }
        Step::Answered(streamed)
    }
}

/// Write a header and a whole body (its length set anew).
async fn write_whole(
    session: &mut Session,
    header: &mut ResponseHeader,
    body: Bytes,
) -> pingora::Result<()> {
    header.remove_header(&http::header::TRANSFER_ENCODING);
    header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    session
        .write_response_header(Box::new(header.clone()), body.is_empty())
        .await?;
    if !body.is_empty() {
        session.write_response_body(Some(body), true).await?;
    }
    Ok(())
}

/// The downstream response header for the upstream's: its status and headers, less those of
/// the upstream connection. Without a length the body is sent chunked, so each piece goes
/// out as soon as it arrives.
fn downstream_header(upstream: &ResponseHeader) -> Result<ResponseHeader, String> {
    let mut header = ResponseHeader::build(upstream.status, Some(upstream.headers.len() + 1))
        .map_err(|e| e.to_string())?;
    let status = upstream.status.as_u16();
    let bodyless = status < 200 || status == 204 || status == 304;
    let chunked = !bodyless
        && (upstream
            .headers
            .contains_key(http::header::TRANSFER_ENCODING)
            || !upstream.headers.contains_key(http::header::CONTENT_LENGTH));
    for (name, value) in upstream.headers.iter() {
        if HOP_BY_HOP.contains(&name.as_str()) || (chunked && name == http::header::CONTENT_LENGTH)
        {
            continue;
        }
        header
            .append_header(name.clone(), value.clone())
            .map_err(|e| e.to_string())?;
    }
    if chunked {
        header
            .insert_header(http::header::TRANSFER_ENCODING, "chunked")
            .map_err(|e| e.to_string())?;
    }
    Ok(header)
}

fn unavailable(error: &str) -> Reply {
    tracing::warn!(error = %error, "MCP upstream unreachable");
    Reply::error(
        502,
        &ErrorBody::new(
            "upstream_unavailable",
            format!("the MCP server could not be reached: {error}"),
        ),
    )
}
