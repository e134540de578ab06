//! Child processes (pinned with `taskset`, killed on drop) and what `/proc` says about them.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A child process of the bench, killed (SIGKILL) when dropped; see [`Spawn::terminate`].
pub struct Proc {
    pub name: String,
    child: Child,
    log: Option<PathBuf>,
    terminate: bool,
}

/// How to start one child: the program, its arguments and environment, where its output goes,
/// and which CPUs it may run on.
pub struct Spawn<'a> {
    pub name: &'a str,
    pub program: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `taskset -c` list, e.g. `"1"` or `"2,3"`; `None`: not pinned.
    pub cpus: Option<&'a str>,
    /// stdout and stderr go here; `None`: stdout piped to the bench, stderr inherited.
    pub log: Option<PathBuf>,
    pub stdin_piped: bool,
    /// Stop it with SIGTERM first: nginx's master stops its workers then, while a SIGKILLed
    /// master leaves them running.
    pub terminate: bool,
}

impl Spawn<'_> {
    pub fn start(self) -> anyhow::Result<Proc> {
        // taskset execs the program, so the child's pid is the program's own.
        let mut command = match self.cpus {
            Some(cpus) => {
                let mut command = Command::new("taskset");
                command.arg("-c").arg(cpus).arg(self.program);
                command
            }
            None => Command::new(self.program),
        };
        command.args(&self.args);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command.stdin(if self.stdin_piped {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        match &self.log {
            Some(path) => {
                let out =
                    File::create(path).with_context(|| format!("create {}", path.display()))?;
                command.stdout(out.try_clone()?).stderr(out);
            }
            None => {
                command.stdout(Stdio::piped()).stderr(Stdio::inherit());
            }
        }
        let child = command.spawn().with_context(|| {
            format!(
                "start {} ({}{})",
                self.name,
                if self.cpus.is_some() {
                    "taskset -c … "
                } else {
                    ""
                },
                self.program.display()
            )
        })?;
        Ok(Proc {
            name: self.name.to_owned(),
            child,
            log: self.log,
            terminate: self.terminate,
        })
    }
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The last lines of its log, for error messages.
    pub fn log_tail(&self) -> String {
        let Some(path) = &self.log else {
            return String::new();
        };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Fail if it has exited, with its log.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); its output:\n{}",
                self.name,
                self.log_tail()
            );
        }
        Ok(())
    }

    /// Wait until `addr` accepts connections (and the process still runs).
    pub fn wait_for_port(&mut self, addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running()?;
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not listen on {addr} within {timeout:?}; its output:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How long a terminated process may take to exit before it is killed.
const TERMINATE_GRACE: Duration = Duration::from_secs(3);

impl Proc {
    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let pid = self.pid();
        if self.terminate {
            let children = with_children(pid);
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
            let deadline = Instant::now() + TERMINATE_GRACE;
            while Instant::now() < deadline {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    // nginx's master exits only after its workers.
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // Still running: kill its workers (our own grandchildren, by pid), then it.
            for child in children.into_iter().filter(|p| *p != pid) {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(child.to_string())
                    .status();
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback port that was free a moment ago (bind port 0, read it, drop the listener).
pub fn free_port() -> anyhow::Result<u16> {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        // Never the port of a Redis somebody runs on this machine.
        if port != 6379 {
            return Ok(port);
        }
    }
}

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    parse_status_kib(&text, field).with_context(|| format!("{field} of pid {pid}"))
}

pub fn parse_status_kib(status: &str, field: &str) -> anyhow::Result<u64> {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .with_context(|| format!("no {field} line"))?;
    let number = line.trim().trim_end_matches("kB").trim();
    number.parse().with_context(|| format!("{field}: {line:?}"))
}

/// User + system CPU time of a process, all its threads, in clock ticks (USER_HZ, 100/s on
/// Linux).
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    parse_stat_ticks(&text).with_context(|| format!("CPU time of pid {pid}"))
}

/// Linux's USER_HZ: the unit of `/proc/PID/stat` times.
pub const TICKS_PER_SECOND: f64 = 100.0;

pub fn parse_stat_ticks(stat: &str) -> anyhow::Result<u64> {
    // The command name (field 2) may hold spaces: count fields after its closing paren.
    let after = stat.rsplit_once(')').context("no ')' in stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    let utime: u64 = fields.get(11).context("no utime")?.parse()?;
    let stime: u64 = fields.get(12).context("no stime")?.parse()?;
    Ok(utime + stime)
}

/// The pid and its children (one level: enough for nginx's master and workers).
pub fn with_children(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            pids.push(child);
        }
    }
    pids
}

/// A process tree's figures: summed over the pid and its children.
pub fn tree_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    with_children(pid)
        .into_iter()
        .map(|p| status_kib(p, field))
        .sum()
}

pub fn tree_ticks(pid: u32) -> anyhow::Result<u64> {
    with_children(pid).into_iter().map(cpu_ticks).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\tx\nVmHWM:\t   12345 kB\nVmRSS:\t  678 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM").unwrap(), 12345);
        assert_eq!(parse_status_kib(status, "VmRSS").unwrap(), 678);
        assert!(parse_status_kib(status, "VmSwap").is_err());
    }

    #[test]
    fn stat_times_survive_spaces_in_the_name() {
        let stat = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 1 1 1";
        assert_eq!(parse_stat_ticks(stat).unwrap(), 10);
    }

    #[test]
    fn this_process_has_a_resident_set() {
        assert!(status_kib(std::process::id(), "VmRSS").unwrap() > 0);
        assert!(cpu_ticks(std::process::id()).is_ok());
    }
}
