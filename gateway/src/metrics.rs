//! Prometheus metrics: one registry, typed handles. Labels are bounded (policy names, fixed
//! outcome and reason words, store call names, status classes); operation IDs are never labels.
//! Every metric is documented in `docs/operations.md`; keep the two in sync.

//!
//! `prometheus-client` encodes the exposition, in the Prometheus text format (0.0.4) or in
//! OpenMetrics with exemplars ([`Format`]); each part of the storage is one of its collectors.

mod asked;
mod declared;
mod format;
mod histogram;
mod labels;
mod per_policy;
mod registered;
mod requests;
#[cfg(test)]
mod scraped;
mod store_duration;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use crate::telemetry::SampledIds;
use asked::AskedOnce;
use declared::DeclaredVersions;
use per_policy::PerPolicy;
use requests::Requests;
use store_duration::StoreDuration;

// The core's words for what became of a request (operation/outcome.rs); metrics count them.
pub(crate) use crate::operation::outcome::{Outcome, Rejection, Unheld};
pub(crate) use format::Format;
pub(crate) use labels::{Limit, ReloadResult, StoreCall, status_class};

pub(crate) struct Metrics {
    /// The simple counters and gauges, and `process_*`.
    registry: Registry,
    /// What encodes `/metrics`: `registry` and the three below, as collectors.
    exposition: prometheus_client::registry::Registry,
    /// The last page's size, reserved for the next (a page of 1000 policies is 4 MB).
    page_size: std::sync::atomic::AtomicUsize,
    /// Requests, asks, rejections, approval delays and upstream times, by policy.
    per_policy: Arc<PerPolicy>,
    asked_once: AskedOnce,
    store_duration: Arc<StoreDuration>,
    /// Every request the proxy listener answered, by route, method and status class.
    requests: Arc<Requests>,
    store_errors: IntCounterVec,
    /// The operations versions requests for operations declare.
    declared_versions: DeclaredVersions,
    store_full: IntCounter,
    limits_hit: IntCounterVec,
    connections_open: IntGauge,
    connections_max: IntGauge,
    upstream_connections_in_use: IntGauge,
    upstream_connections_max: IntGauge,
    store_durability_problems: IntGauge,
    operations_unknown: IntGauge,
    passthrough: IntCounterVec,
    in_flight: IntGauge,
    reloads: IntCounterVec,
    last_reload_successful: IntGauge,
    policies_loaded: IntGauge,
}

