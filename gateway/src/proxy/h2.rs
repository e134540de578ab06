//! Which connections speak HTTP/2, for the connection limits around pingora's app.
//!
//! pingora runs each HTTP/2 stream in a task of its own, so the per-request "head read"
//! mark never reaches the connection's header deadline; an HTTP/2 connection is instead
//! closed when idle by pingora's `h2_idle_timeout` (set to the same deadline).

use pingora::protocols::{ALPN, Stream};

/// The HTTP/2 connection preface (RFC 9113 section 3.4).
pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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
