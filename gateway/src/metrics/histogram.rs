//! Latency histograms whose buckets each keep the latest exemplar of a sampled request: its
//! trace and span IDs, the value and when it was observed, exposed in OpenMetrics (issue 30).
//!
//! They are `prometheus-client`'s `HistogramWithExemplars`: its `Exemplar` has no public
//! constructor, so a collector over storage of our own could not hand exemplars to the
//! library's encoder (issue 39). An observation takes the histogram's lock (tens of
//! nanoseconds, against a request's tens of microseconds); the trace IDs are kept as numbers
//! and written as hex only when a scrape encodes them.

use std::time::SystemTime;

use prometheus_client::encoding::{
    EncodeLabel, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelSetEncoder,
    LabelValueEncoder, MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;

use crate::telemetry::SampledIds;

/// One histogram series with fixed `bounds` (a value goes into the first bucket whose bound
/// is ≥ it, `+Inf` above the last).
#[derive(Debug)]
pub(super) struct Histogram(HistogramWithExemplars<Trace>);

impl Histogram {
    pub(super) fn new(bounds: &[f64]) -> Histogram {
        Histogram(HistogramWithExemplars::new(bounds.iter().copied()))
    }

    /// `ids`: the sampled span the value was timed in, kept as its bucket's exemplar.
    pub(super) fn observe(&self, value: f64, ids: Option<SampledIds>) {
        let at = ids.map(|_| SystemTime::now());
        self.0.observe(value, ids.map(Trace), at);
    }
}

impl EncodeMetric for Histogram {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// An exemplar's labels: `trace_id` (32 hex digits) and `span_id` (16), 63 characters,
/// within OpenMetrics's 128.
#[derive(Debug, Clone, Copy)]
pub(super) struct Trace(SampledIds);

impl EncodeLabelSet for Trace {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("trace_id", Hex(self.0.trace_id, 32)).encode(encoder.encode_label())?;
        ("span_id", Hex(u128::from(self.0.span_id), 16)).encode(encoder.encode_label())
    }
}

/// A number in lower-case hex, zero-padded to this many digits.
struct Hex(u128, usize);

impl EncodeLabelValue for Hex {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write as _;
        write!(encoder, "{:0width$x}", self.0, width = self.1)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use prometheus_client::registry::{Registry, Unit};

    const IDS: SampledIds = SampledIds {
        trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
        span_id: 0x00f0_67aa_0ba9_02b7,
    };

    /// `histogram` as the library writes it in both formats.
    fn encoded(histogram: Histogram) -> (String, String) {
        let mut registry = Registry::default();
        registry.register_with_unit("h", "H", Unit::Seconds, histogram);
        let (mut text, mut om) = (String::new(), String::new());
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        prometheus_client::encoding::text::encode(&mut om, &registry).unwrap();
        (text, om)
    }

    #[test]
    fn histograms_bucket_as_prometheus_does() {
        let histogram = Histogram::new(&[1.0, 2.0, 5.0]);
        for value in [0.5, 1.0, 1.5, 5.0, 7.0] {
            histogram.observe(value, None);
        }
        let (text, om) = encoded(histogram);
        for line in [
            "h_seconds_bucket{le=\"1\"} 2\n",
            "h_seconds_bucket{le=\"2\"} 3\n",
            "h_seconds_bucket{le=\"5\"} 4\n",
            "h_seconds_bucket{le=\"+Inf\"} 5\n",
            "h_seconds_sum 15.0\n",
            "h_seconds_count 5\n",
        ] {
            assert!(text.contains(line), "no {line} in\n{text}");
        }
        assert!(!om.contains(" # {"), "nothing sampled, no exemplar:\n{om}");
    }

    #[test]
    fn each_bucket_keeps_its_latest_exemplar_in_openmetrics_only() {
        let histogram = Histogram::new(&[0.25, 2.5, 5.0]);
        let other = SampledIds {
            trace_id: 1,
            span_id: 2,
        };
        let before = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        histogram.observe(0.125, Some(other));
        histogram.observe(0.25, Some(IDS));
        histogram.observe(1.0, None);
        histogram.observe(9.5, Some(other));
        let (text, om) = encoded(histogram);
        let exemplar = |bucket: &str| -> (String, f64) {
            let line = om
                .lines()
                .find(|line| line.starts_with(bucket))
                .unwrap_or_else(|| panic!("no {bucket} in\n{om}"));
            let (_, exemplar) = line.split_once(" # ").unwrap_or((line, ""));
            let (labels, rest) = exemplar.split_once("} ").unwrap_or(("", ""));
            let at = rest.split(' ').nth(1).map_or(0.0, |t| t.parse().unwrap());
            (
                format!("{labels}}} {}", rest.split(' ').next().unwrap()),
                at,
            )
        };
        let (first, at) = exemplar("h_seconds_bucket{le=\"0.25\"} 2 ");
        assert_eq!(
            first,
            "{trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\",span_id=\"00f067aa0ba902b7\"} 0.25"
        );
        assert!(at >= before && at < before + 60.0, "{at} {before}");
        assert_eq!(exemplar("h_seconds_bucket{le=\"2.5\"} 3").0, "} ");
        assert_eq!(
            exemplar("h_seconds_bucket{le=\"+Inf\"} 4 ").0,
            "{trace_id=\"00000000000000000000000000000001\",span_id=\"0000000000000002\"} 9.5"
        );
        assert!(om.contains("h_seconds_sum 10.875\n"), "{om}");
        assert!(!text.contains(" # {"), "{text}");
    }
}
