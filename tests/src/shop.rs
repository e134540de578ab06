//! The real example `shop` binary as a child process on a free port, killed on drop.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::binaries;

const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `shop --listen 127.0.0.1:0`.
pub struct Shop {
    child: Child,
    url: String,
}

impl Shop {
    /// Start it and read the address it prints (`shop listening on http://…`).
    pub fn start() -> Shop {
        let mut child = Command::new(binaries::shop())
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the shop binary");
        let stdout = child.stdout.take().expect("the shop's stdout");
        // Read the first line on a thread, so a shop that never prints can't hang the test.
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = sender.send(lines.next());
            // Keep draining so the shop never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match receiver.recv_timeout(READY_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            other => {
                let _ = child.kill();
                panic!("the shop did not print its address within {READY_TIMEOUT:?}: {other:?}");
            }
        };
        let url = line
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in the shop's first line {line:?}"))
            .to_owned();
        Shop { child, url }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        self.url.clone()
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
