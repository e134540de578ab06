//! The two expositions of `/metrics`: Prometheus's text format (0.0.4), as it always was, and
//! OpenMetrics 1.0, the only one that carries exemplars, for a scraper that asks for it
//! (Prometheus does, in its scrape `Accept` header).
//!
//! The `prometheus` crate (0.14) writes the text format only, so its families are translated
//! line by line ([`from_text`]): the two differ, for what it registers, in metadata only
//! (counter families named without `_total`, `unknown` for `untyped`, `UNIT`, `"` escaped in
//! `HELP`) and in the spelling of `le`. The gateway's own families (the per-policy ones and
//! the store's histogram) write either form directly, with exemplars.

use std::fmt::Write as _;

use crate::telemetry::SampledIds;

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

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Unknown,
}

/// One family's metadata lines. `help` is as the text format escapes it (`\\`, `\n`); a
/// counter's `name` ends with `_total`.
pub(super) fn head(out: &mut String, format: Format, name: &str, help: &str, kind: Kind) {
    let word = |untyped| match kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Histogram => "histogram",
        Kind::Summary => "summary",
        Kind::Unknown => untyped,
    };
    match format {
        Format::Text => {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {}",
                word("untyped")
            );
        }
        Format::OpenMetrics => {
            // The family of `x_total` samples is `x`.
            let family = match kind {
                Kind::Counter => name.strip_suffix("_total").unwrap_or(name),
                _ => name,
            };
            let _ = writeln!(out, "# TYPE {family} {}", word("unknown"));
            // A unit MUST be the name's suffix; these are the ones the gateway's names use.
            if let Some(unit) = ["seconds", "bytes"]
                .into_iter()
                .find(|unit| family.strip_suffix(unit).is_some_and(|f| f.ends_with('_')))
            {
                let _ = writeln!(out, "# UNIT {family} {unit}");
            }
            // An empty HELP is no HELP.
            if !help.is_empty() {
                let _ = writeln!(out, "# HELP {family} {}", help.replace('"', "\\\""));
            }
        }
    }
}

/// A histogram bound as its `le` label: as `prometheus` writes it in the text format, and in
/// OpenMetrics's canonical form (Go's shortest `%g`, `.0` added to a number without point or
/// exponent: `1.0`, `0.0025`, `86400.0`, `1e+06`), which the spec requires of `le`.
pub(super) fn le(bound: f64, format: Format) -> String {
    match format {
        Format::Text => bound.to_string(),
        Format::OpenMetrics => canonical(bound),
    }
}

fn canonical(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    // Rust's `{:e}` has the shortest digits that read back, as Go's `%g` does.
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let plain = value.to_string();
    if plain.contains('.') {
        plain
    } else {
        plain + ".0"
    }
}

/// A bucket's exemplar, after its sample: ` # {trace_id="…",span_id="…"} value timestamp`.
/// Its labels are 63 characters, within OpenMetrics's 128.
pub(super) fn exemplar(out: &mut String, ids: SampledIds, value: f64, at_millis: u64) {
    let _ = write!(
        out,
        " # {{trace_id=\"{:032x}\",span_id=\"{:016x}\"}} {value} {}.{:03}",
        ids.trace_id,
        ids.span_id,
        at_millis / 1000,
        at_millis % 1000
    );
}

/// The text exposition `prometheus`'s `TextEncoder` wrote, as OpenMetrics (without `# EOF`:
/// the page ends after the gateway's own families). It writes no timestamps and no
/// exemplars, `# HELP` (when there is help) just before `# TYPE`, and a histogram's or
/// summary's `le`/`quantile` as the last label.
pub(super) fn from_text(text: &str, out: &mut String) {
    let mut help: Option<(&str, &str)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ');
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, word) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let kind = match word {
                // An OpenMetrics counter's samples are `_total`: one named otherwise is
                // exposed untyped.
                "counter" if name.ends_with("_total") => Kind::Counter,
                "gauge" => Kind::Gauge,
                "histogram" => Kind::Histogram,
                "summary" => Kind::Summary,
                _ => Kind::Unknown,
            };
            let help = help.take().filter(|(n, _)| *n == name).map(|(_, h)| h);
            head(
                out,
                Format::OpenMetrics,
                name,
                help.unwrap_or_default(),
                kind,
            );
        } else {
            sample(line, out);
        }
    }
}

