//! One whole run: check what is needed, run the selected rows one after another (each with
//! fresh processes), count Redis round trips, measure memory, and build the report.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::env::{Env, Options, Store};
use crate::report::Report;
use crate::rows::{self, Row, Target};
use crate::{held, roundtrips, scaling};

/// Row ids in table order, from a comma-separated list: `all` for every row of the main table,
/// `scaling` for every scaling row (issue 28), or ids of either.
pub fn select(wanted: &[String], all: Vec<Row>, scaling: Vec<Row>) -> anyhow::Result<Vec<Row>> {
    let group = |name: &str| wanted.iter().any(|w| w == name);
    let (every_main, every_scaling) = (group("all"), group("scaling"));
    for id in wanted {
        if id != "all" && id != "scaling" && !all.iter().chain(&scaling).any(|row| row.id == id) {
            let ids: Vec<&str> = all.iter().chain(&scaling).map(|row| row.id).collect();
            bail!(
                "unknown row {id:?}; rows are all, scaling, {}",
                ids.join(", ")
            );
        }
    }
    let named = |row: &Row| wanted.iter().any(|w| w == row.id);
    Ok(all
        .into_iter()
        .filter(|row| every_main || named(row))
        .chain(
            scaling
                .into_iter()
                .filter(|row| every_scaling || named(row)),
        )
        .collect())
}

fn needs(rows: &[Row], f: impl Fn(Target) -> bool) -> bool {
    rows.iter().any(|row| f(row.target))
}

/// Fail early, saying exactly what to install or build.
fn preflight(opts: &Options, rows: &[Row]) -> anyhow::Result<()> {
    let found = |program: &Path| Command::new(program).arg("-v").output().is_ok();
    if needs(rows, |t| matches!(t, Target::Nginx(_) | Target::Traced(..))) && !found(&opts.nginx) {
        bail!(
            "nginx not found ({}): apt-get install -y nginx",
            opts.nginx.display()
        );
    }
    if needs(rows, |t| matches!(t, Target::Pingora(_))) && !opts.pingora_bin.is_file() {
        bail!(
            "no bare-pingora binary at {}: cargo build --release -p poppy-bench (or tests/bench/run.sh)",
            opts.pingora_bin.display()
        );
    }
    if rows.iter().any(|row| row.generator == rows::Generator::Wrk)
        && Command::new(&opts.wrk).arg("-v").output().is_err()
    {
        bail!(
            "wrk not found ({}): apt-get install -y wrk (or run without --wrk)",
            opts.wrk.display()
        );
    }
    if needs(rows, |t| t == Target::Gateway(Store::Redis)) && !found(&opts.redis_server) {
        bail!(
            "redis-server not found ({}): apt-get install -y redis-server",
            opts.redis_server.display()
        );
    }
    if needs(rows, |t| {
        matches!(t, Target::Gateway(_) | Target::Traced(..))
    }) && !opts.gateway_bin.is_file()
    {
        bail!(
            "no gateway binary at {}: cargo build --release -p poppy-gateway (or tests/bench/run.sh)",
            opts.gateway_bin.display()
        );
    }
    let pinned = [
        &opts.plan.proxy,
        &opts.plan.upstream,
        &opts.plan.load,
        &opts.plan.redis,
    ]
    .iter()
    .any(|cpus| cpus.is_some());
    if pinned && Command::new("taskset").arg("-V").output().is_err() {
        bail!("taskset not found: apt-get install -y util-linux (or run with --no-pin)");
    }
    Ok(())
}

pub fn run(opts: Options, command_line: String) -> anyhow::Result<Report> {
    let mut rows = select(
        &opts.rows,
        rows::all(opts.replay_ops),
        scaling::rows(opts.replay_ops),
    )?;
    if opts.with_wrk {
        rows = rows::with_wrk(rows);
    }
    preflight(&opts, &rows)?;
    let load_before = load_average();
    let mut env = Env::new(opts)?;
    let mut results = Vec::new();
    for row in &rows {
        eprintln!("poppy-bench: row {} — {}", row.id, row.label);
        let result = rows::run(&mut env, row)?;
        eprintln!(
            "poppy-bench:   {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs, {} errors",
            result.load.requests_per_s(),
            result.load.p50_us,
            result.load.p99_us,
            result.load.errors
        );
        results.push(result);
    }
    let roundtrips =
        if env.opts.roundtrip_ops > 0 && needs(&rows, |t| t == Target::Gateway(Store::Redis)) {
            eprintln!("poppy-bench: counting Redis round trips");
            let ops = env.opts.roundtrip_ops;
            Some(roundtrips::measure(&mut env, ops).context("Redis round trips")?)
        } else {
            None
        };
    let held = if env.opts.held > 0 && needs(&rows, |t| matches!(t, Target::Gateway(_))) {
        eprintln!("poppy-bench: memory with {} held requests", env.opts.held);
        let (k, limit) = (env.opts.held, env.opts.held_body_limit);
        Some(held::measure(&mut env, k, limit).context("held requests")?)
    } else {
        None
    };
    let held_sizes = if env.opts.held > 0 && rows.iter().any(|row| scaling::is_body_row(row.id)) {
        eprintln!(
            "poppy-bench: memory with {} held requests per body size",
            env.opts.held
        );
        let held = env.opts.held;
        Some(
            held::measure_sizes(&mut env, held, &scaling::BODY_SIZES)
                .context("held requests per body size")?,
        )
    } else {
        None
    };
    let opts = &env.opts;
    let settings = vec![
        format!("command: {command_line}"),
        format!(
            "machine: {} CPUs, load average {} before, {} after (figures from a loaded machine are not comparable)",
            crate::cpu::available(),
            load_before,
            load_average()
        ),
        format!("CPU plan: {}", opts.plan),
        format!(
            "load: {} connections per row, closed loop, HTTP/1.1 keep-alive; warm-up {:?}, measured {:?}; gateway threads = nginx workers = {}; gateway RUST_LOG={}",
            opts.connections, opts.warmup, opts.duration, opts.threads, opts.gateway_log
        ),
        format!(
            "open-loop rows (L…): {} requests/s sent on a fixed schedule (pair rows: half as many pairs) over {} connections",
            opts.rate, opts.open_connections
        ),
        format!("nginx: {}", nginx_version(&opts.nginx)),
        format!(
            "load generators: poppy-bench's own client{}",
            if opts.with_wrk {
                format!(
                    " and {} (rows ending in w: -t1, same connections, its own process on the load CPUs)",
                    wrk_version(&opts.wrk)
                )
            } else {
                String::new()
            }
        ),
    ];
    Ok(Report {
        settings,
        rows: results,
        roundtrips,
        held,
        held_sizes,
    })
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

fn wrk_version(wrk: &Path) -> String {
    Command::new(wrk)
        .arg("-v")
        .output()
        .map(|out| {
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            text.lines().next().unwrap_or("wrk").trim().to_owned()
        })
        .unwrap_or_else(|_| "wrk (not found)".into())
}

fn nginx_version(nginx: &Path) -> String {
    Command::new(nginx)
        .arg("-v")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stderr).trim().to_owned())
        .unwrap_or_else(|_| "not found".into())
}
