//! The printed report: one Markdown table of the rows (with ratios against the upstream's and
//! nginx's rows), the Redis round trips, memory, and where we stand against the targets.
//! Pure formatting, unit-tested.

use std::fmt::Write as _;

use serde::Serialize;

use crate::held::HeldMemory;
use crate::roundtrips::{PerOp, RoundTrips, total};
use crate::rows::{RowResult, references};

/// The targets (issue 17; the round trips and memory ones from issue 6).
pub const PASSTHROUGH_CPU_VS_NGINX: f64 = 1.5;
pub const PASSTHROUGH_RPS_VS_NGINX: f64 = 0.8;
pub const ANSWER_CPU_VS_PASSTHROUGH: f64 = 0.5;
pub const PAIR_CPU_VS_PASSTHROUGH: f64 = 2.0;
pub const IDLE_RSS_KIB: u64 = 32 * 1024;
/// Before issue 17: the record-and-generation read (the lookup script), the claim, the
/// completion.
pub const APPROVE_ROUND_TRIPS: f64 = 3.0;
pub const REPLAY_ROUND_TRIPS: f64 = 1.0;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Lines describing the run (command, CPU plan, settings).
    pub settings: Vec<String>,
    pub rows: Vec<RowResult>,
    pub roundtrips: Option<RoundTrips>,
    pub held: Option<HeldMemory>,
    /// In-flight memory per body size (the scaling rows).
    pub held_sizes: Option<crate::scaling::HeldSizes>,
}

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    for line in &report.settings {
        let _ = writeln!(out, "{line}");
    }
    out.push('\n');
    // The open-loop rows have a table of their own (`real.rs`).
    let closed: Vec<RowResult> = report
        .rows
        .iter()
        .filter(|row| row.rate.is_none())
        .cloned()
        .collect();
    out.push_str(&table(&closed));
    out.push_str(&notes(&report.rows));
    out.push_str(&pingora_lines(&report.rows));
    out.push_str(&answer_lines(&report.rows));
    out.push_str(&crate::real::render(&report.rows));
    if let Some(roundtrips) = &report.roundtrips {
        out.push('\n');
        out.push_str(&roundtrip_lines(roundtrips));
    }
    out.push('\n');
    out.push_str(&memory_lines(report));
    out.push('\n');
    out.push_str(&targets_table(report));
    out.push_str(&crate::scaling::render(
        &report.rows,
        report.held_sizes.as_ref(),
    ));
    out
}

fn find<'a>(rows: &'a [RowResult], id: &str) -> Option<&'a RowResult> {
    rows.iter().find(|r| r.id == id)
}

pub fn ratio(value: f64, reference: Option<f64>) -> Option<f64> {
    reference.filter(|r| *r > 0.0).map(|r| value / r)
}

fn show_ratio(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "–".to_owned(), |r| format!("{r:.2}"))
}

fn show(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:.decimals$}"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The rows as a Markdown table. Ratios are this row's figure over row 1's (upstream direct)
/// and row 2's (nginx) of the same method: above 1 is more requests/s, or slower latency.
pub fn table(rows: &[RowResult]) -> String {
    let mut out = String::from(
        "| row | what | req/s | ×r1 | ×r2 | pairs/s | p50 µs | ×r1 | ×r2 | p99 µs | ×r1 | ×r2 | CPU µs/req | Redis CPU µs/req | peak RSS MiB | new upstream conns | errors |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in rows {
        let (r1, r2) = references(&row.id);
        let (r1, r2) = (find(rows, &r1), find(rows, &r2));
        let rps = row.load.requests_per_s();
        let ref_rps = |r: Option<&RowResult>| r.map(|r| r.load.requests_per_s());
        let ref_p50 = |r: Option<&RowResult>| r.map(|r| r.load.p50_us);
        let ref_p99 = |r: Option<&RowResult>| r.map(|r| r.load.p99_us);
        let pairs = if row.pairs {
            format!("{:.0}", row.load.iterations_per_s())
        } else {
            "–".to_owned()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} | {} | {} | {:.0} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            row.id,
            row.label,
            rps,
            show_ratio(ratio(rps, ref_rps(r1))),
            show_ratio(ratio(rps, ref_rps(r2))),
            pairs,
            row.load.p50_us,
            show_ratio(ratio(row.load.p50_us, ref_p50(r1))),
            show_ratio(ratio(row.load.p50_us, ref_p50(r2))),
            row.load.p99_us,
            show_ratio(ratio(row.load.p99_us, ref_p99(r1))),
            show_ratio(ratio(row.load.p99_us, ref_p99(r2))),
            show(row.cpu_us_per_request, 1),
            show(row.redis_cpu_us_per_request, 1),
            show(row.peak_rss_kib.map(mib), 1),
            show(row.upstream_connections.map(|c| c as f64), 0),
            row.load.errors,
        );
    }
    out
}

