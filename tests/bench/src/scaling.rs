//! Issue 28's scaling rows: what a request costs as the work grows (the number of policies,
//! the body's size), each beside the 1-policy, 64-byte row of the same kind in the same run;
//! and the RSS an approved execution holds in flight, per body size. Rows are selected with
//! `--rows scaling` (or by id); they run on `memory://`, with the bench's own client.

use std::fmt::Write as _;

use serde::Serialize;

use crate::env::Store;
use crate::held::HeldPoint;
use crate::rows::{Generator, Row, RowResult, Target};
use crate::scenario::Scenario;

/// Policies in the gateway's policy file (the exchange last in file order).
pub const POLICY_COUNTS: [usize; 4] = [1, 100, 1000, 10_000];
/// Body sizes of the exchange request (padded with an ignored `note`); the first is the
/// unpadded 63-byte body.
pub const BODY_SIZES: [usize; 4] = [64, 4096, 65536, 1 << 20];

/// Issue 28's targets.
pub const POLICIES_VS_ONE: f64 = 1.2;
pub const MINT_64K_VS_64: f64 = 2.5;
pub const HELD_PER_BODY_BYTE: f64 = 1.2;
pub const HELD_OVERHEAD_BYTES: f64 = 16.0 * 1024.0;

/// The policy-scaling kinds: id suffix, what the row sends.
const POLICY_KINDS: [(&str, &str); 3] = [
    ("m", "mint on the last policy in file order"),
    ("r", "replay of a performed approval"),
    ("g", "Personal Agent GET no policy names"),
];

/// In-flight memory per body size: `held` approved executions at each size.
#[derive(Debug, Clone, Serialize)]
pub struct HeldSizes {
    pub held: usize,
    pub points: Vec<HeldPoint>,
}

fn size_label(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1024 && b % 1024 == 0 => format!("{}k", b >> 10),
        b => b.to_string(),
    }
}

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

pub fn policy_row_id(count: usize, kind: &str) -> String {
    format!("p{count}{kind}")
}

/// Body rows: `b{size}m` (mints; the 64-byte one is `p1m`) and `b{size}a` (pairs).
pub fn body_row_id(bytes: usize, kind: &str) -> String {
    if bytes == BODY_SIZES[0] && kind == "m" {
        return policy_row_id(1, "m");
    }
    format!("b{}{kind}", size_label(bytes))
}

/// Whether a row id is a body-size row (they bring the in-flight memory per size along).
pub fn is_body_row(id: &str) -> bool {
    BODY_SIZES.iter().any(|&bytes| {
        body_row_id(bytes, "a") == id || (bytes > 64 && body_row_id(bytes, "m") == id)
    })
}

/// Every scaling row, in table order.
pub fn rows(replay_ops: usize) -> Vec<Row> {
    let row = |id: String, label: String, scenario: Scenario, policies: usize| Row {
        id: leak(id),
        label: leak(label),
        target: Target::Gateway(Store::Memory),
        scenario,
        generator: Generator::Poppy,
        policies,
        signing: crate::rows::Signing::Unsigned,
    };
    let mut out = Vec::new();
    for (kind, what) in POLICY_KINDS {
        for count in POLICY_COUNTS {
            let scenario = match kind {
                "m" => Scenario::Mint,
                "r" => Scenario::Replay { ops: replay_ops },
                _ => Scenario::AgentGet,
            };
            out.push(row(
                policy_row_id(count, kind),
                format!("{what}, {count} policies, memory://"),
                scenario,
                count,
            ));
        }
    }
    for bytes in BODY_SIZES.into_iter().skip(1) {
        out.push(row(
            body_row_id(bytes, "m"),
            format!("mint, {bytes}-byte body, memory://"),
            Scenario::MintPadded {
                pad_bytes: Scenario::pad_for(bytes),
            },
            1,
        ));
    }
    for bytes in BODY_SIZES {
        out.push(row(
            body_row_id(bytes, "a"),
            format!("approved execution, {bytes}-byte body, memory://"),
            Scenario::Approve {
                order_prefix: "ord".into(),
                pad_bytes: Scenario::pad_for(bytes),
            },
            1,
        ));
    }
    out
}

