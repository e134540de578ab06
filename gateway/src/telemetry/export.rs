//! OTLP export: spans go through a bounded queue to one exporter thread, which sends them in
//! batches over HTTP/protobuf with the gateway's own HTTP client. A full queue drops the span
//! (counted, never waited for), and so does a batch the collector does not take: a request
//! never waits for tracing.
//!
//! The SDK's own batch processor would do the batching, but it counts what it drops only in
//! its shutdown log line, and its HTTP transport is a second reqwest (0.13, blocking).

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    Sampler, SdkTracerProvider, Span, SpanData, SpanExporter as _, SpanProcessor,
};

use super::TracingSettings;

/// Spans sent to the collector in one request, at most.
const MAX_BATCH: usize = 512;
/// The longest a collector may take to answer one batch.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from the collector.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("tracing: the OTLP exporter: {0}")]
    Exporter(String),
    #[error("tracing: the exporter thread: {0}")]
    Thread(std::io::Error),
}

/// The tracer provider `settings` describe, its exporter thread started.
pub(crate) fn provider(settings: &TracingSettings) -> Result<SdkTracerProvider, TracingError> {
    let resource = resource(settings);
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(Client::new()?)
        .with_timeout(EXPORT_TIMEOUT);
    if let Some(endpoint) = &settings.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    if !settings.headers.is_empty() {
        builder = builder.with_headers(settings.headers.iter().cloned().collect::<HashMap<_, _>>());
    }
    let mut exporter = builder
        .build()
        .map_err(|e| TracingError::Exporter(e.to_string()))?;
    exporter.set_resource(&resource);
    let processor = QueueProcessor::start(exporter, settings)?;
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            settings.sampling_ratio,
        ))))
        .with_resource(resource)
        .build())
}

/// `service.name`: `[tracing] service_name`, else `OTEL_SERVICE_NAME` (the SDK reads it, with
/// `OTEL_RESOURCE_ATTRIBUTES`), else `poppy-gateway`.
fn resource(settings: &TracingSettings) -> Resource {
    let builder = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    match &settings.service_name {
        Some(name) => builder.with_service_name(name.clone()),
        None if std::env::var_os("OTEL_SERVICE_NAME").is_none() => {
            builder.with_service_name("poppy-gateway")
        }
        None => builder,
    }
    .build()
}

fn dropped(count: usize) {
    if let Some(counter) = super::SPANS_DROPPED.as_ref() {
        counter.inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }
}

/// What the exporter thread is sent.
enum Item {
    Span(Box<SpanData>),
    /// Export what is queued now, then say so.
    Flush(SyncSender<()>),
}

/// Queues ended spans for the exporter thread; never blocks.
#[derive(Debug)]
struct QueueProcessor {
    queue: SyncSender<Item>,
}

impl QueueProcessor {
    fn start(
        exporter: opentelemetry_otlp::SpanExporter,
        settings: &TracingSettings,
    ) -> Result<QueueProcessor, TracingError> {
        let (queue, items) = sync_channel(settings.max_queue_size);
        let every = settings.export_interval;
        std::thread::Builder::new()
            .name("trace-export".into())
            .spawn(move || export_loop(&exporter, &items, every))
            .map_err(TracingError::Thread)?;
        Ok(QueueProcessor { queue })
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _: &mut Span, _: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.queue.try_send(Item::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => dropped(1),
            Err(TrySendError::Disconnected(_)) => dropped(1),
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let (done, wait) = sync_channel(1);
        self.queue
            .send(Item::Flush(done))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        wait.recv_timeout(EXPORT_TIMEOUT)
            .map_err(|_| OTelSdkError::Timeout(EXPORT_TIMEOUT))
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        self.force_flush()
    }
}

/// The exporter thread: a batch goes when it is full or `every` after its first span.
fn export_loop(
    exporter: &opentelemetry_otlp::SpanExporter,
    items: &Receiver<Item>,
    every: Duration,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "tracing: no runtime for the exporter; no span will be exported");
            return;
        }
    };
    let mut failures: u64 = 0;
    let mut send = |batch: &mut Vec<SpanData>| {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        let count = spans.len();
        if let Err(e) = runtime.block_on(exporter.export(spans)) {
            dropped(count);
            failures += 1;
            if failures.is_power_of_two() {
                tracing::warn!(error = %e, failures, "tracing: the collector did not take a batch of spans; they were dropped");
            }
        }
    };
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut due: Option<Instant> = None;
    loop {
        let item = match due {
            None => items.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(due) => items.recv_timeout(due.saturating_duration_since(Instant::now())),
        };
        match item {
            Ok(Item::Span(span)) => {
                batch.push(*span);
                due.get_or_insert_with(|| Instant::now() + every);
                if batch.len() >= MAX_BATCH {
                    send(&mut batch);
                    due = None;
                }
            }
            Ok(Item::Flush(done)) => {
                send(&mut batch);
                due = None;
                let _ = done.try_send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                send(&mut batch);
                due = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&mut batch);
                return;
            }
        }
    }
}

/// The exporter's HTTP client: the gateway's reqwest (rustls), no redirects.
#[derive(Debug)]
struct Client(reqwest::Client);

impl Client {
    fn new() -> Result<Client, TracingError> {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map(Client)
            .map_err(|e| TracingError::Exporter(e.to_string()))
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut answer = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let status = answer.status();
        let headers = std::mem::take(answer.headers_mut());
        let mut body = Vec::new();
        while let Some(chunk) = answer.chunk().await? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let mut response = Response::new(Bytes::from(body));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
