//! Where the workspace's binaries are: next to the test executable, in the target profile
//! directory (`target/debug/deps/<test>` → `target/debug/`).

use std::path::PathBuf;

/// The target profile directory the running test executable was built into.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the running test executable");
    let mut dir = exe
        .parent()
        .expect("the test executable has a parent directory")
        .to_path_buf();
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir.pop();
    }
    dir
}

/// The `poppy-gateway` binary (override with `POPPY_GATEWAY_BIN`).
pub fn gateway() -> PathBuf {
    find("poppy-gateway", "POPPY_GATEWAY_BIN")
}

/// The example `shop` binary (override with `POPPY_SHOP_BIN`).
pub fn shop() -> PathBuf {
    find("shop", "POPPY_SHOP_BIN")
}

/// The example Company Agent `company` (override with `POPPY_COMPANY_BIN`).
pub fn company() -> PathBuf {
    find("company", "POPPY_COMPANY_BIN")
}

/// The example Personal Agent `agent` (override with `POPPY_AGENT_BIN`).
pub fn agent() -> PathBuf {
    find("agent", "POPPY_AGENT_BIN")
}

fn find(name: &str, override_var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(override_var) {
        return PathBuf::from(path);
    }
    let path = profile_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !path.is_file() {
        panic!(
            "the `{name}` binary is not at {}: run `cargo build --workspace` (or `cargo test \
             --workspace`) first, with the same CARGO_TARGET_DIR and profile as the tests",
            path.display()
        );
    }
    path
}
