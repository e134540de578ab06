//! The machinery every measurement shares: options, the CPU plan, a private folder, and
//! starting the upstream, the gateway and Redis for it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tempfile::TempDir;

use crate::children::{self, Event};
use crate::cpu::CpuPlan;
use crate::gateway::{self, GatewayConfig};
use crate::load::{LoadResult, LoadSpec};
use crate::procs::Proc;
use crate::redis::RedisServer;

/// Everything a run can be told.
#[derive(Debug, Clone)]
pub struct Options {
    pub duration: Duration,
    pub warmup: Duration,
    pub connections: usize,
    /// Gateway threads, and nginx workers.
    pub threads: usize,
    /// Row ids to run (see `rows::all`).
    pub rows: Vec<String>,
    pub gateway_bin: PathBuf,
    /// The bare-pingora reference proxy (`poppy-bench-pingora`).
    pub pingora_bin: PathBuf,
    pub nginx: PathBuf,
    /// Also run every row wrk can drive under wrk (ids ending in `w`).
    pub with_wrk: bool,
    pub wrk: PathBuf,
    pub redis_server: PathBuf,
    pub plan: CpuPlan,
    pub gateway_log: String,
    pub max_body_bytes: usize,
    /// Operations per Redis round-trip count (0: skip).
    pub roundtrip_ops: u64,
    /// Held requests in flight for the memory measurement (0: skip).
    pub held: usize,
    /// The gateway's body limit in the memory measurement; bodies fill it.
    pub held_body_limit: usize,
    pub timeout: Duration,
    /// Iterations per row at most (besides the time bound).
    pub max_iterations: u64,
    /// Replay rows: how many performed approvals are retried.
    pub replay_ops: usize,
    /// Keep the folder of configs and logs (its path is printed) instead of deleting it.
    pub keep_dir: bool,
    /// Open-loop rows (`L…`): requests per second, and the connections that send them.
    pub rate: u64,
    pub open_connections: usize,
}

/// Which store a gateway row uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Memory,
    Redis,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::Memory => "memory://",
            Store::Redis => "redis",
        }
    }
}

/// What a row adds to a gateway's configuration.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// `[tracing]` sampling `.0` traces per 10 000 and exporting to `.1`.
    pub tracing: Option<(u32, SocketAddr)>,
    /// The `[session]` table (default: `verify = "off"`).
    pub session: Option<String>,
    /// Also the payment policy with 71 terms ([`gateway::large_policy`]).
    pub large_policy: bool,
}

pub struct Env {
    pub opts: Options,
    pub exe: PathBuf,
    dir: Option<TempDir>,
    redis: Option<RedisServer>,
    /// The tracing rows' OTLP collector (an nginx answering 200), started on first use.
    otlp_sink: Option<(Proc, SocketAddr)>,
    started: usize,
}

impl Drop for Env {
    fn drop(&mut self) {
        // Processes first (Redis), then the folder they wrote in.
        self.redis = None;
        self.otlp_sink = None;
        if self.opts.keep_dir
            && let Some(dir) = self.dir.take()
        {
            eprintln!(
                "poppy-bench: configs and logs kept in {}",
                dir.keep().display()
            );
        }
    }
}

impl Env {
    pub fn new(opts: Options) -> anyhow::Result<Env> {
        Ok(Env {
            opts,
            exe: std::env::current_exe().context("path of poppy-bench")?,
            dir: Some(tempfile::Builder::new().prefix("poppy-bench-").tempdir()?),
            redis: None,
            otlp_sink: None,
            started: 0,
        })
    }

    /// A new folder for one process's config and log.
    pub fn folder(&mut self, name: &str) -> anyhow::Result<PathBuf> {
        self.started += 1;
        let root = self.dir.as_ref().context("the bench folder is gone")?;
        let path = root.path().join(format!("{:02}-{name}", self.started));
        std::fs::create_dir_all(&path)?;
        Ok(path)
    }

