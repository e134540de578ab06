//! `poppy-gateway audit …`: read the files, check, print. Needs no config: a third party
//! holding a receipts file and the operator's public key checks it offline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::chain::{self, Verified};
use super::signing::{PublicKey, SigningKey};

/// `audit verify FILE [--public-key PEM]…`: 0 when the chain (and every signature) holds, 1
/// naming the first bad line, 2 when a file cannot be read or a key file holds no usable key.
pub fn verify(file: &Path, public_keys: &[PathBuf]) -> ExitCode {
    let mut keys = Vec::new();
    for key_file in public_keys {
        match std::fs::read(key_file)
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|bytes| PublicKey::parse_file(&bytes).map_err(|e| e.to_string()))
        {
            Ok(found) => keys.extend(found),
            Err(why) => {
                eprintln!("{}: {why}", key_file.display());
                return ExitCode::from(2);
            }
        }
    }
    let bytes = match std::fs::read(file) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("{}: cannot read: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let given = (!keys.is_empty()).then_some(keys.as_slice());
    match chain::verify(&bytes, given) {
        Ok(verified) => {
            for line in report(&verified) {
                println!("{}: {line}", file.display());
            }
            ExitCode::SUCCESS
        }
        Err(broken) => {
            println!("{}: chain broken at {broken}", file.display());
            ExitCode::FAILURE
        }
    }
}

/// What an intact chain's check found, one line each; the first is the verdict.
fn report(v: &Verified) -> Vec<String> {
    let mut lines = Vec::new();
    let replicas = match v.replicas.len() {
        0 => String::new(),
        _ => format!(
            " (replica {})",
            v.replicas.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
    };
    lines.push(match &v.signatures {
        Some(s) => {
            let kids: Vec<&str> = s.kids.iter().map(String::as_str).collect();
            format!(
                "{} receipts{replicas}, chain intact, {} signatures verified (key {})",
                v.receipts,
                s.verified,
                if kids.is_empty() {
                    "none used".to_owned()
                } else {
                    kids.join(", ")
                }
            )
        }
        None => format!(
            "{} receipts{replicas}, chain intact; signatures not checked (no --public-key): a file edited with every link recomputed passes this check too",
            v.receipts
        ),
    });
    if let Some(s) = &v.signatures
        && s.unsigned_before > 0
    {
        lines.push(format!(
            "lines 1-{} are not signed (written before [receipts] signing_key was set); the first signed line's link vouches for them",
            s.unsigned_before
        ));
    }
    for seal in &v.seals {
        lines.push(format!(
            "lines {}-{}: {} bytes torn by a crash, sealed by line {}{}",
            seal.lines.0,
            seal.lines.1,
            seal.bytes,
            seal.seal_line,
            seal.sealed_at
                .as_deref()
                .map(|at| format!(" at {at}"))
                .unwrap_or_default()
        ));
    }
    if v.unfinished > 0 {
        lines.push(format!(
            "the last {} bytes have no newline: a receipt being written, or one torn by a crash that the gateway seals when it opens the file again; not checked",
            v.unfinished
        ));
    }
    lines
}

/// `audit public-key KEY`: the JWKS of a receipts signing key, for `audit verify
/// --public-key`.
pub fn public_key(key: &Path) -> ExitCode {
    match std::fs::read(key)
        .map_err(|e| format!("cannot read: {e}"))
        .and_then(|pem| SigningKey::from_pem(&pem).map_err(|e| e.to_string()))
    {
        Ok(key) => {
            println!("{}", serde_json::json!({"keys": [key.public().jwk()]}));
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("{}: {why}", key.display());
            ExitCode::from(2)
        }
    }
}
