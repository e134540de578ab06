//! OpenTelemetry traces (`[tracing]`): a server span per request, child spans for the
//! gateway's own phases (admit, lookup, store round trips, mint, claim, forward, record,
//! replay), W3C Trace Context read from the request and written on every request the gateway
//! sends upstream, and OTLP export in batches (`export.rs`).
//!
//! Off unless configured: then [`TRACER`] is unset, every function here returns at its first
//! line, and no span object is ever built. Spans carry routes, policies, operation IDs and
//! outcomes (the metrics' words) and never a Session, token, summary or body.
//!
//! The request's span travels with its future as OpenTelemetry's current context
//! ([`Span::within`]), so the store decorator and the one upstream writer find it without
//! it being passed through every call.

mod export;
pub(crate) mod traceparent;

use std::borrow::Cow;
use std::future::Future;
use std::sync::{LazyLock, OnceLock};

use futures_util::future::Either;
use opentelemetry::context::{FutureExt as _, WithContext};
use opentelemetry::trace::{
    Link, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

pub(crate) use export::TracingError;

/// `[tracing]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    /// `None`: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`, or
    /// `http://localhost:4318/v1/traces` (the exporter reads them).
    pub endpoint: Option<String>,
    pub headers: Vec<(String, String)>,
    pub sampling_ratio: f64,
    /// `None`: `OTEL_SERVICE_NAME`, else `poppy-gateway`.
    pub service_name: Option<String>,
    pub max_queue_size: usize,
    pub export_interval: std::time::Duration,
}

/// The tracer, set once at startup when `[tracing]` is configured.
static TRACER: OnceLock<(SdkTracer, SdkTracerProvider)> = OnceLock::new();

/// Spans that never reached the collector: the export queue was full, or the collector did
/// not take the batch. Registered by `metrics.rs` as `poppy_trace_spans_dropped_total`.
pub(crate) static SPANS_DROPPED: LazyLock<Option<prometheus::IntCounter>> = LazyLock::new(|| {
    prometheus::IntCounter::new(
        "poppy_trace_spans_dropped_total",
        "Trace spans dropped before reaching the collector: the export queue was full, or the collector did not accept a batch",
    )
    .ok()
});

const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
const TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

/// Start exporting traces as `settings` say. Called once, at startup, inside no runtime.
pub(crate) fn start(settings: &TracingSettings) -> Result<(), TracingError> {
    let provider = export::provider(settings)?;
    let tracer = provider.tracer("poppy-gateway");
    let _ = TRACER.set((tracer, provider));
    Ok(())
}

/// Export what is queued (at shutdown); waits at most a few seconds.
pub(crate) fn flush() {
    if let Some((_, provider)) = TRACER.get() {
        let _ = provider.force_flush();
    }
}

fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get().map(|(tracer, _)| tracer)
}

/// One span of the gateway's (or none, tracing off): ended when dropped.
#[derive(Debug, Default)]
pub(crate) struct Span(Option<Context>);

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(cx) = &self.0 {
            cx.span().end();
        }
    }
}

impl Span {
    /// The server span of a request that arrived with `headers`: a child of its
    /// `traceparent` when that is well formed, else a new trace's root.
    /// `name`: made only with tracing on.
    pub(crate) fn server(
        headers: &http::HeaderMap,
        name: impl FnOnce() -> Cow<'static, str>,
    ) -> Span {
        let Some(tracer) = tracer() else {
            return Span(None);
        };
        let parent = traceparent::from_headers(headers, &TRACEPARENT, &TRACESTATE)
            .map_or_else(Context::new, |remote| {
                Context::new().with_remote_span_context(remote)
            });
        let span = tracer
            .span_builder(name())
            .with_kind(SpanKind::Server)
            .start_with_context(tracer, &parent);
        Span(Some(parent.with_span(span)))
    }

    /// A phase of the request being served (a child of the current span); none outside one.
    pub(crate) fn phase(name: &'static str) -> Span {
        Span::child(name, SpanKind::Internal, None)
    }

    /// A call to another service (the upstream, the store) made for the current request.
    pub(crate) fn client(name: impl Into<Cow<'static, str>>) -> Span {
        Span::child(name, SpanKind::Client, None)
    }

    /// A phase linked to the span `linked` names (a `traceparent` kept with a record).
    pub(crate) fn linked(name: &'static str, linked: Option<&str>) -> Span {
        let link = linked
            .and_then(|tp| traceparent::parse(tp.as_bytes(), None))
            .map(Link::with_context);
        Span::child(name, SpanKind::Internal, link)
    }

    /// A call to another service made for this span's request, outside its future (pingora's
    /// proxy phases).
    /// None when this span is not sampled: see [`Span::child`].
    pub(crate) fn client_child(&self, name: &'static str) -> Span {
        match (tracer(), &self.0) {
            (Some(tracer), Some(parent)) if parent.span().span_context().is_sampled() => {
                Span::start(tracer, parent, name, SpanKind::Client, None)
            }
            _ => Span(None),
        }
    }

    /// Whether this is a span (tracing on), sampled or not.
    pub(crate) fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// This span's IDs when it is sampled: the exemplar of a latency it timed.
    pub(crate) fn sampled_ids(&self) -> Option<SampledIds> {
        self.context(SampledIds::of).flatten()
    }

