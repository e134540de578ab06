//! Real, lenient web frameworks as upstreams (Flask on Werkzeug, Starlette on uvicorn, Express
//! 4 with method-override), each serving the same small API from `tests/deps/frameworks/` and
//! recording every execution with the terms it acted on. See that folder's README.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::rawhttp::{self, RawResponse};
use crate::thirdparty;

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Which framework serves the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    Flask,
    Starlette,
    Express,
}

/// One running framework app, killed on drop.
pub struct FrameworkApp {
    child: Child,
    port: u16,
    pub framework: Framework,
}

impl FrameworkApp {
    /// Start the app on a free port and wait until it says which.
    pub fn start(framework: Framework) -> FrameworkApp {
        let dir = thirdparty::deps_dir().join("frameworks");
        let mut command = match framework {
            Framework::Flask => {
                let mut c = Command::new(thirdparty::python("frameworks"));
                c.arg("flask_app.py");
                c
            }
            Framework::Starlette => {
                let mut c = Command::new(thirdparty::python("frameworks"));
                c.arg("starlette_app.py");
                c
            }
            Framework::Express => {
                thirdparty::node_project("express");
                let mut c = Command::new("node");
                c.arg("express_app.js");
                c
            }
        };
        let mut child = command
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn the {framework:?} app: {e}"));
        let stdout = child.stdout.take().expect("the app's stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = sender.send(lines.next());
            for _ in lines {}
        });
        let port = match receiver.recv_timeout(READY_TIMEOUT) {
            Ok(Some(Ok(line))) => line
                .strip_prefix("PORT ")
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or_else(|| panic!("{framework:?} printed {line:?}, not `PORT n`")),
            other => {
                let _ = child.kill();
                panic!("the {framework:?} app did not start within {READY_TIMEOUT:?}: {other:?}");
            }
        };
        FrameworkApp {
            child,
            port,
            framework,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every execution so far, read from the app directly.
    pub fn executions(&self) -> Vec<Value> {
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let request = b"GET /__executions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        let answer = rawhttp::exchange(addr, request, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{:?} /__executions: {e}", self.framework));
        assert_eq!(answer.status, 200, "{:?} /__executions", self.framework);
        serde_json::from_slice(&body_of(&answer)).unwrap_or_else(|e| {
            panic!(
                "{:?} /__executions is not JSON ({e}): {:?}",
                self.framework,
                String::from_utf8_lossy(&answer.body)
            )
        })
    }
}

impl Drop for FrameworkApp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body of a raw response, de-chunked if it was sent chunked.
pub fn body_of(answer: &RawResponse) -> Vec<u8> {
    if !answer
        .head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return answer.body.clone();
    }
    let mut out = Vec::new();
    let mut rest = answer.body.as_slice();
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..line_end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        out.extend_from_slice(&rest[start..(start + size).min(rest.len())]);
        rest = rest.get(start + size + 2..).unwrap_or_default();
    }
    out
}
