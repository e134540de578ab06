//! The load generator: a fixed number of connections, each in a closed loop (send, wait for
//! the answer, send again), for a warm-up and then a measured window, bounded in time and in
//! iterations. Latencies of requests completed in the window go into an HDR histogram.
//!
//! Closed loop means a slow server is sent less, so latency under overload is understated
//! (coordinated omission); the rows compare servers at the same concurrency, which is what
//! this is for. With a `rate` the load is open loop instead: iteration `k` is due at
//! `start + k / rate` whatever came back before, the connection that takes it waits for that
//! time, and its latency is measured from the time it was due (a late answer delays no
//! later send, and a send the connections could not make in time counts its wait).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::sleep_until;

use crate::scenario::{Prepared, Scenario, Worker};

/// Highest latency the histogram holds (µs); anything slower is clamped to it.
const MAX_LATENCY_US: u64 = 60_000_000;
/// Pause after a failed request, so a refused connection cannot spin a core.
const ERROR_PAUSE: Duration = Duration::from_millis(10);

/// What to run: one row's traffic against one address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    pub scenario: Scenario,
    pub connections: usize,
    pub warmup_ms: u64,
    pub duration_ms: u64,
    /// Iterations (requests, or pairs) at most, over all connections and the warm-up.
    pub max_iterations: u64,
    pub timeout_ms: u64,
    /// Sign Personal Agent Sessions as the agent of this `client_id` (none: unsigned).
    #[serde(default)]
    pub agent: Option<String>,
    /// Open loop: iterations per second, on a fixed schedule (none: closed loop).
    #[serde(default)]
    pub rate: Option<u64>,
}

/// What a run measured (in the window only, except `errors` and `first_error`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    pub requests: u64,
    /// Completed iterations: equal to `requests` but for mint + approve pairs.
    pub iterations: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed_s: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
    /// Open loop: how late the load generator itself woke for a due iteration (p99, µs;
    /// its timer has 1 ms resolution), which every latency of the row includes.
    #[serde(default)]
    pub lateness_p99_us: Option<f64>,
}

impl LoadResult {
    pub fn requests_per_s(&self) -> f64 {
        per_second(self.requests, self.elapsed_s)
    }

    pub fn iterations_per_s(&self) -> f64 {
        per_second(self.iterations, self.elapsed_s)
    }
}

fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Called as the run moves on; the child process turns these into lines on stdout.
pub trait Hooks {
    /// Setup is done (a replay row has performed its approvals); returns when load may start.
    fn ready(&mut self) -> anyhow::Result<()>;
    fn measure_start(&mut self);
    fn measure_end(&mut self);
}

/// Hooks that do nothing, for in-process runs.
pub struct NoHooks;

impl Hooks for NoHooks {
    fn ready(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    fn measure_start(&mut self) {}
    fn measure_end(&mut self) {}
}

struct Tally {
    histogram: Histogram<u64>,
    lateness: Histogram<u64>,
    requests: u64,
    iterations: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn new() -> anyhow::Result<Tally> {
        let histogram = || {
            Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).map_err(|e| anyhow!("histogram: {e}"))
        };
        Ok(Tally {
            histogram: histogram()?,
            lateness: histogram()?,
            requests: 0,
            iterations: 0,
            errors: 0,
            first_error: None,
        })
    }
}