    /// The trace ID when this span is sampled (recorded).
    pub(crate) fn sampled_trace_id(&self) -> Option<String> {
        self.context(|c| c.is_sampled().then(|| c.trace_id().to_string()))
            .flatten()
    }

    fn child(name: impl Into<Cow<'static, str>>, kind: SpanKind, link: Option<Link>) -> Span {
        let Some(tracer) = tracer() else {
            return Span(None);
        };
        let parent = Context::current();
        // A request that is not sampled gets no child span at all (parent-based sampling
        // would not record one): what it sends upstream carries its server span's
        // `traceparent`, not sampled, and it costs next to nothing.
        if !parent.has_active_span() || !parent.span().span_context().is_sampled() {
            return Span(None);
        }
        Span::start(tracer, &parent, name, kind, link)
    }

    fn start(
        tracer: &SdkTracer,
        parent: &Context,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        link: Option<Link>,
    ) -> Span {
        let mut builder = tracer.span_builder(name).with_kind(kind);
        if let Some(link) = link {
            builder = builder.with_links(vec![link]);
        }
        let span = builder.start_with_context(tracer, parent);
        Span(Some(parent.with_span(span)))
    }

    /// Whether this span is being recorded (tracing on, and sampled).
    fn recording(&self) -> Option<&Context> {
        self.0.as_ref().filter(|cx| cx.span().is_recording())
    }

    /// Set an attribute (only on a recorded span: nothing is built otherwise).
    pub(crate) fn set(&self, key: &'static str, value: impl Into<Value>) {
        if let Some(cx) = self.recording() {
            cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// `set` for a value that costs something to make.
    pub(crate) fn set_with<V: Into<Value>>(&self, key: &'static str, value: impl FnOnce() -> V) {
        if let Some(cx) = self.recording() {
            cx.span().set_attribute(KeyValue::new(key, value()));
        }
    }

    /// The span failed: its status says why (a fixed phrase, never request data).
    pub(crate) fn fail(&self, why: &'static str) {
        if let Some(cx) = self.recording() {
            cx.span().set_status(Status::error(why));
        }
    }

    fn context<R>(&self, f: impl FnOnce(&SpanContext) -> R) -> Option<R> {
        self.0.as_ref().map(|cx| f(cx.span().span_context()))
    }

    /// This span as a `traceparent` (to keep with a record, or send upstream).
    pub(crate) fn traceparent(&self) -> Option<String> {
        self.context(traceparent::format)
    }

    /// The trace ID, 32 hex digits (the access log's `trace_id`).
    pub(crate) fn trace_id(&self) -> Option<String> {
        self.context(|c| c.trace_id().to_string())
    }

    /// Run `future` with this span as the current one (plain `future` with tracing off).
    pub(crate) fn within<F: Future>(&self, future: F) -> Either<WithContext<F>, F> {
        match &self.0 {
            Some(cx) => Either::Left(future.with_context(cx.clone())),
            None => Either::Right(future),
        }
    }

    /// Write this span's `traceparent` (and the trace's `tracestate`) on `headers`, replacing
    /// a client's: the upstream's parent is the gateway's span.
    pub(crate) fn inject(&self, headers: &mut pingora::http::RequestHeader) -> pingora::Result<()> {
        self.context(|context| inject(context, headers))
            .unwrap_or(Ok(()))
    }
}

/// A sampled span's trace and span IDs: what a latency histogram keeps as a bucket's exemplar
/// (plain numbers: nothing is allocated to observe one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SampledIds {
    pub(crate) trace_id: u128,
    pub(crate) span_id: u64,
}

impl SampledIds {
    fn of(context: &SpanContext) -> Option<SampledIds> {
        context.is_sampled().then(|| SampledIds {
            trace_id: u128::from_be_bytes(context.trace_id().to_bytes()),
            span_id: u64::from_be_bytes(context.span_id().to_bytes()),
        })
    }

    /// The current span's IDs when it is sampled; none with tracing off (one check of the
    /// tracer), outside a request, or when the request is not sampled.
    pub(crate) fn current() -> Option<SampledIds> {
        tracer()?;
        Context::map_current(|cx| SampledIds::of(cx.span().span_context()))
    }
}

/// Write the current span's `traceparent` on a request the gateway sends itself (the one
/// upstream writer calls this); nothing with tracing off or outside a request.
pub(crate) fn inject_current(headers: &mut pingora::http::RequestHeader) -> pingora::Result<()> {
    if tracer().is_none() {
        return Ok(());
    }
    let cx = Context::current();
    if !cx.has_active_span() {
        return Ok(());
    }
    inject(cx.span().span_context(), headers)
}

fn inject(
    context: &SpanContext,
    headers: &mut pingora::http::RequestHeader,
) -> pingora::Result<()> {
    headers.insert_header(TRACEPARENT, traceparent::format(context))?;
    let state = context.trace_state().header();
    if state.is_empty() {
        headers.remove_header(&TRACESTATE);
    } else {
        headers.insert_header(TRACESTATE, state)?;
    }
    Ok(())
}