/// What the table cannot say: errors, and whether the upstream saw what it should have.
pub fn notes(rows: &[RowResult]) -> String {
    let mut out = String::new();
    for row in rows {
        if let Some(error) = &row.load.first_error {
            let _ = writeln!(
                out,
                "- row {}: {} errors; first: {error}",
                row.id, row.load.errors
            );
        }
        let Some(calls) = row.upstream_calls else {
            continue;
        };
        if row.label.contains("replays") && calls > 0 {
            let _ = writeln!(
                out,
                "- row {}: the upstream was called {calls} times during replays (expected 0)",
                row.id
            );
        }
        if row.pairs {
            let _ = writeln!(
                out,
                "- row {}: {} executions in the window, {calls} upstream calls (equal but for pairs in flight at the edges)",
                row.id, row.load.iterations
            );
        }
    }
    out
}

fn per_op(per_op: &PerOp) -> String {
    let parts: Vec<String> = per_op
        .iter()
        .map(|(name, calls)| format!("{name} {calls:.2}"))
        .collect();
    format!("{:.2} ({})", total(per_op), parts.join(", "))
}

pub fn roundtrip_lines(rt: &RoundTrips) -> String {
    format!(
        "Redis round trips per operation (MONITOR over {} of each, script-internal commands excluded):\n\
         - mint (403): {}\n\
         - approved execution (the approve request of a pair): {}\n\
         - mint + approve pair: {:.2}\n\
         - replay: {}\n",
        rt.ops,
        per_op(&rt.mint),
        per_op(&rt.approve),
        total(&rt.mint) + total(&rt.approve),
        per_op(&rt.replay),
    )
}

fn idle_rss(rows: &[RowResult]) -> Option<(u64, String)> {
    rows.iter()
        .filter_map(|r| r.idle_rss_kib.map(|kib| (kib, r.id.clone())))
        .max()
}

pub fn memory_lines(report: &Report) -> String {
    let mut out = String::new();
    let idle: Vec<String> = report
        .rows
        .iter()
        .filter_map(|r| {
            r.idle_rss_kib
                .map(|kib| format!("{:.1} MiB (row {})", mib(kib), r.id))
        })
        .collect();
    if !idle.is_empty() {
        let _ = writeln!(
            out,
            "Gateway idle RSS (fresh process, before traffic): {}",
            idle.join(", ")
        );
    }
    if let Some(held) = &report.held {
        for (name, point) in [("small", &held.small), ("limit-filling", &held.full)] {
            let _ = writeln!(
                out,
                "Held requests, {name} bodies: {} approved executions in flight with {}-byte bodies (limit {}): RSS {:.1} → {:.1} MiB = {:.0} bytes per request ({:.2}× the limit); {:.1} MiB after they completed",
                held.held,
                point.body_bytes,
                held.limit_bytes,
                mib(point.baseline_kib),
                mib(point.during_kib),
                point.per_request_bytes(held.held),
                point.per_request_bytes(held.held) / held.limit_bytes as f64,
                mib(point.after_kib),
            );
        }
        let _ = writeln!(
            out,
            "Held requests: {:.0} bytes per request whatever the body, plus {:.2} bytes of RSS per body byte",
            held.small.per_request_bytes(held.held),
            held.per_body_byte()
        );
    }
    out
}

