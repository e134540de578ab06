#![allow(clippy::unwrap_used)]
use super::*;

use std::collections::BTreeSet;

use crate::metrics::Format;
use crate::metrics::scraped::{Page, encoded};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

fn render(registry: &Registry) -> String {
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut out)
        .unwrap();
    String::from_utf8(out).unwrap()
}

/// The families as `prometheus`'s vectors made them before (the code this replaced).
struct Vectors {
    operations: IntCounterVec,
    asked: IntCounterVec,
    rejected: IntCounterVec,
    unheld: IntCounterVec,
    approval_delay: HistogramVec,
    upstream_duration: HistogramVec,
}

impl Vectors {
    fn new(registry: &Registry) -> Vectors {
        let counter = |(name, help): (&str, &str), labels: &[&str]| {
            let name = format!("{name}_total");
            let c = IntCounterVec::new(Opts::new(name, help), labels).unwrap();
            registry.register(Box::new(c.clone())).unwrap();
            c
        };
        let histogram = |(name, help): (&str, &str), buckets: &[f64]| {
            let name = format!("{name}_seconds");
            let h = HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                &["operation"],
            )
            .unwrap();
            registry.register(Box::new(h.clone())).unwrap();
            h
        };
        Vectors {
            operations: counter(OPERATIONS, &["operation", "outcome"]),
            asked: counter(ASKED, &["operation"]),
            rejected: counter(REJECTED, &["operation", "reason"]),
            unheld: counter(UNHELD, &["operation", "reason"]),
            approval_delay: histogram(APPROVAL_DELAY, &APPROVAL_DELAY_BUCKETS),
            upstream_duration: histogram(UPSTREAM_DURATION, &UPSTREAM_BUCKETS),
        }
    }

    fn add(&self, name: &str) {
        for outcome in Outcome::ALL {
            self.operations.with_label_values(&[name, outcome.as_str()]);
        }
        for reason in Rejection::ALL {
            self.rejected.with_label_values(&[name, reason.as_str()]);
        }
        for why in Unheld::ALL {
            self.unheld.with_label_values(&[name, why.as_str()]);
        }
        self.asked.with_label_values(&[name]);
        self.approval_delay.with_label_values(&[name]);
        self.upstream_duration.with_label_values(&[name]);
    }
}

/// What a scraper reads of `per_policy` in `format`: its series, and its families' metadata.
fn scraped(per_policy: &Arc<PerPolicy>, format: Format) -> (BTreeSet<String>, Vec<String>) {
    let page = encoded(per_policy, format);
    let mut heads: Vec<String> = page
        .lines()
        .filter(|line| line.starts_with("# HELP") || line.starts_with("# TYPE"))
        .map(str::to_owned)
        .collect();
    heads.sort();
    (Page::parse(&page).series(), heads)
}

