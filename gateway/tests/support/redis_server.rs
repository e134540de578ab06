//! A private `redis-server` child process on a free port, killed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Never the system Redis.
const SYSTEM_REDIS_PORT: u16 = 6379;
const START_TIMEOUT: Duration = Duration::from_secs(10);
const START_ATTEMPTS: usize = 5;

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Start a server on a free port (retrying on another port if that one was taken).
    pub fn start() -> RedisServer {
        for _ in 0..START_ATTEMPTS {
            let mut server = RedisServer {
                port: free_port(),
                child: None,
            };
            if server.try_start() {
                return server;
            }
        }
        panic!("redis-server did not start after {START_ATTEMPTS} attempts");
    }

    /// A free port with nothing listening on it, for a server started later.
    pub fn reserve_port() -> u16 {
        free_port()
    }

    /// A stopped server bound to `port` once started.
    pub fn stopped_on(port: u16) -> RedisServer {
        RedisServer { port, child: None }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kill the server (SIGKILL: no goodbye to clients) and wait for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL works on a paused process too.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freeze the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Undo [`RedisServer::pause`] (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("server is running");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Start (again) on the same port.
    pub fn restart(&mut self) {
        self.stop();
        assert!(
            self.try_start(),
            "redis-server did not start again on port {}",
            self.port
        );
    }

    fn try_start(&mut self) -> bool {
        assert_ne!(self.port, SYSTEM_REDIS_PORT);
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed to run these tests");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.answers_ping() {
                return true;
            }
            let exited = self
                .child
                .as_mut()
                .is_some_and(|child| matches!(child.try_wait(), Ok(Some(_))));
            if exited {
                // Most likely the port was taken meanwhile.
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop();
        false
    }

    fn answers_ping(&self) -> bool {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().expect("local address").port();
        if port != SYSTEM_REDIS_PORT {
            return port;
        }
    }
}
