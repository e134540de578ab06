//! The counters and gauges kept in the `prometheus` crate's registry (the gateway's simple
//! ones, those of modules that count before the registry exists, and its process collector's
//! `process_*`), encoded by `prometheus-client` like every other family: read at each scrape
//! from the registry's gathered values, never translated from its text.

use prometheus::proto::{Metric, MetricFamily, MetricType as Kind};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// The registry, encoded as a collector.
#[derive(Clone)]
pub(super) struct Registered(pub(super) prometheus::Registry);

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Registered")
    }
}

impl Collector for Registered {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in self.0.gather() {
            encode_family(&mut encoder, &family)?;
        }
        Ok(())
    }
}

/// How a family of the registry is exposed: its name without the suffixes the library adds
/// (a counter's `_total`, the unit), its unit, and its type.
fn descriptor(family: &MetricFamily) -> Option<(&str, Option<Unit>, MetricType)> {
    let name = family.name();
    let (name, kind) = match family.get_field_type() {
        // An OpenMetrics counter's samples are `_total`: one named otherwise stays untyped.
        Kind::COUNTER => match name.strip_suffix("_total") {
            Some(name) => (name, MetricType::Counter),
            None => (name, MetricType::Unknown),
        },
        Kind::GAUGE => (name, MetricType::Gauge),
        // The gateway registers none (a test checks): its histograms are its own.
        Kind::UNTYPED | Kind::HISTOGRAM | Kind::SUMMARY => return None,
    };
    let unit = [("_seconds", Unit::Seconds), ("_bytes", Unit::Bytes)]
        .into_iter()
        .find_map(|(suffix, unit)| Some((name.strip_suffix(suffix)?, unit)));
    Some(match unit {
        Some((name, unit)) => (name, Some(unit), kind),
        None => (name, None, kind),
    })
}

fn encode_family(
    encoder: &mut DescriptorEncoder<'_>,
    family: &MetricFamily,
) -> Result<(), std::fmt::Error> {
    let Some((name, unit, kind)) = descriptor(family) else {
        return Ok(());
    };
    let mut metrics = encoder.encode_descriptor(name, family.help(), unit.as_ref(), kind)?;
    for metric in family.get_metric() {
        let labels: Vec<(&str, &str)> = metric
            .get_label()
            .iter()
            .map(|pair| (pair.name(), pair.value()))
            .collect();
        let value = value(family.get_field_type(), metric);
        encode_value(metrics.encode_family(&labels)?, kind, value)?;
    }
    Ok(())
}

fn value(kind: Kind, metric: &Metric) -> f64 {
    match kind {
        Kind::COUNTER => metric.get_counter().get_value(),
        _ => metric.get_gauge().get_value(),
    }
}

/// Whole numbers (every counter and gauge but `process_cpu_seconds_total` and
/// `process_start_time_seconds`) as integers, as the registry wrote them.
fn encode_value(
    mut encoder: MetricEncoder<'_>,
    kind: MetricType,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let whole = value.fract() == 0.0 && value.abs() < 9e15;
    match (kind, whole) {
        (MetricType::Counter, true) if value >= 0.0 => {
            encoder.encode_counter::<NoLabelSet, _, u64>(&(value as u64), None)
        }
        (MetricType::Counter, _) => encoder.encode_counter::<NoLabelSet, _, f64>(&value, None),
        (_, true) => encoder.encode_gauge(&(value as i64)),
        (_, false) => encoder.encode_gauge(&value),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::metrics::Format;
    use crate::metrics::scraped::{Page, encoded};

    #[test]
    fn the_registrys_families_keep_their_names_labels_and_values() {
        let registry = prometheus::Registry::new();
        let counter = prometheus::IntCounterVec::new(
            prometheus::Opts::new("a_total", "Things \\ done"),
            &["k"],
        )
        .unwrap();
        counter.with_label_values(&["v\"1"]).inc_by(3);
        let odd = prometheus::IntCounter::new("c", "Counted, oddly named").unwrap();
        odd.inc();
        let gauge = prometheus::Gauge::new("g_bytes", "Bytes").unwrap();
        gauge.set(1.5e6);
        let time = prometheus::Gauge::new("t_seconds", "When").unwrap();
        time.set(1_700_000_000.25);
        for c in [
            Box::new(counter) as Box<dyn prometheus::core::Collector>,
            Box::new(odd),
            Box::new(gauge),
            Box::new(time),
        ] {
            registry.register(c).unwrap();
        }
        let old = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        let registered = Arc::new(Registered(registry));
        let text = encoded(&registered, Format::Text);
        assert_eq!(Page::parse(&text).series(), Page::parse(&old).series());
        assert!(text.contains("# TYPE a_total counter\n"), "{text}");
        assert!(text.contains("# HELP a_total Things \\\\ done\n"), "{text}");
        let om = encoded(&registered, Format::OpenMetrics);
        assert_eq!(Page::parse(&om).series(), Page::parse(&old).series());
        for line in [
            "# TYPE a counter\n",
            "a_total{k=\"v\\\"1\"} 3\n",
            "# TYPE c unknown\n",
            "c 1\n",
            "# TYPE g_bytes gauge\n# UNIT g_bytes bytes\n",
            "# TYPE t_seconds gauge\n# UNIT t_seconds seconds\n",
            "t_seconds 1700000000.25\n",
        ] {
            assert!(om.contains(line), "no {line} in\n{om}");
        }
    }
}
