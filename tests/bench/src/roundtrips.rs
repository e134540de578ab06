//! Redis round trips per operation: `MONITOR` around a fixed number of mints, of mint +
//! approve pairs and of replays, sent one at a time to a fresh gateway on Redis. Commands a
//! Lua script runs inside Redis are not round trips and are left out.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use serde::Serialize;

use crate::children::Event;
use crate::env::{Env, Store};
use crate::load::LoadSpec;
use crate::redis::Monitor;
use crate::scenario::Scenario;

/// Client commands per operation, by command name.
pub type PerOp = BTreeMap<String, f64>;

#[derive(Debug, Clone, Serialize)]
pub struct RoundTrips {
    pub ops: u64,
    /// A mint (403): the generation read.
    pub mint: PerOp,
    /// The approve request of a pair (pair − mint).
    pub approve: PerOp,
    /// A replay of a recorded answer.
    pub replay: PerOp,
}

pub fn total(per_op: &PerOp) -> f64 {
    per_op.values().sum()
}

pub fn measure(env: &mut Env, ops: u64) -> anyhow::Result<RoundTrips> {
    let (_upstream, upstream_addr) = env.upstream()?;
    let (_gateway, addr) = env.gateway(Store::Redis, upstream_addr, env.opts.max_body_bytes, 1)?;
    let redis_addr = env.redis()?.addr;
    let spec = |scenario: Scenario, iterations: u64| LoadSpec {
        addr,
        scenario,
        connections: 1,
        warmup_ms: 0,
        duration_ms: 120_000,
        max_iterations: iterations,
        agent: None,
        rate: None,
        timeout_ms: env.opts.timeout.as_millis() as u64,
    };
    // First calls load the scripts (NOSCRIPT, SCRIPT LOAD) and connect: not what is counted.
    env.load(&spec(Scenario::approve(), 3), |_| Ok(()))
        .context("round trips: warm-up")?;

    let count = |scenario: Scenario| -> anyhow::Result<PerOp> {
        let mut monitor = None;
        let result = env.load(&spec(scenario, ops), |event| {
            if event == Event::Ready {
                monitor = Some(Monitor::start(redis_addr)?);
            }
            Ok(())
        })?;
        if result.errors > 0 || result.iterations != ops {
            bail!(
                "round trips: {} of {ops} operations done, {} errors (first: {})",
                result.iterations,
                result.errors,
                result.first_error.as_deref().unwrap_or("none")
            );
        }
        let counts = monitor.context("MONITOR never started")?.finish()?;
        Ok(counts
            .into_iter()
            .map(|(name, calls)| (name, calls as f64 / ops as f64))
            .collect())
    };
    let mint = count(Scenario::Mint)?;
    let pair = count(Scenario::approve())?;
    let replay = count(Scenario::Replay { ops: 1 })?;
    let mut approve = pair;
    for (name, calls) in &mint {
        if let Some(value) = approve.get_mut(name) {
            *value -= calls;
        }
    }
    approve.retain(|_, calls| calls.abs() > 1e-9);
    Ok(RoundTrips {
        ops,
        mint,
        approve,
        replay,
    })
}