/// One target: what it asks, what we measured, and whether it holds (`None`: not measured).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub target: String,
    pub measured: String,
    pub pass: Option<bool>,
}

pub fn verdicts(report: &Report) -> Vec<Verdict> {
    let rows = &report.rows;
    let mut out = Vec::new();
    // Each comparison is made within one load generator: the poppy rows, then the wrk rows.
    for wrk in ["", "w"] {
        let id = |base: &str| format!("{base}{wrk}");
        let by = if wrk.is_empty() { "" } else { " [wrk]" };
        for (a, b, method) in [("3", "2", "POST"), ("3g", "2g", "GET")] {
            out.push(compare(
                rows,
                &format!(
                    "passthrough CPU/req ≤ {PASSTHROUGH_CPU_VS_NGINX}× nginx's ({method}){by}"
                ),
                (&id(a), &id(b)),
                Figure::Cpu,
                |r| r <= PASSTHROUGH_CPU_VS_NGINX + 1e-9,
            ));
            out.push(compare(
                rows,
                &format!("passthrough req/s ≥ {PASSTHROUGH_RPS_VS_NGINX}× nginx's ({method}){by}"),
                (&id(a), &id(b)),
                Figure::Rps,
                |r| r >= PASSTHROUGH_RPS_VS_NGINX - 1e-9,
            ));
        }
        for (a, what) in [
            ("4", "minting, redis"),
            ("7a", "minting, memory://"),
            ("6", "replay, redis"),
            ("7c", "replay, memory://"),
        ] {
            out.push(compare(
                rows,
                &format!("{what}: CPU/req ≤ {ANSWER_CPU_VS_PASSTHROUGH}× passthrough's{by}"),
                (&id(a), &id("3")),
                Figure::Cpu,
                |r| r <= ANSWER_CPU_VS_PASSTHROUGH + 1e-9,
            ));
        }
    }
    for (a, what) in [("5", "redis"), ("7b", "memory://")] {
        out.push(compare(
            rows,
            &format!("approved execution ({what}): CPU per pair ≤ {PAIR_CPU_VS_PASSTHROUGH}× passthrough's per request"),
            (a, "3"),
            Figure::CpuPerIteration,
            |r| r <= PAIR_CPU_VS_PASSTHROUGH + 1e-9,
        ));
    }
    let idle = idle_rss(rows);
    out.push(Verdict {
        target: "idle RSS ≤ 32 MiB".into(),
        measured: idle.as_ref().map_or_else(
            || "no gateway row run".into(),
            |(kib, id)| format!("{:.1} MiB at most (row {id})", mib(*kib)),
        ),
        pass: idle.map(|(kib, _)| kib <= IDLE_RSS_KIB),
    });
    out.push(Verdict {
        target: "RSS growth per held request ≤ the body limit".into(),
        measured: report.held.as_ref().map_or_else(
            || "not measured".into(),
            |h| {
                format!(
                    "{:.0} bytes per request, limit {}",
                    h.per_request_bytes(),
                    h.limit_bytes
                )
            },
        ),
        pass: report
            .held
            .as_ref()
            .map(|h| h.per_request_bytes() <= h.limit_bytes as f64),
    });
    let rt = report.roundtrips.as_ref();
    let approve = rt.map(|rt| total(&rt.approve));
    out.push(Verdict {
        target: "approved execution ≤ 3 Redis round trips (as before issue 17)".into(),
        measured: approve.map_or_else(|| "not measured".into(), |a| format!("{a:.2}")),
        pass: approve.map(|a| a <= APPROVE_ROUND_TRIPS + 1e-9),
    });
    let replay = rt.map(|rt| total(&rt.replay));
    out.push(Verdict {
        target: "replay = 1 Redis round trip".into(),
        measured: replay.map_or_else(|| "not measured".into(), |r| format!("{r:.2}")),
        pass: replay.map(|r| r <= REPLAY_ROUND_TRIPS + 1e-9),
    });
    out
}