/// CPU µs of one unit of the row: a request, or a pair for mint + approve rows.
fn cpu(rows: &[RowResult], id: &str) -> Option<f64> {
    let row = rows.iter().find(|r| r.id == id)?;
    let per_request = row.cpu_us_per_request?;
    Some(if row.pairs {
        per_request * 2.0
    } else {
        per_request
    })
}

fn cell(value: Option<f64>, base: Option<f64>) -> String {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => format!("{v:.1} ({:.2}×)", v / b),
        (Some(v), _) => format!("{v:.1}"),
        _ => "–".to_owned(),
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT MET" }
}

/// The scaling tables and issue 28's verdicts on them; empty when no scaling row ran.
pub fn render(rows: &[RowResult], held: Option<&HeldSizes>) -> String {
    let ran = |id: &str| rows.iter().any(|r| r.id == id);
    let any_policy = POLICY_KINDS
        .iter()
        .any(|(k, _)| POLICY_COUNTS.iter().any(|&n| ran(&policy_row_id(n, k))));
    let any_body = BODY_SIZES
        .iter()
        .any(|&b| ran(&body_row_id(b, "a")) || (b > 64 && ran(&body_row_id(b, "m"))));
    if !any_policy && !any_body && held.is_none() {
        return String::new();
    }
    let mut out = String::from(
        "\n### Scaling (issue 28)\n\nCPU µs per request of the gateway (per pair for approved executions), memory://, and in parentheses × the 1-policy, 64-byte row of the same kind in this run.\n",
    );
    let mut verdicts = Vec::new();
    if any_policy {
        out.push_str("\n| policies |");
        for n in POLICY_COUNTS {
            let _ = write!(out, " {n} |");
        }
        out.push_str("\n| --- |");
        out.push_str(&" ---: |".repeat(POLICY_COUNTS.len()));
        out.push('\n');
        for (kind, what) in POLICY_KINDS {
            let base = cpu(rows, &policy_row_id(1, kind));
            let _ = write!(out, "| {what} |");
            for n in POLICY_COUNTS {
                let _ = write!(out, " {} |", cell(cpu(rows, &policy_row_id(n, kind)), base));
            }
            out.push('\n');
            let last = POLICY_COUNTS[POLICY_COUNTS.len() - 1];
            if let (Some(v), Some(b)) = (cpu(rows, &policy_row_id(last, kind)), base) {
                let r = v / b;
                verdicts.push(format!(
                    "| {what}: {last} policies ≤ {POLICIES_VS_ONE}× one | {v:.1} vs {b:.1} µs = {r:.2}× | {} |",
                    verdict(r <= POLICIES_VS_ONE)
                ));
            }
        }
    }
    if any_body || held.is_some() {
        out.push_str("\n| body bytes |");
        for b in BODY_SIZES {
            let _ = write!(out, " {b} |");
        }
        out.push_str("\n| --- |");
        out.push_str(&" ---: |".repeat(BODY_SIZES.len()));
        out.push('\n');
        let mint_base = cpu(rows, &body_row_id(BODY_SIZES[0], "m"));
        out.push_str("| mint (ignored padding member) |");
        for b in BODY_SIZES {
            let _ = write!(
                out,
                " {} |",
                cell(cpu(rows, &body_row_id(b, "m")), mint_base)
            );
        }
        let pair_base = cpu(rows, &body_row_id(BODY_SIZES[0], "a"));
        out.push_str("\n| approved execution (mint + approve), per pair |");
        for b in BODY_SIZES {
            let _ = write!(
                out,
                " {} |",
                cell(cpu(rows, &body_row_id(b, "a")), pair_base)
            );
        }
        out.push('\n');
        if let (Some(v), Some(b)) = (cpu(rows, &body_row_id(65536, "m")), mint_base) {
            let r = v / b;
            verdicts.push(format!(
                "| mint with a 64 KiB body ≤ {MINT_64K_VS_64}× a 64-byte mint | {v:.1} vs {b:.1} µs = {r:.2}× | {} |",
                verdict(r <= MINT_64K_VS_64)
            ));
        }
        if let Some(held) = held {
            out.push_str(
                "| RSS per approved execution in flight, bytes (× the bound, 1.2 × body + 16 KiB) |",
            );
            // Points come in BODY_SIZES order; the first body is the unpadded 63 bytes.
            for point in held.points.iter().take(BODY_SIZES.len()) {
                let body = point.body_bytes;
                let per = point.per_request_bytes(held.held);
                let bound = HELD_PER_BODY_BYTE * body as f64 + HELD_OVERHEAD_BYTES;
                let _ = write!(out, " {per:.0} ({:.2}×) |", per / bound);
                verdicts.push(format!(
                    "| RSS per approved execution in flight, {body}-byte body ≤ {HELD_PER_BODY_BYTE}× body + 16 KiB | {per:.0} bytes vs {bound:.0} ({} held) | {} |",
                    held.held,
                    verdict(per <= bound)
                ));
            }
            for _ in held.points.len()..BODY_SIZES.len() {
                out.push_str(" – |");
            }
            out.push('\n');
        }
    }
    if !verdicts.is_empty() {
        out.push_str("\n| target (issue 28) | measured | verdict |\n| --- | --- | --- |\n");
        for line in verdicts {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::LoadResult;

    fn result(id: &str, cpu: f64, pairs: bool) -> RowResult {
        RowResult {
            id: id.into(),
            label: id.into(),
            load: LoadResult::default(),
            pairs,
            rate: None,
            cpu_us_per_request: Some(cpu),
            redis_cpu_us_per_request: None,
            peak_rss_kib: None,
            idle_rss_kib: None,
            upstream_calls: None,
            upstream_connections: None,
        }
    }

    #[test]
    fn ids_are_unique_and_the_64_byte_mint_is_the_one_policy_mint() {
        let rows = rows(8);
        let mut ids: Vec<&str> = rows.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), rows.len());
        assert_eq!(body_row_id(64, "m"), "p1m");
        assert_eq!(body_row_id(1 << 20, "a"), "b1Ma");
        assert!(is_body_row("b64ka") && is_body_row("b4km") && !is_body_row("p1m"));
        let big = rows.iter().find(|r| r.id == "p10000m").unwrap();
        assert_eq!(big.policies, 10_000);
    }

    #[test]
    fn tables_put_each_row_beside_its_one_policy_64_byte_row() {
        let rows = vec![
            result("p1m", 30.0, false),
            result("p10000m", 33.0, false),
            result("b64km", 90.0, false),
            result("b64a", 50.0, true),
            result("b1Ma", 500.0, true),
        ];
        let held = HeldSizes {
            held: 2,
            points: vec![HeldPoint {
                body_bytes: 4096,
                baseline_kib: 1000,
                during_kib: 1040,
                after_kib: 1040,
            }],
        };
        let text = render(&rows, Some(&held));
        assert!(
            text.contains("| 30.0 (1.00×) | – | – | 33.0 (1.10×) |"),
            "{text}"
        );
        assert!(
            text.contains("10000 policies ≤ 1.2× one | 33.0 vs 30.0 µs = 1.10× | met |"),
            "{text}"
        );
        // Pairs are per pair (two requests).
        assert!(
            text.contains("| 100.0 (1.00×) | – | – | 1000.0 (10.00×) |"),
            "{text}"
        );
        assert!(text.contains("= 3.00× | NOT MET |"), "{text}");
        // 40 KiB over 2 requests: 20480 bytes, within 1.2 × 4096 + 16384.
        assert!(
            text.contains(
                "4096-byte body ≤ 1.2× body + 16 KiB | 20480 bytes vs 21299 (2 held) | met |"
            ),
            "{text}"
        );
        assert_eq!(render(&[result("3", 1.0, false)], None), "");
    }
}
