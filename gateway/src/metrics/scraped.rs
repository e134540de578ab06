//! Tests' view of `/metrics`: a collector's exposition, and a page read back as a scraper reads
//! it (samples by name and label set, order and formatting aside), so that tests assert what
//! dashboards and alerts depend on rather than bytes.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::registry::Registry;

use super::Format;

/// `collector`'s families as the library encodes them (OpenMetrics without `# EOF`).
pub(crate) fn encoded<C: Collector>(collector: &Arc<C>, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Arc::clone(collector)));
    let mut out = String::new();
    match format {
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry),
        Format::OpenMetrics => {
            prometheus_client::encoding::text::encode_registry(&mut out, &registry)
        }
    }
    .unwrap();
    out
}

/// One sample: its name, labels (`le` as a number, so `1` and `1.0` are one bound), value,
/// and the exemplar after it, if any (`{labels} value [timestamp]`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
    pub(crate) exemplar: Option<String>,
}

pub(crate) struct Page(pub(crate) Vec<Sample>);

impl Page {
    pub(crate) fn parse(text: &str) -> Page {
        Page(
            text.lines()
                .filter(|line| !line.is_empty() && !line.starts_with('#'))
                .map(|line| sample(line).unwrap_or_else(|| panic!("unreadable sample {line}")))
                .collect(),
        )
    }

    /// The value of the series `name` with exactly these labels.
    pub(crate) fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.get(name, labels).map(|s| s.value)
    }

    pub(crate) fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Sample> {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| label(k, v.to_string()))
            .collect();
        self.0.iter().find(|s| s.name == name && s.labels == wanted)
    }

    pub(crate) fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> {
        self.0.iter().filter(move |s| s.name == name)
    }

    /// Every series with its value, as a set: what a scraper stores, whatever the order.
    pub(crate) fn series(&self) -> BTreeSet<String> {
        self.0
            .iter()
            .map(|s| format!("{}{:?} {}", s.name, s.labels, s.value))
            .collect()
    }
}

/// A label as compared: `le` by its number.
fn label(key: &str, value: String) -> (String, String) {
    let value = match (key, value.parse::<f64>()) {
        ("le", Ok(bound)) if value != "+Inf" => bound.to_string(),
        _ => value,
    };
    (key.to_owned(), value)
}

fn sample(line: &str) -> Option<Sample> {
    let (line, exemplar) = match line.split_once(" # ") {
        Some((sample, exemplar)) => (sample, Some(exemplar.to_owned())),
        None => (line, None),
    };
    let (series, value) = line.rsplit_once(' ')?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, labels(rest.strip_suffix('}')?)?),
        None => (series, BTreeMap::new()),
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value: value.parse().ok()?,
        exemplar,
    })
}

fn labels(mut rest: &str) -> Option<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => value.push(match chars.next()?.1 {
                    'n' => '\n',
                    other => other,
                }),
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        let (key, value) = label(key, value);
        labels.insert(key, value);
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(labels)
}
