//! A private `redis-server` (free loopback port, no persistence) and what the bench asks it:
//! plain commands, and `MONITOR` to count the round trips the gateway makes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use crate::procs::{Proc, Spawn, free_port, loopback};

const IO_TIMEOUT: Duration = Duration::from_secs(5);

pub struct RedisServer {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl RedisServer {
    /// Start `redis-server` on a free port in `dir`, pinned to `cpus`, and wait for PING.
    pub fn start(program: &Path, dir: &Path, cpus: Option<&str>) -> anyhow::Result<RedisServer> {
        let port = free_port()?;
        let proc = Spawn {
            name: "redis-server",
            program,
            args: [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &dir.display().to_string(),
            ]
            .map(str::to_owned)
            .to_vec(),
            env: Vec::new(),
            cpus,
            log: Some(dir.join("redis.log")),
            stdin_piped: false,
            terminate: false,
        }
        .start()?;
        let mut server = RedisServer {
            proc,
            addr: loopback(port),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while command(server.addr, &["PING"]).is_err() {
            server.proc.check_running()?;
            if Instant::now() > deadline {
                bail!("redis-server on {} did not answer PING", server.addr);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("redis://{}/0", self.addr)
    }

    /// Empty it between rows, so no row reads another's records.
    pub fn flush(&self) -> anyhow::Result<()> {
        command(self.addr, &["FLUSHALL"]).map(|_| ())
    }
}

/// Send one command, return a simple, integer or bulk reply as text.
pub fn command(addr: SocketAddr, args: &[&str]) -> anyhow::Result<String> {
    let mut stream = connect(addr)?;
    stream.write_all(&encode(args))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end();
    match line.as_bytes().first() {
        Some(b'+') | Some(b':') => Ok(line[1..].to_owned()),
        Some(b'-') => Err(anyhow!("redis: {}", &line[1..])),
        Some(b'$') => {
            let len: i64 = line[1..].parse().context("bulk length")?;
            if len < 0 {
                return Ok(String::new());
            }
            let mut bytes = vec![0u8; len as usize + 2];
            reader.read_exact(&mut bytes)?;
            bytes.truncate(len as usize);
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        }
        _ => Err(anyhow!("unexpected redis reply {line:?}")),
    }
}

fn connect(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .with_context(|| format!("connect to redis at {addr}"))?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(stream)
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    out
}

/// A `MONITOR` session: every command Redis runs, as it runs it. Commands that a Lua script
/// runs are shown as coming from `lua`; the others are round trips from clients.
pub struct Monitor {
    addr: SocketAddr,
    marker: String,
    reader: JoinHandle<anyhow::Result<Vec<String>>>,
}

impl Monitor {
    pub fn start(addr: SocketAddr) -> anyhow::Result<Monitor> {
        let mut stream = connect(addr)?;
        // Quiet gaps (between a row's setup and its load) must not end the session.
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        stream.write_all(&encode(&["MONITOR"]))?;
        let mut reader = BufReader::new(stream);
        let mut first = String::new();
        reader.read_line(&mut first)?;
        if first.trim_end() != "+OK" {
            bail!("MONITOR answered {first:?}");
        }
        let marker = format!("poppy-bench-monitor-end-{}", std::process::id());
        let wanted = marker.clone();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(600);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line)? == 0 {
                    bail!("MONITOR connection closed");
                }
                if line.contains(&wanted) {
                    return Ok(lines);
                }
                lines.push(line);
                if Instant::now() > deadline {
                    bail!("MONITOR ran past its bound");
                }
            }
        });
        Ok(Monitor {
            addr,
            marker,
            reader,
        })
    }

    /// Stop and count client round trips by command (script-internal commands left out).
    pub fn finish(self) -> anyhow::Result<BTreeMap<String, u64>> {
        // MONITOR shows commands in the order Redis ran them: once it shows this one, it has
        // shown everything before it.
        command(self.addr, &["ECHO", &self.marker])?;
        let lines = self
            .reader
            .join()
            .map_err(|_| anyhow!("MONITOR reader panicked"))??;
        Ok(count_round_trips(&lines))
    }
}

/// Count client commands in MONITOR lines such as
/// `+1700000000.123456 [0 127.0.0.1:51234] "EVALSHA" "…"` (a script's own are `[0 lua]`).
pub fn count_round_trips(lines: &[String]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in lines {
        let Some((source, rest)) = line.split_once("] ") else {
            continue;
        };
        if source.ends_with(" lua") {
            continue;
        }
        let Some(command) = rest.split('"').nth(1) else {
            continue;
        };
        *counts.entry(command.to_ascii_uppercase()).or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_commands_are_not_round_trips() {
        let lines: Vec<String> = [
            r#"+1700000000.000001 [0 127.0.0.1:5000] "GET" "poppy:gen:{exc_a}""#,
            r#"+1700000000.000002 [0 127.0.0.1:5000] "evalsha" "abc" "1" "k""#,
            r#"+1700000000.000003 [0 lua] "HGETALL" "poppy:op:{exc_a}:b""#,
            r#"+1700000000.000004 [0 127.0.0.1:5000] "HGETALL" "poppy:op:{exc_a}:b""#,
        ]
        .map(str::to_owned)
        .to_vec();
        let counts = count_round_trips(&lines);
        assert_eq!(counts.get("GET"), Some(&1));
        assert_eq!(counts.get("EVALSHA"), Some(&1));
        assert_eq!(counts.get("HGETALL"), Some(&1));
        assert_eq!(counts.values().sum::<u64>(), 3);
    }
}
