//! The series labelled by policy, stored compactly. Every policy is exported from the first
//! scrape (dashboards and alerts read its zeros), which with `prometheus`'s own vectors cost
//! 16.5 KiB of RSS per policy (each child keeps its label pairs, two histogram shards, …):
//! 160 MiB at 10000 policies. Here a policy is one [`Series`] of plain atomics (about 0.5
//! KiB), and [`PerPolicy`] is a [`Collector`] that renders the same families, names, help,
//! labels and buckets as the vectors did (a test compares the two expositions).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};

use super::{Outcome, Rejection};

/// Time from minting to approval, in seconds: people take seconds to hours.
const APPROVAL_DELAY_BUCKETS: [f64; 14] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0,
    86400.0,
];
/// Upstream answers to approved executions: from 1 ms (a nearby API answers in a few, and a
/// first bucket above that would make every quantile read as that bucket) to the default 30 s
/// timeout.
const UPSTREAM_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
];

/// The five families, in the order of [`PerPolicy::descs`].
const OPERATIONS: (&str, &str) = (
    "poppy_operations_total",
    "Requests for operations, by policy and outcome",
);
const ASKED: (&str, &str) = (
    "poppy_operations_asked_total",
    "Distinct operations asked for approval (each counted once per process while it can be approved), by policy",
);
const REJECTED: (&str, &str) = (
    "poppy_approvals_rejected_total",
    "Approvals that failed a check and were answered with a new revision, by policy and reason",
);
const APPROVAL_DELAY: (&str, &str) = (
    "poppy_approval_delay_seconds",
    "Time from minting an operation's revision to the first request carrying its valid approval",
);
const UPSTREAM_DURATION: (&str, &str) = (
    "poppy_upstream_duration_seconds",
    "Time the upstream took to answer an approved execution (or to fail)",
);

/// A histogram with fixed buckets: a count per bucket (not cumulative), the count above the
/// last bound, and the sum's bits.
struct Buckets<const N: usize> {
    counts: [AtomicU64; N],
    above: AtomicU64,
    sum: AtomicU64,
}

impl<const N: usize> Buckets<N> {
    fn new() -> Self {
        Buckets {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            above: AtomicU64::new(0),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// `prometheus`'s rule: the first bucket whose bound is ≥ the value (NaN: none).
    fn observe(&self, bounds: &[f64; N], value: f64) {
        match bounds.iter().position(|bound| *bound >= value) {
            Some(i) => self.counts[i].fetch_add(1, Ordering::Relaxed),
            None => self.above.fetch_add(1, Ordering::Relaxed),
        };
        let mut old = self.sum.load(Ordering::Relaxed);
        loop {
            let new = (f64::from_bits(old) + value).to_bits();
            match self
                .sum
                .compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => old = actual,
            }
        }
    }

    /// The exposition's form: cumulative buckets; the count is the last one's plus those
    /// above, so `+Inf` always equals `_count` even while observations land.
    fn proto(&self, bounds: &[f64; N]) -> proto::Histogram {
        let mut cumulative = 0;
        let buckets = bounds
            .iter()
            .zip(&self.counts)
            .map(|(bound, count)| {
                cumulative += count.load(Ordering::Relaxed);
                let mut bucket = proto::Bucket::default();
                bucket.set_cumulative_count(cumulative);
                bucket.set_upper_bound(*bound);
                bucket
            })
            .collect();
        let mut histogram = proto::Histogram::default();
        histogram.set_bucket(buckets);
        histogram.set_sample_count(cumulative + self.above.load(Ordering::Relaxed));
        histogram.set_sample_sum(f64::from_bits(self.sum.load(Ordering::Relaxed)));
        histogram
    }
}

/// One policy's values.
struct Series {
    /// Which of its series exist, by [`Series::bit`]: all of them for the policies added up
    /// front; only those used, for a name first seen in traffic (a `[[route]]`'s policy), as
    /// with the vectors.
    present: AtomicU64,
    outcomes: [AtomicU64; Outcome::ALL.len()],
    rejections: [AtomicU64; Rejection::ALL.len()],
    asked: AtomicU64,
    approval_delay: Buckets<{ APPROVAL_DELAY_BUCKETS.len() }>,
    upstream_duration: Buckets<{ UPSTREAM_BUCKETS.len() }>,
}

/// Bits of [`Series::present`] after the outcomes'.
const REJECTIONS_BIT: u32 = Outcome::ALL.len() as u32;
const ASKED_BIT: u32 = REJECTIONS_BIT + Rejection::ALL.len() as u32;
const APPROVAL_DELAY_BIT: u32 = ASKED_BIT + 1;
const UPSTREAM_DURATION_BIT: u32 = ASKED_BIT + 2;
const ALL_PRESENT: u64 = (1 << (UPSTREAM_DURATION_BIT + 1)) - 1;

impl Series {
    fn new(present: u64) -> Series {
        Series {
            present: AtomicU64::new(present),
            outcomes: std::array::from_fn(|_| AtomicU64::new(0)),
            rejections: std::array::from_fn(|_| AtomicU64::new(0)),
            asked: AtomicU64::new(0),
            approval_delay: Buckets::new(),
            upstream_duration: Buckets::new(),
        }
    }

