//! The `agent` binary's command line: usage errors are exit 3 (2 means "outcome unknown").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run agent")
}

#[test]
fn help_is_not_an_error() {
    let out = agent(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--yes"));
}

#[test]
fn usage_errors_exit_3() {
    for args in [
        &["POST"][..],
        &["POST", "/x", "--json", "{not json"],
        &["POST", "no-slash"],
        &["POST", "/x", "--header", "no colon"],
        &["POST", "/x", "--gateway", "https://example.com"],
        &["POST", "/x", "--max-wait", "5 weeks"],
        // Conversation mode: an http:// endpoint, and no request of its own.
        &["--conversation", "https://company.example"],
        &["--conversation", "http://127.0.0.1:1", "POST", "/x"],
        &["POST", "/x", "--say", "hello"],
        // --wait is for --no-extension, which has no conversation mode.
        &["POST", "/x", "--wait", "1m"],
        &["POST", "/x", "--no-extension", "--wait", "soon"],
        &["--conversation", "http://127.0.0.1:1", "--no-extension"],
    ] {
        let out = agent(args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
    }
}

#[test]
fn an_unreachable_gateway_exits_3() {
    // A port that was just free: connecting to it is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gateway = format!("http://127.0.0.1:{port}");
    let out = agent(&["--gateway", &gateway, "--timeout", "5s", "GET", "/x"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

#[test]
fn sign_prints_one_new_session_jwt_per_call() {
    let sign = || {
        let out = agent(&[
            "sign",
            "--sid",
            "ses_cli",
            "POST",
            "http://127.0.0.1:8080/orders/ord_7Hk2/exchanges",
        ]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let (first, second) = (sign(), sign());
    assert_eq!(first.split('.').count(), 3, "{first}");
    assert_ne!(first, second);
    for args in [&["sign", "POST"][..], &["sign", "POST", "/no-origin"]] {
        assert_eq!(agent(args).status.code(), Some(3), "{args:?}");
    }
}

#[test]
fn demo_token_is_an_unsigned_jwt_of_the_account() {
    let out = agent(&["demo-token", "ada"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    assert_eq!(parts[2], "", "unsigned: {token}");
    use base64::Engine as _;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(parts[1])
        .unwrap();
    assert_eq!(claims, br#"{"sub":"ada"}"#);
}
