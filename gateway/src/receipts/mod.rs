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

use sha2::{Digest, Sha256};

pub(crate) use signing::pkcs8_from_pem;
pub use signing::{KeyError, PublicKey, SigningKey};
pub use sink::ReceiptError;
pub(crate) use sink::ReceiptSink;
// What a receipt says is the core's (operation/receipt.rs); this module signs and keeps it.
pub(crate) use crate::operation::{Receipt, rfc3339_ms};

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