    /// Mark the series of `bit` as present (a load, and a write only the first time).
    fn touch(&self, bit: u32) {
        if self.present.load(Ordering::Relaxed) & (1 << bit) == 0 {
            self.present.fetch_or(1 << bit, Ordering::Relaxed);
        }
    }

    fn has(&self, bit: u32) -> bool {
        self.present.load(Ordering::Relaxed) & (1 << bit) != 0
    }
}

/// Policy name → its series. Read on every counted request, written only when names are
/// added (startup, a reload, a name seen for the first time): a snapshot swapped whole.
type Table = HashMap<Box<str>, Arc<Series>>;

/// The per-policy families, as one collector; clones share the values (one is registered,
/// one counts).
#[derive(Clone)]
pub(crate) struct PerPolicy(Arc<Shared>);

struct Shared {
    descs: Vec<Desc>,
    table: ArcSwap<Table>,
    /// Serialises writers, so that two adding names at once don't lose one's names.
    adding: std::sync::Mutex<()>,
}

impl PerPolicy {
    pub(crate) fn new() -> Result<PerPolicy, prometheus::Error> {
        let desc = |(name, help): (&str, &str), labels: &[&str]| {
            Desc::new(
                name.to_owned(),
                help.to_owned(),
                labels.iter().map(|l| (*l).to_owned()).collect(),
                HashMap::new(),
            )
        };
        Ok(PerPolicy(Arc::new(Shared {
            descs: vec![
                desc(OPERATIONS, &["operation", "outcome"])?,
                desc(ASKED, &["operation"])?,
                desc(REJECTED, &["operation", "reason"])?,
                desc(APPROVAL_DELAY, &["operation"])?,
                desc(UPSTREAM_DURATION, &["operation"])?,
            ],
            table: ArcSwap::default(),
            adding: std::sync::Mutex::new(()),
        })))
    }

    /// Create the series of these policies (kept: a reload that removes a policy leaves its
    /// series, as the vectors did).
    pub(crate) fn add<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        self.insert(names, ALL_PRESENT);
    }

