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

/// The example shop's `[approval_page]` (examples/shop/gateway.toml) on a free port, for a
/// gateway that loads `policies/shop.toml`: its exchange allows the page (`approval =
/// "either"`), which needs the table. The provider is never asked (the tests that add this
/// sign nobody in there); the client secret is the demo's development file.
pub fn approval_page_config() -> String {
    let secret = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/shop/page-client.secret");
    crate::page::PageTable::new(crate::ports::free_port(), "http://127.0.0.1:9")
        .company_name("Stormline Outfitters")
        .client_id("poppy-approval-page")
        .secret_file(&secret)
        .toml()
}
