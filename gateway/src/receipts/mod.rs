//! Approval receipts: who approved what, provably after the fact. Every performed operation
//! and every operator resolution appends one JSON line to an append-only sink (a file, or
//! stdout), each carrying the hash of the line before it ([`chain`]) and, with `[receipts]
//! signing_key`, an Ed25519 signature ([`signing`]). `poppy-gateway audit verify FILE
//! --public-key PEM` checks a chain offline; `GET /operations/{id}/receipt` on the admin API
//! reads the files.
//!
//! A file is one replica's chain: `[receipts] replica` names it (`receipts.gw-1.jsonl`), and the
//! gateway holds an exclusive lock on it while it runs, so two processes never append to one
//! chain. Opening a file seals a line torn by a crash ([`chain::recover`]).

pub mod audit;
pub mod chain;
pub mod signing;
mod sink;

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use signing::{KeyError, PublicKey, SigningKey};
pub use sink::ReceiptError;
pub(crate) use sink::ReceiptSink;

/// `[receipts] path`: a file (appended to, its chain continued), or `-` for stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptTarget {
    File {
        /// This replica's chain.
        path: PathBuf,
        /// `path` as configured: other replicas' chains are named after it, in its folder.
        configured: PathBuf,
    },
    Stdout,
}

/// `[receipts]`, validated.
#[derive(Debug, Clone)]
pub struct ReceiptSettings {
    pub target: ReceiptTarget,
    /// Without one, lines are chained but not signed (a warning at startup).
    pub signing_key: Option<Arc<SigningKey>>,
    /// Written into every line, and into the file's name.
    pub replica: Option<String>,
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
