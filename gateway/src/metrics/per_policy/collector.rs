//! The six per-policy families, encoded by `prometheus-client` straight from the stored series
//! (no per-series structures built for a scrape: one of 10000 policies writes 230 k series).
//! Families and series come in a fixed order, policies by name; a family with no series is left
//! out, as the registry left it out.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::super::histogram::Histogram;
use super::*;

/// A policy's name and series.
type Policy<'a> = (&'a str, &'a Series);

impl Collector for PerPolicy {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let table = self.0.table.load();
        let mut policies: Vec<Policy<'_>> = table
            .iter()
            .map(|(name, series)| (&**name, &**series))
            .collect();
        policies.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let encoder = &mut encoder;
        histograms(
            encoder,
            &policies,
            APPROVAL_DELAY,
            APPROVAL_DELAY_BIT,
            |s| &s.approval_delay,
        )?;
        let rejected = Rejection::ALL.map(|r| (REJECTIONS_BIT + r as u32, r as usize, r.as_str()));
        counters(encoder, &policies, REJECTED, "reason", &rejected, |s, i| {
            &s.rejections[i]
        })?;
        if policies.iter().any(|(_, s)| s.has(ASKED_BIT)) {
            let mut family =
                encoder.encode_descriptor(ASKED.0, ASKED.1, None, MetricType::Counter)?;
            for (policy, series) in policies.iter().filter(|p| p.1.has(ASKED_BIT)) {
                let count = series.asked.load(Ordering::Relaxed);
                family
                    .encode_family(&[("operation", *policy)])?
                    .encode_counter::<NoLabelSet, _, u64>(&count, None)?;
            }
        }
        let outcomes = Outcome::ALL.map(|o| (o as u32, o as usize, o.as_str()));
        counters(
            encoder,
            &policies,
            OPERATIONS,
            "outcome",
            &outcomes,
            |s, i| &s.outcomes[i],
        )?;
        let unheld = Unheld::ALL.map(|u| (UNHELD_BIT + u as u32, u as usize, u.as_str()));
        counters(encoder, &policies, UNHELD, "reason", &unheld, |s, i| {
            &s.unheld[i]
        })?;
        histograms(
            encoder,
            &policies,
            UPSTREAM_DURATION,
            UPSTREAM_DURATION_BIT,
            |s| &s.upstream_duration,
        )
    }
}

/// A histogram family by policy (in seconds), its policies whose series of `bit` exists.
fn histograms(
    encoder: &mut DescriptorEncoder<'_>,
    policies: &[Policy<'_>],
    (name, help): (&str, &str),
    bit: u32,
    histogram: impl Fn(&Series) -> &Histogram,
) -> Result<(), std::fmt::Error> {
    if !policies.iter().any(|(_, s)| s.has(bit)) {
        return Ok(());
    }
    let mut family =
        encoder.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for (policy, series) in policies.iter().filter(|p| p.1.has(bit)) {
        histogram(series).encode(family.encode_family(&[("operation", *policy)])?)?;
    }
    Ok(())
}

/// A counter family by policy and one fixed word (`label`): for each policy, each of `words`
/// (present bit, index, word) whose series exists, its `value` at that index.
fn counters(
    encoder: &mut DescriptorEncoder<'_>,
    policies: &[Policy<'_>],
    (name, help): (&str, &str),
    label: &str,
    words: &[(u32, usize, &str)],
    value: impl Fn(&Series, usize) -> &AtomicU64,
) -> Result<(), std::fmt::Error> {
    let present = |bit: u32| policies.iter().any(|(_, s)| s.has(bit));
    if !words.iter().any(|(bit, _, _)| present(*bit)) {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (policy, series) in policies {
        for (bit, index, word) in words {
            if series.has(*bit) {
                let count = value(series, *index).load(Ordering::Relaxed);
                family
                    .encode_family(&[("operation", *policy), (label, *word)])?
                    .encode_counter::<NoLabelSet, _, u64>(&count, None)?;
            }
        }
    }
    Ok(())
}
