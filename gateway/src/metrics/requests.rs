//! `poppy_http_request_duration_seconds{route, method, class}`: every request the proxy
//! listener answered, passthrough or not, from its arrival to its answer written (issue 39:
//! the bulk of the traffic had no latency metric). Its `_count` counts the requests. The
//! labels are bounded: the configured route names (and `none`), eight method words, six
//! status classes. The buckets keep exemplars like the approval histograms.

use std::sync::OnceLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::histogram::Histogram;
use super::labels::{STATUS_CLASSES, status_class};
use crate::telemetry::SampledIds;

/// The family's name before its unit (`_seconds`).
const NAME: &str = "poppy_http_request_duration";
const HELP: &str = "Time from a request's arrival on the proxy listener to its answer, by route (none: no route matched), method and response status class; every request, passthrough, held, performed or refused";

/// From a fast refusal to a slow upstream (an approved forward may take `upstream.timeout`).
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The method label's words, in the order the series are written; any other method is `other`.
const METHODS: [&str; 8] = [
    "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "other",
];

fn method_index(method: &http::Method) -> usize {
    METHODS
        .iter()
        .position(|m| *m == method.as_str())
        .unwrap_or(METHODS.len() - 1)
}

/// One route's histograms, by method, then status class; each made when it counts its first
/// request (a route has 48, most never used).
#[derive(Debug)]
struct Route {
    name: String,
    series: [[OnceLock<Histogram>; STATUS_CLASSES.len()]; METHODS.len()],
}

/// The routes are known once the configuration is loaded ([`Requests::set_routes`]); a
/// request on a route not named there (none is) is not counted rather than given a new label.
#[derive(Debug)]
pub(super) struct Requests(OnceLock<Vec<Route>>);

impl Requests {
    pub(super) fn new() -> Requests {
        Requests(OnceLock::new())
    }

    /// The route names requests are counted by (the first call wins).
    pub(super) fn set_routes<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let _ = self.0.set(
            names
                .into_iter()
                .map(|name| Route {
                    name: name.to_owned(),
                    series: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
                })
                .collect(),
        );
    }

    pub(super) fn observe(
        &self,
        route: &str,
        method: &http::Method,
        status: Option<u16>,
        seconds: f64,
        ids: Option<SampledIds>,
    ) {
        let Some(route) = self
            .0
            .get()
            .and_then(|r| r.iter().find(|r| r.name == route))
        else {
            return;
        };
        let class = status_class(status);
        let class = STATUS_CLASSES
            .iter()
            .position(|c| *c == class)
            .unwrap_or(STATUS_CLASSES.len() - 1);
        if let Some(cell) = route
            .series
            .get(method_index(method))
            .and_then(|m| m.get(class))
        {
            cell.get_or_init(|| Histogram::new(&BUCKETS))
                .observe(seconds, ids);
        }
    }
}
impl Collector for Requests {
    /// The family: its series that have counted a request; none before the first request
    /// (the family is left out, as before).
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(routes) = self.0.get() else {
            return Ok(());
        };
        let counted = || routes.iter().flat_map(|r| r.series.iter().flatten());
        if !counted().any(|cell| cell.get().is_some()) {
            return Ok(());
        }
        let mut family =
            encoder.encode_descriptor(NAME, HELP, Some(&Unit::Seconds), MetricType::Histogram)?;
        for route in routes {
            for (method, by_class) in METHODS.iter().zip(&route.series) {
                for (class, cell) in STATUS_CLASSES.iter().zip(by_class) {
                    let Some(histogram) = cell.get() else {
                        continue;
                    };
                    let labels = [
                        ("class", *class),
                        ("method", *method),
                        ("route", route.name.as_str()),
                    ];
                    histogram.encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::metrics::Format;
    use crate::metrics::scraped::{Page, encoded};

    #[test]
    fn only_counted_series_are_written_with_bounded_labels() {
        let requests = std::sync::Arc::new(Requests::new());
        requests.set_routes(["default", "none"]);
        assert_eq!(encoded(&requests, Format::Text), "", "nothing counted yet");
        requests.observe("default", &http::Method::GET, Some(200), 0.002, None);
        requests.observe("default", &http::Method::GET, Some(204), 0.2, None);
        requests.observe(
            "none",
            &"PROPFIND".parse().unwrap(),
            Some(404),
            0.0001,
            None,
        );
        requests.observe("not-a-route", &http::Method::GET, Some(200), 0.1, None);
        let text = encoded(&requests, Format::Text);
        let page = Page::parse(&text);
        let name = "poppy_http_request_duration_seconds";
        let default_get = [("class", "2xx"), ("method", "GET"), ("route", "default")];
        assert_eq!(
            page.value(&format!("{name}_count"), &default_get),
            Some(2.0)
        );
        let le = [default_get.as_slice(), &[("le", "0.0025")]].concat();
        assert_eq!(page.value(&format!("{name}_bucket"), &le), Some(1.0));
        let other = [("class", "4xx"), ("method", "other"), ("route", "none")];
        assert_eq!(page.value(&format!("{name}_count"), &other), Some(1.0));
        assert!(!text.contains("not-a-route"), "{text}");
        assert_eq!(page.named(&format!("{name}_count")).count(), 2, "{text}");
    }
}
