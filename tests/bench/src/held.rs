//! Memory with approved executions in flight: K mint + approve pairs whose bodies fill the
//! gateway's body limit, held at the upstream until all K are there; the gateway's RSS then,
//! against its RSS before (after only a little small traffic, so the allocator has not kept
//! memory of earlier large requests that the held ones could reuse unseen).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

use crate::children::Event;
use crate::env::{Env, Store};
use crate::http1::call_blocking;
use crate::load::LoadSpec;
use crate::procs::status_kib;
use crate::rows::upstream_counters;
use crate::scenario::{ITEM_BODY, Scenario};

/// One measurement: `held` requests in flight with bodies of `body_bytes`.
#[derive(Debug, Clone, Serialize)]
pub struct HeldPoint {
    pub body_bytes: usize,
    pub baseline_kib: u64,
    pub during_kib: u64,
    pub after_kib: u64,
}

/// Two measurements, small bodies and bodies that fill the limit, to tell what a request in
/// flight costs whatever its body (buffers, tasks, connections) from what each body byte costs.
#[derive(Debug, Clone, Serialize)]
pub struct HeldMemory {
    pub held: usize,
    pub limit_bytes: usize,
    pub small: HeldPoint,
    pub full: HeldPoint,
}

impl HeldPoint {
    /// RSS growth per request in flight, bytes.
    pub fn per_request_bytes(&self, held: usize) -> f64 {
        self.during_kib.saturating_sub(self.baseline_kib) as f64 * 1024.0 / held.max(1) as f64
    }
}

impl HeldMemory {
    /// With bodies at the limit: what the target is about.
    pub fn per_request_bytes(&self) -> f64 {
        self.full.per_request_bytes(self.held)
    }

    /// RSS per body byte in flight: the slope between the two measurements.
    pub fn per_body_byte(&self) -> f64 {
        let bytes = self.full.body_bytes.saturating_sub(self.small.body_bytes) as f64;
        if bytes <= 0.0 {
            return 0.0;
        }
        (self.full.per_request_bytes(self.held) - self.small.per_request_bytes(self.held)) / bytes
    }
}

pub fn measure(env: &mut Env, held: usize, limit: usize) -> anyhow::Result<HeldMemory> {
    // The note is the only padding: `{..., "note": "xxxx"}` must stay within the limit.
    let pad = limit
        .checked_sub(ITEM_BODY.len() + 16)
        .context("--held-body-limit is too small for the exchange body")?;
    Ok(HeldMemory {
        held,
        limit_bytes: limit,
        small: point(env, held, limit, 0)?,
        full: point(env, held, limit, pad)?,
    })
}

/// In-flight memory at each body size of the scaling rows, one fresh gateway per size, all
/// with the same body limit (the largest size).
pub fn measure_sizes(
    env: &mut Env,
    held: usize,
    sizes: &[usize],
) -> anyhow::Result<crate::scaling::HeldSizes> {
    let limit = sizes
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(ITEM_BODY.len());
    let points = sizes
        .iter()
        .map(|&bytes| point(env, held, limit, Scenario::pad_for(bytes)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(crate::scaling::HeldSizes { held, points })
}

/// A fresh gateway, a little small traffic, then `held` pairs padded by `pad` held in flight.
fn point(env: &mut Env, held: usize, limit: usize, pad: usize) -> anyhow::Result<HeldPoint> {
    let (_upstream, upstream_addr) = env.upstream()?;
    let (gateway, addr) = env.gateway(Store::Memory, upstream_addr, limit, 1)?;
    let pid = gateway.pid();
    let body_bytes = crate::scenario::item_body(pad).len();
    let spec = |scenario: Scenario, connections: usize, iterations: u64| LoadSpec {
        addr,
        scenario,
        connections,
        warmup_ms: 0,
        duration_ms: 120_000,
        max_iterations: iterations,
        agent: None,
        rate: None,
        timeout_ms: 90_000,
    };
    env.load(&spec(Scenario::approve(), 1, 3), |_| Ok(()))
        .context("held: warm-up")?;
    std::thread::sleep(Duration::from_millis(200));
    let baseline_kib = status_kib(pid, "VmRSS")?;

    let mut during_kib = None;
    let scenario = Scenario::Approve {
        order_prefix: "hold-".into(),
        pad_bytes: pad,
    };
    let result = env.load(&spec(scenario, held, held as u64), |event| {
        if event != Event::MeasureStart {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while upstream_counters(upstream_addr)?.held < held as u64 {
            if Instant::now() > deadline {
                bail!("held: the upstream never held {held} requests at once");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        during_kib = Some(status_kib(pid, "VmRSS")?);
        call_blocking(
            upstream_addr,
            "POST",
            "/__bench/release",
            Duration::from_secs(5),
        )?;
        Ok(())
    })?;
    if result.errors > 0 || result.iterations != held as u64 {
        bail!(
            "held: {} of {held} executions done, {} errors (first: {})",
            result.iterations,
            result.errors,
            result.first_error.as_deref().unwrap_or("none")
        );
    }
    Ok(HeldPoint {
        body_bytes,
        baseline_kib,
        during_kib: during_kib.context("held: never measured")?,
        after_kib: status_kib(pid, "VmRSS")?,
    })
}
