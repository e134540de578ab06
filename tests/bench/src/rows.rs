//! The rows of the table: what each one starts, and the traffic it drives.

use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;

use crate::children::Event;
use crate::env::{Env, Extras, Store};
use crate::http1::call_blocking;
use crate::load::LoadResult;
use crate::nginx;
use crate::procs::{TICKS_PER_SECOND, tree_kib, tree_ticks};
use crate::scenario::Scenario;
use crate::signer::session_table;

/// What sits between the load generator and the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Nothing: the upstream's own limit.
    Upstream,
    Nginx(Role),
    /// The bare-pingora reference proxy (`poppy-bench-pingora`).
    Pingora(Role),
    Gateway(Store),
    /// The gateway with `[tracing]` on, sampling this many traces per 10 000, exporting to
    /// an nginx that answers every export 200 ([`Role::Sink`]).
    Traced(Store, u32),
}

/// What a reference server (nginx, bare pingora) does with each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Forward it to the upstream: the baseline of passthrough.
    Proxy,
    /// Answer it itself, the body read, with a fixed 403 of a mint's size
    /// ([`crate::scenario::MINT_ANSWER`]): the least answering a request costs that server
    /// here, the reference of the gateway's own answers (minting, replay).
    Answer,
    /// Answer every request `200` with no body: the OTLP collector of the tracing rows,
    /// which takes every batch and costs the gateway nothing but the export itself.
    Sink,
}

/// Which program drives a row's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Generator {
    /// The bench's own closed-loop client (`load.rs`).
    Poppy,
    /// wrk (`wrk.rs`): its rows' ids end in `w`.
    Wrk,
    /// The bench's own client, open loop at `--rate` requests/s (`load.rs`): the latency
    /// rows, ids starting with `L`.
    OpenLoop,
}

/// How the row's Personal Agent requests carry their Session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signing {
    /// One unsigned Session JWT (claims only); the gateway with `verify = "off"`.
    Unsigned,
    /// Signed per request by a delegated key ([`crate::signer`]); `verify = "required"`.
    Required,
    /// Signed the same way; `verify = "off"` (proof of possession on approvals and replays).
    Off,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub id: &'static str,
    pub label: &'static str,
    pub target: Target,
    pub scenario: Scenario,
    pub generator: Generator,
    /// Policies the gateway is given (the exchange last in file order); 1 but in the
    /// policy-scaling rows.
    pub policies: usize,
    pub signing: Signing,
}

