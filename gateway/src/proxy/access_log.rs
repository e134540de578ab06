//! `[access_log]`: one line per request, written from pingora's `logging` hook.
//!
//! Lines go through a bounded queue to one writer thread, so a slow disk never holds a
//! request; when the queue is full a line is dropped (and counted in the gateway's log)
//! rather than waited for. Never written: `Poppy-Session`, `Authorization`, bodies, queries.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::Instant;

use pingora::proxy::Session;
use serde_json::json;

use crate::config::{AccessLog, LogFormat, LogTarget};
use crate::upstream::forwarded::{ClientFacts, Notes};

/// Lines waiting for the writer thread.
const QUEUE: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum AccessLogError {
    #[error("access_log.path {0}: {1}")]
    Open(String, std::io::Error),
}

/// What the writer thread is sent.
enum Item {
    Line(String),
    /// Open the file again (a rotation moved it away).
    Reopen,
}

/// Where lines go.
type Output = Box<dyn Write + Send>;

/// Open `target` for appending.
fn open_output(target: &LogTarget) -> Result<Output, AccessLogError> {
    Ok(match target {
        LogTarget::Stdout => Box::new(std::io::stdout()),
        LogTarget::File(path) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| AccessLogError::Open(path.display().to_string(), e))?,
        ),
    })
}

pub(crate) struct AccessLogger {
    format: LogFormat,
    lines: SyncSender<Item>,
    dropped: AtomicU64,
}

/// One request's line, as the logging hook assembles it.
pub(crate) struct Entry<'a> {
    pub(crate) request_id: &'a str,
    pub(crate) started: Instant,
    pub(crate) facts: Option<&'a ClientFacts>,
    pub(crate) route: &'a str,
    pub(crate) notes: &'a Notes,
    /// Proxied to the upstream (not answered by the gateway itself).
    pub(crate) passthrough: bool,
    /// The request's trace (`[tracing]` on).
    pub(crate) trace_id: Option<&'a str>,
}

impl AccessLogger {
    /// Open the target (append) and start the writer thread.
    pub(crate) fn open(settings: &AccessLog) -> Result<AccessLogger, AccessLogError> {
        let mut out = open_output(&settings.target)?;
        let (lines, queue) = sync_channel::<Item>(QUEUE);
        let target = settings.target.clone();
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || {
                for item in queue {
                    match item {
                        // Each line is written whole (one write call) so readers never see
                        // half lines.
                        Item::Line(line) => {
                            if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush())
                            {
                                tracing::error!(error = %e, "access log: a line could not be written");
                            }
                        }
                        // A rotated file is let go only once its successor is open.
                        Item::Reopen => match open_output(&target) {
                            Ok(reopened) => {
                                out = reopened;
                                tracing::info!("SIGHUP: access log reopened");
                            }
                            Err(e) => tracing::error!(
                                error = %e,
                                "SIGHUP: access log not reopened; writing on to the open file"
                            ),
                        },
                    }
                }
            })
            .map_err(|e| AccessLogError::Open("writer thread".into(), e))?;
        Ok(AccessLogger {
            format: settings.format,
            lines,
            dropped: AtomicU64::new(0),
        })
    }

    /// What reopens the file on SIGHUP (after a rotation), for a file target.
    pub(crate) fn reopener(&self, settings: &AccessLog) -> Option<AccessLogReopener> {
        matches!(settings.target, LogTarget::File(_)).then(|| AccessLogReopener(self.lines.clone()))
    }

    pub(crate) fn log(&self, session: &Session, entry: &Entry<'_>) {
        let mut line = match self.format {
            LogFormat::Json => json_line(session, entry).to_string(),
            LogFormat::Combined => combined_line(session, entry),
        };
        line.push('\n');
        match self.lines.try_send(Item::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped,
                        "access log: the writer is behind; lines were dropped"
                    );
                }
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn status(session: &Session) -> u16 {
    session.response_written().map_or(0, |r| r.status.as_u16())
}

