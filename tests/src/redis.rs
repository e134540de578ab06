//! A private `redis-server` child process on a free port, killed on drop.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::ports::free_port;

const START_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// A `redis-server --save "" --appendonly no` of this test alone.
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    role: Role,
    child: Option<Child>,
}

/// What a server is started as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Standalone,
    /// `--replicaof 127.0.0.1 <port>`.
    ReplicaOf(u16),
    /// `--cluster-enabled yes`; its cluster bus listens on port + 10000.
    ClusterNode,
}

impl Role {
    fn args(self, port: u16, dir: &TempDir) -> Vec<String> {
        match self {
            Role::Standalone => Vec::new(),
            Role::ReplicaOf(primary) => {
                vec![
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    primary.to_string(),
                ]
            }
            Role::ClusterNode => vec![
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                dir.path()
                    .join(format!("nodes-{port}.conf"))
                    .display()
                    .to_string(),
            ],
        }
    }

    /// A free port for this role: a cluster node's bus port (port + 10000) must be free too.
    fn port(self) -> u16 {
        if self != Role::ClusterNode {
            return free_port();
        }
        loop {
            let port = free_port();
            if let Some(bus) = port.checked_add(10_000)
                && std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok()
            {
                return port;
            }
        }
    }
}

impl RedisServer {
    /// Start a server on a free port and wait (at most 10 s) until it answers PING.
    pub fn start() -> RedisServer {
        RedisServer::start_as(Role::Standalone)
    }

    /// Start a replica of `primary` and wait (at most 10 s) until the primary counts it as a
    /// connected replica, so that `WAIT 1` can be satisfied.
    pub fn start_replica_of(primary: &RedisServer) -> RedisServer {
        let replica = RedisServer::start_as(Role::ReplicaOf(primary.port));
        replica.wait_for_replication(primary);
        replica
    }

