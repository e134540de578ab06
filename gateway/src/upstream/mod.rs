//! The gateway's own upstream client, for approved executions and poppy.json.
//!
//! Approved requests are never sent on a pooled connection: a stale pooled connection fails in a
//! way that can't tell "never received" from "performed", and that difference decides between
//! releasing a claim and leaving the outcome unknown. A fresh connection that fails to connect
//! provably sent nothing.

pub(crate) mod forwarded;
pub(crate) mod head;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora::connectors::ConnectorOptions;
use pingora::connectors::http::Connector;
use pingora::upstreams::peer::HttpPeer;

use crate::config::Upstream;
use crate::ingress::{ForwardRequest, HOP_BY_HOP};
use crate::protocol::approved::ApprovedForward;
use crate::store::RecordedResponse;
use forwarded::ProxyContext;
use head::{UpstreamHead, write_request};

/// The largest upstream answer the gateway records for replay.
pub(crate) const MAX_RECORDED_BODY: usize = 16 * 1024 * 1024;

/// What a tap sees of an answer that is an event stream, as it arrives (see
/// [`UpstreamClient::send_approved`]).
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
    head: UpstreamHead,
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
        UpstreamClient {
            connector: Connector::new(Some(options)),
            peer,
            connect_timeout: upstream.connect_timeout,
            timeout: upstream.timeout,
            head: UpstreamHead::new(upstream),
        }
    }

    /// Send an approved execution: as [`Self::send`], with its operation ID in the configured
    /// header so the upstream can log it (and, with `[upstream.approval_header]`, what was
    /// approved, signed), and a `200` event stream also passed to `tap` piece by piece as it
    /// arrives.
    pub(crate) async fn send_approved(
        &self,
        request: ForwardRequest,
        approved: &ApprovedForward<'_>,
        proxy: &ProxyContext,
        tap: Option<&Tap>,
    ) -> Result<RecordedResponse, ForwardError> {
        self.exchange(request, Some(approved), proxy, &|_| false, tap)
            .await
    }

    /// How this upstream's request heads are built (the one upstream writer).
    pub(crate) fn head(&self) -> &UpstreamHead {
        &self.head
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
        proxy: &ProxyContext,
    ) -> Result<RecordedResponse, ForwardError> {
        self.send_until(request, proxy, &|_| false).await
    }

    /// [`Self::send`], reading the answer only until `enough(body so far)` says it has what
    /// it needs (a resumed MCP stream stays open after the response it was resumed for).
    pub(crate) async fn send_until(
        &self,
        request: ForwardRequest,
        proxy: &ProxyContext,
        enough: &(dyn Fn(&[u8]) -> bool + Sync),
    ) -> Result<RecordedResponse, ForwardError> {
        self.exchange(request, None, proxy, enough, None).await
    }

    /// Send `request` (its head built by the one upstream writer, `upstream/head.rs`) and read
    /// the answer until `enough`; when the answer is a `200` event stream, each piece of it
    /// also goes to `tap` as it arrives (an MCP call's server requests must reach the client
    /// while the call runs); the whole answer is still returned.
    async fn exchange(
        &self,
        request: ForwardRequest,
        approved: Option<&ApprovedForward<'_>>,
        proxy: &ProxyContext,
        enough: &(dyn Fn(&[u8]) -> bool + Sync),
        tap: Option<&Tap>,
    ) -> Result<RecordedResponse, ForwardError> {
        let header = self
            .head
            .build(&request, approved, proxy)
            .map_err(|e| ForwardError::NotSent(format!("the request could not be built: {e}")))?;
        let (mut session, _reused) = self
            .connector
            .get_http_session(&self.peer)
            .await
            .map_err(|e| ForwardError::NotSent(e.to_string()))?;
        let exchange = async {
            write_request(&mut session, header, &request.body)
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
            proxy.upstream_status(status);
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