fn protocol(entry: &Entry<'_>) -> &'static str {
    match entry.facts {
        Some(f) if f.http2 => "HTTP/2",
        _ => "HTTP/1.1",
    }
}

/// Milliseconds since `started`, to the microsecond (`1.234`, not `1.2345678910000001`): the
/// same number in both formats.
fn duration_ms(started: std::time::Instant) -> f64 {
    started.elapsed().as_micros() as f64 / 1000.0
}

fn json_line(session: &Session, entry: &Entry<'_>) -> serde_json::Value {
    let header = session.req_header();
    let facts = entry.facts;
    json!({
        "time": now_rfc3339(),
        "request_id": entry.request_id,
        "client": facts.and_then(|f| f.peer).map(|ip| ip.to_string()),
        "method": header.method.as_str(),
        "path": String::from_utf8_lossy(logged_path(header)),
        "protocol": protocol(entry),
        "tls": facts.is_some_and(|f| f.tls),
        "host": facts.and_then(|f| f.host.as_deref()),
        "status": status(session),
        "bytes_sent": session.body_bytes_sent(),
        "duration_ms": duration_ms(entry.started),
        "route": entry.route,
        "passthrough": entry.passthrough,
        "upstream_status": entry.notes.upstream_status,
        "operation_id": entry.notes.operation_id,
        "outcome": entry.notes.outcome,
        "trace_id": entry.trace_id,
    })
}

/// The request's path as both formats log it: without the query, which can carry tokens
/// (`?access_token=…`) that must not land in log files. One rule, so no format drifts.
fn logged_path(header: &pingora::http::RequestHeader) -> &[u8] {
    let raw = header.raw_path();
    raw.iter()
        .position(|&b| b == b'?')
        .map_or(raw, |query| &raw[..query])
}

/// nginx's `combined` (with `-` for referer), then `key=value` pairs nginx users append.
fn combined_line(session: &Session, entry: &Entry<'_>) -> String {
    let header = session.req_header();
    let time = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000"
        ))
        .unwrap_or_default();
    let agent = header
        .headers
        .get(http::header::USER_AGENT)
        .map(|v| escaped(v.as_bytes()))
        .unwrap_or_else(|| "-".into());
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    format!(
        "{client} - - [{time}] \"{method} {path} {protocol}\" {status} {bytes} \"-\" \"{agent}\" request_id={rid} duration_ms={ms:.3} route={route} upstream_status={up} operation_id={op} outcome={outcome} trace_id={trace}",
        client = dash(entry.facts.and_then(|f| f.peer).map(|ip| ip.to_string())),
        method = header.method.as_str(),
        path = escaped(logged_path(header)),
        protocol = protocol(entry),
        status = status(session),
        bytes = session.body_bytes_sent(),
        rid = entry.request_id,
        ms = duration_ms(entry.started),
        route = entry.route,
        up = dash(entry.notes.upstream_status.map(|s| s.to_string())),
        op = dash(entry.notes.operation_id.clone()),
        outcome = entry.notes.outcome.unwrap_or("-"),
        trace = entry.trace_id.unwrap_or("-"),
    )
}

/// A request's bytes as nginx writes them in a quoted field: `"`, `\`, controls and bytes
/// beyond ASCII as `\xHH`, so that no client can end the field or forge a line.
fn escaped(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        if byte == b'"' || byte == b'\\' || !(0x20..0x7f).contains(&byte) {
            let _ = write!(out, "\\x{byte:02X}");
        } else {
            out.push(char::from(byte));
        }
    }
    out
}

/// Reopens the access log file on SIGHUP, so `logrotate` (without `copytruncate`) can move it
/// away: the policy and certificate reloads listen for the same signal.
pub(crate) struct AccessLogReopener(SyncSender<Item>);

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for AccessLogReopener {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let Some(mut hangups) = crate::hangup::hangups("the access log will not reopen") else {
            return;
        };
        while crate::hangup::next(&mut hangups, &mut shutdown).await {
            // Queued behind the lines already sent: they go to the old file.
            if self.0.try_send(Item::Reopen).is_err() {
                tracing::error!("SIGHUP: access log not reopened (its writer is behind or gone)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_to_the_microsecond() {
        let started = std::time::Instant::now() - std::time::Duration::from_nanos(1_234_567_891);
        let ms = duration_ms(started);
        let text = serde_json::json!(ms).to_string();
        let decimals = text.split('.').nth(1).map_or(0, str::len);
        assert!(decimals <= 3, "{text}");
        assert!((1234.0..1300.0).contains(&ms), "{text}");
    }
}