/// Every row, in table order. Ids ending in `g` are the GET variants of rows 1–3; `2p` and
/// `2pg` are the bare-pingora reference rows.
pub fn all(replay_ops: usize) -> Vec<Row> {
    use Role::{Answer, Proxy};
    use Store::{Memory, Redis};
    use Target::{Gateway, Nginx, Pingora, Traced, Upstream};
    let row = |id, label, target, scenario| Row {
        id,
        label,
        target,
        scenario,
        generator: Generator::Poppy,
        policies: 1,
        signing: Signing::Unsigned,
    };
    let signed = |id, label, scenario, signing| Row {
        signing,
        ..row(id, label, Gateway(Memory), scenario)
    };
    let open = |id, label, target, scenario| Row {
        generator: Generator::OpenLoop,
        ..row(id, label, target, scenario)
    };
    let replay = Scenario::Replay { ops: replay_ops };
    vec![
        row(
            "1",
            "upstream direct (POST)",
            Upstream,
            Scenario::plain_post(),
        ),
        row(
            "2",
            "nginx → upstream (POST)",
            Nginx(Proxy),
            Scenario::plain_post(),
        ),
        row(
            "2p",
            "bare pingora → upstream (POST)",
            Pingora(Proxy),
            Scenario::plain_post(),
        ),
        row(
            "3",
            "gateway passthrough (POST)",
            Gateway(Memory),
            Scenario::plain_post(),
        ),
        row(
            "3t",
            "gateway passthrough (POST), tracing 100%",
            Traced(Memory, 10_000),
            Scenario::plain_post(),
        ),
        row(
            "3t1",
            "gateway passthrough (POST), tracing 1%",
            Traced(Memory, 100),
            Scenario::plain_post(),
        ),
        row(
            "1g",
            "upstream direct (GET)",
            Upstream,
            Scenario::plain_get(),
        ),
        row(
            "2g",
            "nginx → upstream (GET)",
            Nginx(Proxy),
            Scenario::plain_get(),
        ),
        row(
            "2pg",
            "bare pingora → upstream (GET)",
            Pingora(Proxy),
            Scenario::plain_get(),
        ),
        row(
            "3g",
            "gateway passthrough (GET)",
            Gateway(Memory),
            Scenario::plain_get(),
        ),
        row(
            "2a",
            "nginx answers a mint's 403 itself",
            Nginx(Answer),
            Scenario::Mint,
        ),
        row(
            "2pa",
            "bare pingora answers a mint's 403 itself",
            Pingora(Answer),
            Scenario::Mint,
        ),
        row(
            "4",
            "gateway minting (403), redis",
            Gateway(Redis),
            Scenario::Mint,
        ),
        row(
            "5",
            "approved executions (mint+approve), redis",
            Gateway(Redis),
            Scenario::approve(),
        ),
        row(
            "6",
            "replays of recorded answers, redis",
            Gateway(Redis),
            replay.clone(),
        ),
        row(
            "7a",
            "gateway minting (403), memory://",
            Gateway(Memory),
            Scenario::Mint,
        ),
        row(
            "7at",
            "gateway minting (403), memory://, tracing 100%",
            Traced(Memory, 10_000),
            Scenario::Mint,
        ),
        row(
            "7at1",
            "gateway minting (403), memory://, tracing 1%",
            Traced(Memory, 100),
            Scenario::Mint,
        ),
        row(
            "7b",
            "approved executions, memory://",
            Gateway(Memory),
            Scenario::approve(),
        ),
        row(
            "7bt",
            "approved executions, memory://, tracing 100%",
            Traced(Memory, 10_000),
            Scenario::approve(),
        ),
        row(
            "7bt1",
            "approved executions, memory://, tracing 1%",
            Traced(Memory, 100),
            Scenario::approve(),
        ),
        row("7c", "replays, memory://", Gateway(Memory), replay.clone()),
        row(
            "7d",
            "gateway minting (403), 71-term policy (68 optional, nested body), memory://",
            Gateway(Memory),
            Scenario::MintLarge,
        ),
        signed(
            "8a",
            "signed Sessions, verify required: minting, memory://",
            Scenario::Mint,
            Signing::Required,
        ),
        signed(
            "8b",
            "signed Sessions, verify required: approved executions, memory://",
            Scenario::approve(),
            Signing::Required,
        ),
        signed(
            "8c",
            "signed Sessions, verify required: replays, memory://",
            replay.clone(),
            Signing::Required,
        ),
        signed(
            "8ao",
            "signed Sessions, verify off: minting, memory://",
            Scenario::Mint,
            Signing::Off,
        ),
        signed(
            "8bo",
            "signed Sessions, verify off: approved executions, memory://",
            Scenario::approve(),
            Signing::Off,
        ),
        signed(
            "8co",
            "signed Sessions, verify off: replays, memory://",
            replay.clone(),
            Signing::Off,
        ),
        open(
            "L1",
            "upstream direct (POST)",
            Upstream,
            Scenario::plain_post(),
        ),
        open(
            "L2",
            "nginx → upstream (POST)",
            Nginx(Proxy),
            Scenario::plain_post(),
        ),
        open(
            "L2p",
            "bare pingora → upstream (POST)",
            Pingora(Proxy),
            Scenario::plain_post(),
        ),
        open(
            "L3",
            "gateway passthrough (POST)",
            Gateway(Memory),
            Scenario::plain_post(),
        ),
        open(
            "L4",
            "gateway minting (403), memory://",
            Gateway(Memory),
            Scenario::Mint,
        ),
        open(
            "L5",
            "approved execution (mint + approve, latency of the pair), memory://",
            Gateway(Memory),
            Scenario::approve(),
        ),
        open("L6", "replays, memory://", Gateway(Memory), replay),
    ]
}

