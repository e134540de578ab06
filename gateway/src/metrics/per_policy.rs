//! The series labelled by policy, stored compactly. Every policy is exported from the first
//! scrape (dashboards and alerts read its zeros), which with `prometheus`'s own vectors cost
//! 16.5 KiB of RSS per policy (each child keeps its label pairs, two histogram shards, …):
//! 160 MiB at 10000 policies, and with `prometheus-client`'s families as much (each series a
//! map entry with its own label set). Here a policy is one [`Series`]: plain atomics for its
//! counters and two histograms. `prometheus-client` encodes them, as a collector
//! (`collector.rs`), with the families, names, help, labels and buckets the vectors had (a
//! test compares the series with theirs).

mod collector;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

use super::histogram::Histogram;
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

/// The six families: name (a counter's before `_total`, a histogram's before its unit,
/// `_seconds`) and help.
const OPERATIONS: (&str, &str) = (
    "poppy_operations",
    "Requests for operations, by policy and outcome",
);
const ASKED: (&str, &str) = (
    "poppy_operations_asked",
    "Distinct operations asked for approval (each counted once per process while it can be approved), by policy",
);
const REJECTED: (&str, &str) = (
    "poppy_approvals_rejected",
    "Approvals that failed a check and were answered with a new revision, by policy and reason",
);
const APPROVAL_DELAY: (&str, &str) = (
    "poppy_approval_delay",
    "Time from minting an operation's revision to the first request carrying its valid approval",
);
const UNHELD: (&str, &str) = (
    "poppy_unheld_requests",
    "Requests to a policy's route that passed through to the upstream without being held, by policy and why: no_session (no Poppy-Session, and no [approval_page.agents]), company_client ([approval_page.agents] makes it the Company's own client's), condition_false (the policy's needs_approval_when is false for its terms)",
);
const UPSTREAM_DURATION: (&str, &str) = (
    "poppy_upstream_duration",
    "Time the upstream took to answer an approved execution (or to fail)",
);

/// One policy's values.
#[derive(Debug)]
struct Series {
    /// Which of its series exist, one bit each (`*_BIT`): all of them for the policies added up
    /// front; only those used, for a name first seen in traffic (a `[[route]]`'s policy), as
    /// with the vectors.
    present: AtomicU64,
    outcomes: [AtomicU64; Outcome::ALL.len()],
    rejections: [AtomicU64; Rejection::ALL.len()],
    unheld: [AtomicU64; Unheld::ALL.len()],
    asked: AtomicU64,
    approval_delay: Histogram,
    upstream_duration: Histogram,
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
            approval_delay: Histogram::new(&APPROVAL_DELAY_BUCKETS),
            upstream_duration: Histogram::new(&UPSTREAM_BUCKETS),
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
#[derive(Debug)]
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
#[derive(Debug)]
pub(crate) struct PerPolicy(Shared);

#[derive(Debug)]
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
            s.approval_delay.observe(seconds, ids)
        });
    }

    pub(crate) fn upstream_duration(&self, policy: &str, seconds: f64, ids: Option<SampledIds>) {
        self.with(policy, UPSTREAM_DURATION_BIT, |s| {
            s.upstream_duration.observe(seconds, ids)
        });
    }
}
