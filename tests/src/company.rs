//! The real example Company Agent (`company`) as a child process on a free port, talking to a
//! gateway's operations service; killed on drop.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use crate::binaries;
use crate::gateway::CONVERSATIONS_TOKEN;

const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `company --listen 127.0.0.1:0 --service URL`.
pub struct Company {
    child: Child,
    url: String,
    log: Arc<Mutex<String>>,
}

impl Company {
    /// Start it against the operations service at `service` (with the test token), offering
    /// the exchange of its defaults (the shop's `ord_2Cv6`, `itm_5Tz`) unless `args` say
    /// otherwise.
    pub fn start(service: &str, args: &[&str]) -> Company {
        let mut child = Command::new(binaries::company())
            .args(["--listen", "127.0.0.1:0", "--service", service])
            .args(args)
            .env("POPPY_CONVERSATIONS_TOKEN", CONVERSATIONS_TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the company binary");
        let stdout = child.stdout.take().expect("the company's stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = sender.send(lines.next());
            for _ in lines {}
        });
        // Its stderr is what it said and did: kept for assertions and failure messages.
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().expect("the company's stderr");
        let kept = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                kept.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        let line = match receiver.recv_timeout(READY_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            other => {
                let _ = child.kill();
                panic!("the company did not print its address within {READY_TIMEOUT:?}: {other:?}");
            }
        };
        let url = line
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in the company's first line {line:?}"))
            .to_owned();
        Company { child, url, log }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// What it printed on stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Company {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("----- company log -----\n{}\n----- end -----", self.log());
        }
    }
}
