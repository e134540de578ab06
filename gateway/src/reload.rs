//! Policy reload on SIGHUP or `POST /reload` on the admin listener: re-read gateway.toml and its policy files, and put the new
//! policies in force if, and only if, everything validates. A reload that fails keeps the
//! running policies and logs every problem with its file, line and column.
//!
//! Only policies reload. The listeners, the upstream, the store and the rest are built once at
//! startup; when they changed in the file, the reload says so and they apply after a restart.
//!
//! pingora's `run_forever` owns SIGTERM, SIGINT and SIGQUIT; SIGHUP is free, and this runs as a
//! pingora background service so it starts and stops with the server.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::ServiceReadyNotifier;
use pingora::services::background::BackgroundService;

use crate::config::{self, Config, ConfigErrors};
use crate::metrics::{Metrics, ReloadResult};
use crate::policy::{LivePolicies, PolicySet};

pub(crate) struct PolicyReloader {
    path: PathBuf,
    /// The settings only a restart applies, as the process started with them.
    started_with: RestartSettings,
    /// Every route's policies together (the admin API's view).
    policies: LivePolicies,
    /// Each route's own policies, by route name: what its requests are matched against.
    routes: Vec<(String, LivePolicies)>,
    metrics: Arc<Metrics>,
    /// One reload at a time (SIGHUP and `POST /reload` may race): each applies what it read,
    /// so an older read never replaces a newer one.
    serial: std::sync::Mutex<()>,
}

/// What a reload that applied did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reloaded {
    /// The policy names now in force.
    pub(crate) policies: Vec<String>,
    /// Sections of gateway.toml (other than `policies`) that changed since startup: they
    /// apply only after a restart.
    pub(crate) restart_needed_for: Vec<&'static str>,
}

impl PolicyReloader {
    pub(crate) fn new(
        config: &Config,
        policies: LivePolicies,
        metrics: Arc<Metrics>,
    ) -> PolicyReloader {
        PolicyReloader {
            path: config.path.clone(),
            started_with: RestartSettings::of(config),
            policies,
            routes: Vec::new(),
            metrics,
            serial: std::sync::Mutex::new(()),
        }
    }

    /// The routes whose policies a reload replaces, by name.
    pub(crate) fn with_routes(mut self, routes: Vec<(String, LivePolicies)>) -> PolicyReloader {
        self.routes = routes;
        self
    }

    /// Load the files again and apply their policies if they validate. Counts the result.
    /// Blocking (file reads): call it off the async threads.
    pub(crate) fn reload(&self) -> Result<Reloaded, ConfigErrors> {
        // A panic in another reload left nothing half-applied (replace is one swap).
        let _serial = self.serial.lock().unwrap_or_else(|e| e.into_inner());
        let config = match config::load(&self.path) {
            Ok(config) => config,
            Err(errors) => {
                self.metrics.reload(ReloadResult::Failure);
                return Err(errors);
            }
        };
        let names: Vec<String> = config.policies.iter().map(|p| p.name.clone()).collect();
        self.metrics.policies(names.iter().map(String::as_str));
        let restart_needed_for = self.started_with.changed_in(&RestartSettings::of(&config));
        // Routes themselves only change on a restart (RestartSettings says so); the policies
        // of every route that is still configured are replaced, each with its own.
        for (name, live) in &self.routes {
            if let Some(route) = config.routes.iter().find(|r| &r.name == name) {
                live.replace(route.policies.clone());
            }
        }
        self.policies.replace(config.policies);
        self.metrics.reload(ReloadResult::Success);
        Ok(Reloaded {
            policies: names,
            restart_needed_for,
        })
    }

    /// Reload off the async threads and log the outcome: what SIGHUP and `POST /reload`
    /// (`cause`) both run. On failure, every problem as text; the running policies are kept.
    pub(crate) async fn reload_and_log(
        self: &Arc<Self>,
        cause: &'static str,
    ) -> Result<Reloaded, Vec<String>> {
        tracing::info!(config = %self.path.display(), cause, "reloading policies");
        let this = Arc::clone(self);
        let outcome = match tokio::task::spawn_blocking(move || this.reload()).await {
            Ok(outcome) => outcome
                .map_err(|errors| errors.0.iter().map(ToString::to_string).collect::<Vec<_>>()),
            Err(e) => {
                self.metrics.reload(ReloadResult::Failure);
                tracing::error!(error = %e, "policy reload did not finish: the running policies are kept");
                return Err(vec![format!("the reload did not finish: {e}")]);
            }
        };
        match &outcome {
            Ok(reloaded) => {
                tracing::info!(
                    count = reloaded.policies.len(),
                    policies = %reloaded.policies.join(", "),
                    "policies reloaded"
                );
                if !reloaded.restart_needed_for.is_empty() {
                    tracing::warn!(
                        changed = %reloaded.restart_needed_for.join(", "),
                        "gateway.toml settings other than `policies` changed: only policies reload, restart the gateway to apply the rest"
                    );
                }
            }
            Err(problems) => {
                for problem in problems {
                    tracing::error!(problem = %problem, "policy reload: invalid");
                }
                tracing::error!(
                    problems = problems.len(),
                    "policy reload failed: the running policies are kept"
                );
            }
        }
        outcome
    }
}

/// Why the reloader is an `Arc`: each reload hands a clone to a blocking thread.
pub(crate) struct ReloadService(Arc<PolicyReloader>);

impl PolicyReloader {
    /// The pingora background service that reloads on SIGHUP (the admin listener's
    /// `POST /reload` holds the same reloader).
    pub(crate) fn service(self: &Arc<Self>) -> ReloadService {
        ReloadService(Arc::clone(self))
    }
}