    /// Insert the names not there yet, with these series present; existing names get them
    /// too.
    fn insert<'a>(&self, names: impl IntoIterator<Item = &'a str>, present: u64) {
        let _adding = self.0.adding.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.0.table.load();
        let mut table: Option<Table> = None;
        for name in names {
            let existing = current
                .get(name)
                .or_else(|| table.as_ref().and_then(|t| t.get(name)));
            if let Some(series) = existing {
                series.present.fetch_or(present, Ordering::Relaxed);
                continue;
            }
            table
                .get_or_insert_with(|| Table::clone(&current))
                .insert(name.into(), Arc::new(Series::new(present)));
        }
        if let Some(table) = table {
            self.0.table.store(Arc::new(table));
        }
    }

    /// Apply `update` to the series of `policy` (`bit` says which), creating it first if the
    /// name is new.
    fn with(&self, policy: &str, bit: u32, update: impl Fn(&Series)) {
        let table = self.0.table.load();
        if let Some(series) = table.get(policy) {
            series.touch(bit);
            return update(series);
        }
        drop(table);
        self.insert([policy], 1 << bit);
        if let Some(series) = self.0.table.load().get(policy) {
            update(series);
        }
    }

    pub(crate) fn operation(&self, policy: &str, outcome: Outcome) {
        self.with(policy, outcome as u32, |s| {
            s.outcomes[outcome as usize].fetch_add(1, Ordering::Relaxed);
        });
    }

    pub(crate) fn asked(&self, policy: &str) {
        self.with(policy, ASKED_BIT, |s| {
            s.asked.fetch_add(1, Ordering::Relaxed);
        });
    }

    pub(crate) fn rejected(&self, policy: &str, reason: Rejection) {
        self.with(policy, REJECTIONS_BIT + reason as u32, |s| {
            s.rejections[reason as usize].fetch_add(1, Ordering::Relaxed);
        });
    }

    pub(crate) fn approval_delay(&self, policy: &str, seconds: f64) {
        self.with(policy, APPROVAL_DELAY_BIT, |s| {
            s.approval_delay.observe(&APPROVAL_DELAY_BUCKETS, seconds)
        });
    }

    pub(crate) fn upstream_duration(&self, policy: &str, seconds: f64) {
        self.with(policy, UPSTREAM_DURATION_BIT, |s| {
            s.upstream_duration.observe(&UPSTREAM_BUCKETS, seconds)
        });
    }
}

/// A label pair of the exposition.
fn label(name: &str, value: &str) -> LabelPair {
    let mut pair = LabelPair::default();
    pair.set_name(name.to_owned());
    pair.set_value(value.to_owned());
    pair
}

fn counter(labels: Vec<LabelPair>, value: u64) -> proto::Metric {
    let mut counter = proto::Counter::default();
    counter.set_value(value as f64);
    let mut metric = proto::Metric::from_label(labels);
    metric.set_counter(counter);
    metric
}

fn histogram(policy: &str, histogram: proto::Histogram) -> proto::Metric {
    let mut metric = proto::Metric::from_label(vec![label("operation", policy)]);
    metric.set_histogram(histogram);
    metric
}

fn family(
    (name, help): (&str, &str),
    kind: MetricType,
    metrics: Vec<proto::Metric>,
) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name.to_owned());
    family.set_help(help.to_owned());
    family.set_field_type(kind);
    family.set_metric(metrics);
    family
}

impl Collector for PerPolicy {
    fn desc(&self) -> Vec<&Desc> {
        self.0.descs.iter().collect()
    }

    /// The registry sorts each family's series by their label values, as it did the
    /// vectors'.
    fn collect(&self) -> Vec<MetricFamily> {
        let table = self.0.table.load();
        let n = table.len();
        let mut operations = Vec::with_capacity(n * Outcome::ALL.len());
        let mut asked = Vec::with_capacity(n);
        let mut rejected = Vec::with_capacity(n * Rejection::ALL.len());
        let mut delays = Vec::with_capacity(n);
        let mut upstream = Vec::with_capacity(n);
        for (policy, series) in table.iter() {
            for outcome in Outcome::ALL.into_iter().filter(|o| series.has(*o as u32)) {
                operations.push(counter(
                    vec![
                        label("operation", policy),
                        label("outcome", outcome.as_str()),
                    ],
                    series.outcomes[outcome as usize].load(Ordering::Relaxed),
                ));
            }
            let rejections = Rejection::ALL.into_iter();
            for reason in rejections.filter(|r| series.has(REJECTIONS_BIT + *r as u32)) {
                rejected.push(counter(
                    vec![label("operation", policy), label("reason", reason.as_str())],
                    series.rejections[reason as usize].load(Ordering::Relaxed),
                ));
            }
            if series.has(ASKED_BIT) {
                asked.push(counter(
                    vec![label("operation", policy)],
                    series.asked.load(Ordering::Relaxed),
                ));
            }
            if series.has(APPROVAL_DELAY_BIT) {
                delays.push(histogram(
                    policy,
                    series.approval_delay.proto(&APPROVAL_DELAY_BUCKETS),
                ));
            }
            if series.has(UPSTREAM_DURATION_BIT) {
                upstream.push(histogram(
                    policy,
                    series.upstream_duration.proto(&UPSTREAM_BUCKETS),
                ));
            }
        }
        vec![
            family(OPERATIONS, MetricType::COUNTER, operations),
            family(ASKED, MetricType::COUNTER, asked),
            family(REJECTED, MetricType::COUNTER, rejected),
            family(APPROVAL_DELAY, MetricType::HISTOGRAM, delays),
            family(UPSTREAM_DURATION, MetricType::HISTOGRAM, upstream),
        ]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
        approval_delay: HistogramVec,
        upstream_duration: HistogramVec,
    }

