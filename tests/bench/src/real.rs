//! Issue 41's part of the report: the fixed-rate latency rows (`L…`), and the cost of real
//! traffic beside the rows it is compared with (signed Sessions, the 71-term policy,
//! tracing at 1%, the approved pair), each against its target. Pure formatting.

use std::fmt::Write as _;

use crate::rows::RowResult;

/// Issue 41's targets.
pub const SIGNED_MINT_VS_UNSIGNED: f64 = 1.5;
pub const TRACING_1PCT_VS_OFF: f64 = 1.05;
pub const PAIR_VS_PASSTHROUGH: f64 = 4.0;

fn find<'a>(rows: &'a [RowResult], id: &str) -> Option<&'a RowResult> {
    rows.iter().find(|r| r.id == id)
}

/// CPU µs per iteration: per pair for a pair row.
fn cpu_per_iteration(row: &RowResult) -> Option<f64> {
    let per_request = row.cpu_us_per_request?;
    Some(if row.pairs {
        per_request * 2.0
    } else {
        per_request
    })
}

pub fn render(rows: &[RowResult]) -> String {
    let mut out = String::new();
    out.push_str(&latency_table(rows));
    out.push_str(&comparisons(rows));
    out
}

/// The open-loop rows: latency percentiles and what each adds over the upstream direct
/// (row L1) at the same rate.
pub fn latency_table(rows: &[RowResult]) -> String {
    let open: Vec<&RowResult> = rows.iter().filter(|r| r.rate.is_some()).collect();
    if open.is_empty() {
        return String::new();
    }
    let base = find(rows, "L1");
    let mut out = String::from(
        "\nFixed rate, open loop (latency from each request's scheduled time; pair rows: mint + approve, from the mint's time to the approval's answer):\n\n\
         | row | what | sent /s | done req/s | p50 µs | p99 µs | p99.9 µs | added p50 | added p99 | added p99.9 | CPU µs/req | errors |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in open {
        let added = |value: f64, of: fn(&RowResult) -> f64| {
            base.filter(|b| b.id != row.id)
                .map_or_else(|| "–".to_owned(), |b| format!("{:+.0}", value - of(b)))
        };
        let l = &row.load;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} |",
            row.id,
            row.label,
            row.rate.unwrap_or(0),
            l.requests_per_s(),
            l.p50_us,
            l.p99_us,
            l.p999_us,
            added(l.p50_us, |b| b.load.p50_us),
            added(l.p99_us, |b| b.load.p99_us),
            added(l.p999_us, |b| b.load.p999_us),
            row.cpu_us_per_request
                .map_or_else(|| "–".to_owned(), |c| format!("{c:.1}")),
            l.errors,
        );
    }
    if let Some(late) = base.and_then(|b| b.load.lateness_p99_us) {
        let _ = writeln!(
            out,
            "- the load generator woke up to {late:.0} µs late for a scheduled request (p99, row L1; its timer has 1 ms resolution): in every row's figures alike"
        );
    }
    out
}

/// One figure against its reference row, with the verdict when there is a target.
fn line(
    out: &mut String,
    rows: &[RowResult],
    what: &str,
    (id, of): (&str, &str),
    target: Option<f64>,
) {
    let (Some(row), Some(reference)) = (find(rows, id), find(rows, of)) else {
        return;
    };
    let (Some(value), Some(base)) = (cpu_per_iteration(row), cpu_per_iteration(reference)) else {
        return;
    };
    if base <= 0.0 {
        return;
    }
    let ratio = value / base;
    let verdict = match target {
        Some(t) if ratio <= t => format!(" (target ≤ {t}×: met)"),
        Some(t) => format!(" (target ≤ {t}×: NOT MET)"),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "- {what}: row {id} {value:.1} µs vs row {of} {base:.1} µs = {ratio:.2}×{verdict}"
    );
}

/// CPU per request (per pair for pairs) of issue 41's rows beside their references.
pub fn comparisons(rows: &[RowResult]) -> String {
    let mut out = String::new();
    let s = Some(SIGNED_MINT_VS_UNSIGNED);
    let t = Some(TRACING_1PCT_VS_OFF);
    let list: [(&str, (&str, &str), Option<f64>); 13] = [
        ("signed mint, verify required", ("8a", "7a"), s),
        ("signed mint, verify off", ("8ao", "7a"), s),
        (
            "signed pair, verify required (per pair)",
            ("8b", "7b"),
            None,
        ),
        ("signed pair, verify off (per pair)", ("8bo", "7b"), None),
        ("signed replay, verify required", ("8c", "7c"), None),
        ("signed replay, verify off", ("8co", "7c"), None),
        ("71-term policy mint", ("7d", "7a"), None),
        ("tracing at 1%, passthrough", ("3t1", "3"), t),
        ("tracing at 1%, mint", ("7at1", "7a"), t),
        ("tracing at 1%, pair", ("7bt1", "7b"), t),
        ("tracing at 100%, passthrough", ("3t", "3"), None),
        (
            "approved pair (memory://) per pair vs passthrough",
            ("7b", "3"),
            Some(PAIR_VS_PASSTHROUGH),
        ),
        (
            "approved pair (redis) per pair vs passthrough",
            ("5", "3"),
            Some(PAIR_VS_PASSTHROUGH),
        ),
    ];
    for (what, ids, target) in list {
        line(&mut out, rows, what, ids, target);
    }
    if out.is_empty() {
        return out;
    }
    format!("\nIssue 41, CPU µs per request (per pair for pairs) beside the reference row:\n{out}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::LoadResult;

    fn row(id: &str, cpu: f64, pairs: bool, rate: Option<u64>) -> RowResult {
        RowResult {
            id: id.into(),
            label: format!("row {id}"),
            load: LoadResult {
                requests: 1000,
                iterations: 1000,
                elapsed_s: 1.0,
                p50_us: 100.0,
                p99_us: 200.0,
                p999_us: 300.0,
                ..LoadResult::default()
            },
            pairs,
            rate,
            cpu_us_per_request: Some(cpu),
            redis_cpu_us_per_request: None,
            peak_rss_kib: None,
            idle_rss_kib: None,
            upstream_calls: None,
            upstream_connections: None,
        }
    }

    #[test]
    fn signed_and_pair_rows_are_judged_against_their_targets() {
        let rows = [
            row("3", 30.0, false, None),
            row("7a", 30.0, false, None),
            row("8a", 60.0, false, None),
            row("7b", 55.0, true, None),
        ];
        let text = comparisons(&rows);
        assert!(
            text.contains("row 8a 60.0 µs vs row 7a 30.0 µs = 2.00× (target ≤ 1.5×: NOT MET)"),
            "{text}"
        );
        assert!(
            text.contains("row 7b 110.0 µs vs row 3 30.0 µs = 3.67× (target ≤ 4×: met)"),
            "{text}"
        );
        assert!(!text.contains("8ao"), "{text}");
    }

    #[test]
    fn latency_rows_add_over_the_upstream_direct() {
        let mut slower = row("L3", 30.0, false, Some(2000));
        slower.load.p99_us = 450.0;
        let rows = [row("L1", 3.0, false, Some(2000)), slower];
        let text = latency_table(&rows);
        assert!(
            text.contains(
                "| L3 | row L3 | 2000 | 1000 | 100 | 450 | 300 | +0 | +250 | +0 | 30.0 | 0 |"
            ),
            "{text}"
        );
        assert!(latency_table(&[row("3", 1.0, false, None)]).is_empty());
    }
}
