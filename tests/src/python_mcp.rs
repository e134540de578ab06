//! The Python MCP servers behind the gateway, on a port each picked itself: the Python SDK's
//! (`tests/deps/mcp/upstream.py`, `mcp` 2.x) and FastMCP's (`fastmcp_upstream.py`); their
//! execution counts (`GET /count`) and the SDK server's gate (`POST /hold`, `/release`).
//! Killed on drop.

use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::announced;
use crate::gateway::{HTTP_TIMEOUT, http_client};
use crate::thirdparty::{deps_dir, python};

/// The Python SDK's MCP server (upstream.py).
pub struct PythonMcpServer {
    child: Child,
    port: u16,
}

impl PythonMcpServer {
    /// The Python SDK's server. `json`: answer `application/json` (else SSE streams).
    pub fn start(json: bool) -> PythonMcpServer {
        PythonMcpServer::start_script("mcp2", "upstream.py", if json { &["--json"] } else { &[] })
    }

    /// FastMCP's server (fastmcp_upstream.py).
    pub fn start_fastmcp() -> PythonMcpServer {
        PythonMcpServer::start_script("fastmcp", "fastmcp_upstream.py", &[])
    }

    /// `tests/deps/mcp/SCRIPT` in the environment `tests/deps/python/VENV`, which prints
    /// `{"port": N}` once it listens.
    pub fn start_script(venv: &str, script: &str, args: &[&str]) -> PythonMcpServer {
        let mut command = Command::new(python(venv));
        command
            .arg(deps_dir().join("mcp").join(script))
            .args(args)
            .stderr(Stdio::inherit());
        let (child, port) = announced::spawn(command, script);
        PythonMcpServer { child, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What it counted: executions by tool, and the other counters upstream.py keeps.
    pub async fn counts(&self) -> Value {
        http_client(HTTP_TIMEOUT)
            .get(format!("{}/count", self.url()))
            .send()
            .await
            .expect("GET /count")
            .json()
            .await
            .expect("counts")
    }

    /// One counter (0 when never counted).
    pub async fn count(&self, name: &str) -> u64 {
        self.counts().await[name].as_u64().unwrap_or(0)
    }

    /// Close the gate: `exchange_item` waits at it.
    pub async fn hold(&self) {
        self.post("/hold").await;
    }

    pub async fn release(&self) {
        self.post("/release").await;
    }

    async fn post(&self, path: &str) {
        http_client(HTTP_TIMEOUT)
            .post(format!("{}{path}", self.url()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    }
}

impl Drop for PythonMcpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
