//! Prometheus metrics: one registry, typed handles. Labels are bounded (policy names, fixed
//! outcome and reason words, store call names, status classes); operation IDs are never labels.
//! Every metric is documented in `docs/operations.md`; keep the two in sync.

mod asked;
mod declared;
mod histogram;
mod labels;
mod openmetrics;
mod per_policy;
mod requests;
mod store_duration;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::telemetry::SampledIds;
use asked::AskedOnce;
use declared::DeclaredVersions;
use per_policy::PerPolicy;
use requests::Requests;
use store_duration::StoreDuration;

// The core's words for what became of a request (operation/outcome.rs); metrics count them.
pub(crate) use crate::operation::outcome::{Outcome, Rejection, Unheld};
pub(crate) use labels::{Limit, ReloadResult, StoreCall, status_class};
pub(crate) use openmetrics::Format;

pub(crate) struct Metrics {
    registry: Registry,
    /// Requests, asks, rejections, approval delays and upstream times, by policy.
    per_policy: PerPolicy,
    asked_once: AskedOnce,
    /// Registered nowhere: rendered into the registry's text where the registry would have.
    store_duration: StoreDuration,
    /// Every request the proxy listener answered, by route, method and status class.
    requests: Requests,
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
        let metrics = Metrics {
            per_policy: PerPolicy::new(),
            asked_once: AskedOnce::default(),
            store_duration: StoreDuration::new(),
            requests: Requests::new(),
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

    /// Every metric, in the text exposition or in OpenMetrics (with exemplars).
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

    pub(crate) fn render(&self, format: Format) -> Vec<u8> {
        // Encoding cannot fail for well-formed metric families.
        let registry = TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_default();
        let policies = self.per_policy.render(format);
        let mut out = String::with_capacity(registry.len() + 4096 + policies.len());
        match format {
            Format::Text => {
                // Where the registry wrote it when it was one of its families (it orders
                // them by name), so that the text stays as it was.
                // Our own families go where the registry would have put them (it orders
                // them by name), so that the text stays as it was.
                let requests_at = family_after(&registry, requests::NAME);
                let store_at = family_after(&registry, store_duration::NAME);
                out.push_str(&registry[..requests_at]);
                self.requests.render(&mut out, format);
                out.push_str(&registry[requests_at..store_at]);
                self.store_duration.render(&mut out, format);
                out.push_str(&registry[store_at..]);
            }
            Format::OpenMetrics => {
                openmetrics::from_text(&registry, &mut out);
                self.store_duration.render(&mut out, format);
                self.requests.render(&mut out, format);
            }
        }
        // The per-policy families after the registry's (neither format orders families).
        out.push_str(&policies);
        if format == Format::OpenMetrics {
            out.push_str("# EOF\n");
        }
        out.into_bytes()
    }
}

/// Where the first family named after `name` starts in a text exposition (its end if none).
fn family_after(text: &str, name: &str) -> usize {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let head = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "));
        if head.is_some_and(|rest| rest.split(' ').next().is_some_and(|family| family > name)) {
            return at;
        }
        at += line.len();
    }
    text.len()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn text(metrics: &Metrics) -> String {
        String::from_utf8(metrics.render(Format::Text)).unwrap()
    }

