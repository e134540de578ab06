//! A private `prometheus` server (Debian's package; `scripts/prereqs.sh test` installs it) on a
//! free port, scraping one gateway's admin listener every second, killed on drop. The dashboard
//! test evaluates the dashboard's own queries on it.

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

    /// An instant query: each series' labels and value; `None` if the query failed.
    pub async fn query(&self, promql: &str) -> Option<Vec<(Value, f64)>> {
        let url = format!("http://127.0.0.1:{}/api/v1/query", self.port);
        let answer: Value = self
            .http
            .get(url)
            .query(&[("query", promql)])
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        if answer["status"] != "success" {
            return None;
        }
        let series = answer["data"]["result"].as_array()?;
        Some(
            series
                .iter()
                .filter_map(|s| {
                    let value = s["value"][1].as_str()?.parse().ok()?;
                    Some((s["metric"].clone(), value))
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
