//! `poppy_store_duration_seconds{call}`, one histogram of [`Buckets`] per store call, so that
//! its buckets keep exemplars (`prometheus`'s histograms cannot). A request makes several
//! store calls: an observation is an array index and atomics, where the `HistogramVec` it
//! replaces hashed the label first. Its text is the vector's, byte for byte (a test compares
//! them), and `Metrics::render` puts it where the registry did.

use super::StoreCall;
use super::histogram::{self, Buckets};
use super::openmetrics::{Format, Kind, head};
use crate::telemetry::SampledIds;

pub(super) const NAME: &str = "poppy_store_duration_seconds";
const HELP: &str = "Time of operation store calls, by call";

/// Store round trips: sub-millisecond in memory, about a millisecond to a nearby Redis.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// By [`StoreCall`], in the order of [`StoreCall::ALL`].
pub(super) struct StoreDuration([Buckets<{ BUCKETS.len() }>; StoreCall::ALL.len()]);

impl StoreDuration {
    pub(super) fn new() -> StoreDuration {
        StoreDuration(std::array::from_fn(|_| Buckets::new()))
    }

    pub(super) fn observe(&self, call: StoreCall, seconds: f64, ids: Option<SampledIds>) {
        if let Some(buckets) = self.0.get(call as usize) {
            buckets.observe(&BUCKETS, seconds, ids);
        }
    }

    /// The family, its series ordered by call as the registry ordered them.
    pub(super) fn render(&self, out: &mut String, format: Format) {
        head(out, format, NAME, HELP, Kind::Histogram);
        let les = histogram::les(&BUCKETS, format);
        let mut calls = StoreCall::ALL;
        calls.sort_unstable_by_key(|call| call.as_str());
        for call in calls {
            if let Some(buckets) = self.0.get(call as usize) {
                let labels = format!("call=\"{}\"", call.as_str());
                histogram::write(out, format, NAME, &labels, buckets, &les);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use prometheus::{HistogramOpts, HistogramVec, Registry, TextEncoder};

    #[test]
    fn calls_index_their_histograms() {
        for (i, call) in StoreCall::ALL.iter().enumerate() {
            assert_eq!(*call as usize, i, "{}", call.as_str());
        }
    }

    /// The text is what the `HistogramVec` this replaced wrote.
    #[test]
    fn the_text_is_the_vectors() {
        let registry = Registry::new();
        let vector = HistogramVec::new(
            HistogramOpts::new(NAME, HELP).buckets(BUCKETS.to_vec()),
            &["call"],
        )
        .unwrap();
        registry.register(Box::new(vector.clone())).unwrap();
        let new = StoreDuration::new();
        for call in StoreCall::ALL {
            vector.with_label_values(&[call.as_str()]);
        }
        for (i, seconds) in [0.00003, 0.0001, 0.0004, 0.002, 0.9, 1.0, 3.5, 0.0]
            .into_iter()
            .enumerate()
        {
            let call = StoreCall::ALL[i % 3];
            vector.with_label_values(&[call.as_str()]).observe(seconds);
            new.observe(call, seconds, None);
        }
        let old = TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        let mut text = String::new();
        new.render(&mut text, Format::Text);
        assert_eq!(text, old);
    }
}
