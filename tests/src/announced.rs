//! A helper process that says where it listens: its first line on stdout is `{"port": N}`
//! (the Python receivers and MCP servers, the OpenID provider). Its later output is read and
//! dropped, so it never blocks on a full pipe.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// How long a helper may take to say its port (a cold Python or node start on a busy machine).
const ANNOUNCE_LIMIT: Duration = Duration::from_secs(30);

/// Start `command` (`name` in messages) and wait for its port; kills it and panics if it says
/// none within 30 s.
pub fn spawn(mut command: Command, name: &str) -> (Child, u16) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let _ = sender.send(first);
        for _ in lines {}
    });
    let line = receiver.recv_timeout(ANNOUNCE_LIMIT).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("{name} did not say its port within {ANNOUNCE_LIMIT:?}")
    });
    let port = serde_json::from_str::<Value>(&line)
        .ok()
        .and_then(|v| v["port"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or_else(|| {
            let _ = child.kill();
            panic!("{name}'s first line is not {{\"port\": N}}: {line:?}")
        });
    (child, port)
}