#[async_trait]
impl BackgroundService for ReloadService {
    /// Ready once SIGHUP is ours: from then on it reloads instead of ending the process.
    async fn start_with_ready_notifier(
        &self,
        mut shutdown: ShutdownWatch,
        ready: ServiceReadyNotifier,
    ) {
        let hangups = crate::hangup::hangups("policies will not reload");
        ready.notify_ready();
        let Some(mut hangups) = hangups else {
            return;
        };
        while crate::hangup::next(&mut hangups, &mut shutdown).await {
            // The outcome is logged; there is no one else to tell.
            let _ = self.0.reload_and_log("SIGHUP").await;
        }
    }
}

/// The routes as configured, without what a reload applies (their policies).
fn routes_without_policies(config: &Config) -> Vec<crate::config::RouteConfig> {
    config
        .routes
        .iter()
        .cloned()
        .map(|mut route| {
            route.policies = PolicySet::default();
            route.policy_files.clear();
            route
        })
        .collect()
}

/// The settings a reload cannot apply, compared by their `Debug` text so that sections added
/// to [`Config`] later are covered without a change here.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RestartSettings {
    sections: Vec<(&'static str, String)>,
    /// Everything but the policies, for sections not named in `sections`.
    rest: String,
}

impl RestartSettings {
    fn of(config: &Config) -> RestartSettings {
        let sections = vec![
            ("[server]", format!("{:?}", config.server)),
            (
                "[upstream] and [[route]]",
                format!("{:?}", routes_without_policies(config)),
            ),
            ("[admin]", format!("{:?}", config.admin_listen)),
            ("[store]", format!("{:?}", config.store)),
            ("[session]", format!("{:?}", config.session)),
            ("[well_known]", format!("{:?}", config.well_known)),
            ("[protocol]", format!("{:?}", config.operations_versions)),
        ];
        let mut rest = config.clone();
        rest.policies = PolicySet::default();
        rest.policy_files.clear();
        rest.routes = routes_without_policies(config);
        RestartSettings {
            sections,
            rest: format!("{rest:?}"),
        }
    }

    fn changed_in(&self, now: &RestartSettings) -> Vec<&'static str> {
        let mut changed: Vec<&'static str> = self
            .sections
            .iter()
            .zip(&now.sections)
            .filter(|(before, after)| before.1 != after.1)
            .map(|(before, _)| before.0)
            .collect();
        if changed.is_empty() && self.rest != now.rest {
            changed.push("other settings");
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::Path;

    const GATEWAY: &str = concat!(
        poppy_e2e::minimal_gateway_toml!(),
        "\n[session]\nverify = \"off\"\n"
    );

    fn policy(name: &str, path: &str) -> String {
        format!(
            r#"[[operation]]
name = "{name}"
method = "POST"
path = "{path}"
id_prefix = "x"
expires_in = "15m"
same_action = ["id"]
summary = "Do {{id}}."
[operation.terms]
id = {{ path = "id" }}
"#
        )
    }

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn setup() -> (
        tempfile::TempDir,
        PolicyReloader,
        LivePolicies,
        Arc<Metrics>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("policies")).unwrap();
        write(dir.path(), "gateway.toml", GATEWAY);
        write(dir.path(), "policies/a.toml", &policy("old", "/old/{id}"));
        let config = config::load(&dir.path().join("gateway.toml")).unwrap();
        let live = LivePolicies::new(config.policies.clone());
        let metrics = Arc::new(Metrics::new().unwrap());
        let reloader = PolicyReloader::new(&config, live.clone(), Arc::clone(&metrics));
        (dir, reloader, live, metrics)
    }

    fn metric(metrics: &Metrics, series: &str) -> String {
        let text = String::from_utf8(metrics.render(crate::metrics::Format::Text)).unwrap();
        text.lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn a_broken_reload_keeps_the_running_policies() {
        let (dir, reloader, live, metrics) = setup();
        write(dir.path(), "policies/a.toml", "[[operation]]\nname = \n");
        let errors = reloader.reload().unwrap_err();
        let text = errors.to_string();
        assert!(text.contains("a.toml:2:"), "{text}");
        assert!(live.snapshot().find_route("POST", "/old/1").is_some());
        assert_eq!(
            metric(&metrics, "poppy_config_reloads_total{result=\"failure\"}"),
            "poppy_config_reloads_total{result=\"failure\"} 1"
        );
        assert_eq!(
            metric(&metrics, "poppy_config_last_reload_successful"),
            "poppy_config_last_reload_successful 0"
        );
    }

    #[test]
    fn a_good_reload_swaps_the_policies_and_names_restart_only_changes() {
        let (dir, reloader, live, metrics) = setup();
        write(dir.path(), "policies/b.toml", &policy("new", "/new/{id}"));
        let reloaded = reloader.reload().unwrap();
        assert_eq!(reloaded.policies, vec!["old", "new"]);
        assert!(reloaded.restart_needed_for.is_empty());
        assert!(live.snapshot().find_route("POST", "/new/1").is_some());
        assert_eq!(
            metric(&metrics, "poppy_policies_loaded"),
            "poppy_policies_loaded 2"
        );

        write(
            dir.path(),
            "gateway.toml",
            &GATEWAY.replace("127.0.0.1:8080", "127.0.0.1:8081"),
        );
        let reloaded = reloader.reload().unwrap();
        assert_eq!(reloaded.restart_needed_for, vec!["[server]"]);
        assert_eq!(
            metric(&metrics, "poppy_config_reloads_total{result=\"success\"}"),
            "poppy_config_reloads_total{result=\"success\"} 2"
        );
    }
}
