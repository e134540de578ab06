//! The second load generator: wrk (its own process, its own event loop), so that every row can
//! be measured by two methods. Rows whose requests do not depend on earlier answers run under
//! it: plain requests, mints, and replays of approvals performed before the load starts. Mint +
//! approve pairs need each 403's body, which wrk cannot read cheaply, so they have no wrk row.
//!
//! wrk sends the exact bytes of [`crate::scenario`]'s requests, from a Lua `request()` that
//! cycles through them; its summary (`--latency`) is parsed into a [`LoadResult`].

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::children::Event;
use crate::http1;
use crate::load::{LoadResult, LoadSpec};
use crate::scenario::{
    ITEM_BODY, Link, ORDER, Scenario, agent_request, approval_for, item_body, session_jwt,
};

/// Whether wrk can drive this scenario.
pub fn supports(scenario: &Scenario) -> bool {
    matches!(
        scenario,
        Scenario::Plain { .. } | Scenario::Mint | Scenario::Replay { .. }
    )
}

/// The requests a wrk row cycles through, and the status each one must get. A replay row first
/// performs its approvals (one connection, before the load and before measuring).
pub fn requests(spec: &LoadSpec) -> anyhow::Result<(Vec<Vec<u8>>, u16)> {
    if spec.agent.is_some() || spec.rate.is_some() {
        bail!("the signed and open-loop rows are driven by poppy-bench's own client only");
    }
    let session = session_jwt();
    Ok(match &spec.scenario {
        Scenario::Plain { method, path } if method == "POST" => (
            vec![http1::request(
                "POST",
                path,
                &[("Content-Type", "application/json")],
                ITEM_BODY.as_bytes(),
            )],
            201,
        ),
        Scenario::Plain { method, path } => (vec![http1::request(method, path, &[], b"")], 200),
        Scenario::Mint => (
            vec![agent_request(&session, ORDER, ITEM_BODY.as_bytes(), None)],
            403,
        ),
        Scenario::Replay { ops } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let approved = runtime.block_on(perform(
                spec.addr,
                &session,
                (*ops).max(1),
                Duration::from_millis(spec.timeout_ms),
            ))?;
            (approved, 201)
        }
        Scenario::Approve { .. } => bail!("wrk cannot drive mint + approve pairs"),
        Scenario::MintPadded { .. } | Scenario::AgentGet | Scenario::MintLarge => {
            bail!("the scaling and 71-term rows are driven by poppy-bench's own client only")
        }
    })
}

/// Perform `ops` approvals; returns the approved requests, whose retries are replays.
async fn perform(
    addr: SocketAddr,
    session: &str,
    ops: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Vec<u8>>> {
    let tag = format!("{:x}", std::process::id());
    let mut link = Link::new(addr, timeout);
    let mut approved = Vec::with_capacity(ops);
    for op in 0..ops {
        let order = format!("wrk{tag}x{op}");
        let body = item_body(0);
        let held = link
            .expect(&agent_request(session, &order, &body, None), 403)
            .await?;
        let approval = approval_for(&held.body)?;
        let request = agent_request(session, &order, &body, Some(&approval));
        link.expect(&request, 201)
            .await
            .context("performing a replay row's approval")?;
        approved.push(request);
    }
    Ok(approved)
}

/// A Lua string literal holding exactly these bytes.
fn lua_string(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 16);
    out.push('"');
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03}")),
        }
    }
    out.push('"');
    out
}

/// The Lua script: `request()` returns the raw requests in turn.
pub fn script(requests: &[Vec<u8>]) -> String {
    let mut out = String::from("local requests = {\n");
    for request in requests {
        out.push_str("  ");
        out.push_str(&lua_string(request));
        out.push_str(",\n");
    }
    out.push_str(
        "}\nlocal i = 0\nrequest = function()\n  i = i % #requests + 1\n  return requests[i]\nend\n",
    );
    out
}

/// `635.91us`, `1.13ms`, `2.00s`, `1.00m` in µs.
fn micros(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let scale = match unit {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" => 60e6,
        "h" => 3600e6,
        _ => return None,
    };
    Some(value * scale)
}

/// wrk's `--latency` summary as a [`LoadResult`]. `expected`: the status every answer must
/// have; answers with another status class count as errors.
pub fn parse(output: &str, expected: u16) -> anyhow::Result<LoadResult> {
    let mut result = LoadResult::default();
    let mut non_2xx_3xx = 0u64;
    let mut socket_errors = 0u64;
    let mut found = false;
    for line in output.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Latency", avg, _stdev, max, ..] => {
                result.mean_us = micros(avg).unwrap_or(0.0);
                result.max_us = micros(max).unwrap_or(0.0);
            }
            ["50%", v] => result.p50_us = micros(v).unwrap_or(0.0),
            ["90%", v] => result.p90_us = micros(v).unwrap_or(0.0),
            ["99%", v] => result.p99_us = micros(v).unwrap_or(0.0),
            [n, "requests", "in", elapsed, ..] => {
                result.requests = n.parse().context("wrk's request count")?;
                let elapsed = elapsed.trim_end_matches(',');
                result.elapsed_s = micros(elapsed).context("wrk's elapsed time")? / 1e6;
                found = true;
            }
            ["Non-2xx", "or", "3xx", "responses:", n] => non_2xx_3xx = n.parse()?,
            ["Socket", "errors:", rest @ ..] => {
                socket_errors = rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum();
            }
            _ => {}
        }
    }
    if !found {
        bail!("no `N requests in T` line in wrk's output:\n{output}");
    }
    let wrong = if (200..400).contains(&expected) {
        non_2xx_3xx
    } else {
        result.requests.saturating_sub(non_2xx_3xx)
    };
    result.errors = wrong + socket_errors;
    result.requests = result.requests.saturating_sub(wrong);
    result.iterations = result.requests;
    if result.errors > 0 {
        result.first_error = Some(format!(
            "{wrong} answers without status {expected}, {socket_errors} socket errors"
        ));
    }
    Ok(result)
}

