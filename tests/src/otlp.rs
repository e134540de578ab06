//! A real OTLP/HTTP trace receiver: `deps/otel/receiver.py`, which decodes what the gateway
//! exports with the official OpenTelemetry protobuf definitions (`opentelemetry-proto`, in
//! `deps/python/otel`) and writes one JSON line per span, which [`OtlpReceiver::spans`] reads.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::announced;
use crate::thirdparty::{deps_dir, python};

pub struct OtlpReceiver {
    child: Child,
    port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl OtlpReceiver {
    /// A receiver that keeps every span.
    pub fn start() -> OtlpReceiver {
        OtlpReceiver::start_with(&[])
    }

    /// A receiver that decodes and counts only (`GET /count`), for benchmarks.
    pub fn start_discarding() -> OtlpReceiver {
        OtlpReceiver::start_with(&["--discard"])
    }

    fn start_with(args: &[&str]) -> OtlpReceiver {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let out = dir.path().join("spans.jsonl");
        let mut command = Command::new(python("otel"));
        command
            .arg(deps_dir().join("otel").join("receiver.py"))
            .arg("--out")
            .arg(&out)
            .args(args)
            .stderr(Stdio::inherit());
        let (child, port) = announced::spawn(command, "receiver.py");
        OtlpReceiver {
            child,
            port,
            out,
            _dir: dir,
        }
    }

    /// The collector's base URL (the gateway adds `/v1/traces`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `[tracing]` sending here, every trace sampled, in batches of at most 100 ms.
    pub fn config(&self) -> String {
        format!(
            "\n[tracing]\nendpoint = \"{}\"\nsampling_ratio = 1.0\nexport_interval = \"100ms\"\n",
            self.url()
        )
    }

    /// Every span received so far, as `receiver.py` wrote them.
    pub fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Everything received so far, as written (for searching it whole).
    pub fn raw(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// The spans of `trace_id`, once `done` says they are all there (bounded: 30 s).
    pub async fn wait_for_trace(
        &self,
        trace_id: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let of_trace = || -> Vec<Value> {
            self.spans()
                .into_iter()
                .filter(|s| s["trace_id"] == trace_id)
                .collect()
        };
        let arrived = crate::wait::until(Duration::from_secs(30), || done(&of_trace())).await;
        let spans = of_trace();
        assert!(
            arrived,
            "the spans of trace {trace_id} did not all arrive within 30 s; got:\n{}",
            spans
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        );
        spans
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