/// The same rows again, driven by wrk (ids and labels marked), for those wrk can drive.
pub fn with_wrk(rows: Vec<Row>) -> Vec<Row> {
    let wrk: Vec<Row> = rows
        .iter()
        .filter(|row| {
            crate::wrk::supports(&row.scenario)
                && row.signing == Signing::Unsigned
                && row.generator == Generator::Poppy
        })
        .map(|row| Row {
            id: leak(format!("{}w", row.id)),
            label: leak(format!("{} [wrk]", row.label)),
            generator: Generator::Wrk,
            ..row.clone()
        })
        .collect();
    rows.into_iter().chain(wrk).collect()
}

/// Row ids and labels are `&'static str`; the few wrk ones are made once per run.
fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// The rows ratios are taken against: the upstream's and nginx's of the same method and the
/// same load generator.
pub fn references(id: &str) -> (String, String) {
    let (base, wrk) = match id.strip_suffix('w') {
        Some(base) => (base, "w"),
        None => (id, ""),
    };
    if base.ends_with('g') {
        (format!("1g{wrk}"), format!("2g{wrk}"))
    } else {
        (format!("1{wrk}"), format!("2{wrk}"))
    }
}

/// One row's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RowResult {
    pub id: String,
    pub label: String,
    pub load: LoadResult,
    /// Mint + approve pairs: `load.iterations` are executions.
    pub pairs: bool,
    /// Open-loop rows: the iterations per second they were sent at.
    pub rate: Option<u64>,
    /// CPU time of the process under test per request in the window (µs).
    pub cpu_us_per_request: Option<f64>,
    pub redis_cpu_us_per_request: Option<f64>,
    /// VmHWM of the process under test (nginx: master + workers), KiB.
    pub peak_rss_kib: Option<u64>,
    /// VmRSS before any traffic, KiB.
    pub idle_rss_kib: Option<u64>,
    /// Requests the upstream received during the window.
    pub upstream_calls: Option<u64>,
    /// Connections the upstream accepted during the window (a proxy reusing its upstream
    /// connections opens none once warm).
    pub upstream_connections: Option<u64>,
}

#[derive(Default)]
struct Samples {
    ticks: Option<(u64, u64)>,
    redis_ticks: Option<(u64, u64)>,
    upstream: Option<(Counters, Counters)>,
}

