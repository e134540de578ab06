//! Latency histograms of plain atomics (`prometheus`'s bucket rule and text), whose buckets
//! each keep the latest exemplar of a sampled request: its trace and span IDs, the value and
//! when it was observed, exposed in OpenMetrics (issue 30).
//!
//! Observing is lock-free: a count, the sum, and for a sampled request one try at its
//! bucket's exemplar (a sequence lock that a writer never waits on: when two requests write
//! one bucket's exemplar at once, one of them is kept). A scrape reads each exemplar without
//! blocking a writer. The exemplars are allocated at a histogram's first sampled observation,
//! so one that never had any (tracing off) costs a pointer.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering, fence};

use super::openmetrics::{self, Format};
use crate::telemetry::SampledIds;

/// A histogram with fixed buckets: a count per bucket (not cumulative), the count above the
/// last bound, and the sum's bits.
pub(super) struct Buckets<const N: usize> {
    counts: [AtomicU64; N],
    above: AtomicU64,
    sum: AtomicU64,
    /// One per bucket, then the one above the last bound.
    exemplars: OnceLock<Box<[Slot]>>,
}

impl<const N: usize> Buckets<N> {
    pub(super) fn new() -> Self {
        Buckets {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            above: AtomicU64::new(0),
            sum: AtomicU64::new(0f64.to_bits()),
            exemplars: OnceLock::new(),
        }
    }

    /// Observations so far.
    pub(super) fn count(&self) -> u64 {
        let below: u64 = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        below + self.above.load(Ordering::Relaxed)
    }

    /// `prometheus`'s rule: the first bucket whose bound is ≥ the value (NaN: none). `ids`:
    /// the sampled span the value was timed in, kept as its bucket's exemplar.
    pub(super) fn observe(&self, bounds: &[f64; N], value: f64, ids: Option<SampledIds>) {
        let bucket = bounds.iter().position(|bound| *bound >= value);
        match bucket {
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
        if let Some(ids) = ids.filter(|_| !value.is_nan()) {
            let slots = self
                .exemplars
                .get_or_init(|| (0..=N).map(|_| Slot::default()).collect());
            let at = u64::try_from(crate::clock::now_millis()).unwrap_or(0);
            if let Some(slot) = slots.get(bucket.unwrap_or(N)) {
                slot.write(ids, value, at);
            }
        }
    }
}

/// A bucket's latest exemplar, under a sequence lock: `seq` is odd while one is written, and
/// grows by 2 with each; 0 is none yet.
#[derive(Default)]
struct Slot {
    seq: AtomicU64,
    trace_high: AtomicU64,
    trace_low: AtomicU64,
    span: AtomicU64,
    value: AtomicU64,
    at_millis: AtomicU64,
}

/// What a [`Slot`] holds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Exemplar {
    ids: SampledIds,
    value: f64,
    at_millis: u64,
}

impl Slot {
    fn write(&self, ids: SampledIds, value: f64, at_millis: u64) {
        let seq = self.seq.load(Ordering::Relaxed);
        // Another request is writing this bucket's exemplar: it is as recent as this one.
        if seq & 1 == 1
            || self
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        fence(Ordering::Release);
        self.trace_high
            .store((ids.trace_id >> 64) as u64, Ordering::Relaxed);
        self.trace_low.store(ids.trace_id as u64, Ordering::Relaxed);
        self.span.store(ids.span_id, Ordering::Relaxed);
        self.value.store(value.to_bits(), Ordering::Relaxed);
        self.at_millis.store(at_millis, Ordering::Relaxed);
        self.seq.store(seq + 2, Ordering::Release);
    }

    /// The exemplar, unless there is none yet or writers kept changing it while it was read.
    fn read(&self) -> Option<Exemplar> {
        for _ in 0..16 {
            let before = self.seq.load(Ordering::Acquire);
            if before == 0 {
                return None;
            }
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let exemplar = Exemplar {
                ids: SampledIds {
                    trace_id: u128::from(self.trace_high.load(Ordering::Relaxed)) << 64
                        | u128::from(self.trace_low.load(Ordering::Relaxed)),
                    span_id: self.span.load(Ordering::Relaxed),
                },
                value: f64::from_bits(self.value.load(Ordering::Relaxed)),
                at_millis: self.at_millis.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return Some(exemplar);
            }
        }
        None
    }
}

/// A histogram's lines for one series: `labels` its labels as written between the braces
/// (`call="claim"`, values already escaped), and `les` its bounds as [`openmetrics::le`] writes them for `format`. In OpenMetrics, each
/// bucket with an exemplar has it after its sample.
pub(super) fn write<const N: usize>(
    out: &mut String,
    format: Format,
    name: &str,
    labels: &str,
    buckets: &Buckets<N>,
    les: &[String; N],
) {
    let exemplars = match format {
        Format::Text => None,
        Format::OpenMetrics => buckets.exemplars.get(),
    };
    let exemplar = |out: &mut String, i: usize| {
        if let Some(e) = exemplars.and_then(|slots| slots.get(i)?.read()) {
            openmetrics::exemplar(out, e.ids, e.value, e.at_millis);
        }
    };
    let mut cumulative = 0;
    for (i, (le, count)) in les.iter().zip(&buckets.counts).enumerate() {
        cumulative += count.load(Ordering::Relaxed);
        let _ = write!(
            out,
            "{name}_bucket{{{labels},le=\"{le}\"}} {}",
            cumulative as f64
        );
        exemplar(out, i);
        out.push('\n');
    }
    // `_count` is the last bucket's plus those above, so `+Inf` always equals it.
    let count = (cumulative + buckets.above.load(Ordering::Relaxed)) as f64;
    let sum = f64::from_bits(buckets.sum.load(Ordering::Relaxed));
    let _ = write!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
    exemplar(out, N);
    let _ = writeln!(
        out,
        "\n{name}_sum{{{labels}}} {sum}\n{name}_count{{{labels}}} {count}"
    );
}

