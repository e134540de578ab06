//! Approval receipts: who approved what, provably after the fact. Every performed operation
//! and every operator resolution appends one JSON line to an append-only sink (a file, or
//! stdout), each carrying the hash of the line before it ([`chain`]). `poppy-gateway audit
//! verify FILE` checks a chain; `GET /operations/{id}/receipt` on the admin API reads a file.

pub mod chain;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `[receipts] path`: a file (appended to, its chain continued), or `-` for stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptTarget {
    File(PathBuf),
    Stdout,
}

/// One receipt. Absent facts are `null`: an operator's resolution knows no summary or terms.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Receipt {
    /// `performed`, `resolved_performed` or `resolved_not_performed`.
    pub kind: &'static str,
    pub operation_id: String,
    pub revision: String,
    pub policy: String,
    pub summary: Option<String>,
    pub terms: Option<Value>,
    /// The approver scope the operation is bound to.
    pub scope: String,
    pub agent: Option<String>,
    pub user: Option<String>,
    pub session: Option<String>,
    pub account: Option<String>,
    /// `verified` (signatures checked by the gateway) or `unverified` (`[session] verify =
    /// "off"`, or an unverified bearer token).
    pub identity: Option<&'static str>,
    /// RFC 3339, milliseconds.
    pub approved_at: Option<String>,
    pub performed_at: String,
    pub upstream_status: Option<u16>,
    /// SHA-256 (hex) of the recorded answer: status, headers and body, framed.
    pub answer_sha256: Option<String>,
}

/// The digest of a recorded answer kept in a receipt.
pub(crate) fn answer_digest(status: u16, headers: &[(String, Vec<u8>)], body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(status.to_be_bytes());
    for (name, value) in headers {
        for part in [name.as_bytes(), value.as_slice()] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
    }
    hash.update((body.len() as u64).to_be_bytes());
    hash.update(body);
    chain::hex(&hash.finalize())
}

#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    #[error("receipts file {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

enum Writer {
    File(std::fs::File),
    Stdout,
}

struct Tail {
    writer: Writer,
    /// The hash the next receipt links to.
    last: String,
}

/// The append-only sink. One lock around "link, write": concurrent receipts form one chain.
pub(crate) struct ReceiptSink {
    target: ReceiptTarget,
    tail: Mutex<Tail>,
}

impl std::fmt::Debug for ReceiptSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReceiptSink({:?})", self.target)
    }
}

impl ReceiptSink {
    /// Open the sink; a file's chain is continued from its last line.
    pub fn open(target: &ReceiptTarget) -> Result<ReceiptSink, ReceiptError> {
        let (writer, last) = match target {
            ReceiptTarget::Stdout => (Writer::Stdout, chain::GENESIS.to_owned()),
            ReceiptTarget::File(path) => {
                let io = |error| ReceiptError::Io {
                    path: path.clone(),
                    error,
                };
                let existing = match std::fs::read_to_string(path) {
                    Ok(text) => text,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                    Err(e) => return Err(io(e)),
                };
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(io)?;
                (Writer::File(file), chain::last_hash(&existing))
            }
        };
        Ok(ReceiptSink {
            target: target.clone(),
            tail: Mutex::new(Tail { writer, last }),
        })
    }

    /// Append a receipt. A failure is logged (loudly): the operation itself already happened.
    pub(crate) fn write(&self, receipt: &Receipt) {
        if let Err(e) = self.try_write(receipt) {
            tracing::error!(operation_id = %receipt.operation_id, error = %e, "receipt not written");
        }
    }

    fn try_write(&self, receipt: &Receipt) -> Result<(), String> {
        let mut value = serde_json::to_value(receipt).map_err(|e| e.to_string())?;
        let mut tail = self
            .tail
            .lock()
            .map_err(|_| "receipt sink poisoned".to_owned())?;
        if let Value::Object(map) = &mut value {
            map.insert("prev".into(), Value::String(tail.last.clone()));
        }
        let line = value.to_string();
        let bytes = format!("{line}\n");
        match &mut tail.writer {
            Writer::File(file) => file.write_all(bytes.as_bytes()),
            Writer::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes.as_bytes()).and_then(|()| out.flush())
            }
        }
        .map_err(|e| e.to_string())?;
        tail.last = chain::hash_line(&line);
        Ok(())
    }

    /// Every receipt of `operation_id` in the file, oldest first. `None` for stdout (nothing
    /// is kept to read back).
    pub fn find(&self, operation_id: &str) -> Option<Result<Vec<Value>, String>> {
        let ReceiptTarget::File(path) = &self.target else {
            return None;
        };
        Some(find_in(path, operation_id))
    }
}

fn find_in(path: &Path, operation_id: &str) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    Ok(text
        .lines()
        .filter(|line| line.contains(operation_id))
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| r.get("operation_id").and_then(Value::as_str) == Some(operation_id))
        .collect())
}

/// Now as RFC 3339 with milliseconds.
pub(crate) fn rfc3339_ms(unix_ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