fn wrk_command(
    wrk: &Path,
    cpus: Option<&str>,
    spec: &LoadSpec,
    script: &Path,
    seconds: u64,
) -> Command {
    let mut command = match cpus {
        Some(cpus) => {
            let mut command = Command::new("taskset");
            command.arg("-c").arg(cpus).arg(wrk);
            command
        }
        None => Command::new(wrk),
    };
    command
        .arg("-t1")
        .arg(format!("-c{}", spec.connections.max(1)))
        .arg(format!("-d{seconds}s"))
        .arg(format!(
            "--timeout={}s",
            spec.timeout_ms.div_ceil(1000).max(1)
        ))
        .arg("--latency")
        .arg("-s")
        .arg(script)
        .arg(format!("http://{}/", spec.addr));
    command
}

fn run_wrk(mut command: Command) -> anyhow::Result<String> {
    let output = command.output().context("run wrk")?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "wrk exited with {}: {}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(stdout)
}

/// One row under wrk: a warm-up run, then the measured run between `MeasureStart` and
/// `MeasureEnd` (wrk counts whole seconds: durations are rounded up to one at least).
pub fn run(
    wrk: &Path,
    dir: &Path,
    spec: &LoadSpec,
    cpus: Option<&str>,
    mut on_event: impl FnMut(Event) -> anyhow::Result<()>,
) -> anyhow::Result<LoadResult> {
    let (requests, expected) = requests(spec)?;
    let path = dir.join("wrk.lua");
    std::fs::write(&path, script(&requests))
        .with_context(|| format!("write {}", path.display()))?;
    on_event(Event::Ready)?;
    if spec.warmup_ms > 0 {
        run_wrk(wrk_command(
            wrk,
            cpus,
            spec,
            &path,
            spec.warmup_ms.div_ceil(1000),
        ))?;
    }
    on_event(Event::MeasureStart)?;
    let output = run_wrk(wrk_command(
        wrk,
        cpus,
        spec,
        &path,
        spec.duration_ms.div_ceil(1000).max(1),
    ));
    on_event(Event::MeasureEnd)?;
    parse(&output?, expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "Running 10s test @ http://127.0.0.1:8080/
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   965.84us  211.15us   9.57ms   91.21%
    Req/Sec    33.28k     1.36k   35.58k    79.00%
  Latency Distribution
     50%  935.00us
     75%    1.01ms
     90%    1.13ms
     99%    1.76ms
  331155 requests in 10.00s, 37.95MB read
  Non-2xx or 3xx responses: 12
Requests/sec:  33112.73
Transfer/sec:      3.79MB
";

    #[test]
    fn the_summary_becomes_a_load_result() {
        let r = parse(SUMMARY, 201).unwrap();
        assert_eq!(r.requests, 331_143);
        assert_eq!(r.errors, 12);
        assert_eq!(r.elapsed_s, 10.0);
        assert_eq!(r.p50_us, 935.0);
        assert_eq!(r.p90_us, 1130.0);
        assert_eq!(r.p99_us, 1760.0);
        assert_eq!(r.max_us, 9570.0);
        assert!(r.first_error.unwrap().contains("12 answers"));
    }

    #[test]
    fn a_403_row_counts_403s_as_answers() {
        let out = SUMMARY.replace(
            "Non-2xx or 3xx responses: 12",
            "Non-2xx or 3xx responses: 331155",
        );
        let r = parse(&out, 403).unwrap();
        assert_eq!((r.requests, r.errors), (331_155, 0));
        let socket = SUMMARY.replace(
            "  Non-2xx or 3xx responses: 12",
            "  Socket errors: connect 0, read 3, write 0, timeout 2",
        );
        assert_eq!(parse(&socket, 201).unwrap().errors, 5);
        assert!(parse("nothing", 200).is_err());
    }

    #[test]
    fn requests_become_lua_strings_byte_for_byte() {
        let lua = script(&[b"POST / HTTP/1.1\r\nX: \"a\\b\"\r\n\r\n".to_vec()]);
        assert!(lua.contains(r#""POST / HTTP/1.1\013\010X: \"a\\b\"\013\010\013\010""#));
        assert!(lua.contains("request = function()"));
        assert!(!supports(&Scenario::approve()));
        assert!(supports(&Scenario::Mint));
    }
}