/// The series (names, labels, values, buckets) and the text format's metadata are the
/// vectors' (issue 39: encoded by `prometheus-client`, ordered otherwise).
#[test]
fn the_exposition_has_the_vectors_series() {
    let old_registry = Registry::new();
    let old = Vectors::new(&old_registry);
    let new = Arc::new(PerPolicy::new());
    assert_eq!(
        encoded(&new, Format::Text),
        "",
        "nothing, before any policy"
    );

    // Startup, then a reload that drops one policy and adds two (the dropped one's series
    // stay), and traffic, including a name no policy had.
    let first = ["refund", "exchange", "cancel_order", "z-tool.call"];
    let second = [
        "exchange",
        "cancel_order",
        "z-tool.call",
        "Åpen",
        "a_new_one",
    ];
    for names in [&first[..], &second[..]] {
        for name in names {
            old.add(name);
        }
        new.add(names.iter().copied());
    }
    for (i, name) in ["exchange", "refund", "unlisted", "exchange"]
        .iter()
        .enumerate()
    {
        let outcome = Outcome::ALL[i * 4 % Outcome::ALL.len()];
        old.operations
            .with_label_values(&[name, outcome.as_str()])
            .inc();
        new.operation(name, outcome);
        let reason = Rejection::ALL[i % Rejection::ALL.len()];
        old.rejected
            .with_label_values(&[name, reason.as_str()])
            .inc();
        new.rejected(name, reason);
        old.asked.with_label_values(&[name]).inc();
        new.asked(name);
        let why = Unheld::ALL[i % Unheld::ALL.len()];
        old.unheld.with_label_values(&[name, why.as_str()]).inc();
        new.unheld(name, why);
        for seconds in [0.0004, 0.003, 2.0, 40.0, 31.5, 1e9, 0.1 * i as f64] {
            old.approval_delay
                .with_label_values(&[name])
                .observe(seconds);
            new.approval_delay(name, seconds, None);
            old.upstream_duration
                .with_label_values(&[name])
                .observe(seconds);
            new.upstream_duration(name, seconds, None);
        }
    }
    let (new_text, new_om) = (
        scraped(&new, Format::Text),
        scraped(&new, Format::OpenMetrics),
    );
    let old = render(&old_registry);
    // A name first seen in traffic has only the series it used.
    assert!(old.contains(r#"poppy_operations_total{operation="unlisted",outcome="released"} 1"#));
    assert!(!old.contains(r#"poppy_operations_total{operation="unlisted",outcome="held"}"#));
    assert!(
        old.contains(r#"poppy_upstream_duration_seconds_bucket{operation="refund",le="+Inf"} 7"#)
    );
    let mut old_heads: Vec<String> = old
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(str::to_owned)
        .collect();
    old_heads.sort();
    let old_series = Page::parse(&old).series();
    assert_eq!(new_text.0, old_series);
    assert_eq!(new_text.1, old_heads);
    assert_eq!(new_om.0, old_series, "OpenMetrics has the same series");
    assert!(
        new_om
            .1
            .contains(&"# TYPE poppy_operations counter".to_owned()),
        "{:?}",
        new_om.1
    );
}

/// What counting costs, against the vectors (BENCHMARKS.md): `cargo test --release -p
/// poppy-gateway --lib counting_cost -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check: run it in release"]
fn counting_cost() {
    const POLICIES: usize = 10_000;
    const ROUNDS: u32 = 2_000_000;
    let names: Vec<String> = (0..POLICIES).map(|i| format!("act{i}")).collect();
    let registry = Registry::new();
    let old = Vectors::new(&registry);
    let new = PerPolicy::new();
    for name in &names {
        old.add(name);
    }
    new.add(names.iter().map(String::as_str));
    let name = names[POLICIES - 1].as_str();
    let time = |what: &str, count: &dyn Fn()| {
        for _ in 0..ROUNDS / 10 {
            count();
        }
        let started = std::time::Instant::now();
        for _ in 0..ROUNDS {
            count();
        }
        let ns = started.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
        eprintln!("{what}: {ns:.1} ns per count ({POLICIES} policies)");
    };
    for _ in 0..2 {
        time("vectors, operation", &|| {
            old.operations
                .with_label_values(&[name, Outcome::Held.as_str()])
                .inc()
        });
        time("atomics, operation", &|| new.operation(name, Outcome::Held));
        time("vectors, upstream histogram", &|| {
            old.upstream_duration
                .with_label_values(&[name])
                .observe(0.003)
        });
        time("table, prometheus-client histogram", &|| {
            new.upstream_duration(name, 0.003, None)
        });
        // A sampled request's: its bucket's exemplar written too (issue 30).
        let ids = SampledIds {
            trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
            span_id: 0x00f0_67aa_0ba9_02b7,
        };
        time(
            "table, prometheus-client histogram, with an exemplar",
            &|| new.upstream_duration(name, 0.003, Some(ids)),
        );
    }
}

#[test]
fn outcomes_and_reasons_index_their_arrays() {
    for (i, outcome) in Outcome::ALL.iter().enumerate() {
        assert_eq!(*outcome as usize, i, "{}", outcome.as_str());
    }
    for (i, reason) in Rejection::ALL.iter().enumerate() {
        assert_eq!(*reason as usize, i, "{}", reason.as_str());
    }
    for (i, why) in Unheld::ALL.iter().enumerate() {
        assert_eq!(*why as usize, i, "{}", why.as_str());
    }
}

#[test]
fn adding_keeps_existing_series() {
    let per_policy = PerPolicy::new();
    per_policy.add(["a", "b"]);
    per_policy.operation("a", Outcome::Held);
    per_policy.add(["b", "c"]);
    per_policy.operation("a", Outcome::Held);
    per_policy.operation("new", Outcome::BadRequest);
    let table = per_policy.0.table.load();
    assert_eq!(table.len(), 4);
    assert_eq!(table["a"].outcomes[0].load(Ordering::Relaxed), 2);
    assert_eq!(
        table["new"].outcomes[Outcome::BadRequest as usize].load(Ordering::Relaxed),
        1
    );
}