    #[test]
    fn the_text_orders_the_registrys_families_as_it_did() {
        let metrics = Metrics::new().unwrap();
        metrics.store_call(StoreCall::Claim, Duration::from_micros(300), false, None);
        metrics.set_routes(["default"]);
        metrics.request(
            "default",
            &http::Method::GET,
            Some(200),
            Duration::from_millis(3),
            None,
        );
        let text = text(&metrics);
        let families: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# HELP ")?.split(' ').next())
            .collect();
        assert!(families.contains(&"poppy_store_duration_seconds"));
        assert!(families.contains(&"poppy_http_request_duration_seconds"));
        assert!(
            families.windows(2).all(|pair| pair[0] < pair[1]),
            "{families:?}"
        );
        assert!(
            text.contains("poppy_store_duration_seconds_bucket{call=\"claim\",le=\"0.0005\"} 1\n")
        );
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn openmetrics_has_the_same_series_with_exemplars() {
        let metrics = Metrics::new().unwrap();
        metrics.policies(["exchange"]);
        let ids = SampledIds {
            trace_id: 0xabc,
            span_id: 0xdef,
        };
        metrics.store_call(
            StoreCall::Claim,
            Duration::from_micros(300),
            false,
            Some(ids),
        );
        metrics
            .per_policy
            .upstream_duration("exchange", 0.002, Some(ids));
        metrics.operation("exchange", Outcome::Performed);
        let page = String::from_utf8(metrics.render(Format::OpenMetrics)).unwrap();
        assert!(page.ends_with("\n# EOF\n"), "{page}");
        let exemplar = |le: &str| {
            format!(
                "{le}\"}} 1 # {{trace_id=\"00000000000000000000000000000abc\",span_id=\"0000000000000def\"}} "
            )
        };
        for line in [
            "# TYPE poppy_operations counter\n",
            "# HELP poppy_operations Requests for operations, by policy and outcome\n",
            "poppy_operations_total{operation=\"exchange\",outcome=\"performed\"} 1\n",
            "# TYPE poppy_store_errors counter\n",
            "# TYPE poppy_store_duration_seconds histogram\n# UNIT poppy_store_duration_seconds seconds\n",
            "# TYPE process_cpu_seconds counter\n# UNIT process_cpu_seconds seconds\n",
            "poppy_approval_delay_seconds_bucket{operation=\"exchange\",le=\"1.0\"} 0\n",
            &exemplar("poppy_store_duration_seconds_bucket{call=\"claim\",le=\"0.0005"),
            &exemplar("poppy_upstream_duration_seconds_bucket{operation=\"exchange\",le=\"0.0025"),
        ] {
            assert!(page.contains(line), "no {line} in\n{page}");
        }
        assert!(!page.contains("# TYPE poppy_operations_total"));
        // The text has every series the OpenMetrics page has, no more.
        let series = |page: &str| -> Vec<String> {
            page.lines()
                .filter(|line| !line.starts_with('#'))
                .map(|line| {
                    let (series, _) = line
                        .split_once("} ")
                        .unwrap_or(line.split_once(' ').unwrap());
                    series.replace(".0\"", "\"")
                })
                .filter(|series| !series.starts_with("process_"))
                .collect()
        };
        let mut text = series(&text(&metrics));
        let mut om = series(&page);
        text.sort();
        om.sort();
        assert_eq!(text, om);
    }

    #[test]
    fn series_exist_before_anything_happens() {
        let metrics = Metrics::new().unwrap();
        metrics.policies(["exchange"]);
        let text = text(&metrics);
        for series in [
            r#"poppy_operations_total{operation="exchange",outcome="performed"} 0"#,
            r#"poppy_approvals_rejected_total{operation="exchange",reason="stale_generation"} 0"#,
            r#"poppy_operations_asked_total{operation="exchange"} 0"#,
            r#"poppy_unheld_requests_total{operation="exchange",reason="no_session"} 0"#,
            r#"poppy_unheld_requests_total{operation="exchange",reason="company_client"} 0"#,
            r#"poppy_operations_total{operation="exchange",outcome="upstream_unavailable"} 0"#,
            r#"poppy_upstream_duration_seconds_bucket{operation="exchange",le="0.001"} 0"#,
            r#"poppy_build_info{version=""#,
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            r#"poppy_approval_delay_seconds_count{operation="exchange"} 0"#,
            r#"poppy_upstream_duration_seconds_count{operation="exchange"} 0"#,
            r#"poppy_store_duration_seconds_count{call="claim"} 0"#,
            r#"poppy_store_errors_total{call="claim"} 0"#,
            r#"poppy_passthrough_requests_total{class="5xx"} 0"#,
            r#"poppy_config_reloads_total{result="failure"} 0"#,
            "poppy_operations_in_flight 0",
            "poppy_config_last_reload_successful 1",
            "poppy_policies_loaded 1",
            "poppy_log_lines_suppressed_total ",
            r#"poppy_token_introspections_total{result="rate_limited"}"#,
        ] {
            assert!(text.contains(series), "missing {series} in\n{text}");
        }
        assert!(!text.contains("operation_id"));
    }

    #[test]
    fn repeated_asks_for_one_operation_count_once() {
        let metrics = Metrics::new().unwrap();
        metrics.policies(["exchange"]);
        let window = Duration::from_secs(900);
        for _ in 0..3 {
            metrics.asked("exchange", "exc_a", window);
        }
        metrics.asked("exchange", "exc_b", window);
        assert!(text(&metrics).contains(r#"poppy_operations_asked_total{operation="exchange"} 2"#));
    }

    #[test]
    fn approval_delay_is_measured_from_minting() {
        let metrics = Metrics::new().unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        // Minted 40 s ago with a 15 min window.
        metrics.approval_delay("exchange", now - 40 + 900, Duration::from_secs(900));
        let text = text(&metrics);
        assert!(
            text.contains(r#"poppy_approval_delay_seconds_bucket{operation="exchange",le="30"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"poppy_approval_delay_seconds_bucket{operation="exchange",le="60"} 1"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn upstream_calls_are_in_flight_while_they_run() {
        let metrics = Metrics::new().unwrap();
        let seen = metrics
            .upstream_call("exchange", async { metrics.in_flight.get() })
            .await;
        assert_eq!(seen, 1);
        assert_eq!(metrics.in_flight.get(), 0);
        assert!(
            text(&metrics)
                .contains(r#"poppy_upstream_duration_seconds_count{operation="exchange"} 1"#)
        );
    }

    #[test]
    fn a_failed_reload_is_remembered_until_one_succeeds() {
        let metrics = Metrics::new().unwrap();
        metrics.reload(ReloadResult::Failure);
        assert_eq!(metrics.last_reload_successful.get(), 0);
        metrics.reload(ReloadResult::Success);
        assert_eq!(metrics.last_reload_successful.get(), 1);
        let text = text(&metrics);
        assert!(text.contains(r#"poppy_config_reloads_total{result="failure"} 1"#));
        assert!(text.contains(r#"poppy_config_reloads_total{result="success"} 1"#));
    }
}
