//! The append-only sink: a file this process holds locked (or stdout), each line linked,
//! signed and written under one lock, so concurrent receipts form one chain.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value, json};

use super::chain::{self, Tail as FileEnd};
use super::{Receipt, ReceiptSettings, ReceiptTarget, rfc3339_ms};

#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    #[error("receipts file {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "receipts file {path} is in use by another process: two gateways would break one chain. Give each replica its own [receipts] replica (e.g. POPPY_GATEWAY__RECEIPTS__REPLICA=$HOSTNAME), or its own path"
    )]
    InUse { path: PathBuf },
}

/// An open chain file, locked for this process (advisory `flock`: every gateway takes it).
#[cfg(target_os = "linux")]
type Locked = nix::fcntl::Flock<File>;
#[cfg(not(target_os = "linux"))]
type Locked = File;

#[cfg(target_os = "linux")]
fn lock(file: File, path: &Path) -> Result<Locked, ReceiptError> {
    use nix::fcntl::{Flock, FlockArg};
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        if errno == nix::errno::Errno::EWOULDBLOCK {
            ReceiptError::InUse {
                path: path.to_owned(),
            }
        } else {
            ReceiptError::Io {
                path: path.to_owned(),
                error: errno.into(),
            }
        }
    })
}

#[cfg(not(target_os = "linux"))]
fn lock(file: File, _path: &Path) -> Result<Locked, ReceiptError> {
    Ok(file)
}

enum Writer {
    File(Locked),
    Stdout,
}

struct Tail {
    writer: Writer,
    /// The hash the next line links to.
    last: String,
}

/// The append-only sink. One lock around "link, sign, write".
pub(crate) struct ReceiptSink {
    settings: ReceiptSettings,
    tail: Mutex<Tail>,
}

impl std::fmt::Debug for ReceiptSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReceiptSink({:?})", self.settings.target)
    }
}