pub fn run(env: &mut Env, row: &Row) -> anyhow::Result<RowResult> {
    let (upstream, upstream_addr) = env.upstream()?;
    // The bench upstream also serves the signing agent's metadata document.
    let client_id = format!("http://{upstream_addr}{}", crate::signer::DOCUMENT_PATH);
    let (proxy, addr) = match row.target {
        Target::Upstream => (None, upstream_addr),
        Target::Pingora(role) => {
            let dir = env.folder("pingora")?;
            let (proc, addr) = crate::pingora::start(
                &env.opts.pingora_bin,
                &dir,
                upstream_addr,
                env.opts.threads,
                env.opts.plan.proxy.as_deref(),
                role,
            )?;
            (Some(proc), addr)
        }
        Target::Nginx(role) => {
            let dir = env.folder("nginx")?;
            let (proc, addr) = nginx::start(
                &env.opts.nginx,
                &dir,
                upstream_addr,
                env.opts.threads,
                env.opts.plan.proxy.as_deref(),
                role,
            )?;
            (Some(proc), addr)
        }
        Target::Gateway(store) | Target::Traced(store, _) => {
            // A body-scaling row's body always fits.
            let limit = env.opts.max_body_bytes.max(row.scenario.body_bytes());
            let tracing = match row.target {
                Target::Traced(_, sampled) => Some((sampled, env.otlp_sink()?)),
                _ => None,
            };
            let session = match row.signing {
                Signing::Unsigned => None,
                Signing::Required => Some(session_table(true, &client_id)),
                Signing::Off => Some(session_table(false, &client_id)),
            };
            let extras = Extras {
                tracing,
                session,
                large_policy: row.scenario == Scenario::MintLarge,
            };
            let (proc, addr) =
                env.gateway_with(store, upstream_addr, limit, row.policies, extras)?;
            (Some(proc), addr)
        }
    };
    let measured = proxy.as_ref().map_or(upstream.pid(), |p| p.pid());
    let redis = match row.target {
        Target::Gateway(Store::Redis) | Target::Traced(Store::Redis, _) => env.redis_pid(),
        _ => None,
    };
    // Let it finish starting up before reading its idle size.
    std::thread::sleep(Duration::from_millis(300));
    let idle_rss_kib = match row.target {
        Target::Gateway(_) | Target::Traced(..) => Some(tree_kib(measured, "VmRSS")?),
        _ => None,
    };

    let mut spec = env.spec(addr, row.scenario.clone());
    if row.signing != Signing::Unsigned {
        spec.agent = Some(client_id);
    }
    if row.generator == Generator::OpenLoop {
        // A pair is two requests: the same request rate as the other rows.
        let per_iteration = row.scenario.requests_per_iteration();
        spec.rate = Some((env.opts.rate / per_iteration).max(1));
        spec.connections = env.opts.open_connections;
    }
    let mut samples = Samples::default();
    let count = || upstream_counters(upstream_addr);
    let on_event = |event| {
        match event {
            Event::Ready => {}
            Event::MeasureStart => {
                samples.ticks = Some((tree_ticks(measured)?, 0));
                samples.redis_ticks = redis
                    .map(crate::procs::cpu_ticks)
                    .transpose()?
                    .map(|t| (t, 0));
                samples.upstream = Some((count()?, Counters::default()));
            }
            Event::MeasureEnd => {
                if let Some(t) = samples.ticks.as_mut() {
                    t.1 = tree_ticks(measured)?;
                }
                if let (Some(t), Some(pid)) = (samples.redis_ticks.as_mut(), redis) {
                    t.1 = crate::procs::cpu_ticks(pid)?;
                }
                if let Some(c) = samples.upstream.as_mut() {
                    c.1 = count()?;
                }
            }
        }
        Ok(())
    };
    let result = match row.generator {
        Generator::Poppy | Generator::OpenLoop => env.load(&spec, on_event),
        Generator::Wrk => {
            let dir = env.folder("wrk")?;
            crate::wrk::run(
                &env.opts.wrk,
                &dir,
                &spec,
                env.opts.plan.load.as_deref(),
                on_event,
            )
        }
    }
    .with_context(|| format!("row {} ({})", row.id, row.label))?;

    let peak_rss_kib = Some(tree_kib(measured, "VmHWM")?);
    if let Some(mut proxy) = proxy {
        proxy.check_running()?;
    }
    let per_request = |ticks: Option<(u64, u64)>| {
        ticks.and_then(|(start, end)| {
            (result.requests > 0).then(|| {
                end.saturating_sub(start) as f64 / TICKS_PER_SECOND * 1e6 / result.requests as f64
            })
        })
    };
    if result.requests == 0 {
        bail!(
            "row {} completed no request in its window; first error: {}",
            row.id,
            result.first_error.as_deref().unwrap_or("none")
        );
    }
    Ok(RowResult {
        id: row.id.to_owned(),
        label: row.label.to_owned(),
        pairs: matches!(row.scenario, Scenario::Approve { .. }),
        rate: spec.rate,
        cpu_us_per_request: per_request(samples.ticks),
        redis_cpu_us_per_request: per_request(samples.redis_ticks),
        peak_rss_kib,
        idle_rss_kib,
        upstream_calls: samples
            .upstream
            .map(|(start, end)| end.count.saturating_sub(start.count)),
        upstream_connections: samples
            .upstream
            .map(|(start, end)| end.connections.saturating_sub(start.connections)),
        load: result,
    })
}

/// What the bench upstream has counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub count: u64,
    pub held: u64,
    pub connections: u64,
}

pub fn upstream_counters(upstream: std::net::SocketAddr) -> anyhow::Result<Counters> {
    let (status, body) = call_blocking(upstream, "GET", "/__bench/count", Duration::from_secs(5))?;
    if status != 200 {
        bail!("upstream /__bench/count answered {status}");
    }
    let value: serde_json::Value = serde_json::from_slice(&body)?;
    let field = |name: &str| {
        value[name]
            .as_u64()
            .with_context(|| format!("upstream {name}"))
    };
    Ok(Counters {
        count: field("count")?,
        held: field("held")?,
        connections: field("connections")?,
    })
}
