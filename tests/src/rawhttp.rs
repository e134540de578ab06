//! HTTP/1.1 over a plain `TcpStream`, for what reqwest cannot send (chunked bodies) and for
//! readiness probes from synchronous code.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A raw response: status and the bytes after the header block (not de-chunked).
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

/// Send `request` as is (it should say `Connection: close`) and read until the server closes
/// or `timeout` passes. Write errors are ignored: a server may answer before reading it all.
pub fn exchange(
    addr: SocketAddr,
    request: &[u8],
    timeout: Duration,
) -> Result<RawResponse, String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let _ = stream.write_all(request);
    let _ = stream.flush();
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) => {
                if received.is_empty() {
                    return Err(format!("no response: {e}"));
                }
                break;
            }
        }
        if let Some(response) = complete(&received) {
            return Ok(response);
        }
    }
    complete(&received)
        .or_else(|| head_only(&received))
        .ok_or_else(|| {
            format!(
                "incomplete response: {:?}",
                String::from_utf8_lossy(&received)
            )
        })
}

/// `GET path` → status.
pub fn get_status(addr: SocketAddr, path: &str, timeout: Duration) -> Result<u16, String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    exchange(addr, request.as_bytes(), timeout).map(|r| r.status)
}

fn split_head(bytes: &[u8]) -> Option<(String, &[u8])> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some((
        String::from_utf8_lossy(&bytes[..end]).into_owned(),
        &bytes[end + 4..],
    ))
}

fn status_of(head: &str) -> Option<u16> {
    head.split_whitespace().nth(1)?.parse().ok()
}

/// A response whose body is complete per Content-Length (or that has none to wait for).
fn complete(bytes: &[u8]) -> Option<RawResponse> {
    let (head, body) = split_head(bytes)?;
    let status = status_of(&head)?;
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let done = match length {
        Some(length) => body.len() >= length,
        None if chunked => body.ends_with(b"0\r\n\r\n"),
        None => false,
    };
    done.then(|| RawResponse {
        status,
        head: head.clone(),
        body: body.to_vec(),
    })
}

fn head_only(bytes: &[u8]) -> Option<RawResponse> {
    let (head, body) = split_head(bytes)?;
    Some(RawResponse {
        status: status_of(&head)?,
        head: head.clone(),
        body: body.to_vec(),
    })
}

/// A header line `name: value`, the value as raw bytes (as a hostile client writes it).
pub fn header_line(name: &str, value: &[u8]) -> Vec<u8> {
    let mut line = format!("{name}: ").into_bytes();
    line.extend_from_slice(value);
    line
}

/// An `Authorization: Bearer<separator><token>` line.
pub fn bearer_line(separator: &[u8], token: &str) -> Vec<u8> {
    let mut value = b"Bearer".to_vec();
    value.extend_from_slice(separator);
    value.extend_from_slice(token.as_bytes());
    header_line("Authorization", &value)
}
