//! Third-party frameworks and clients that tests run as real processes (Flask, Starlette,
//! Express, the official MCP SDKs, ...), installed by `tests/deps/install.sh` (which `.ci/run`
//! runs): a Python virtual environment per folder of `tests/deps/python/`, an npm project per
//! folder of `tests/deps/node/`.

use std::path::PathBuf;

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
