//! Operator keys made as the docs say, with the `openssl` command.

use std::path::{Path, PathBuf};
use std::process::Command;

/// An Ed25519 key pair in `dir` (`openssl genpkey -algorithm ed25519`, then `pkey -pubout`):
/// (`NAME.pem`, the private key, PKCS#8; `NAME.pub.pem`, its public key, SPKI).
pub fn ed25519_key(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub.pem"));
    let (private_arg, public_arg) = (private.to_string_lossy(), public.to_string_lossy());
    for args in [
        vec!["genpkey", "-algorithm", "ed25519", "-out", &private_arg],
        vec!["pkey", "-in", &private_arg, "-pubout", "-out", &public_arg],
    ] {
        let status = Command::new("openssl")
            .args(&args)
            .status()
            .unwrap_or_else(|e| panic!("run openssl: {e}"));
        assert!(status.success(), "openssl {args:?}");
    }
    (private, public)
}