/// A sample line, its `le` or `quantile` value (the last label) in canonical form.
fn sample(line: &str, out: &mut String) {
    let bound = line.rfind("\"} ").and_then(|end| {
        // The last label's value is a number: no comma, brace or quote in it.
        let start = line[..end].rfind([',', '{'])? + 1;
        let label = &line[start..end];
        let value = label
            .strip_prefix("le=\"")
            .or_else(|| label.strip_prefix("quantile=\""))?;
        let number: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().ok()?,
        };
        Some((start + label.len() - value.len(), end, number))
    });
    match bound {
        Some((from, to, number)) => {
            out.push_str(&line[..from]);
            out.push_str(&canonical(number));
            out.push_str(&line[to..]);
        }
        None => out.push_str(line),
    }
    out.push('\n');
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

    #[test]
    fn bounds_are_canonical_numbers() {
        // The spec's examples ("Canonical Numbers"), and every bound the gateway uses.
        for (value, expected) in [
            (0.0, "0.0"),
            (0.001, "0.001"),
            (0.01, "0.01"),
            (0.1, "0.1"),
            (0.9, "0.9"),
            (0.95, "0.95"),
            (0.999, "0.999"),
            (1.0, "1.0"),
            (1.7, "1.7"),
            (10.0, "10.0"),
            (1e-10, "1e-10"),
            (1e-9, "1e-09"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (0.00025, "0.00025"),
            (100_000.0, "100000.0"),
            (86_400.0, "86400.0"),
            (1e6, "1e+06"),
            (1e10, "1e+10"),
            (1.1e23, "1.1e+23"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(le(value, Format::OpenMetrics), expected);
        }
        assert_eq!(le(1.0, Format::Text), "1");
        assert_eq!(le(0.00025, Format::Text), "0.00025");
    }

    #[test]
    fn metadata_follows_the_format() {
        let mut text = String::new();
        head(
            &mut text,
            Format::Text,
            "a_total",
            "A \\\\ \"b\"",
            Kind::Counter,
        );
        assert_eq!(
            text,
            "# HELP a_total A \\\\ \"b\"\n# TYPE a_total counter\n"
        );
        let mut om = String::new();
        head(
            &mut om,
            Format::OpenMetrics,
            "a_total",
            "A \\\\ \"b\"",
            Kind::Counter,
        );
        head(
            &mut om,
            Format::OpenMetrics,
            "x_seconds",
            "X",
            Kind::Histogram,
        );
        head(&mut om, Format::OpenMetrics, "y_bytes", "Y", Kind::Gauge);
        head(&mut om, Format::OpenMetrics, "nobytes", "Z", Kind::Unknown);
        assert_eq!(
            om,
            "# TYPE a counter\n# HELP a A \\\\ \\\"b\\\"\n\
             # TYPE x_seconds histogram\n# UNIT x_seconds seconds\n# HELP x_seconds X\n\
             # TYPE y_bytes gauge\n# UNIT y_bytes bytes\n# HELP y_bytes Y\n\
             # TYPE nobytes unknown\n# HELP nobytes Z\n"
        );
    }

    #[test]
    fn an_exemplar_is_the_ids_the_value_and_the_time() {
        let mut out = String::from("x_bucket{le=\"1.0\"} 3");
        let ids = SampledIds {
            trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
            span_id: 0x00f0_67aa_0ba9_02b7,
        };
        exemplar(&mut out, ids, 0.67, 1_600_000_000_023);
        assert_eq!(
            out,
            "x_bucket{le=\"1.0\"} 3 # {trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\",span_id=\"00f067aa0ba902b7\"} 0.67 1600000000.023"
        );
        let labels = "trace_id".len() + 32 + "span_id".len() + 16;
        assert!(labels <= 128, "{labels} characters");
    }

    #[test]
    fn the_registrys_text_becomes_openmetrics() {
        let text = "# HELP a_total Things \\\\ \"done\"\n# TYPE a_total counter\n\
                    a_total{k=\"v\"} 3\n\
                    # TYPE b untyped\nb 1\n\
                    # HELP c Counted, oddly named\n# TYPE c counter\nc 2\n\
                    # HELP h_seconds Time\n# TYPE h_seconds histogram\n\
                    h_seconds_bucket{call=\"x,le=\\\"1\\\"} \",le=\"0.5\"} 1\n\
                    h_seconds_bucket{call=\"x,le=\\\"1\\\"} \",le=\"1\"} 2\n\
                    h_seconds_bucket{call=\"x,le=\\\"1\\\"} \",le=\"+Inf\"} 2\n\
                    h_seconds_sum{call=\"x,le=\\\"1\\\"} \"} 1.2\n\
                    h_seconds_count{call=\"x,le=\\\"1\\\"} \"} 2\n\
                    # HELP s Quantiles\n# TYPE s summary\ns{quantile=\"1\"} 4\ns_sum 4\ns_count 1\n\
                    # HELP process_resident_memory_bytes RSS\n# TYPE process_resident_memory_bytes gauge\n\
                    process_resident_memory_bytes 1.5e6\n";
        let mut om = String::new();
        from_text(text, &mut om);
        assert_eq!(
            om,
            "# TYPE a counter\n# HELP a Things \\\\ \\\"done\\\"\na_total{k=\"v\"} 3\n\
             # TYPE b unknown\nb 1\n\
             # TYPE c unknown\n# HELP c Counted, oddly named\nc 2\n\
             # TYPE h_seconds histogram\n# UNIT h_seconds seconds\n# HELP h_seconds Time\n\
             h_seconds_bucket{call=\"x,le=\\\"1\\\"} \",le=\"0.5\"} 1\n\
             h_seconds_bucket{call=\"x,le=\\\"1\\\"} \",le=\"1.0\"} 2\n\
             h_seconds_bucket{call=\"x,le=\\\"1\\\"} \",le=\"+Inf\"} 2\n\
             h_seconds_sum{call=\"x,le=\\\"1\\\"} \"} 1.2\n\
             h_seconds_count{call=\"x,le=\\\"1\\\"} \"} 2\n\
             # TYPE s summary\n# HELP s Quantiles\ns{quantile=\"1.0\"} 4\ns_sum 4\ns_count 1\n\
             # TYPE process_resident_memory_bytes gauge\n# UNIT process_resident_memory_bytes bytes\n\
             # HELP process_resident_memory_bytes RSS\nprocess_resident_memory_bytes 1.5e6\n"
        );
    }
}
