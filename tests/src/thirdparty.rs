//! Third-party frameworks and clients that tests run as real processes (Flask, Starlette,
//! Express, the official MCP SDKs, ...), installed by `tests/deps/install.sh` (which `.ci/run`
//! runs): a Python virtual environment per folder of `tests/deps/python/`, an npm project per
//! folder of `tests/deps/node/`.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;

/// `tests/deps`, where the environments and the scripts that use them live.
pub fn deps_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deps")
}

/// The Python interpreter of the virtual environment `tests/deps/python/NAME/.venv`. Panics
/// with the command to run when it is not installed: a test that needs it must not pass
/// without it.
pub fn python(name: &str) -> PathBuf {
    let python = deps_dir()
        .join("python")
        .join(name)
        .join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `bash tests/deps/install.sh` (CI's .ci/run does)",
        python.display()
    );
    python
}

/// The npm project `tests/deps/node/NAME`, with its `node_modules` installed. Panics with the
/// command to run when it is not.
pub fn node_project(name: &str) -> PathBuf {
    let dir = deps_dir().join("node").join(name);
    assert!(
        dir.join("node_modules").is_dir(),
        "{}/node_modules is missing: run `bash tests/deps/install.sh` (CI's .ci/run does)",
        dir.display()
    );
    dir
}

/// What a client script run to the end printed.
pub struct ScriptOutput {
    pub stdout: String,
    /// Its stdout and stderr, for a failure message.
    pub text: String,
}

impl ScriptOutput {
    /// The steps the script printed, by name ([`steps`]).
    pub fn steps(&self) -> HashMap<String, Value> {
        steps(&self.stdout)
    }
}

/// The steps a client script printed: one JSON object a line, named by its `step` member
/// (other lines, such as an SDK's own output, are passed over).
pub fn steps(stdout: &str) -> HashMap<String, Value> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|v| Some((v["step"].as_str()?.to_owned(), v)))
        .collect()
}

/// Run `command` (a client script) to the end within `limit`, its output piped, killed if the
/// test gives up; panics, naming `what`, if it runs longer or fails.
pub async fn run_script(
    command: impl Into<tokio::process::Command>,
    what: &str,
    limit: std::time::Duration,
) -> ScriptOutput {
    let mut command = command.into();
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: can't start: {e}"));
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what}: did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("{what}: its output: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let text = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        output.status.success(),
        "{what}: failed ({}):\n{text}",
        output.status
    );
    ScriptOutput { stdout, text }
}
