//! `[receipts]`: where approval receipts go, the key that signs them, and whose chain a file is.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::error::ConfigError;
use super::named_file::read_named;
use crate::receipts::{ReceiptSettings, ReceiptTarget, SigningKey};

/// The longest replica name: it goes into a file name.
const MAX_REPLICA: usize = 64;

/// `[receipts]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReceiptsFile {
    /// A JSON Lines file (relative to gateway.toml's folder), or `-` for stdout.
    pub path: Spanned<String>,
    /// An Ed25519 private key, PKCS#8 PEM (relative to gateway.toml's folder).
    pub signing_key: Option<Spanned<String>>,
    /// This gateway's name among replicas sharing the receipts folder: its own chain file.
    pub replica: Option<Spanned<String>>,
}

/// Validate `[receipts]`, reading its signing key; `None` after pushing its errors.
pub(super) fn compile(
    file: &ReceiptsFile,
    folder: &Path,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<ReceiptSettings> {
    let before = errors.len();
    let replica = file.replica.as_ref().and_then(|r| {
        let name = r.get_ref();
        let valid = !name.is_empty()
            && name.len() <= MAX_REPLICA
            && !name.starts_with('.')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid {
            errors.push(at(
                r.span(),
                format!("receipts.replica: `{name}` must be 1 to {MAX_REPLICA} of A-Z a-z 0-9 - _ . (not starting with .): it names this replica's chain file"),
            ));
        }
        valid.then(|| name.clone())
    });
    let target = match file.path.get_ref().as_str() {
        "" => {
            errors.push(at(
                file.path.span(),
                "receipts.path: a file, or \"-\" for stdout".into(),
            ));
            None
        }
        "-" => Some(ReceiptTarget::Stdout),
        path => Some(ReceiptTarget::File {
            path: chain_file(&folder.join(path), replica.as_deref()),
            configured: folder.join(path),
        }),
    };
    let signing_key = file.signing_key.as_ref().and_then(|k| {
        let check = |pem: Vec<u8>| SigningKey::from_pem(&pem).map_err(|e| e.to_string());
        read_named(k, "receipts.signing_key", folder, check, at, errors).map(Arc::new)
    });
    (errors.len() == before).then_some(ReceiptSettings {
        target: target?,
        signing_key,
        replica,
    })
}

/// A replica's chain file: `receipts.jsonl` of replica `gw-1` is `receipts.gw-1.jsonl`; without
/// a replica, the path itself.
pub(crate) fn chain_file(path: &Path, replica: Option<&str>) -> PathBuf {
    let Some(replica) = replica else {
        return path.to_owned();
    };
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let name = match (stem, path.extension()) {
        (Some(stem), Some(ext)) => format!("{stem}.{replica}.{}", ext.to_string_lossy()),
        (Some(stem), None) => format!("{stem}.{replica}"),
        (None, _) => replica.to_owned(),
    };
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_has_its_own_file() {
        let path = Path::new("/var/lib/poppy/receipts.jsonl");
        assert_eq!(chain_file(path, None), path);
        assert_eq!(
            chain_file(path, Some("gw-1")),
            Path::new("/var/lib/poppy/receipts.gw-1.jsonl")
        );
        assert_eq!(
            chain_file(Path::new("receipts"), Some("a")),
            Path::new("receipts.a")
        );
    }
}