/// Which figure of two rows a target compares.
#[derive(Debug, Clone, Copy)]
enum Figure {
    Rps,
    Cpu,
    /// CPU per iteration: per mint + approve pair on pair rows.
    CpuPerIteration,
}

impl Figure {
    fn of(self, row: &RowResult) -> Option<f64> {
        match self {
            Figure::Rps => Some(row.load.requests_per_s()),
            Figure::Cpu => row.cpu_us_per_request,
            Figure::CpuPerIteration => row
                .cpu_us_per_request
                .map(|cpu| cpu * if row.pairs { 2.0 } else { 1.0 }),
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Figure::Rps => "/s",
            Figure::Cpu | Figure::CpuPerIteration => " µs",
        }
    }
}

/// Row `a`'s figure over row `b`'s, judged by `holds`.
fn compare(
    rows: &[RowResult],
    target: &str,
    (a, b): (&str, &str),
    figure: Figure,
    holds: impl Fn(f64) -> bool,
) -> Verdict {
    let value = find(rows, a).and_then(|r| figure.of(r));
    let reference = find(rows, b).and_then(|r| figure.of(r));
    let r = value.and_then(|v| ratio(v, reference));
    let unit = figure.unit();
    Verdict {
        target: target.to_owned(),
        measured: match (value, reference, r) {
            (Some(v), Some(rf), Some(r)) => {
                format!("row {a} {v:.1}{unit} vs row {b} {rf:.1}{unit} = {r:.2}×")
            }
            _ => format!("rows {a} and {b} not both run"),
        },
        pass: r.map(holds),
    }
}

/// Where the passthrough CPU goes, by the reference rows: pingora's own share (bare pingora
/// over nginx) and ours (the gateway over bare pingora), per method and load generator.
pub fn pingora_lines(rows: &[RowResult]) -> String {
    let mut out = String::new();
    for (gateway, pingora, nginx) in [
        ("3", "2p", "2"),
        ("3g", "2pg", "2g"),
        ("3w", "2pw", "2w"),
        ("3gw", "2pgw", "2gw"),
    ] {
        let cpu = |id: &str| find(rows, id).and_then(|r| r.cpu_us_per_request);
        if let (Some(g), Some(p), Some(n)) = (cpu(gateway), cpu(pingora), cpu(nginx)) {
            let _ = writeln!(
                out,
                "- CPU µs/req: nginx {n:.1} (row {nginx}), bare pingora {p:.1} ({:.2}× nginx), gateway passthrough {g:.1} ({:.2}× bare pingora, row {gateway})",
                p / n,
                g / p
            );
        }
    }
    out
}

