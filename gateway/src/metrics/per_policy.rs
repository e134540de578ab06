//! The series labelled by policy, stored compactly. Every policy is exported from the first
//! scrape (dashboards and alerts read its zeros), which with `prometheus`'s own vectors cost
//! 16.5 KiB of RSS per policy (each child keeps its label pairs, two histogram shards, …):
//! 160 MiB at 10000 policies. Here a policy is one [`Series`] of plain atomics (about 0.5
//! KiB), and [`PerPolicy::render`] writes the same families, names, help, labels and buckets
//! as the vectors did, in the same text (a test compares the two expositions byte for byte).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::fmt::Write as _;

use arc_swap::ArcSwap;

use super::histogram::{self, Buckets};
use super::openmetrics::{Format, Kind, head};
use super::{Outcome, Rejection, Unheld};
use crate::telemetry::SampledIds;

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

/// The six families: name and help.
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
const UNHELD: (&str, &str) = (
    "poppy_unheld_requests_total",
    "Requests to a policy's route that passed through to the upstream without being held, by policy and why: no_session (no Poppy-Session, and no [approval_page.agents]), company_client ([approval_page.agents] makes it the Company's own client's), condition_false (the policy's needs_approval_when is false for its terms)",
);
const UPSTREAM_DURATION: (&str, &str) = (
    "poppy_upstream_duration_seconds",
    "Time the upstream took to answer an approved execution (or to fail)",
);

/// One policy's values.
struct Series {
    /// Which of its series exist, one bit each (`*_BIT`): all of them for the policies added up
    /// front; only those used, for a name first seen in traffic (a `[[route]]`'s policy), as
    /// with the vectors.
    present: AtomicU64,
    outcomes: [AtomicU64; Outcome::ALL.len()],
    rejections: [AtomicU64; Rejection::ALL.len()],
    unheld: [AtomicU64; Unheld::ALL.len()],
    asked: AtomicU64,
    approval_delay: Buckets<{ APPROVAL_DELAY_BUCKETS.len() }>,
    upstream_duration: Buckets<{ UPSTREAM_BUCKETS.len() }>,
}

/// Bits of [`Series::present`] after the outcomes'.
const REJECTIONS_BIT: u32 = Outcome::ALL.len() as u32;
const ASKED_BIT: u32 = REJECTIONS_BIT + Rejection::ALL.len() as u32;
const APPROVAL_DELAY_BIT: u32 = ASKED_BIT + 1;
const UPSTREAM_DURATION_BIT: u32 = ASKED_BIT + 2;
const UNHELD_BIT: u32 = UPSTREAM_DURATION_BIT + 1;
const ALL_PRESENT: u64 = (1 << (UNHELD_BIT + Unheld::ALL.len() as u32)) - 1;
// Every series' bit fits in `present`.
const _: () = assert!(UNHELD_BIT + (Unheld::ALL.len() as u32) < 64);

