//! A private `prometheus` server (Debian's package; `scripts/prereqs.sh test` installs it) on a
//! free port, scraping one gateway's admin listener every second, killed on drop. The dashboard
//! test evaluates the dashboard's own queries on it; the exemplars test reads the exemplars it
//! stored (`--enable-feature=exemplar-storage`).

use std::fs::File;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use crate::gateway::http_client;
use crate::ports::free_port;
use crate::wait;

/// The scrape job's name: what the dashboard's `$job` variable selects.
pub const JOB: &str = "poppy-gateway";
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Prometheus {
    port: u16,
    dir: TempDir,
    child: Child,
    http: reqwest::Client,
}

impl Prometheus {
    /// Start it scraping `target` (a gateway's admin address), and wait until it is ready and
    /// has scraped the target once.
    pub async fn scraping(target: SocketAddr) -> Prometheus {
        Prometheus::scraping_with(target, &[]).await
    }

    /// [`Prometheus::scraping`], with more command-line arguments (`--enable-feature=…`).
    pub async fn scraping_with(target: SocketAddr, args: &[&str]) -> Prometheus {
        let dir = tempfile::Builder::new()
            .prefix("poppy-e2e-prometheus-")
            .tempdir()
            .unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
                 - job_name: {JOB}\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("start prometheus: {e} (install it: scripts/prereqs.sh test, or apt-get install prometheus)")
            });
        let prometheus = Prometheus {
            port,
            dir,
            child,
            http: http_client(Duration::from_secs(5)),
        };
        let up = wait::until_some(START_TIMEOUT, || async {
            let up = prometheus.query(&format!("up{{job=\"{JOB}\"}}")).await?;
            (up.first()?.1 == 1.0).then_some(())
        })
        .await;
        assert!(
            up.is_some(),
            "prometheus did not scrape {target} within {START_TIMEOUT:?}:\n{}",
            prometheus.log()
        );
        prometheus
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/{endpoint}` with these parameters: its `data`; `None` if it failed.
    async fn api(&self, endpoint: &str, params: &[(&str, String)]) -> Option<Value> {
        let url = format!("http://127.0.0.1:{}/api/v1/{endpoint}", self.port);
        let answer: Value = self
            .http
            .get(url)
            .query(params)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (answer["status"] == "success").then(|| answer["data"].clone())
    }

    /// An instant query: each series' labels and value; `None` if the query failed.
    pub async fn query(&self, promql: &str) -> Option<Vec<(Value, f64)>> {
        let data = self.api("query", &[("query", promql.to_owned())]).await?;
        Some(
            data["result"]
                .as_array()?
                .iter()
                .filter_map(|s| {
                    let value = s["value"][1].as_str()?.parse().ok()?;
                    Some((s["metric"].clone(), value))
                })
                .collect(),
        )
    }

    /// The exemplars stored for the series `promql` selects in the last hour
    /// (`/api/v1/query_exemplars`): each series' labels and its exemplars; `None` if the query
    /// failed.
    pub async fn exemplars(&self, promql: &str) -> Option<Vec<(Value, Vec<Value>)>> {
        let now = wait::unix_now();
        let params = [
            ("query", promql.to_owned()),
            ("start", format!("{:.3}", now - 3600.0)),
            ("end", format!("{:.3}", now + 60.0)),
        ];
        let data = self.api("query_exemplars", &params).await?;
        Some(
            data.as_array()?
                .iter()
                .map(|s| {
                    let exemplars = s["exemplars"].as_array().cloned().unwrap_or_default();
                    (s["seriesLabels"].clone(), exemplars)
                })
                .collect(),
        )
    }

    /// Wait (at most 30 s) until `promql` evaluates to exactly one series of value `expected`,
    /// i.e. until Prometheus has scraped what the test did.
    pub async fn wait_for(&self, promql: &str, expected: f64) {
        let seen = wait::until_some(START_TIMEOUT, || async {
            let result = self.query(promql).await?;
            (result.len() == 1 && result[0].1 == expected).then_some(())
        })
        .await;
        assert!(
            seen.is_some(),
            "`{promql}` did not reach {expected}: {:?}",
            self.query(promql).await
        );
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