impl ReceiptSink {
    /// Open the sink. A file is locked (another process holding it is an error), a line torn
    /// by a crash is sealed, and its chain continued.
    pub(crate) fn open(settings: &ReceiptSettings) -> Result<ReceiptSink, ReceiptError> {
        let sink = |writer, last| ReceiptSink {
            settings: settings.clone(),
            tail: Mutex::new(Tail { writer, last }),
        };
        let where_ = match &settings.target {
            ReceiptTarget::File { path, .. } => path.display().to_string(),
            ReceiptTarget::Stdout => "stdout".to_owned(),
        };
        match &settings.signing_key {
            Some(key) => tracing::info!(receipts = %where_, kid = key.kid(), "receipts are signed"),
            None => tracing::warn!(
                receipts = %where_,
                "receipts are not signed ([receipts] signing_key): whoever can write them can change a receipt and recompute every link, and `audit verify` cannot tell"
            ),
        }
        let ReceiptTarget::File { path, .. } = &settings.target else {
            return Ok(sink(Writer::Stdout, chain::GENESIS.to_owned()));
        };
        let io = |error| ReceiptError::Io {
            path: path.clone(),
            error,
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        let mut file = lock(file, path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let recovered = chain::recover(&bytes);
        let sink = sink(Writer::File(file), recovered.last);
        match recovered.tail {
            FileEnd::Clean => {}
            FileEnd::Unterminated => sink.append(b"\n").map_err(io)?,
            FileEnd::Torn {
                bytes,
                sha256,
                newline,
            } => {
                let seal = json!({
                    "kind": chain::SEAL,
                    "torn_bytes": bytes,
                    "torn_sha256": sha256,
                    "sealed_at": rfc3339_ms(now_ms()),
                });
                let before = if newline { "" } else { "\n" };
                sink.write_value(seal, before).map_err(io)?;
                tracing::warn!(
                    receipts = %path.display(),
                    torn_bytes = bytes,
                    "receipts file: a line torn by a crash is kept and sealed; the chain goes on after it"
                );
            }
        }
        Ok(sink)
    }

    /// Append a receipt. A failure is logged (loudly): the operation itself already happened.
    pub(crate) fn write(&self, receipt: &Receipt) {
        let written = serde_json::to_value(receipt)
            .map_err(std::io::Error::other)
            .and_then(|value| self.write_value(value, ""));
        if let Err(e) = written {
            tracing::error!(operation_id = %receipt.operation_id, error = %e, "receipt not written");
        }
    }

    /// Link, sign and write one line (after `before`), in one write.
    fn write_value(&self, value: Value, before: &str) -> std::io::Result<()> {
        let mut members = match value {
            Value::Object(members) => members,
            _ => Map::new(),
        };
        let mut tail = self
            .tail
            .lock()
            .map_err(|_| std::io::Error::other("receipt sink poisoned"))?;
        let line = self.line(&mut members, &tail.last);
        write_all(&mut tail.writer, format!("{before}{line}\n").as_bytes())?;
        tail.last = chain::hash_line(line.as_bytes());
        Ok(())
    }

    fn append(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut tail = self
            .tail
            .lock()
            .map_err(|_| std::io::Error::other("receipt sink poisoned"))?;
        write_all(&mut tail.writer, bytes)
    }

    /// `members` with this replica, the link and the key's id, signed when there is a key.
    fn line(&self, members: &mut Map<String, Value>, prev: &str) -> String {
        if let Some(replica) = &self.settings.replica {
            members.insert("replica".into(), Value::String(replica.clone()));
        }
        members.insert("prev".into(), Value::String(prev.to_owned()));
        match &self.settings.signing_key {
            Some(key) => {
                members.insert("kid".into(), Value::String(key.kid().to_owned()));
                key.sign_line(&Value::Object(std::mem::take(members)).to_string())
            }
            None => Value::Object(std::mem::take(members)).to_string(),
        }
    }

    /// Every receipt of `operation_id` in this replica's file and the other replicas' files
    /// beside it, oldest first. `None` for stdout (nothing is kept to read back).
    pub(crate) fn find(&self, operation_id: &str) -> Option<Result<Vec<Value>, String>> {
        let ReceiptTarget::File { path, configured } = &self.settings.target else {
            return None;
        };
        Some(find_in(&chain_files(path, configured), operation_id))
    }
}

fn write_all(writer: &mut Writer, bytes: &[u8]) -> std::io::Result<()> {
    match writer {
        Writer::File(file) => file.write_all(bytes),
        Writer::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// This replica's file, then every other chain named after `configured` in its folder
/// (`receipts.jsonl`, `receipts.<replica>.jsonl`), sorted.
fn chain_files(own: &Path, configured: &Path) -> Vec<PathBuf> {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let (Some(folder), Some(stem)) = (configured.parent(), configured.file_stem()) else {
        return vec![own.to_owned()];
    };
    let stem = format!("{}.", stem.to_string_lossy());
    let ext = configured
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let mut others: Vec<PathBuf> = std::fs::read_dir(folder)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p != own)
                .filter(|p| {
                    name(p).is_some_and(|n| {
                        Some(&n) == name(configured).as_ref()
                            || (n.starts_with(&stem)
                                && n.ends_with(&ext)
                                && n.len() > stem.len() + ext.len())
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    others.sort();
    std::iter::once(own.to_owned()).chain(others).collect()
}

/// The receipts of `operation_id` in `files`, by `performed_at` (the files' order for ties).
/// This replica's file must be readable; the others are read when they can be.
fn find_in(files: &[PathBuf], operation_id: &str) -> Result<Vec<Value>, String> {
    let id = operation_id.as_bytes();
    let mut found = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let bytes = match std::fs::read(file) {
            Ok(bytes) => bytes,
            Err(e) if i == 0 => return Err(e.to_string()),
            Err(_) => continue,
        };
        found.extend(
            bytes
                .split(|b| *b == b'\n')
                .filter(|line| line.windows(id.len()).any(|w| w == id))
                .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
                .filter(|r| r.get("operation_id").and_then(Value::as_str) == Some(operation_id)),
        );
    }
    found.sort_by(|a, b| {
        let at = |r: &Value| {
            r.get("performed_at")
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        at(a).cmp(&at(b))
    });
    Ok(found)
}