impl Series {
    fn new(present: u64) -> Series {
        Series {
            present: AtomicU64::new(present),
            outcomes: std::array::from_fn(|_| AtomicU64::new(0)),
            rejections: std::array::from_fn(|_| AtomicU64::new(0)),
            unheld: std::array::from_fn(|_| AtomicU64::new(0)),
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
/// Hashed with FNV-1a: the names are short and chosen by the operator, and SipHash made a
/// count dearer than the vectors' (`counting_cost`).
type Table = HashMap<Box<str>, Arc<Series>, BuildHasherDefault<Fnv>>;

/// FNV-1a, 64 bits.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The per-policy families.
pub(crate) struct PerPolicy(Shared);

struct Shared {
    table: ArcSwap<Table>,
    /// Serialises writers, so that two adding names at once don't lose one's names.
    adding: std::sync::Mutex<()>,
}

impl PerPolicy {
    pub(crate) fn new() -> PerPolicy {
        PerPolicy(Shared {
            table: ArcSwap::default(),
            adding: std::sync::Mutex::new(()),
        })
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

    pub(crate) fn unheld(&self, policy: &str, why: Unheld) {
        self.with(policy, UNHELD_BIT + why as u32, |s| {
            s.unheld[why as usize].fetch_add(1, Ordering::Relaxed);
        });
    }

    pub(crate) fn approval_delay(&self, policy: &str, seconds: f64, ids: Option<SampledIds>) {
        self.with(policy, APPROVAL_DELAY_BIT, |s| {
            s.approval_delay
                .observe(&APPROVAL_DELAY_BUCKETS, seconds, ids)
        });
    }

    pub(crate) fn upstream_duration(&self, policy: &str, seconds: f64, ids: Option<SampledIds>) {
        self.with(policy, UPSTREAM_DURATION_BIT, |s| {
            s.upstream_duration.observe(&UPSTREAM_BUCKETS, seconds, ids)
        });
    }
}

/// `prometheus`'s text format, as its `TextEncoder` writes it: the label value escaped
/// (`\\`, `\n`, `"`), values as Rust prints an `f64`.
pub(super) fn escaped(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '\n', '"']) {
        return value.into();
    }
    let mut out = String::with_capacity(value.len() * 2);
    for c in value.chars() {
        match c {
            '\\' | '\n' | '"' => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out.into()
}

impl PerPolicy {
    /// The six families, each series as `prometheus`'s registry and `TextEncoder` wrote it
    /// (families by name, series by label values; a family with no series is left out), or
    /// in OpenMetrics with the histograms' exemplars, straight from the atomics: no protobuf
    /// structures per series (a scrape of 10000 policies built 230 k of them).
    pub(crate) fn render(&self, format: Format) -> String {
        let table = self.0.table.load();
        let mut policies: Vec<(&str, std::borrow::Cow<'_, str>, &Series)> = table
            .iter()
            .map(|(name, series)| (&**name, escaped(name), &**series))
            .collect();
        policies.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut outcomes = Outcome::ALL;
        outcomes.sort_unstable_by_key(|o| o.as_str());
        let mut reasons = Rejection::ALL;
        reasons.sort_unstable_by_key(|r| r.as_str());
        let mut unheld = Unheld::ALL;
        unheld.sort_unstable_by_key(|u| u.as_str());
        let any = |bit: u32| policies.iter().any(|(_, _, s)| s.has(bit));
        // About 120 bytes a line, 72 lines a policy.
        let mut out = String::with_capacity(policies.len() * 72 * 120);

        let family = |out: &mut String, (name, help): (&str, &str), kind| {
            head(out, format, name, help, kind);
        };

        if any(APPROVAL_DELAY_BIT) {
            family(&mut out, APPROVAL_DELAY, Kind::Histogram);
            let les = histogram::les(&APPROVAL_DELAY_BUCKETS, format);
            for (_, policy, series) in policies.iter().filter(|p| p.2.has(APPROVAL_DELAY_BIT)) {
                let (name, buckets) = (APPROVAL_DELAY.0, &series.approval_delay);
                let labels = format!("operation=\"{policy}\"");
                histogram::write(&mut out, format, name, &labels, buckets, &les);
            }
        }
        // Each worded family: its words in label order, as (present bit, index, word).
        let rejected = reasons.map(|r| (REJECTIONS_BIT + r as u32, r as usize, r.as_str()));
        counters(
            &mut out,
            format,
            &policies,
            REJECTED,
            "reason",
            &rejected,
            |s, i| &s.rejections[i],
        );
        if any(ASKED_BIT) {
            family(&mut out, ASKED, Kind::Counter);
            for (_, policy, series) in policies.iter().filter(|p| p.2.has(ASKED_BIT)) {
                let value = series.asked.load(Ordering::Relaxed) as f64;
                let _ = writeln!(out, "{}{{operation=\"{policy}\"}} {value}", ASKED.0);
            }
        }
        let outcomes = outcomes.map(|o| (o as u32, o as usize, o.as_str()));
        counters(
            &mut out,
            format,
            &policies,
            OPERATIONS,
            "outcome",
            &outcomes,
            |s, i| &s.outcomes[i],
        );
        let unheld = unheld.map(|u| (UNHELD_BIT + u as u32, u as usize, u.as_str()));
        counters(
            &mut out,
            format,
            &policies,
            UNHELD,
            "reason",
            &unheld,
            |s, i| &s.unheld[i],
        );
        if any(UPSTREAM_DURATION_BIT) {
            family(&mut out, UPSTREAM_DURATION, Kind::Histogram);
            let les = histogram::les(&UPSTREAM_BUCKETS, format);
            let filtered = policies.iter().filter(|p| p.2.has(UPSTREAM_DURATION_BIT));
            for (_, policy, series) in filtered {
                let (name, buckets) = (UPSTREAM_DURATION.0, &series.upstream_duration);
                let labels = format!("operation=\"{policy}\"");
                histogram::write(&mut out, format, name, &labels, buckets, &les);
            }
        }
        out
    }
}

/// A counter family by policy and one fixed word (`label`): for each policy, each of `words`
/// (present bit, index, word) whose series exists, its `value` at that index.
fn counters(
    out: &mut String,
    format: Format,
    policies: &[(&str, std::borrow::Cow<'_, str>, &Series)],
    (name, help): (&str, &str),
    label: &str,
    words: &[(u32, usize, &str)],
    value: impl Fn(&Series, usize) -> &AtomicU64,
) {
    let present = |bit: u32| policies.iter().any(|(_, _, s)| s.has(bit));
    if !words.iter().any(|(bit, _, _)| present(*bit)) {
        return;
    }
    head(out, format, name, help, Kind::Counter);
    for (_, policy, series) in policies {
        for (bit, index, word) in words {
            if series.has(*bit) {
                let count = value(series, *index).load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{name}{{operation=\"{policy}\",{label}=\"{word}\"}} {}",
                    count as f64
                );
            }
        }
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
        unheld: IntCounterVec,
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

    #[test]
    fn the_exposition_is_the_vectors_byte_for_byte() {
        let old_registry = Registry::new();
        let old = Vectors::new(&old_registry);
        let new = PerPolicy::new();
        assert_eq!(
            new.render(Format::Text),
            render(&old_registry),
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
        let (old, new) = (render(&old_registry), new.render(Format::Text));
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
            time("atomics, upstream histogram", &|| {
                new.upstream_duration(name, 0.003, None)
            });
            // A sampled request's: its bucket's exemplar written too (issue 30).
            let ids = SampledIds {
                trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
                span_id: 0x00f0_67aa_0ba9_02b7,
            };
            time("atomics, upstream histogram, with an exemplar", &|| {
                new.upstream_duration(name, 0.003, Some(ids))
            });
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
}
