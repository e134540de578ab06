//! The gateway's own upstream client, for approved executions and poppy.json.
//!
//! Approved requests are never sent on a pooled connection: a stale pooled connection fails in a
//! way that can't tell "never received" from "performed", and that difference decides between
//! releasing a claim and leaving the outcome unknown. A fresh connection that fails to connect
//! provably sent nothing.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora::connectors::ConnectorOptions;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::upstreams::peer::HttpPeer;

use crate::config::Upstream;
use crate::ingress::{ForwardRequest, HOP_BY_HOP};
use crate::store::RecordedResponse;

/// The largest upstream answer the gateway records for replay.
pub(crate) const MAX_RECORDED_BODY: usize = 16 * 1024 * 1024;

/// What a tap sees of an answer that is an event stream, as it arrives (see
/// [`UpstreamClient::send_tapped`]).
#[derive(Debug)]
pub(crate) enum Tapped {
    /// The status and headers (hop-by-hop and `Content-Length` removed).
    Head {
        status: u16,
        headers: Vec<(String, Vec<u8>)>,
    },
    /// The next piece of the body.
    Chunk(Bytes),
}

/// Where a tapped answer goes.
pub(crate) type Tap = tokio::sync::mpsc::UnboundedSender<Tapped>;

/// Why a forward produced no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ForwardError {
    /// Nothing reached the upstream (no connection could be made).
    #[error("request not sent: {0}")]
    NotSent(String),
    /// The request may have reached the upstream; whether it took effect is unknown.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

pub(crate) struct UpstreamClient {
    connector: Connector,
    peer: HttpPeer,
    connect_timeout: Duration,
    timeout: Duration,
    /// `Host` for requests that carry none (HTTP/1.1 needs one).
    default_host: http::HeaderValue,
    operation_id_header: http::HeaderName,
}

impl UpstreamClient {
    pub(crate) fn new(upstream: &Upstream) -> UpstreamClient {
        let mut peer = HttpPeer::new(
            upstream.address.as_str(),
            upstream.tls,
            upstream.host.clone(),
        );
        peer.options.connection_timeout = Some(upstream.connect_timeout);
        peer.options.total_connection_timeout = Some(upstream.connect_timeout);
        let passthrough = &upstream.passthrough;
        peer.options.read_timeout = Some(passthrough.read_timeout);
        peer.options.write_timeout = Some(passthrough.write_timeout);
        peer.options.idle_timeout = Some(passthrough.idle_timeout);
        peer.options.verify_cert = passthrough.tls_verify;
        peer.options.verify_hostname = passthrough.tls_verify;
        let mut options = ConnectorOptions::new(0);
        options.ca_file = passthrough
            .ca_file
            .as_ref()
            .map(|p| p.display().to_string());
        let default_host = upstream
            .passthrough
            .host_header
            .as_deref()
            .unwrap_or(&upstream.host);
        UpstreamClient {
            connector: Connector::new(Some(options)),
            peer,
            connect_timeout: upstream.connect_timeout,
            timeout: upstream.timeout,
            default_host: http::HeaderValue::from_str(default_host)
                .unwrap_or_else(|_| http::HeaderValue::from_static("localhost")),
            operation_id_header: passthrough.operation_id_header.clone(),
        }
    }

    /// Send an approved execution: as [`Self::send`], with its operation ID in the configured
    /// header so the upstream can log it.
    pub(crate) async fn send_approved(
        &self,
        mut request: ForwardRequest,
        operation_id: &str,
        tap: Option<&Tap>,
    ) -> Result<RecordedResponse, ForwardError> {
        if let Ok(value) = http::HeaderValue::from_str(operation_id) {
            request
                .headers
                .retain(|(name, _)| *name != self.operation_id_header);
            request
                .headers
                .push((self.operation_id_header.clone(), value));
        }
        self.send_tapped(request, &|_| false, tap).await
    }

    /// The request line and headers of a forward: its own headers, `Content-Length`, the proxy
    /// headers of the request it is for (forwarded.rs) and `Host`.
    fn request_header(&self, request: &ForwardRequest) -> Result<RequestHeader, String> {
        let mut header = RequestHeader::build(
            request.method.clone(),
            request.path_and_query.as_bytes(),
            Some(request.headers.len() + 1),
        )
        .map_err(|e| e.to_string())?;
        for (name, value) in &request.headers {
            header
                .append_header(name.clone(), value.clone())
                .map_err(|e| e.to_string())?;
        }
        header
            .insert_header(http::header::CONTENT_LENGTH, request.body.len().to_string())
            .map_err(|e| e.to_string())?;
        super::forwarded::apply_current(&mut header).map_err(|e| e.to_string())?;
        if !header.headers.contains_key(http::header::HOST) {
            header
                .insert_header(http::header::HOST, self.default_host.clone())
                .map_err(|e| e.to_string())?;
        }
        Ok(header)
    }

