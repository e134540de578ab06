//! Which of the two expositions of `/metrics` a scrape gets: Prometheus's text format (0.0.4),
//! as it always was, or OpenMetrics 1.0, the only one that carries exemplars, for a scraper that
//! asks for it (Prometheus does, in its scrape `Accept` header). `prometheus-client` encodes
//! both (`super::exposition`); choosing between them is the gateway's.

/// Which exposition a scrape gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `text/plain; version=0.0.4`: every scraper that does not ask for OpenMetrics.
    Text,
    /// `application/openmetrics-text; version=1.0.0`, with exemplars and `# EOF`.
    OpenMetrics,
}

impl Format {
    /// The exposition an `Accept` header prefers: OpenMetrics when it accepts
    /// `application/openmetrics-text` (version 1.0.0, 0.0.1 or none) at least as much as the
    /// text format; otherwise, and without the header, the text format.
    pub(crate) fn negotiate(accept: Option<&[u8]>) -> Format {
        let Some(accept) = accept.and_then(|a| std::str::from_utf8(a).ok()) else {
            return Format::Text;
        };
        let (mut openmetrics, mut text) = (0.0f64, 0.0f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let (mut q, mut version) = (1.0, None);
            for param in parts {
                match param.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
                    Some((k, v)) if k.eq_ignore_ascii_case("q") => q = v.parse().unwrap_or(0.0),
                    Some((k, v)) if k.eq_ignore_ascii_case("version") => version = Some(v),
                    _ => {}
                }
            }
            if media.eq_ignore_ascii_case("application/openmetrics-text") {
                if matches!(version, None | Some("1.0.0" | "0.0.1")) {
                    openmetrics = openmetrics.max(q);
                }
            } else if ["text/plain", "text/*", "*/*"]
                .iter()
                .any(|m| media.eq_ignore_ascii_case(m))
            {
                text = text.max(q);
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_and_other_scrapers_get_what_they_ask_for() {
        let negotiated = |accept: Option<&str>| Format::negotiate(accept.map(str::as_bytes));
        // Prometheus 2.x's scrape header.
        assert_eq!(
            negotiated(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiated(Some("Application/OpenMetrics-Text; version=0.0.1")),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiated(Some("application/openmetrics-text")),
            Format::OpenMetrics
        );
        for accept in [
            None,
            Some("*/*"),
            Some("text/plain"),
            Some("text/plain;version=0.0.4"),
            Some("application/json"),
            Some("application/openmetrics-text;q=0"),
            Some("application/openmetrics-text;version=2.0.0"),
            Some("application/openmetrics-text;q=0.4, text/plain;q=0.5"),
            Some("text/plain, application/openmetrics-text;q=0.9"),
            Some("\u{ff}"),
        ] {
            assert_eq!(negotiated(accept), Format::Text, "{accept:?}");
        }
        assert_eq!(
            Format::negotiate(Some(b"\xff\xfe")),
            Format::Text,
            "not UTF-8"
        );
    }
}