/// What answering a request itself costs, by the reference rows that answer a mint's 403
/// without an upstream (nginx `return`, bare pingora), beside the gateway's own answers and
/// the proxying of the same servers: the floor under the minting and replay targets.
pub fn answer_lines(rows: &[RowResult]) -> String {
    let mut out = String::new();
    let cpu = |id: &str| find(rows, id).and_then(|r| r.cpu_us_per_request);
    for wrk in ["", "w"] {
        let id = |base: &str| format!("{base}{wrk}");
        let (Some(nginx_answers), Some(pingora_answers)) = (cpu(&id("2a")), cpu(&id("2pa"))) else {
            continue;
        };
        // `value` against row `reference`'s CPU, when that row ran.
        let versus = |line: &mut String, value: f64, reference: &str, what: &str| {
            if let Some(of) = cpu(&id(reference)) {
                let _ = write!(line, ", {:.2}× {what} (row {})", value / of, id(reference));
            }
        };
        let mut line = format!(
            "- answering itself, CPU µs/req: nginx {nginx_answers:.1} (row {})",
            id("2a")
        );
        versus(&mut line, nginx_answers, "2", "its proxying");
        let _ = write!(
            line,
            "; bare pingora {pingora_answers:.1} (row {})",
            id("2pa")
        );
        versus(&mut line, pingora_answers, "2p", "its proxying");
        versus(&mut line, pingora_answers, "3", "gateway passthrough");
        for (row, what) in [("7a", "minting"), ("7c", "replay")] {
            if let Some(gateway) = cpu(&id(row)) {
                let _ = write!(
                    line,
                    "; gateway {what} (memory://) {gateway:.1} = {:.2}× bare pingora answering (row {})",
                    gateway / pingora_answers,
                    id(row)
                );
            }
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

pub fn targets_table(report: &Report) -> String {
    let mut out = String::from("| target | measured | verdict |\n| --- | --- | --- |\n");
    for v in verdicts(report) {
        let verdict = match v.pass {
            Some(true) => "met",
            Some(false) => "NOT MET",
            None => "–",
        };
        let _ = writeln!(out, "| {} | {} | {verdict} |", v.target, v.measured);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::LoadResult;

    fn row(id: &str, rps: f64, p99: f64) -> RowResult {
        RowResult {
            id: id.into(),
            label: format!("row {id}"),
            load: LoadResult {
                requests: (rps * 10.0) as u64,
                iterations: (rps * 10.0) as u64,
                elapsed_s: 10.0,
                p50_us: p99 / 2.0,
                p99_us: p99,
                ..LoadResult::default()
            },
            pairs: false,
            rate: None,
            cpu_us_per_request: Some(12.5),
            redis_cpu_us_per_request: None,
            peak_rss_kib: Some(20 * 1024),
            idle_rss_kib: id.starts_with('3').then_some(10 * 1024),
            upstream_calls: None,
            upstream_connections: Some(0),
        }
    }

    #[test]
    fn ratios_are_against_the_upstream_and_nginx() {
        let rows = vec![
            row("1", 1000.0, 100.0),
            row("2", 500.0, 200.0),
            row("3", 250.0, 400.0),
        ];
        let table = table(&rows);
        let line = table.lines().find(|l| l.starts_with("| 3 |")).unwrap();
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cells[3], "250");
        assert_eq!(cells[4], "0.25");
        assert_eq!(cells[5], "0.50");
        assert_eq!(cells[6], "–");
        assert_eq!(cells[10], "400");
        assert_eq!(cells[12], "2.00");
        assert_eq!(cells[13], "12.5");
        assert_eq!(cells[15], "20.0");
        assert_eq!(table.lines().count(), 5);
    }

    #[test]
    fn get_rows_compare_with_get_rows() {
        let rows = vec![
            row("1", 1000.0, 100.0),
            row("1g", 2000.0, 50.0),
            row("3g", 1000.0, 100.0),
        ];
        let line = table(&rows)
            .lines()
            .find(|l| l.starts_with("| 3g |"))
            .unwrap()
            .to_owned();
        assert_eq!(line.split('|').map(str::trim).nth(4), Some("0.50"));
    }

    #[test]
    fn verdicts_follow_the_targets() {
        let with_cpu = |mut r: RowResult, cpu: f64| {
            r.cpu_us_per_request = Some(cpu);
            r
        };
        let mut approved = with_cpu(row("5", 300.0, 900.0), 50.0);
        approved.pairs = true;
        let report = Report {
            settings: vec![],
            rows: vec![
                with_cpu(row("2", 1000.0, 200.0), 30.0),
                with_cpu(row("2p", 900.0, 200.0), 40.0),
                with_cpu(row("3", 900.0, 350.0), 44.0),
                with_cpu(row("7a", 2000.0, 100.0), 20.0),
                with_cpu(row("7c", 2000.0, 100.0), 25.0),
                approved,
            ],
            roundtrips: Some(RoundTrips {
                ops: 10,
                mint: [("GET".to_owned(), 1.0)].into(),
                approve: [
                    ("GET".to_owned(), 1.0),
                    ("HGETALL".to_owned(), 1.0),
                    ("EVALSHA".to_owned(), 2.0),
                ]
                .into(),
                replay: [("HGETALL".to_owned(), 1.0)].into(),
            }),
            held: None,
            held_sizes: None,
        };
        let verdicts = verdicts(&report);
        let get = |name: &str| {
            verdicts
                .iter()
                .find(|v| v.target.starts_with(name))
                .unwrap_or_else(|| panic!("{name}"))
                .clone()
        };
        // 44 / 30 = 1.47: within 1.5×; 900/1000 req/s = 0.9 ≥ 0.8.
        assert_eq!(
            get("passthrough CPU/req ≤ 1.5× nginx's (POST)").pass,
            Some(true)
        );
        assert_eq!(
            get("passthrough req/s ≥ 0.8× nginx's (POST)").pass,
            Some(true)
        );
        assert_eq!(get("passthrough CPU/req ≤ 1.5× nginx's (GET)").pass, None);
        // 20 / 44 = 0.45 meets 0.5×; 25 / 44 = 0.57 does not.
        assert_eq!(get("minting, memory://").pass, Some(true));
        assert_eq!(get("replay, memory://").pass, Some(false));
        assert_eq!(get("minting, redis").pass, None);
        // A pair costs 2 × 50 = 100 µs > 2 × 44.
        assert_eq!(get("approved execution (redis)").pass, Some(false));
        assert!(
            get("approved execution (redis)")
                .measured
                .contains("100.0 µs")
        );
        assert_eq!(get("approved execution ≤ 3").measured, "4.00");
        assert_eq!(get("approved execution ≤ 3").pass, Some(false));
        assert_eq!(get("replay = 1").pass, Some(true));
        assert_eq!(get("idle RSS").pass, Some(true));
        let text = render(&report);
        assert!(text.contains(
            "| approved execution ≤ 3 Redis round trips (as before issue 17) | 4.00 | NOT MET |"
        ));
        assert!(text.contains("- approved execution (the approve request of a pair): 4.00 (EVALSHA 2.00, GET 1.00, HGETALL 1.00)"));
        assert!(text.contains(
            "bare pingora 40.0 (1.33× nginx), gateway passthrough 44.0 (1.10× bare pingora, row 3)"
        ));
    }

    #[test]
    fn answer_lines_set_the_gateways_answers_beside_the_reference_servers() {
        let with_cpu = |mut r: RowResult, cpu: f64| {
            r.cpu_us_per_request = Some(cpu);
            r
        };
        let rows = vec![
            with_cpu(row("2", 1000.0, 200.0), 10.0),
            with_cpu(row("2p", 900.0, 200.0), 20.0),
            with_cpu(row("3", 900.0, 350.0), 25.0),
            with_cpu(row("2a", 2000.0, 100.0), 8.0),
            with_cpu(row("2pa", 2000.0, 100.0), 16.0),
            with_cpu(row("7a", 2000.0, 100.0), 24.0),
        ];
        let text = answer_lines(&rows);
        assert_eq!(
            text,
            "- answering itself, CPU µs/req: nginx 8.0 (row 2a), 0.80× its proxying (row 2); \
             bare pingora 16.0 (row 2pa), 0.80× its proxying (row 2p), 0.64× gateway passthrough (row 3); \
             gateway minting (memory://) 24.0 = 1.50× bare pingora answering (row 7a)\n"
        );
        assert_eq!(answer_lines(&rows[..3]), "");
    }
}
