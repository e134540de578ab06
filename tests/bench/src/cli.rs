//! Command line: `poppy-bench [OPTIONS]` runs the benchmark; `upstream` and `load` are the
//! bench's own child processes.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use crate::cpu::CpuPlan;
use crate::env::Options;

#[derive(Parser, Debug)]
#[command(
    name = "poppy-bench",
    about = "upstream direct vs nginx vs poppy-gateway (passthrough, minting, approvals, replays), one machine, one run"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Internal>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// The bench's child processes; not for people.
#[derive(Subcommand, Debug)]
pub enum Internal {
    /// The fast upstream (prints `listening ADDR`).
    #[command(hide = true)]
    Upstream {
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// A load generator (a JSON `LoadSpec`; speaks the line protocol on stdio).
    #[command(hide = true)]
    Load {
        #[arg(long)]
        spec: String,
    },
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Measured time per row (`10s`, `500ms`, `1m`).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Unmeasured warm-up per row.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Concurrent connections (closed loop) per row.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Gateway threads, and nginx worker processes.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Rows to run, comma-separated (1,2,2p,3,1g,2g,2pg,3g,2a,2pa,4,5,6,7a,7b,7c) or `all`;
    /// `scaling` for issue 28's scaling rows (p1m…p10000m, p1r…, p1g…, b4km…b1Mm, b64a…b1Ma),
    /// which also measure in-flight memory per body size.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub rows: Vec<String>,
    /// The poppy-gateway binary [default: next to poppy-bench].
    #[arg(long)]
    pub gateway_bin: Option<PathBuf>,
    /// The bare-pingora reference proxy [default: next to poppy-bench].
    #[arg(long)]
    pub pingora_bin: Option<PathBuf>,
    #[arg(long, default_value = "nginx")]
    pub nginx: PathBuf,
    /// Also measure every row wrk can drive (all but mint + approve pairs) with wrk: the
    /// second method; its rows' ids end in `w`.
    #[arg(long)]
    pub wrk: bool,
    #[arg(long, default_value = "wrk")]
    pub wrk_bin: PathBuf,
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Pin nothing (the default pins with taskset when there are 2+ CPUs).
    #[arg(long)]
    pub no_pin: bool,
    /// CPUs (taskset -c list) of the proxy under test [default: 0].
    #[arg(long)]
    pub proxy_cpus: Option<String>,
    #[arg(long)]
    pub upstream_cpus: Option<String>,
    #[arg(long)]
    pub load_cpus: Option<String>,
    #[arg(long)]
    pub redis_cpus: Option<String>,
    /// RUST_LOG of the gateway (its default is info).
    #[arg(long, default_value = "info")]
    pub gateway_log: String,
    /// The gateway's max_body_bytes in the rows.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Operations per Redis round-trip count (0: skip).
    #[arg(long, default_value_t = 200)]
    pub roundtrip_ops: u64,
    /// Approved executions held in flight for the memory measurement (0: skip).
    #[arg(long, default_value_t = 64)]
    pub held: usize,
    /// The gateway's body limit in the memory measurement; held bodies fill it.
    #[arg(long, default_value_t = 64 * 1024)]
    pub held_body_limit: usize,
    /// Performed approvals a replay row retries.
    #[arg(long, default_value_t = 8)]
    pub replay_ops: usize,
    /// Per-request timeout.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Iterations per row at most, besides the time bound.
    #[arg(long, default_value_t = 50_000_000)]
    pub max_iterations: u64,
    /// Keep the folder of configs and logs of every process (its path is printed at the end).
    #[arg(long)]
    pub keep_dir: bool,
    /// Open-loop latency rows (`L…`): requests per second, sent on a fixed schedule (a pair
    /// row sends half as many pairs). Pick a rate every row sustains.
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// Open-loop latency rows: connections that take the scheduled requests.
    #[arg(long, default_value_t = 64)]
    pub open_connections: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl RunArgs {
    pub fn options(&self) -> anyhow::Result<Options> {
        let mut plan = if self.no_pin {
            CpuPlan::unpinned()
        } else {
            CpuPlan::default_for(crate::cpu::available())
        };
        for (slot, given) in [
            (&mut plan.proxy, &self.proxy_cpus),
            (&mut plan.upstream, &self.upstream_cpus),
            (&mut plan.load, &self.load_cpus),
            (&mut plan.redis, &self.redis_cpus),
        ] {
            if let Some(cpus) = given {
                *slot = Some(cpus.clone());
            }
        }
        if self.connections == 0 || self.threads == 0 {
            bail!("--connections and --threads must be at least 1");
        }
        let gateway_bin = match &self.gateway_bin {
            Some(path) => path.clone(),
            None => crate::gateway::default_binary()?,
        };
        let pingora_bin = match &self.pingora_bin {
            Some(path) => path.clone(),
            None => crate::pingora::default_binary()?,
        };
        Ok(Options {
            duration: self.duration,
            warmup: self.warmup,
            connections: self.connections,
            threads: self.threads,
            rows: self.rows.clone(),
            gateway_bin,
            pingora_bin,
            nginx: self.nginx.clone(),
            with_wrk: self.wrk,
            wrk: self.wrk_bin.clone(),
            redis_server: self.redis_server.clone(),
            plan,
            gateway_log: self.gateway_log.clone(),
            max_body_bytes: self.max_body_bytes,
            roundtrip_ops: self.roundtrip_ops,
            held: self.held,
            held_body_limit: self.held_body_limit,
            timeout: self.timeout,
            max_iterations: self.max_iterations,
            replay_ops: self.replay_ops,
            keep_dir: self.keep_dir,
            rate: self.rate,
            open_connections: self.open_connections.max(1),
        })
    }
}

/// `500ms`, `10s`, `2m`; a bare number is seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .with_context(|| format!("not a duration: {text:?}"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        _ => bail!("unknown unit in {text:?} (use ms, s or m)"),
    };
    if !seconds.is_finite() || !(0.0..=3600.0).contains(&seconds) {
        bail!("{text:?} is out of range (0 to 1 hour)");
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("10h").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("2h").is_err());
    }

    #[test]
    fn rows_and_cpus_come_from_flags() {
        let cli = Cli::try_parse_from([
            "poppy-bench",
            "--rows",
            "1,3",
            "--proxy-cpus",
            "0,1",
            "--gateway-bin",
            "/x/poppy-gateway",
        ])
        .unwrap();
        let options = cli.run.options().unwrap();
        assert_eq!(options.rows, ["1", "3"]);
        assert_eq!(options.plan.proxy.as_deref(), Some("0,1"));
        assert!(cli.command.is_none());
    }
}
