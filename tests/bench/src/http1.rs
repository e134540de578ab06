//! A minimal HTTP/1.1 keep-alive client: the load generator's wire code.
//!
//! Hand-written rather than hyper's client so the load generator spends as little of its
//! (shared) core as possible per request: one write, usually one read, no per-request task or
//! channel. It understands exactly what the servers under test send: `Content-Length` or
//! chunked bodies, and `Connection: close`.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head or body the client accepts; anything bigger is a bug in a row.
const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// One response, read whole.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: Bytes,
    /// The server said `Connection: close`: the connection must not be reused.
    pub close: bool,
}

/// The bytes of one request with `Host` and `Content-Length` (even when 0, so the servers
/// never wait for a body).
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + body.len() + headers.len() * 64);
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

/// A keep-alive connection.
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    pub async fn connect(addr: SocketAddr, timeout: Duration) -> anyhow::Result<Conn> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| anyhow!("connect to {addr}: timed out"))?
            .with_context(|| format!("connect to {addr}"))?;
        // Small requests and answers: never wait for Nagle.
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
        })
    }

    /// Send one request and read its whole response.
    pub async fn send(&mut self, request: &[u8]) -> anyhow::Result<Response> {
        self.stream.write_all(request).await.context("write")?;
        loop {
            if let Some(response) = parse(&mut self.buf)? {
                return Ok(response);
            }
            if self.buf.len() > MAX_RESPONSE {
                bail!("response larger than {MAX_RESPONSE} bytes");
            }
            self.buf.reserve(16 * 1024);
            let n = self.stream.read_buf(&mut self.buf).await.context("read")?;
            if n == 0 {
                bail!("connection closed before a complete response");
            }
        }
    }
}

/// Take one complete response off the front of `buf`, or `None` if more bytes are needed.
pub fn parse(buf: &mut BytesMut) -> anyhow::Result<Option<Response>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut head = httparse::Response::new(&mut headers);
    let head_len = match head.parse(buf).context("malformed response head")? {
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(n) => n,
    };
    let status = head
        .code
        .ok_or_else(|| anyhow!("response without a status"))?;
    let mut content_length = None;
    let mut chunked = false;
    let mut close = head.version == Some(0);
    for header in head.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(header.value).context("content-length")?;
            content_length = Some(text.trim().parse::<usize>().context("content-length")?);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = header.value.eq_ignore_ascii_case(b"chunked");
        } else if header.name.eq_ignore_ascii_case("connection") {
            close = header.value.eq_ignore_ascii_case(b"close");
        }
    }
    let bodiless = status == 204 || status == 304 || (100..200).contains(&status);
    if chunked {
        let Some((body, used)) = dechunk(&buf[head_len..])? else {
            return Ok(None);
        };
        buf.advance(head_len + used);
        return Ok(Some(Response {
            status,
            body: Bytes::from(body),
            close,
        }));
    }
    let length = match content_length {
        Some(n) => n,
        None if bodiless => 0,
        None => bail!("response {status} without Content-Length or chunked body"),
    };
    if length > MAX_RESPONSE {
        bail!("response body of {length} bytes");
    }
    if buf.len() < head_len + length {
        return Ok(None);
    }
    let mut message = buf.split_to(head_len + length);
    let body = message.split_off(head_len).freeze();
    Ok(Some(Response {
        status,
        body,
        close,
    }))
}

/// Decode a complete chunked body: the body and how many bytes it took, or `None` if
/// incomplete. Trailers are skipped.
pub fn dechunk(mut data: &[u8]) -> anyhow::Result<Option<(Vec<u8>, usize)>> {
    let total = data.len();
    let mut body = Vec::new();
    loop {
        let Some(line_end) = find_crlf(data) else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&data[..line_end]).context("chunk size line")?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("chunk size {size_text:?}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            // Trailers, then an empty line.
            loop {
                let Some(end) = find_crlf(data) else {
                    return Ok(None);
                };
                data = &data[end + 2..];
                if end == 0 {
                    return Ok(Some((body, total - data.len())));
                }
            }
        }
        if body.len() + size > MAX_RESPONSE {
            bail!("chunked body larger than {MAX_RESPONSE} bytes");
        }
        if data.len() < size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

fn find_crlf(data: &[u8]) -> Option<usize> {
    data.windows(2).position(|w| w == b"\r\n")
}

/// A blocking `GET`/`POST` with `Connection: close`, for the orchestrator's probes and control
/// calls (readiness, the upstream's counters). Returns status and body.
pub fn call_blocking(
    addr: SocketAddr,
    method: &str,
    path: &str,
    timeout: Duration,
) -> anyhow::Result<(u16, Bytes)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connect to {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(&request(method, path, &[("Connection", "close")], b""))?;
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(response) = parse(&mut buf)? {
            return Ok((response.status, response.body));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("{method} {path} on {addr}: closed before a complete response");
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE {
            bail!("{method} {path} on {addr}: response too large");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_responses_are_taken_one_at_a_time() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"[..],
        );
        let first = parse(&mut buf).unwrap().unwrap();
        assert_eq!(
            (first.status, &first.body[..], first.close),
            (201, &b"ok"[..], false)
        );
        let second = parse(&mut buf).unwrap().unwrap();
        assert_eq!(
            (second.status, second.body.len(), second.close),
            (200, 0, true)
        );
        assert!(buf.is_empty());
        assert!(parse(&mut buf).unwrap().is_none());
    }

    #[test]
    fn partial_responses_wait_for_more() {
        let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"[..]);
        assert!(parse(&mut buf).unwrap().is_none());
        buf.extend_from_slice(b"cde");
        assert_eq!(&parse(&mut buf).unwrap().unwrap().body[..], b"abcde");
    }

    #[test]
    fn chunked_bodies_are_decoded() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\nrest"[..],
        );
        let response = parse(&mut buf).unwrap().unwrap();
        assert_eq!(&response.body[..], b"abcde");
        assert_eq!(&buf[..], b"rest");
        assert!(dechunk(b"3\r\nab").unwrap().is_none());
        assert!(dechunk(b"zz\r\n").is_err());
    }

    #[test]
    fn requests_always_carry_a_length() {
        let bytes = request("GET", "/x", &[("A", "b")], b"");
        assert_eq!(
            bytes,
            b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nA: b\r\nContent-Length: 0\r\n\r\n"
        );
    }
}
