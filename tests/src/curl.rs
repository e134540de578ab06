//! The system `curl`, as a third-party HTTP client: HTTP/2 through ALPN, HTTP/1.1, TLS.

use std::path::Path;
use std::process::Command;

use crate::agent::Request;
use crate::answer::Answer;

/// Which protocol curl is told to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `--http1.1`
    Http1,
    /// `--http2` (ALPN on TLS; prior knowledge on cleartext)
    Http2,
}

/// What curl did: the answer, the protocol of the status line, and its verbose log.
pub struct CurlAnswer {
    pub answer: Answer,
    /// `HTTP/2` or `HTTP/1.1`.
    pub version: String,
    pub verbose: String,
}

/// Send `request` with curl to `https://localhost:<port>` trusting `ca` (or to
/// `http://127.0.0.1:<port>` without one), within 30 s.
pub fn send(request: &Request, port: u16, ca: Option<&Path>, protocol: Protocol) -> CurlAnswer {
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head");
    let body = dir.path().join("body");
    let sent = dir.path().join("sent");
    std::fs::write(&sent, &request.body).unwrap();
    let mut command = Command::new("curl");
    command
        .args(["-sS", "-v", "--max-time", "30", "-X", &request.method])
        .arg("-D")
        .arg(&head)
        .arg("-o")
        .arg(&body);
    command.arg(match (protocol, ca) {
        (Protocol::Http1, _) => "--http1.1",
        (Protocol::Http2, Some(_)) => "--http2",
        (Protocol::Http2, None) => "--http2-prior-knowledge",
    });
    for (name, value) in request.wire_headers() {
        command.arg("-H").arg(format!("{name}: {value}"));
    }
    if !request.body.is_empty() {
        command
            .arg("--data-binary")
            .arg(format!("@{}", sent.display()));
    }
    let url = match ca {
        Some(ca) => {
            command
                .arg("--cacert")
                .arg(ca)
                .arg("--resolve")
                .arg(format!("localhost:{port}:127.0.0.1"));
            format!("https://localhost:{port}{}", request.path)
        }
        None => format!("http://127.0.0.1:{port}{}", request.path),
    };
    let output = command.arg(url).output().expect("run curl");
    let verbose = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "curl failed for {}: {verbose}",
        request.describe()
    );
    let head = std::fs::read_to_string(&head).unwrap();
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or_default().to_owned();
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or_default().to_owned();
    let status = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    CurlAnswer {
        answer: Answer {
            request: format!("curl {} {}", version, request.describe()),
            status,
            headers,
            body: std::fs::read(&body).unwrap_or_default(),
        },
        version,
        verbose,
    }
}
