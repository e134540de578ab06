//! The bare-pingora reference row: `poppy-bench-pingora` (src/bin), a minimal `ProxyHttp` with
//! the gateway's pingora features, allocator and runtime settings, in front of the same
//! upstream. The gap between its row and nginx's is pingora's; between the gateway's and its,
//! ours.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::procs::{Proc, Spawn, free_port, loopback};
use crate::rows::Role;

/// Where the binary is: next to poppy-bench (the same target profile).
pub fn default_binary() -> anyhow::Result<PathBuf> {
    let gateway = crate::gateway::default_binary()?;
    let dir = gateway.parent().context("no folder")?;
    Ok(dir.join("poppy-bench-pingora"))
}

/// Start the bare proxy with `threads` threads, proxying or answering itself; returns it and
/// its address.
pub fn start(
    binary: &Path,
    dir: &Path,
    upstream: SocketAddr,
    threads: usize,
    cpus: Option<&str>,
    role: Role,
) -> anyhow::Result<(Proc, SocketAddr)> {
    if !binary.is_file() {
        bail!(
            "no bare-pingora binary at {}: cargo build --release -p poppy-bench (or tests/bench/run.sh)",
            binary.display()
        );
    }
    let port = free_port()?;
    let mut args = vec![
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--upstream".into(),
        upstream.to_string(),
        "--threads".into(),
        threads.to_string(),
    ];
    if role == Role::Answer {
        args.extend(["--answer".into(), "403".into()]);
    }
    let mut proc = Spawn {
        name: "poppy-bench-pingora",
        program: binary,
        args,
        env: Vec::new(),
        cpus,
        log: Some(dir.join("pingora.log")),
        stdin_piped: false,
        terminate: false,
    }
    .start()?;
    let addr = loopback(port);
    proc.wait_for_port(addr, Duration::from_secs(10))?;
    Ok((proc, addr))
}