    /// The header an approved forward carries its operation ID in: the gateway's alone, so it
    /// is stripped from every request the gateway did not approve.
    pub(crate) fn operation_id_header(&self) -> &http::HeaderName {
        &self.operation_id_header
    }

    /// `connect_timeout`: how long getting a connection may take.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The peer passthrough traffic goes to.
    pub(crate) fn peer(&self) -> &HttpPeer {
        &self.peer
    }

    /// Send a request on a fresh connection and read the whole answer. A request whose header
    /// can't be built is refused before any connection: nothing was sent, so its claim is
    /// released, never left as an unknown outcome.
    pub(crate) async fn send(
        &self,
        request: ForwardRequest,
    ) -> Result<RecordedResponse, ForwardError> {
        self.send_until(request, &|_| false).await
    }

    /// [`Self::send`], reading the answer only until `enough(body so far)` says it has what
    /// it needs (a resumed MCP stream stays open after the response it was resumed for).
    pub(crate) async fn send_until(
        &self,
        request: ForwardRequest,
        enough: &(dyn Fn(&[u8]) -> bool + Sync),
    ) -> Result<RecordedResponse, ForwardError> {
        self.send_tapped(request, enough, None).await
    }

    /// [`Self::send_until`], and when the answer is a `200` event stream, each piece of it
    /// also goes to `tap` as it arrives (an MCP call's server requests must reach the client
    /// while the call runs); the whole answer is still returned.
    pub(crate) async fn send_tapped(
        &self,
        request: ForwardRequest,
        enough: &(dyn Fn(&[u8]) -> bool + Sync),
        tap: Option<&Tap>,
    ) -> Result<RecordedResponse, ForwardError> {
        let header = self
            .request_header(&request)
            .map_err(|e| ForwardError::NotSent(format!("the request could not be built: {e}")))?;
        let (mut session, _reused) = self
            .connector
            .get_http_session(&self.peer)
            .await
            .map_err(|e| ForwardError::NotSent(e.to_string()))?;
        let exchange = async {
            session
                .write_request_header(Box::new(header))
                .await
                .map_err(|e| e.to_string())?;
            if !request.body.is_empty() {
                session
                    .write_request_body(request.body.clone(), true)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            session
                .finish_request_body()
                .await
                .map_err(|e| e.to_string())?;
            session
                .read_response_header()
                .await
                .map_err(|e| e.to_string())?;
            let (status, headers) = {
                let response = session.response_header().ok_or("no response header")?;
                let headers: Vec<(String, Vec<u8>)> = response
                    .headers
                    .iter()
                    .filter(|(name, _)| {
                        !HOP_BY_HOP.contains(&name.as_str())
                            && *name != http::header::CONTENT_LENGTH
                    })
                    .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                    .collect();
                (response.status.as_u16(), headers)
            };
            super::forwarded::note(|notes| notes.upstream_status = Some(status));
            let is_stream = headers.iter().any(|(name, value)| {
                name == "content-type"
                    && value
                        .get(..17)
                        .is_some_and(|v| v.eq_ignore_ascii_case(b"text/event-stream"))
            });
            let tap = tap.filter(|_| status == 200 && is_stream);
            if let Some(tap) = tap {
                let _ = tap.send(Tapped::Head {
                    status,
                    headers: headers.clone(),
                });
            }
            let mut body = BytesMut::new();
            let mut too_large = false;
            while let Some(chunk) = session
                .read_response_body()
                .await
                .map_err(|e| e.to_string())?
            {
                if body.len() + chunk.len() > MAX_RECORDED_BODY {
                    too_large = true;
                } else {
                    body.extend_from_slice(&chunk);
                    if let Some(tap) = tap {
                        let _ = tap.send(Tapped::Chunk(chunk));
                    }
                    if enough(&body) {
                        break;
                    }
                }
            }
            Ok::<_, String>(if too_large {
                oversized_answer(status)
            } else {
                RecordedResponse {
                    status,
                    headers,
                    body: body.freeze(),
                }
            })
        };
        let outcome = tokio::time::timeout(self.timeout, exchange).await;
        // Approved executions never go back to a pool (see the module comment).
        session.shutdown().await;
        match outcome {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(ForwardError::Unknown(e)),
            Err(_) => Err(ForwardError::Unknown(format!(
                "no complete answer within {:?}",
                self.timeout
            ))),
        }
    }
}

/// What is recorded (and replayed) when the upstream's answer is too large to keep: the action
/// was performed, and every retry must hear the same.
fn oversized_answer(status: u16) -> RecordedResponse {
    let body = serde_json::json!({
        "error": "upstream_answer_too_large",
        "detail": format!("the operation was performed (upstream status {status}), but its answer exceeded {MAX_RECORDED_BODY} bytes and was not kept"),
        "upstream_status": status,
    });
    RecordedResponse {
        status: 502,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: Bytes::from(body.to_string()),
    }
}
