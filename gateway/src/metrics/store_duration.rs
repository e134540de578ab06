//! `poppy_store_duration_seconds{call}`, one [`Histogram`] per store call, so that its buckets
//! keep exemplars. A request makes several store calls: an observation is an array index and
//! the histogram's update, where a `HistogramVec` would hash the label first.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::StoreCall;
use super::histogram::Histogram;
use crate::telemetry::SampledIds;

/// The family's name before its unit (`_seconds`).
const NAME: &str = "poppy_store_duration";
const HELP: &str = "Time of operation store calls, by call";

/// Store round trips: sub-millisecond in memory, about a millisecond to a nearby Redis.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// By [`StoreCall`], in the order of [`StoreCall::ALL`].
#[derive(Debug)]
pub(super) struct StoreDuration([Histogram; StoreCall::ALL.len()]);

impl StoreDuration {
    pub(super) fn new() -> StoreDuration {
        StoreDuration(std::array::from_fn(|_| Histogram::new(&BUCKETS)))
    }

    pub(super) fn observe(&self, call: StoreCall, seconds: f64, ids: Option<SampledIds>) {
        if let Some(histogram) = self.0.get(call as usize) {
            histogram.observe(seconds, ids);
        }
    }
}

impl Collector for StoreDuration {
    /// The family, every call's series (each exported from the start).
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family =
            encoder.encode_descriptor(NAME, HELP, Some(&Unit::Seconds), MetricType::Histogram)?;
        for (call, histogram) in StoreCall::ALL.iter().zip(&self.0) {
            histogram.encode(family.encode_family(&[("call", call.as_str())])?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_index_their_histograms() {
        for (i, call) in StoreCall::ALL.iter().enumerate() {
            assert_eq!(*call as usize, i, "{}", call.as_str());
        }
    }
}
