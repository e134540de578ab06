//! A gateway.toml and one policy file in a temporary folder, for tests that load configs and
//! check their errors (each names its file, line and column).

use std::fmt::Display;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// The text of the smallest gateway.toml that loads once a `[session]` is added, as a
/// literal (for `concat!`): one policy folder, a listener and an upstream.
#[macro_export]
macro_rules! minimal_gateway_toml {
    () => {
        r#"policies = ["policies/*.toml"]

[server]
listen = "127.0.0.1:8080"

[upstream]
url = "http://127.0.0.1:9000"
"#
    };
}

/// The smallest gateway.toml, without `[session]` (see [`ConfigFiles::new`]).
pub const MINIMAL_GATEWAY_TOML: &str = minimal_gateway_toml!();

/// The choice every config must make, appended by [`ConfigFiles::new`] to a gateway.toml
/// without a `[session]` table (after the rest, so the other lines keep their numbers).
pub const SESSION_OFF: &str = "\n[session]\nverify = \"off\"\n";

/// `gateway.toml` and `policies/policy.toml` in a folder of their own.
pub struct ConfigFiles {
    dir: TempDir,
}

impl ConfigFiles {
    /// These files; [`SESSION_OFF`] is appended to a gateway.toml without `[session]`.
    pub fn new(gateway: &str, policy: &str) -> ConfigFiles {
        if gateway.contains("[session]") {
            ConfigFiles::exactly(gateway, policy)
        } else {
            ConfigFiles::exactly(&format!("{gateway}{SESSION_OFF}"), policy)
        }
    }

    /// These files, exactly.
    pub fn exactly(gateway: &str, policy: &str) -> ConfigFiles {
        let dir = tempfile::tempdir().expect("a temporary folder");
        std::fs::create_dir(dir.path().join("policies")).expect("create policies/");
        std::fs::write(dir.path().join("gateway.toml"), gateway).expect("write gateway.toml");
        std::fs::write(dir.path().join("policies/policy.toml"), policy).expect("write a policy");
        ConfigFiles { dir }
    }

    /// The folder, for files a config names (a token file, a certificate).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn gateway(&self) -> PathBuf {
        self.dir.path().join("gateway.toml")
    }

    pub fn policy(&self) -> PathBuf {
        self.dir.path().join("policies/policy.toml")
    }

    /// Load the gateway.toml with `load` (the gateway's `config::load`).
    pub fn load_with<T, E>(&self, load: impl FnOnce(&Path) -> Result<T, E>) -> Result<T, E> {
        load(&self.gateway())
    }

    /// Load it with `load`, which must refuse it: one message per error.
    pub fn errors_with<T, E>(&self, load: impl FnOnce(&Path) -> Result<T, E>) -> Vec<String>
    where
        E: IntoIterator,
        E::Item: Display,
    {
        match load(&self.gateway()) {
            Ok(_) => panic!("expected the config to be refused"),
            Err(errors) => errors.into_iter().map(|e| e.to_string()).collect(),
        }
    }
}

/// An error in `file` (at `line`, or anywhere in the file when `line` is 0) containing every
/// needle.
pub fn assert_error_at(errors: &[String], file: &Path, line: usize, needles: &[&str]) {
    let prefix = if line == 0 {
        format!("{}:", file.display())
    } else {
        format!("{}:{line}:", file.display())
    };
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with(&prefix) && needles.iter().all(|n| e.contains(n))),
        "no error at {prefix} containing {needles:?} in {errors:#?}"
    );
}
