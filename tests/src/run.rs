//! Run a binary to completion (the gateway's `check`/`explain`, the example `agent`), with
//! stdin from a string, output captured in files (no pipe can fill up and block it), and a
//! deadline after which it is killed and the test fails.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a run ended, and what it printed.
#[derive(Debug, Clone)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// stdout then stderr.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    pub fn describe(&self) -> String {
        format!(
            "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// Assert the exit code, showing the output otherwise.
    pub fn assert_code(&self, code: i32, context: &str) -> &Run {
        assert_eq!(
            self.code,
            Some(code),
            "{context}: expected exit code {code}:\n{}",
            self.describe()
        );
        self
    }
}

/// Run `binary args…` with `stdin` as its input and `env` set (proxy variables removed, so
/// loopback requests go straight to the test's servers). Panics if it runs past `timeout`.
pub fn run_binary(
    binary: &Path,
    args: &[&str],
    stdin: &str,
    env: &[(&str, &str)],
    timeout: Duration,
) -> Run {
    let dir = tempfile::Builder::new()
        .prefix("poppy-e2e-run-")
        .tempdir()
        .expect("temporary folder for a run's output");
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let mut command = Command::new(binary);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&out_path).expect("create stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("create stderr file"));
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()));
    if let Some(mut input) = child.stdin.take() {
        // A binary that exits without reading its input closes the pipe: not an error here.
        let _ = input.write_all(stdin.as_bytes());
    }
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "{} {args:?} was still running after {timeout:?}:\n{}",
        binary.display(),
        run.describe()
    );
    run
}
