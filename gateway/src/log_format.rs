//! `--log-format json`: one flat JSON object per line, `timestamp`, `level`, `target` and
//! `message` first, then the event's own fields at the top level (issue 39: log shippers and
//! `jq` expect `.message`, not `.fields.message`).
//!
//! tracing-subscriber's JSON formatter can flatten, but it writes the fields the `log` bridge
//! adds to every record of pingora's and the Redis client's (`log.file` with the build
//! machine's source path, `log.line`, `log.module_path`, `log.target`); only its text format
//! leaves them out. This formatter leaves them out too, and takes the level and target from
//! the record (`NormalizeEvent`), as the text format does.

use std::fmt::{self, Write as _};

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent as _;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter of `--log-format json`.
pub struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut fields = Fields::default();
        event.record(&mut fields);

        let mut line = String::with_capacity(256);
        line.push('{');
        entry(&mut line, "timestamp", &Value::String(timestamp));
        line.push(',');
        entry(&mut line, "level", &Value::from(meta.level().as_str()));
        line.push(',');
        entry(&mut line, "target", &Value::from(meta.target()));
        if let Some(message) = fields.message {
            line.push(',');
            entry(&mut line, "message", &Value::String(message));
        }
        for (name, value) in &fields.others {
            line.push(',');
            entry(&mut line, name, value);
        }
        line.push('}');
        writeln!(writer, "{line}")
    }
}

fn entry(line: &mut String, name: &str, value: &Value) {
    let _ = write!(line, "{}:{value}", Value::from(name));
}

/// An event's fields, in the order they were recorded, without the `log` bridge's.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    others: Vec<(&'static str, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match field.name() {
            "message" => {
                self.message = Some(match value {
                    Value::String(text) => text,
                    other => other.to_string(),
                })
            }
            name if name.starts_with("log.") => {}
            name => self.others.push((name, value)),
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use std::sync::{Arc, Mutex};

    /// What the formatter wrote, line by line.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn events_are_flat_and_carry_no_source_paths() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(FlatJson)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(
                policy = "exchange",
                took_ms = 3u64,
                ok = true,
                "operation \"x\""
            );
            // A record through the `log` bridge, as pingora's are.
            let record = log::Record::builder()
                .level(log::Level::Info)
                .target("pingora_core::server")
                .file(Some(
                    "/root/.cargo/registry/src/pingora-core/src/server/mod.rs",
                ))
                .line(Some(643))
                .module_path(Some("pingora_core::server"))
                .args(format_args!("Server starting"))
                .build();
            log::Log::log(&tracing_log::LogTracer::new(), &record);
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let events: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(events.len(), 2, "{text}");
        assert_eq!(events[0]["message"], "operation \"x\"");
        assert_eq!(events[0]["policy"], "exchange");
        assert_eq!(events[0]["took_ms"], 3);
        assert_eq!(events[0]["ok"], true);
        assert_eq!(events[0]["level"], "WARN");
        assert!(text.lines().next().unwrap().starts_with("{\"timestamp\":"));
        assert_eq!(events[1]["message"], "Server starting");
        assert_eq!(events[1]["target"], "pingora_core::server");
        assert_eq!(events[1]["level"], "INFO");
        assert!(!text.contains("log.") && !text.contains(".cargo"), "{text}");
        assert!(events.iter().all(|e| e.get("fields").is_none()));
    }
}
