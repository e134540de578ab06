//! HTTP/2 for the connection limits around pingora's app: which connections speak it, the
//! `503` over the cap, and the server options that bound what one connection can take.
//!
//! pingora runs each HTTP/2 stream in a task of its own, so the per-request "head read"
//! mark never reaches the connection's header deadline; an HTTP/2 connection is instead
//! closed when idle by pingora's `h2_idle_timeout` (set to the same deadline).

use std::time::Duration;

use bytes::Bytes;
use pingora::protocols::http::v2::server::{H2Options, default_h2_options, handshake};
use pingora::protocols::{ALPN, Stream};

/// The HTTP/2 connection preface (RFC 9113 section 3.4).
pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Framing overhead of small DATA frames one connection may have buffered before the app
/// reads them (h2 counts 256 bytes less the payload for each frame under 256 bytes): 1024
/// frames, however small. h2's default, half the 64 KiB connection window, allowed about 140
/// frames of a few dozen bytes: a body sent in more, faster than the gateway read it (a policy
/// route reads it only once the request is classified), closed the connection with GOAWAY
/// `ENHANCE_YOUR_CALM` and no answer. Past this budget h2's guard still does so; the memory it
/// bounds is well under the budget (the frames' payloads share the connection's read buffers).
const SMALL_DATA_FRAMES_BUDGET: usize = 1024 * 256;

/// pingora's HTTP/2 server options, with at most `max_streams` streams open per connection:
/// each stream forwarded holds an upstream connection (RELIABILITY.md).
pub(crate) fn server_options(max_streams: u32) -> H2Options {
    let mut options = default_h2_options();
    options.max_concurrent_streams(max_streams);
    options.data_frame_budget(SMALL_DATA_FRAMES_BUDGET);
    options
}

/// How a connection opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opening {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2 negotiated through ALPN; the preface has not been seen (TLS cannot be peeked).
    Http2Negotiated,
    /// With `h2c`, the HTTP/2 preface has arrived.
    Http2Preface,
}

/// How the connection opens: `h2` through ALPN or, with `h2c`, the HTTP/2 preface. The bytes
/// peeked stay in the stream for pingora to read.
pub(super) async fn opening(stream: &mut Stream, h2c: bool) -> Opening {
    if matches!(stream.selected_alpn_proto(), Some(ALPN::H2)) {
        return Opening::Http2Negotiated;
    }
    if !h2c || stream.get_ssl_digest().is_some() {
        return Opening::Http1;
    }
    let mut buf = [0u8; PREFACE.len()];
    if matches!(stream.try_peek(&mut buf).await, Ok(true)) && buf == PREFACE {
        Opening::Http2Preface
    } else {
        Opening::Http1
    }
}

/// Answer the first request of an HTTP/2 connection with `503`, `Retry-After` and the JSON
/// `body`, then close the connection (GOAWAY), all within `within`.
pub(super) async fn refuse(stream: Stream, body: &'static str, within: Duration) {
    let refused = async {
        let mut connection = match handshake(stream, None).await {
            Ok(connection) => connection,
            Err(e) => {
                tracing::debug!(error = %e, "HTTP/2 connection over the cap: no handshake");
                return;
            }
        };
        let accepted = connection.accept().await;
        tracing::debug!(?accepted, "HTTP/2 connection over the cap: first stream");
        if let Some(Ok((_request, mut respond))) = accepted {
            let response = http::Response::builder()
                .status(http::StatusCode::SERVICE_UNAVAILABLE)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::RETRY_AFTER, "1")
                .body(());
            if let Ok(response) = response
                && let Ok(mut sent) = respond.send_response(response, false)
            {
                let _ = sent.send_data(Bytes::from_static(body.as_bytes()), true);
            }
        }
        connection.graceful_shutdown();
        // Polling the connection writes the answer and the GOAWAY; streams the client opened
        // meanwhile are reset when dropped.
        while let Some(Ok(_)) = connection.accept().await {}
    };
    let _ = tokio::time::timeout(within, refused).await;
}