pub async fn run(spec: &LoadSpec, hooks: &mut dyn Hooks) -> anyhow::Result<LoadResult> {
    let timeout = Duration::from_millis(spec.timeout_ms);
    let prepared =
        Arc::new(Prepared::new(&spec.scenario, spec.addr, timeout, spec.agent.as_deref()).await?);
    let interval = spec
        .rate
        .filter(|rate| *rate > 0)
        .map(|rate| Duration::from_secs_f64(1.0 / rate as f64));
    hooks.ready()?;

    let start = Instant::now();
    let window_start = start + Duration::from_millis(spec.warmup_ms);
    let window_end = window_start + Duration::from_millis(spec.duration_ms);
    let claimed = Arc::new(AtomicU64::new(0));
    let scenario = Arc::new(spec.scenario.clone());
    let mut tasks = JoinSet::new();
    for index in 0..spec.connections.max(1) {
        let mut worker = Worker::new(index, spec.addr, timeout);
        let (prepared, scenario, claimed) = (
            Arc::clone(&prepared),
            Arc::clone(&scenario),
            Arc::clone(&claimed),
        );
        let max_iterations = spec.max_iterations;
        tasks.spawn(async move {
            let mut tally = Tally::new()?;
            while Instant::now() < window_end {
                let k = claimed.fetch_add(1, Ordering::Relaxed);
                if k >= max_iterations {
                    break;
                }
                // Open loop: wait for this iteration's time; its latency counts from then.
                let due = match interval {
                    Some(interval) => {
                        let due = start + interval.mul_f64(k as f64);
                        if due > window_end {
                            break;
                        }
                        sleep_until(due.into()).await;
                        let late = Instant::now().saturating_duration_since(due);
                        if due >= window_start {
                            tally.lateness.saturating_record(late.as_micros() as u64);
                        }
                        Some(due)
                    }
                    None => None,
                };
                let in_window = |t: Instant| t >= window_start && t <= window_end;
                let histogram = &mut tally.histogram;
                let requests = &mut tally.requests;
                let mut record = |sent: Instant, answered: Instant| {
                    if in_window(answered) {
                        // Open loop: the iteration's latency is recorded whole, below.
                        if due.is_none() {
                            let us = answered.duration_since(sent).as_micros() as u64;
                            histogram.saturating_record(us.clamp(1, MAX_LATENCY_US));
                        }
                        *requests += 1;
                    }
                };
                match worker.iterate(&scenario, &prepared, &mut record).await {
                    Ok(()) => {
                        let done = Instant::now();
                        if in_window(done) {
                            tally.iterations += 1;
                            if let Some(due) = due {
                                let us = done.duration_since(due).as_micros() as u64;
                                tally
                                    .histogram
                                    .saturating_record(us.clamp(1, MAX_LATENCY_US));
                            }
                        }
                    }
                    Err(error) => {
                        tally.errors += 1;
                        tally
                            .first_error
                            .get_or_insert_with(|| format!("{error:#}"));
                        tokio::time::sleep(ERROR_PAUSE).await;
                    }
                }
            }
            Ok::<_, anyhow::Error>(tally)
        });
    }

    let mut total = Tally::new()?;
    let (mut started, mut ended) = (false, false);
    loop {
        let next = if started { window_end } else { window_start };
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(joined) => {
                    let tally = joined.map_err(|e| anyhow!("load task: {e}"))??;
                    total.histogram.add(&tally.histogram).map_err(|e| anyhow!("histogram: {e}"))?;
                    total.lateness.add(&tally.lateness).map_err(|e| anyhow!("histogram: {e}"))?;
                    total.requests += tally.requests;
                    total.iterations += tally.iterations;
                    total.errors += tally.errors;
                    if total.first_error.is_none() {
                        total.first_error = tally.first_error;
                    }
                }
                None => break,
            },
            _ = sleep_until(next.into()), if !ended => {
                if started {
                    ended = true;
                    hooks.measure_end();
                } else {
                    started = true;
                    hooks.measure_start();
                }
            }
        }
    }
    if !started {
        hooks.measure_start();
    }
    if !ended {
        hooks.measure_end();
    }
    let finished = Instant::now().min(window_end);
    let elapsed_s = finished
        .saturating_duration_since(window_start)
        .as_secs_f64();
    let h = &total.histogram;
    let quantile = |q: f64| {
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(q) as f64
        }
    };
    Ok(LoadResult {
        requests: total.requests,
        iterations: total.iterations,
        errors: total.errors,
        first_error: total.first_error,
        elapsed_s,
        p50_us: quantile(0.50),
        p90_us: quantile(0.90),
        p99_us: quantile(0.99),
        p999_us: quantile(0.999),
        max_us: if h.is_empty() { 0.0 } else { h.max() as f64 },
        mean_us: if h.is_empty() { 0.0 } else { h.mean() },
        lateness_p99_us: (interval.is_some() && !total.lateness.is_empty())
            .then(|| total.lateness.value_at_quantile(0.99) as f64),
    })
}
