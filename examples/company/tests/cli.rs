//! The `company` binary's command line (an integration test also makes `cargo test` build the
//! binary that the end-to-end tests run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

fn company(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_company"))
        .args(args)
        .env_remove("POPPY_CONVERSATIONS_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run company")
}

#[test]
fn help_names_the_service() {
    let out = company(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--service"));
}

#[test]
fn no_token_no_start() {
    let out = company(&["--listen", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no service token"),
        "{out:?}"
    );
    let out = company(&[
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        "/nonexistent/token",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