    impl Vectors {
        fn new(registry: &Registry) -> Vectors {
            let counter = |(name, help): (&str, &str), labels: &[&str]| {
                let c = IntCounterVec::new(Opts::new(name, help), labels).unwrap();
                registry.register(Box::new(c.clone())).unwrap();
                c
            };
            let histogram = |(name, help): (&str, &str), buckets: &[f64]| {
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
            self.asked.with_label_values(&[name]);
            self.approval_delay.with_label_values(&[name]);
            self.upstream_duration.with_label_values(&[name]);
        }
    }

    #[test]
    fn the_exposition_is_the_vectors_byte_for_byte() {
        let old_registry = Registry::new();
        let old = Vectors::new(&old_registry);
        let new_registry = Registry::new();
        let new = PerPolicy::new().unwrap();
        new_registry.register(Box::new(new.clone())).unwrap();

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
            for seconds in [0.0004, 0.003, 2.0, 40.0, 31.5, 1e9, 0.1 * i as f64] {
                old.approval_delay
                    .with_label_values(&[name])
                    .observe(seconds);
                new.approval_delay(name, seconds);
                old.upstream_duration
                    .with_label_values(&[name])
                    .observe(seconds);
                new.upstream_duration(name, seconds);
            }
        }
        let (old, new) = (render(&old_registry), render(&new_registry));
        // A name first seen in traffic has only the series it used.
        assert!(
            old.contains(r#"poppy_operations_total{operation="unlisted",outcome="released"} 1"#)
        );
        assert!(!old.contains(r#"poppy_operations_total{operation="unlisted",outcome="held"}"#));
        assert!(
            old.contains(
                r#"poppy_upstream_duration_seconds_bucket{operation="refund",le="+Inf"} 7"#
            )
        );
        assert_eq!(new, old);
    }

    #[test]
    fn outcomes_and_reasons_index_their_arrays() {
        for (i, outcome) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*outcome as usize, i, "{}", outcome.as_str());
        }
        for (i, reason) in Rejection::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i, "{}", reason.as_str());
        }
    }

    #[test]
    fn histograms_bucket_as_prometheus_does() {
        let buckets = Buckets::<3>::new();
        let bounds = [1.0, 2.0, 5.0];
        for value in [0.5, 1.0, 1.5, 5.0, 7.0, f64::NAN] {
            buckets.observe(&bounds, value);
        }
        let proto = buckets.proto(&bounds);
        let counts: Vec<u64> = proto
            .get_bucket()
            .iter()
            .map(|b| b.cumulative_count())
            .collect();
        assert_eq!(counts, [2, 3, 4]);
        assert_eq!(proto.get_sample_count(), 6);
        assert!(proto.get_sample_sum().is_nan());
    }

    #[test]
    fn adding_keeps_existing_series() {
        let per_policy = PerPolicy::new().unwrap();
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
}