    /// A fresh upstream.
    pub fn upstream(&mut self) -> anyhow::Result<(Proc, SocketAddr)> {
        children::start_upstream(&self.exe, self.opts.plan.upstream.as_deref())
    }

    /// The run's Redis (started on first use), emptied.
    pub fn redis(&mut self) -> anyhow::Result<&RedisServer> {
        if self.redis.is_none() {
            let dir = self.folder("redis")?;
            self.redis = Some(RedisServer::start(
                &self.opts.redis_server,
                &dir,
                self.opts.plan.redis.as_deref(),
            )?);
        }
        let redis = self.redis.as_ref().context("redis")?;
        redis.flush()?;
        Ok(redis)
    }

    /// The tracing rows' OTLP collector: nginx answering every export 200 (its CPU is not the
    /// gateway's, and it takes every batch at once).
    pub fn otlp_sink(&mut self) -> anyhow::Result<SocketAddr> {
        if self.otlp_sink.is_none() {
            let dir = self.folder("otlp-sink")?;
            self.otlp_sink = Some(crate::nginx::start(
                &self.opts.nginx,
                &dir,
                // Never used: the sink proxies nothing.
                crate::procs::loopback(9),
                1,
                self.opts.plan.redis.as_deref(),
                crate::rows::Role::Sink,
            )?);
        }
        Ok(self.otlp_sink.as_ref().context("otlp sink")?.1)
    }

    pub fn redis_pid(&self) -> Option<u32> {
        self.redis.as_ref().map(|r| r.proc.pid())
    }

    /// A fresh gateway in front of `upstream`, with `policies` policies (see
    /// [`gateway::policy_file`]).
    pub fn gateway(
        &mut self,
        store: Store,
        upstream: SocketAddr,
        max_body_bytes: usize,
        policies: usize,
    ) -> anyhow::Result<(Proc, SocketAddr)> {
        self.gateway_with(store, upstream, max_body_bytes, policies, Extras::default())
    }

    /// [`Self::gateway`], with what a row adds ([`Extras`]).
    pub fn gateway_with(
        &mut self,
        store: Store,
        upstream: SocketAddr,
        max_body_bytes: usize,
        policies: usize,
        extras: Extras,
    ) -> anyhow::Result<(Proc, SocketAddr)> {
        let store_url = match store {
            Store::Memory => "memory://".to_owned(),
            Store::Redis => self.redis()?.url(),
        };
        let config = GatewayConfig {
            threads: self.opts.threads,
            store_url,
            upstream,
            max_body_bytes,
            policies,
            log_level: self.opts.gateway_log.clone(),
            tracing: extras.tracing,
            session: extras
                .session
                .unwrap_or_else(|| crate::signer::session_table(false, "")),
            large_policy: extras.large_policy,
        };
        let dir = self.folder("gateway")?;
        gateway::start(
            &self.opts.gateway_bin,
            &dir,
            &config,
            self.opts.plan.proxy.as_deref(),
        )
    }

    /// A load spec for `addr` with this run's settings.
    pub fn spec(&self, addr: SocketAddr, scenario: crate::scenario::Scenario) -> LoadSpec {
        LoadSpec {
            addr,
            scenario,
            connections: self.opts.connections,
            warmup_ms: self.opts.warmup.as_millis() as u64,
            duration_ms: self.opts.duration.as_millis() as u64,
            max_iterations: self.opts.max_iterations,
            agent: None,
            rate: None,
            timeout_ms: self.opts.timeout.as_millis() as u64,
        }
    }

    /// Run a load generator on the load CPUs.
    pub fn load(
        &self,
        spec: &LoadSpec,
        on_event: impl FnMut(Event) -> anyhow::Result<()>,
    ) -> anyhow::Result<LoadResult> {
        children::run_load(&self.exe, spec, self.opts.plan.load.as_deref(), on_event)
    }
}