/// `bounds` as `le` values.
pub(super) fn les<const N: usize>(bounds: &[f64; N], format: Format) -> [String; N] {
    bounds.map(|bound| openmetrics::le(bound, format))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const IDS: SampledIds = SampledIds {
        trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
        span_id: 0x00f0_67aa_0ba9_02b7,
    };

    fn text<const N: usize>(format: Format, buckets: &Buckets<N>, bounds: &[f64; N]) -> String {
        let mut out = String::new();
        write(
            &mut out,
            format,
            "h",
            "op=\"p\"",
            buckets,
            &les(bounds, format),
        );
        out
    }

    #[test]
    fn histograms_bucket_as_prometheus_does() {
        let buckets = Buckets::<3>::new();
        let bounds = [1.0, 2.0, 5.0];
        for value in [0.5, 1.0, 1.5, 5.0, 7.0, f64::NAN] {
            buckets.observe(&bounds, value, None);
        }
        assert_eq!(
            text(Format::Text, &buckets, &bounds),
            "h_bucket{op=\"p\",le=\"1\"} 2\nh_bucket{op=\"p\",le=\"2\"} 3\n\
             h_bucket{op=\"p\",le=\"5\"} 4\nh_bucket{op=\"p\",le=\"+Inf\"} 6\n\
             h_sum{op=\"p\"} NaN\nh_count{op=\"p\"} 6\n"
        );
        assert!(buckets.exemplars.get().is_none(), "nothing sampled");
    }

    #[test]
    fn each_bucket_keeps_its_latest_exemplar_in_openmetrics_only() {
        let buckets = Buckets::<3>::new();
        let bounds = [0.25, 2.5, 5.0];
        let other = SampledIds {
            trace_id: 1,
            span_id: 2,
        };
        buckets.observe(&bounds, 0.125, Some(other));
        buckets.observe(&bounds, 0.25, Some(IDS));
        buckets.observe(&bounds, 1.0, None);
        buckets.observe(&bounds, 9.5, Some(other));
        let before = u64::try_from(crate::clock::now_millis()).unwrap();
        let at = buckets.exemplars.get().unwrap()[0]
            .read()
            .unwrap()
            .at_millis;
        assert!(at <= before && at + 60_000 > before, "{at} {before}");
        let (secs, millis) = (at / 1000, at % 1000);
        let om = text(Format::OpenMetrics, &buckets, &bounds);
        let rest = format!("{secs}.{millis:03}");
        assert!(
            om.starts_with(&format!(
                "h_bucket{{op=\"p\",le=\"0.25\"}} 2 # {{trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\",span_id=\"00f067aa0ba902b7\"}} 0.25 {rest}\n\
                 h_bucket{{op=\"p\",le=\"2.5\"}} 3\n\
                 h_bucket{{op=\"p\",le=\"5.0\"}} 3\n\
                 h_bucket{{op=\"p\",le=\"+Inf\"}} 4 # {{trace_id=\"00000000000000000000000000000001\",span_id=\"0000000000000002\"}} 9.5 "
            )),
            "{om}"
        );
        assert!(
            om.ends_with("\nh_sum{op=\"p\"} 10.875\nh_count{op=\"p\"} 4\n"),
            "{om}"
        );
        assert!(!text(Format::Text, &buckets, &bounds).contains('#'));
    }

    #[test]
    fn a_scrape_reads_whole_exemplars_while_requests_write_them() {
        let slot = Slot::default();
        assert_eq!(slot.read(), None, "none yet");
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for writer in 1..=2u64 {
                let (slot, stop) = (&slot, &stop);
                scope.spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        // Every field says the same number: a torn read would mix two.
                        let n = writer << 32 | i;
                        let ids = SampledIds {
                            trace_id: u128::from(n) << 64 | u128::from(n),
                            span_id: n,
                        };
                        slot.write(ids, n as f64, n);
                        // Requests write a bucket's exemplar microseconds apart at the most.
                        std::thread::yield_now();
                    }
                });
            }
            let (mut read, mut missed) = (0, 0);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while read < 10_000 && std::time::Instant::now() < deadline {
                match slot.read() {
                    Some(e) => {
                        let n = e.ids.span_id;
                        assert_eq!(e.ids.trace_id, u128::from(n) << 64 | u128::from(n));
                        assert_eq!((e.value, e.at_millis), (n as f64, n));
                        read += 1;
                    }
                    None => missed += 1,
                }
            }
            stop.store(true, Ordering::Relaxed);
            assert_eq!(read, 10_000, "{missed} reads found none");
        });
    }
}
