//! Which connections speak HTTP/2, for the connection limits around pingora's app.
//!
//! pingora runs each HTTP/2 stream in a task of its own, so the per-request "head read"
//! mark never reaches the connection's header deadline; an HTTP/2 connection is instead
//! closed when idle by pingora's `h2_idle_timeout` (set to the same deadline).

use pingora::protocols::{ALPN, Stream};

/// The HTTP/2 connection preface (RFC 9113 section 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the connection negotiated `h2` through ALPN or, with `h2c`, opens with the
/// HTTP/2 preface. The bytes peeked stay in the stream for pingora to read.
pub(super) async fn speaks_h2(stream: &mut Stream, h2c: bool) -> bool {
    if matches!(stream.selected_alpn_proto(), Some(ALPN::H2)) {
        return true;
    }
    if !h2c || stream.get_ssl_digest().is_some() {
        return false;
    }
    let mut buf = [0u8; PREFACE.len()];
    matches!(stream.try_peek(&mut buf).await, Ok(true)) && buf == PREFACE
}
