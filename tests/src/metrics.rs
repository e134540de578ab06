//! Reading the Prometheus text exposition of `GET /metrics`.

use std::collections::BTreeMap;

/// One sample line: `name{label="value",…} 12`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed `/metrics` page.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub text: String,
    pub samples: Vec<Sample>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let samples = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .filter_map(parse_line)
            .collect();
        Metrics {
            text: text.to_owned(),
            samples,
        }
    }

    /// The value of the series `name` with exactly these labels, if exposed.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == wanted)
            .map(|s| s.value)
    }

    /// The value of `name` with these labels, 0 when not (yet) exposed.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }

    /// The names of every sample on the page (histograms as `_bucket`, `_sum`, `_count`).
    pub fn names(&self) -> std::collections::BTreeSet<&str> {
        self.samples.iter().map(|s| s.name.as_str()).collect()
    }

    /// `poppy_operations_total{operation, outcome}`, 0 when not (yet) exposed.
    pub fn operations(&self, operation: &str, outcome: &str) -> f64 {
        self.get(
            "poppy_operations_total",
            &[("operation", operation), ("outcome", outcome)],
        )
        .unwrap_or(0.0)
    }
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, rest) = match line.find('{') {
        Some(_) => {
            let close = line.rfind('}')?;
            (&line[..close + 1], line[close + 1..].trim())
        }
        None => {
            let space = line.find(char::is_whitespace)?;
            (&line[..space], line[space..].trim())
        }
    };
    let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
    let (name, labels) = match series.find('{') {
        Some(open) => (
            &series[..open],
            parse_labels(&series[open + 1..series.len() - 1])?,
        ),
        None => (series, BTreeMap::new()),
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

fn parse_labels(text: &str) -> Option<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_owned();
        let after = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(match escaped {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = Some(i);
                    break;
                }
                other => value.push(other),
            }
        }
        labels.insert(key, value);
        rest = after[end? + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Some(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_labelled_and_plain_samples() {
        let m = Metrics::parse(
            "# HELP x y\n# TYPE poppy_operations_total counter\n\
             poppy_operations_total{operation=\"exchange\",outcome=\"held\"} 3\n\
             poppy_operations_total{outcome=\"performed\", operation=\"exchange\"} 1\n\
             up 1\n",
        );
        assert_eq!(m.operations("exchange", "held"), 3.0);
        assert_eq!(m.operations("exchange", "performed"), 1.0);
        assert_eq!(m.operations("exchange", "replayed"), 0.0);
        assert_eq!(m.get("up", &[]), Some(1.0));
    }
}
