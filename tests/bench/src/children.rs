//! The bench's own child processes (the upstream, the load generator): this same binary, run
//! with an internal subcommand and pinned to their CPUs, talking to the orchestrator in lines.
//!
//! Load generator protocol: it prints `ready` once set up, waits for `go` on stdin, prints
//! `measure_start` and `measure_end` around the measured window, then `result <json>`.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::ChildStdout;

use anyhow::{Context, anyhow, bail};

use crate::load::{Hooks, LoadResult, LoadSpec};
use crate::procs::{Proc, Spawn};

/// What the orchestrator hears from a load generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Ready,
    MeasureStart,
    MeasureEnd,
}

/// Start `poppy-bench upstream` and read the address it bound.
pub fn start_upstream(exe: &Path, cpus: Option<&str>) -> anyhow::Result<(Proc, SocketAddr)> {
    let mut proc = Spawn {
        name: "bench upstream",
        program: exe,
        args: vec!["upstream".into()],
        env: Vec::new(),
        cpus,
        log: None,
        stdin_piped: false,
        terminate: false,
    }
    .start()?;
    let stdout = proc.child_mut().stdout.take().context("upstream stdout")?;
    let line = BufReader::new(stdout)
        .lines()
        .next()
        .context("the upstream exited before saying where it listens")??;
    let addr = line
        .strip_prefix("listening ")
        .and_then(|a| a.parse().ok())
        .with_context(|| format!("unexpected first line from the upstream: {line:?}"))?;
    Ok((proc, addr))
}

/// Run one load generator to the end, calling `on_event` as it goes.
pub fn run_load(
    exe: &Path,
    spec: &LoadSpec,
    cpus: Option<&str>,
    mut on_event: impl FnMut(Event) -> anyhow::Result<()>,
) -> anyhow::Result<LoadResult> {
    let mut proc = Spawn {
        name: "load generator",
        program: exe,
        args: vec!["load".into(), "--spec".into(), serde_json::to_string(spec)?],
        env: Vec::new(),
        cpus,
        log: None,
        stdin_piped: true,
        terminate: false,
    }
    .start()?;
    let stdout: ChildStdout = proc.child_mut().stdout.take().context("load stdout")?;
    let mut stdin = proc.child_mut().stdin.take().context("load stdin")?;
    let mut result = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        match line.as_str() {
            "ready" => {
                on_event(Event::Ready)?;
                stdin.write_all(b"go\n")?;
                stdin.flush()?;
            }
            "measure_start" => on_event(Event::MeasureStart)?,
            "measure_end" => on_event(Event::MeasureEnd)?,
            other => {
                if let Some(json) = other.strip_prefix("result ") {
                    result = Some(serde_json::from_str::<LoadResult>(json)?);
                } else if let Some(error) = other.strip_prefix("error ") {
                    bail!("load generator failed: {error}");
                }
            }
        }
    }
    let status = proc.child_mut().wait()?;
    if !status.success() {
        bail!("load generator exited with {status}");
    }
    result.ok_or_else(|| anyhow!("load generator ended without a result"))
}

/// The load generator's side of the protocol (stdout lines, `go` on stdin).
pub struct LineHooks;

impl Hooks for LineHooks {
    fn ready(&mut self) -> anyhow::Result<()> {
        say("ready");
        let mut line = String::new();
        // Blocking on purpose: nothing else runs until the orchestrator says go.
        std::io::stdin().read_line(&mut line)?;
        if line.trim() != "go" {
            bail!("expected `go` on stdin, got {line:?}");
        }
        Ok(())
    }

    fn measure_start(&mut self) {
        say("measure_start");
    }

    fn measure_end(&mut self) {
        say("measure_end");
    }
}

/// One protocol line, flushed at once (the orchestrator samples `/proc` when it reads it).
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
