//! `poppy_http_request_duration_seconds{route, method, class}`: every request the proxy
//! listener answered, passthrough or not, from its arrival to its answer written (issue 39:
//! the bulk of the traffic had no latency metric). Its `_count` counts the requests. The
//! labels are bounded: the configured route names (and `none`), eight method words, six
//! status classes. The buckets keep exemplars like the approval histograms.

use std::sync::OnceLock;

use super::histogram::{self, Buckets};
use super::labels::{STATUS_CLASSES, status_class};
use super::openmetrics::{Format, Kind, head};
use crate::telemetry::SampledIds;

pub(super) const NAME: &str = "poppy_http_request_duration_seconds";
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

/// One route's histograms, by method, then status class.
struct Route {
    name: String,
    series: [[Buckets<{ BUCKETS.len() }>; STATUS_CLASSES.len()]; METHODS.len()],
}

/// The routes are known once the configuration is loaded ([`Requests::set_routes`]); a
/// request on a route not named there (none is) is not counted rather than given a new label.
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
                    series: std::array::from_fn(|_| std::array::from_fn(|_| Buckets::new())),
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
        if let Some(buckets) = route
            .series
            .get(method_index(method))
            .and_then(|m| m.get(class))
        {
            buckets.observe(&BUCKETS, seconds, ids);
        }
    }

    /// The family: its series that have counted a request (a route has 48, most never used);
    /// none before the first request, as the registry leaves out a family without series.
    pub(super) fn render(&self, out: &mut String, format: Format) {
        let Some(routes) = self.0.get() else {
            return;
        };
        let counted = |b: &Buckets<{ BUCKETS.len() }>| b.count() > 0;
        if !routes
            .iter()
            .flat_map(|r| r.series.iter().flatten())
            .any(counted)
        {
            return;
        }
        head(out, format, NAME, HELP, Kind::Histogram);
        let les = histogram::les(&BUCKETS, format);
        let mut routes: Vec<&Route> = routes.iter().collect();
        routes.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        for route in routes {
            for (method, by_class) in METHODS.iter().zip(&route.series) {
                for (class, buckets) in STATUS_CLASSES.iter().zip(by_class) {
                    if !counted(buckets) {
                        continue;
                    }
                    let labels = format!(
                        "class=\"{class}\",method=\"{method}\",route=\"{}\"",
                        super::per_policy::escaped(&route.name)
                    );
                    histogram::write(out, format, NAME, &labels, buckets, &les);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_counted_series_are_written_with_bounded_labels() {
        let requests = Requests::new();
        requests.set_routes(["default", "none"]);
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
        let mut text = String::new();
        requests.render(&mut text, Format::Text);
        assert!(text.contains(
            "poppy_http_request_duration_seconds_count{class=\"2xx\",method=\"GET\",route=\"default\"} 2"
        ), "{text}");
        assert!(text.contains(
            "poppy_http_request_duration_seconds_bucket{class=\"2xx\",method=\"GET\",route=\"default\",le=\"0.0025\"} 1"
        ), "{text}");
        assert!(text.contains(
            "poppy_http_request_duration_seconds_count{class=\"4xx\",method=\"other\",route=\"none\"} 1"
        ), "{text}");
        assert!(!text.contains("not-a-route"), "{text}");
        assert_eq!(text.matches("_count{").count(), 2, "{text}");
    }
}