impl Metrics {
    pub(crate) fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok::<_, prometheus::Error>(c)
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok::<_, prometheus::Error>(g)
        };
        let mut metrics = Metrics {
            exposition: prometheus_client::registry::Registry::default(),
            page_size: std::sync::atomic::AtomicUsize::new(64 * 1024),
            per_policy: Arc::new(PerPolicy::new()),
            asked_once: AskedOnce::default(),
            store_duration: Arc::new(StoreDuration::new()),
            requests: Arc::new(Requests::new()),
            declared_versions: DeclaredVersions::new(&registry)?,
            store_errors: counter(
                "poppy_store_errors_total",
                "Operation store calls that failed, by call",
                &["call"],
            )?,
            store_full: {
                let c = IntCounter::new(
                    "poppy_store_full_total",
                    "Claims refused (503, nothing forwarded) because memory:// held memory_max_records or memory_max_bytes",
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            limits_hit: counter(
                "poppy_limits_hit_total",
                "Requests refused or connections closed by a limit: held_bodies (503), body_timeout (408), header_timeout (closed), connections (503, closed), connections_reclaimed (a connection waiting for a request closed to make room), upstream_connections (503)",
                &["limit"],
            )?,
            connections_open: gauge(
                "poppy_connections_open",
                "Downstream connections open now, from accept (server.max_connections caps them)",
            )?,
            connections_max: gauge(
                "poppy_connections_max",
                "The cap on downstream connections in force: server.max_connections, or less when the process may not open enough file descriptors",
            )?,
            upstream_connections_in_use: gauge(
                "poppy_upstream_connections_in_use",
                "Requests holding one of the upstream connections server.max_upstream_connections allows",
            )?,
            upstream_connections_max: gauge(
                "poppy_upstream_connections_max",
                "The cap on upstream connections in force: server.max_upstream_connections, or less when the process may not open enough file descriptors",
            )?,
            store_durability_problems: gauge(
                "poppy_store_durability_problems",
                "Findings of the last Redis durability check (no persistence, eviction allowed, settings unreadable); 0 when durable",
            )?,
            operations_unknown: gauge(
                "poppy_operations_unknown",
                "Operations whose outcome is unknown (lease over, no answer recorded) and that no operator resolved yet, in the whole store",
            )?,
            passthrough: counter(
                "poppy_passthrough_requests_total",
                "Requests proxied untouched (no Poppy-Session, or no policy route), by response status class",
                &["class"],
            )?,
            in_flight: gauge(
                "poppy_operations_in_flight",
                "Approved operations being forwarded by this gateway right now",
            )?,
            reloads: counter(
                "poppy_config_reloads_total",
                "Policy reloads (SIGHUP), by result",
                &["result"],
            )?,
            last_reload_successful: gauge(
                "poppy_config_last_reload_successful",
                "1 if the last policy reload applied (or none was tried), 0 if it failed",
            )?,
            policies_loaded: gauge(
                "poppy_policies_loaded",
                "Policies (operations and tools) the gateway is running with",
            )?,
            registry,
        };
        // Series that exist from the start read as 0, not "no data", and rate() sees their
        // first increment.
        for call in StoreCall::ALL {
            metrics.store_errors.with_label_values(&[call.as_str()]);
        }
        for class in labels::STATUS_CLASSES {
            metrics.passthrough.with_label_values(&[class]);
        }
        for result in ReloadResult::ALL {
            metrics.reloads.with_label_values(&[result.as_str()]);
        }
        for limit in Limit::ALL {
            metrics.limits_hit.with_label_values(&[limit.as_str()]);
        }
        metrics.last_reload_successful.set(1);
        // The log filter counts from before any registry exists: one counter per process.
        if let Some(suppressed) = crate::quiet_log::SUPPRESSED.as_ref() {
            metrics.registry.register(Box::new(suppressed.clone()))?;
        }
        if let Some(dropped) = crate::telemetry::SPANS_DROPPED.as_ref() {
            metrics.registry.register(Box::new(dropped.clone()))?;
        }
        // So do introspections: the token verifier is built with the config, before this.
        if let Some(introspections) = crate::identity::token::introspection::INTROSPECTIONS.as_ref()
        {
            for result in crate::identity::token::introspection::RESULTS {
                introspections.with_label_values(&[result]);
            }
            metrics
                .registry
                .register(Box::new(introspections.clone()))?;
        }
        let build_info = IntGaugeVec::new(
            Opts::new(
                "poppy_build_info",
                "Always 1; its labels say which build of the gateway is running",
            ),
            &["version"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        metrics.registry.register(Box::new(build_info))?;
        // process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, … (Linux).
        #[cfg(target_os = "linux")]
        metrics.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        let registered = registered::Registered(metrics.registry.clone());
        metrics.exposition.register_collector(Box::new(registered));
        let store_duration = Arc::clone(&metrics.store_duration);
        metrics
            .exposition
            .register_collector(Box::new(store_duration));
        let requests = Arc::clone(&metrics.requests);
        metrics.exposition.register_collector(Box::new(requests));
        let per_policy = Arc::clone(&metrics.per_policy);
        metrics.exposition.register_collector(Box::new(per_policy));
        Ok(metrics)
    }

    /// Create the series of these policies (at startup and after a reload), so that every one
    /// is exported from the start.
    pub(crate) fn policies<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let names: Vec<&str> = names.into_iter().collect();
        self.per_policy.add(names.iter().copied());
        self.policies_loaded
            .set(i64::try_from(names.len()).unwrap_or(i64::MAX));
    }

    /// The webhook's counters (`poppy_webhook_events_total{type, result}` and
    /// `poppy_webhook_queued`), registered now: `[webhook]` only, without it they are absent.
    pub(crate) fn webhook_counters(&self) -> Result<(IntCounterVec, IntGauge), prometheus::Error> {
        let events = IntCounterVec::new(
            Opts::new(
                "poppy_webhook_events_total",
                "Webhook events, by type and what became of them: sent (a 2xx), dropped (the queue was full, or the gateway stopped first), failed (refused with a 3xx or 4xx, or still failing after max_attempts or max_age)",
            ),
            &["type", "result"],
        )?;
        let queued = IntGauge::new(
            "poppy_webhook_queued",
            "Webhook events waiting to be sent or retried (at most [webhook] queue)",
        )?;
        self.registry.register(Box::new(events.clone()))?;
        self.registry.register(Box::new(queued.clone()))?;
        Ok((events, queued))
    }

    pub(crate) fn operation(&self, policy: &str, outcome: Outcome) {
        self.per_policy.operation(policy, outcome);
    }

    /// An operation was offered for approval (a 403 or a held tool call). Counted once per
    /// operation_id, however many times the agent asks before its user decides.
    pub(crate) fn asked(&self, policy: &str, operation_id: &str, expires_in: Duration) {
        if self.asked_once.first(operation_id, expires_in) {
            self.per_policy.asked(policy);
        }
    }

    /// An approval failed a check (it is answered with a new revision).
    pub(crate) fn rejected(&self, policy: &str, reason: Rejection) {
        self.per_policy.rejected(policy, reason);
    }

    /// A request to `policy`'s route passed through without being held.
    pub(crate) fn unheld(&self, policy: &str, why: Unheld) {
        self.per_policy.unheld(policy, why);
    }

    /// A valid approval was claimed. Revisions are stateless, so the minting time is
    /// recovered from the approved revision: `expires_at − expires_in`. The current span, when
    /// sampled, is its bucket's exemplar.
    pub(crate) fn approval_delay(&self, policy: &str, expires_at: i64, expires_in: Duration) {
        let minted_at = expires_at as f64 - expires_in.as_secs_f64();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(minted_at);
        let delay = (now - minted_at).max(0.0);
        self.per_policy
            .approval_delay(policy, delay, SampledIds::current());
    }

    /// Time an approved execution's upstream call, counting it in flight meanwhile. The span
    /// it runs in (the forward's), when sampled, is its bucket's exemplar.
    pub(crate) async fn upstream_call<T>(&self, policy: &str, call: impl Future<Output = T>) -> T {
        // A guard, so that a request cancelled mid-call still leaves the gauge right.
        struct InFlight<'a>(&'a IntGauge);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.dec();
            }
        }
        self.in_flight.inc();
        let _in_flight = InFlight(&self.in_flight);
        let started = Instant::now();
        let result = call.await;
        let took = started.elapsed().as_secs_f64();
        self.per_policy
            .upstream_duration(policy, took, SampledIds::current());
        result
    }

    /// One operation store call: how long it took, and whether it failed; `ids`: its span,
    /// when sampled (the exemplar).
    pub(crate) fn store_call(
        &self,
        call: StoreCall,
        took: Duration,
        failed: bool,
        ids: Option<SampledIds>,
    ) {
        self.store_duration.observe(call, took.as_secs_f64(), ids);
        if failed {
            self.store_errors.with_label_values(&[call.as_str()]).inc();
        }
    }

    /// A proxied request finished; `status` is what was written downstream, if anything.
    /// A request for an operation declared `declared` in `Poppy-Extensions`.
    pub(crate) fn declared(&self, declared: crate::protocol::Declared) {
        self.declared_versions.count(declared);
    }

    pub(crate) fn passthrough(&self, status: Option<u16>) {
        self.passthrough
            .with_label_values(&[status_class(status)])
            .inc();
    }

    pub(crate) fn reload(&self, result: ReloadResult) {
        self.reloads.with_label_values(&[result.as_str()]).inc();
        self.last_reload_successful
            .set(i64::from(result == ReloadResult::Success));
    }

    /// A limit refused a request or closed a connection.
    pub(crate) fn limit_hit(&self, limit: Limit) {
        self.limits_hit.with_label_values(&[limit.as_str()]).inc();
    }

    /// Connections open now.
    pub(crate) fn connections_open(&self, open: usize) {
        self.connections_open
            .set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// The connection caps in force (see `crate::fds`).
    pub(crate) fn connection_caps(&self, connections: usize, upstream: usize) {
        self.connections_max
            .set(i64::try_from(connections).unwrap_or(i64::MAX));
        self.upstream_connections_max
            .set(i64::try_from(upstream).unwrap_or(i64::MAX));
    }

    /// Requests holding an upstream connection now.
    pub(crate) fn upstream_connections_in_use(&self, in_use: usize) {
        self.upstream_connections_in_use
            .set(i64::try_from(in_use).unwrap_or(i64::MAX));
    }

    /// A claim refused because `memory://` is full.
    pub(crate) fn store_full(&self) {
        self.store_full.inc();
    }

    /// The number of findings of the last durability check.
    pub(crate) fn store_durability_problems(&self, count: usize) {
        self.store_durability_problems
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// The store's current count of unresolved unknown operations (read on every scrape).
    pub(crate) fn operations_unknown(&self, count: u64) {
        self.operations_unknown
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// The route names the proxy's requests are counted by (`none` is added: no route matched).
    pub(crate) fn set_routes<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        self.requests
            .set_routes(names.into_iter().chain(std::iter::once("none")));
    }

    /// One request the proxy listener answered (or, `status` `None`, could not answer).
    pub(crate) fn request(
        &self,
        route: &str,
        method: &http::Method,
        status: Option<u16>,
        took: Duration,
        ids: Option<SampledIds>,
    ) {
        self.requests
            .observe(route, method, status, took.as_secs_f64(), ids);
    }

    /// Every metric, in the text exposition or in OpenMetrics (with exemplars and `# EOF`).
    pub(crate) fn encode(&self, format: Format) -> Result<Vec<u8>, std::fmt::Error> {
        use prometheus_client::encoding::{prometheus_text, text};
        use std::sync::atomic::Ordering::Relaxed;
        let mut out = String::with_capacity(self.page_size.load(Relaxed) * 9 / 8);
        match format {
            Format::Text => prometheus_text::encode(&mut out, &self.exposition)?,
            Format::OpenMetrics => text::encode(&mut out, &self.exposition)?,
        }
        self.page_size.store(out.len(), Relaxed);
        Ok(out.into_bytes())
    }
}

#[cfg(test)]
impl Metrics {
    /// [`Metrics::encode`], for tests.
    #[allow(clippy::unwrap_used)]
    pub(crate) fn render(&self, format: Format) -> Vec<u8> {
        self.encode(format).unwrap()
    }
}
