//! `[tracing]`: OpenTelemetry traces exported over OTLP (HTTP/protobuf), off without the
//! table (or with `OTEL_SDK_DISABLED=true`). What the table leaves out comes from the usual
//! `OTEL_*` variables (docs/operations.md, "Traces", says which wins).

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::duration::duration;
use super::error::ConfigError;
use crate::telemetry::TracingSettings;

/// `OTEL_BSP_MAX_QUEUE_SIZE`'s default.
const DEFAULT_QUEUE: usize = 2048;
/// `OTEL_BSP_SCHEDULE_DELAY`'s default.
const DEFAULT_EXPORT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// `[tracing]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TracingFile {
    /// The collector's OTLP/HTTP URL: `http://collector:4318` (then `/v1/traces` is added) or
    /// the whole traces URL.
    pub endpoint: Option<Spanned<String>>,
    /// Headers sent with every export (an API key: prefer `OTEL_EXPORTER_OTLP_HEADERS`).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, Spanned<String>>,
    /// The share of new traces recorded (0.0 to 1.0); a request's sampled parent decides
    /// for it (parent-based).
    pub sampling_ratio: Option<Spanned<f64>>,
    pub service_name: Option<Spanned<String>>,
    /// Spans waiting for export, at most; more are dropped and counted.
    pub max_queue_size: Option<Spanned<usize>>,
    /// How long a span may wait for its batch.
    pub export_interval: Option<Spanned<String>>,
}

/// Validate `[tracing]`; `None` after pushing its errors, or when `OTEL_SDK_DISABLED` says so.
pub(super) fn compile(
    file: &TracingFile,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<TracingSettings> {
    let before = errors.len();
    let endpoint = file
        .endpoint
        .as_ref()
        .and_then(|e| match traces_url(e.get_ref()) {
            Ok(url) => Some(url),
            Err(why) => {
                errors.push(at(e.span(), format!("tracing.endpoint: {why}")));
                None
            }
        });
    let mut headers = Vec::new();
    for (name, value) in &file.headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err()
            || http::HeaderValue::from_str(value.get_ref()).is_err()
        {
            errors.push(at(
                value.span(),
                format!("tracing.headers: `{name}` is not a valid HTTP header"),
            ));
        } else {
            headers.push((name.clone(), value.get_ref().clone()));
        }
    }
    let sampling_ratio = match &file.sampling_ratio {
        Some(r) if (0.0..=1.0).contains(r.get_ref()) => *r.get_ref(),
        Some(r) => {
            errors.push(at(
                r.span(),
                "tracing.sampling_ratio: a share of traces, from 0.0 to 1.0".into(),
            ));
            1.0
        }
        None => env_ratio().unwrap_or(1.0),
    };
    let max_queue_size = match &file.max_queue_size {
        Some(n) if *n.get_ref() > 0 => *n.get_ref(),
        Some(n) => {
            errors.push(at(n.span(), "tracing.max_queue_size: at least 1".into()));
            DEFAULT_QUEUE
        }
        None => DEFAULT_QUEUE,
    };
    let export_interval = duration(
        &file.export_interval,
        DEFAULT_EXPORT_INTERVAL,
        "tracing.export_interval",
        at,
        errors,
    );
    let service_name = file.service_name.as_ref().map(|n| n.get_ref().clone());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    (errors.len() == before && !disabled).then_some(TracingSettings {
        endpoint,
        headers,
        sampling_ratio,
        service_name,
        max_queue_size,
        export_interval,
    })
}

/// `OTEL_TRACES_SAMPLER_ARG`, when it is a ratio.
fn env_ratio() -> Option<f64> {
    std::env::var("OTEL_TRACES_SAMPLER_ARG")
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
}

/// An `http(s)://` URL; one without a path gets OTLP's `/v1/traces`.
fn traces_url(text: &str) -> Result<String, String> {
    let uri: http::Uri = text.parse().map_err(|_| format!("`{text}` is not a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!("`{text}` is not an http:// or https:// URL"));
    }
    Ok(match uri.path() {
        "" | "/" => format!("{}/v1/traces", text.trim_end_matches('/')),
        _ => text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn a_bare_collector_url_gets_the_traces_path() {
        assert_eq!(
            traces_url("http://collector:4318").as_deref(),
            Ok("http://collector:4318/v1/traces")
        );
        assert_eq!(
            traces_url("https://c.example/").as_deref(),
            Ok("https://c.example/v1/traces")
        );
        assert_eq!(
            traces_url("http://c:4318/otlp/v1/traces").as_deref(),
            Ok("http://c:4318/otlp/v1/traces")
        );
        assert!(traces_url("collector:4318").is_err());
        assert!(traces_url("ftp://c/").is_err());
    }
}
