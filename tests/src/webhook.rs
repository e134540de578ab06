//! A Company's webhook receiver (`tests/deps/webhook/receiver.py`): a Python `http.server` on
//! the port it picked, verifying each delivery with the Standard Webhooks reference library
//! and recording every attempt to a file this reads with bounded waits. Killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::announced;
use crate::thirdparty::{deps_dir, python};
use crate::wait;

/// The signing secret the receiver verifies with (test-only), as Standard Webhooks write it.
pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One delivery attempt the receiver got.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// `webhook-id`.
    pub id: String,
    /// Which attempt of this ID it was (1, 2, …).
    pub attempt: u64,
    /// Whether the Standard Webhooks library accepted its signature and timestamp.
    pub verified: bool,
    /// What the receiver answered.
    pub status: u16,
    /// The body, parsed.
    pub event: Value,
    /// The whole record line: every header and the body exactly as received.
    pub raw: String,
}

impl Attempt {
    /// The event's `type` (`operation.held`, …).
    pub fn kind(&self) -> &str {
        self.event["type"].as_str().unwrap_or_default()
    }

    /// `data.operation_id`.
    pub fn operation_id(&self) -> &str {
        self.event["data"]["operation_id"]
            .as_str()
            .unwrap_or_default()
    }
}

/// The receiver process and its record file.
pub struct WebhookReceiver {
    child: Child,
    port: u16,
    record: PathBuf,
    _dir: tempfile::TempDir,
}

impl WebhookReceiver {
    /// A receiver that answers 200 to every verified delivery.
    pub fn start() -> WebhookReceiver {
        WebhookReceiver::failing_first(0)
    }

    /// A receiver that answers 500 to the first `n` attempts of each event, then 200.
    pub fn failing_first(n: u32) -> WebhookReceiver {
        let dir = tempfile::Builder::new()
            .prefix("poppy-e2e-webhook-")
            .tempdir()
            .expect("a folder for the receiver's record");
        let record = dir.path().join("attempts.jsonl");
        let mut command = Command::new(python("webhook"));
        command
            .arg(deps_dir().join("webhook/receiver.py"))
            .args(["--secret", SECRET, "--fail-first", &n.to_string()])
            .arg("--record")
            .arg(&record)
            .stderr(Stdio::inherit());
        let (child, port) = announced::spawn(command, "receiver.py");
        WebhookReceiver {
            child,
            port,
            record,
            _dir: dir,
        }
    }

    /// Where the gateway sends events.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hooks/poppy", self.port)
    }

    /// Every attempt so far, in the order received.
    pub fn attempts(&self) -> Vec<Attempt> {
        let Ok(text) = std::fs::read_to_string(&self.record) else {
            return Vec::new();
        };
        text.lines()
            .map(|line| {
                let record: Value = serde_json::from_str(line).expect("a JSON record line");
                let body = record["body"].as_str().unwrap_or_default();
                Attempt {
                    id: record["id"].as_str().unwrap_or_default().to_owned(),
                    attempt: record["attempt"].as_u64().unwrap_or_default(),
                    verified: record["verified"].as_bool().unwrap_or(false),
                    status: record["status"]
                        .as_u64()
                        .and_then(|s| u16::try_from(s).ok())
                        .unwrap_or_default(),
                    event: serde_json::from_str(body).unwrap_or(Value::Null),
                    raw: line.to_owned(),
                }
            })
            .collect()
    }

    /// The attempts of events of `kind` for `operation_id`.
    pub fn attempts_of(&self, kind: &str, operation_id: &str) -> Vec<Attempt> {
        self.attempts()
            .into_iter()
            .filter(|a| a.kind() == kind && a.operation_id() == operation_id)
            .collect()
    }

    /// Wait (at most `limit`) until an attempt of `kind` for `operation_id` was answered 200;
    /// all of that event's attempts so far.
    pub async fn delivered(&self, kind: &str, operation_id: &str, limit: Duration) -> Vec<Attempt> {
        let arrived = wait::until(limit, || {
            self.attempts_of(kind, operation_id)
                .iter()
                .any(|a| a.status == 200)
        })
        .await;
        let attempts = self.attempts_of(kind, operation_id);
        assert!(
            arrived,
            "no {kind} event for {operation_id} delivered within {limit:?}; attempts: {:#?}",
            self.attempts()
        );
        attempts
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
