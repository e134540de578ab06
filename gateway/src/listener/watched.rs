//! The stream pingora reads a client connection through, telling the connection limits
//! (connections.rs) what they cannot see themselves.
//!
//! HTTP/2 over TLS: pingora's HTTP/2 handshake waits for the preface without a limit, and its
//! `h2_idle_timeout` only starts after the handshake; a TLS stream cannot be peeked. So the
//! stream reports its own reads: once the preface's 24 bytes have been read, the connection
//! serves, and the handshake and then `h2_idle_timeout` take over.
//!
//! HTTP/1.1: a head pingora cannot read (a malformed request line or header, a bad
//! `Content-Length`) or will not proxy (`CONNECT`) it refuses itself, with an empty `400` or
//! `405`, before any hook of the gateway runs. Such a response is the only one written while
//! the connection still waits for a head, so it is recognised there and written as the
//! gateway's JSON error instead.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use async_trait::async_trait;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::{SslDigest, TlsRef};
use pingora::protocols::{
    ALPN, GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl,
    Stream, TimingDigest, UniqueID, UniqueIDType,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::protocol::ErrorBody;

/// The detail of every refusal of `CONNECT`, on HTTP/1.1 (here) and HTTP/2 (service.rs).
pub(crate) const CONNECT_REFUSED: &str =
    "this gateway does not proxy CONNECT; nothing was forwarded";

/// What a connection's stream reports to (the connection limits' handle on it).
pub(super) trait HeadWatch: Send + Sync {
    /// A request head (an HTTP/2 preface) has arrived.
    fn serving(&self);
    /// Whether the connection waits for a request head now.
    fn is_waiting(&self) -> bool;
}

/// A client connection's stream, reporting to its [`HeadWatch`].
pub(super) struct Watched {
    inner: Stream,
    connection: Box<dyn HeadWatch>,
    /// HTTP/2: bytes of the preface still to be read before the connection serves.
    preface_left: usize,
    /// HTTP/1.1: pingora's own refusals are rewritten.
    http1: bool,
    rewrite: Rewrite,
}

/// Where the rewrite of a refusal of pingora's stands.
enum Rewrite {
    None,
    /// The gateway's answer, `.1` bytes of it written.
    Writing(Vec<u8>, usize),
    /// Written; whatever pingora writes after it (the rest of its empty answer) is dropped,
    /// as the connection closes.
    Done,
}

impl Watched {
    /// An HTTP/1.1 connection.
    pub(super) fn http1(inner: Stream, connection: Box<dyn HeadWatch>) -> Stream {
        Box::new(Watched {
            inner,
            connection,
            preface_left: 0,
            http1: true,
            rewrite: Rewrite::None,
        })
    }

    /// An HTTP/2 connection whose `preface` bytes have not been read yet.
    pub(super) fn http2(inner: Stream, preface: usize, connection: Box<dyn HeadWatch>) -> Stream {
        Box::new(Watched {
            inner,
            connection,
            preface_left: preface,
            http1: false,
            rewrite: Rewrite::None,
        })
    }

    /// Write the rewritten answer, if one is being written; `Ready(Ok(()))` when there is none
    /// (or no more) to write.
    fn poll_rewrite(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Rewrite::Writing(bytes, written) = &mut self.rewrite {
            while *written < bytes.len() {
                match ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..])) {
                    Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Ok(n) => *written += n,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            self.rewrite = Rewrite::Done;
        }
        Poll::Ready(Ok(()))
    }
}

/// The gateway's answer for a response pingora starts writing in `head` while the connection
/// still waits for a request head: its own refusal of a head it could not read.
fn refusal_of(head: &[u8]) -> Option<Vec<u8>> {
    let status: u16 = std::str::from_utf8(head.strip_prefix(b"HTTP/1.1 ")?.get(..3)?)
        .ok()?
        .parse()
        .ok()?;
    if status < 400 {
        return None;
    }
    let (reason, body) = match status {
        405 => (
            "Method Not Allowed",
            ErrorBody::new("method_not_allowed", CONNECT_REFUSED),
        ),
        _ => (
            "Bad Request",
            ErrorBody::new(
                "bad_request",
                "the request's head could not be read as HTTP/1.1 (a malformed request line or header, an invalid Content-Length, or a head too large); nothing was forwarded",
            ),
        ),
    };
    let body = body.to_bytes();
    let mut answer = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncache-control: no-store\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    Some(answer)
}

impl fmt::Debug for Watched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watched")
            .field("inner", &self.inner)
            .field("preface_left", &self.preface_left)
            .field("http1", &self.http1)
            .finish()
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.preface_left > 0 {
            let read = buf.filled().len() - before;
            self.preface_left = self.preface_left.saturating_sub(read);
            if self.preface_left == 0 {
                self.connection.serving();
            }
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if matches!(this.rewrite, Rewrite::None)
            && this.http1
            && buf.starts_with(b"HTTP/1.1 ")
            && this.connection.is_waiting()
            && let Some(answer) = refusal_of(buf)
        {
            this.rewrite = Rewrite::Writing(answer, 0);
        }
        if matches!(this.rewrite, Rewrite::None) {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        ready!(this.poll_rewrite(cx))?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if matches!(this.rewrite, Rewrite::None) {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        ready!(this.poll_rewrite(cx))?;
        Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_rewrite(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_rewrite(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for Watched {
    async fn shutdown(&mut self) {
        let _ = std::future::poll_fn(|cx| self.poll_rewrite(cx)).await;
        self.inner.shutdown().await
    }
}

impl UniqueID for Watched {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for Watched {
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for Watched {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for Watched {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for Watched {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait]
impl Peek for Watched {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use super::refusal_of;

    #[test]
    fn pingoras_refusals_become_json() {
        let head = b"HTTP/1.1 400 Bad Request\r\nServer: Pingora\r\nContent-Length: 0\r\n\r\n";
        let answer = String::from_utf8(refusal_of(head).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"));
        assert!(answer.contains(&format!("content-length: {}\r\n", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"], "bad_request");
        let answer = refusal_of(b"HTTP/1.1 405 Method Not Allowed\r\n").unwrap();
        assert!(
            String::from_utf8(answer)
                .unwrap()
                .contains("method_not_allowed")
        );
        assert!(refusal_of(b"HTTP/1.1 200 OK\r\n").is_none());
        assert!(refusal_of(b"HTTP/1.1 ").is_none());
    }
}