    /// Wait (at most 10 s) until this replica's link to `primary` is up and the primary
    /// counts it, e.g. after [`RedisServer::restart`] of a replica.
    pub fn wait_for_replication(&self, primary: &RedisServer) {
        let deadline = Instant::now() + START_TIMEOUT;
        while !(self.replication_is_up()
            && primary
                .info_field("replication", "connected_slaves")
                .is_some_and(|n| n != "0"))
        {
            assert!(
                Instant::now() < deadline,
                "the replica on port {} did not connect to its primary on port {} within \
                 {START_TIMEOUT:?}:\n{}",
                self.port,
                primary.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A port nothing listens on yet, for a server started later ([`RedisServer::stopped_on`]).
    pub fn reserve_port() -> u16 {
        free_port()
    }

    /// A server that is not running yet: [`RedisServer::restart`] starts it on `port`.
    pub fn stopped_on(port: u16) -> RedisServer {
        RedisServer {
            port,
            dir: tempfile::Builder::new()
                .prefix("poppy-e2e-redis-")
                .tempdir()
                .expect("temporary directory for redis-server"),
            role: Role::Standalone,
            child: None,
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
        let child = self.child.as_ref().expect("the server is running");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Start a node of a Redis Cluster, not yet joined to any (see [`crate::RedisCluster`]).
    pub(crate) fn start_cluster_node() -> RedisServer {
        RedisServer::start_as(Role::ClusterNode)
    }

    fn start_as(role: Role) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("poppy-e2e-redis-")
            .tempdir()
            .expect("temporary directory for redis-server");
        let mut last_error = String::new();
        for _attempt in 0..2 {
            let port = role.port();
            match spawn(port, &dir, &role.args(port, &dir)) {
                Ok(child) => {
                    return RedisServer {
                        port,
                        dir,
                        role,
                        child: Some(child),
                    };
                }
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    /// A replica whose link to its primary is up.
    fn replication_is_up(&self) -> bool {
        self.command(&["INFO", "replication"])
            .is_ok_and(|info| info.contains("master_link_status:up"))
    }

    /// The `INFO` field `name` of `section`, e.g. `("replication", "connected_slaves")`.
    pub fn info_field(&self, section: &str, name: &str) -> Option<String> {
        let info = self.command(&["INFO", section]).ok()?;
        let prefix = format!("{name}:");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map(|value| value.trim().to_owned())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis://127.0.0.1:PORT/0`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kill the server (SIGKILL). Its data is gone: it never saves.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stop it if it runs, then start it again on the same port (empty).
    pub fn restart(&mut self) {
        self.stop();
        match spawn(self.port, &self.dir, &self.role.args(self.port, &self.dir)) {
            Ok(child) => self.child = Some(child),
            Err(error) => panic!(
                "redis-server did not restart on port {}: {error}",
                self.port
            ),
        }
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Whether it answers PING now.
    pub fn ping(&self) -> bool {
        ping(self.port).is_ok()
    }

    /// Send one command and return its reply: `+OK` → `OK`, `:3` → `3`, `$…` → the bulk
    /// string, `$-1` → `(nil)`, `-ERR …` → `Err`.
    pub fn command(&self, args: &[&str]) -> Result<String, String> {
        command(self.port, args)
    }

    /// A file in this server's folder, opened for appending (for a helper's output).
    pub(crate) fn log_file(&self, name: &str) -> File {
        let path = self.dir.path().join(name);
        File::options()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
    }

    pub(crate) fn read_log_file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// What the server printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(log_path(&self.dir)).unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "----- redis-server log (port {}) -----\n{}\n-----",
                self.port,
                self.log()
            );
        }
        self.stop();
    }
}

fn log_path(dir: &TempDir) -> PathBuf {
    dir.path().join("redis.log")
}

fn spawn(port: u16, dir: &TempDir, extra_args: &[String]) -> Result<Child, String> {
    let log = File::options()
        .create(true)
        .append(true)
        .open(log_path(dir))
        .map_err(|e| format!("open redis log: {e}"))?;
    let log_err = log.try_clone().map_err(|e| format!("clone log: {e}"))?;
    let mut child = Command::new("redis-server")
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                panic!("redis-server is not installed (apt-get install redis-server)")
            }
            format!("spawn redis-server: {e}")
        })?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(log_path(dir)).unwrap_or_default();
            return Err(format!(
                "redis-server on port {port} exited with {status}:\n{log}"
            ));
        }
        if ping(port).is_ok() {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "redis-server on port {port} did not answer PING within {START_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn ping(port: u16) -> Result<(), String> {
    let reply = command(port, &["PING"])?;
    if reply == "PONG" {
        Ok(())
    } else {
        Err(format!("PING answered {reply:?}"))
    }
}

fn command(port: u16, args: &[&str]) -> Result<String, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    stream.write_all(&request).map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(parsed) = parse_reply(&reply)? {
            return Ok(parsed);
        }
        let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!(
                "connection closed mid-reply: {:?}",
                String::from_utf8_lossy(&reply)
            ));
        }
        reply.extend_from_slice(&buf[..n]);
    }
}

/// A complete simple, error, integer or bulk reply, or `None` if more bytes are needed.
fn parse_reply(bytes: &[u8]) -> Result<Option<String>, String> {
    let Some(line_end) = bytes.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = String::from_utf8_lossy(&bytes[1..line_end]).into_owned();
    match bytes.first() {
        Some(b'+') | Some(b':') => Ok(Some(line)),
        Some(b'-') => Err(line),
        Some(b'$') => {
            let len: i64 = line
                .parse()
                .map_err(|_| format!("bad bulk length {line:?}"))?;
            if len < 0 {
                return Ok(Some("(nil)".to_owned()));
            }
            let start = line_end + 2;
            let end = start + len as usize;
            if bytes.len() < end + 2 {
                return Ok(None);
            }
            Ok(Some(
                String::from_utf8_lossy(&bytes[start..end]).into_owned(),
            ))
        }
        _ => Err(format!(
            "unsupported reply {:?}",
            String::from_utf8_lossy(bytes)
        )),
    }
}
