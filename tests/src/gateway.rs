//! The real `poppy-gateway` binary as a child process, on free ports, with a config and
//! policies written to a temporary folder.

use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::agent::Request;
use crate::answer::Answer;
use crate::metrics::Metrics;
use crate::ports::{self, free_port};
use crate::{binaries, policies, rawhttp};

/// `POPPY_GATEWAY_KEYS` of every test gateway unless a test says otherwise, so two gateways,
/// or one restarted, verify each other's revisions.
pub const TEST_KEYS: &str = "poppy-e2e-test-signing-key-0123456789";

const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Timeout of every HTTP call a test makes.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of the gateway's log printed when a test fails.
const LOG_TAIL_LINES: usize = 400;

/// Builds the config folder and starts the gateway.
#[derive(Debug, Clone)]
pub struct GatewayBuilder {
    upstream_url: String,
    store_url: String,
    policies: Vec<(String, String)>,
    keys: Option<String>,
    max_body_bytes: u64,
    upstream_timeout: String,
    upstream_connect_timeout: String,
    extra_config: String,
    /// Lines of the `[store]` table after `url`.
    store_lines: String,
    server_lines: String,
    /// Lines of the `[upstream]` table after its timeouts.
    upstream_lines: String,
    /// The `[session]` table's lines: `verify = "off"` unless a test says otherwise (the
    /// tests' Sessions are unsigned JWTs; the upstream would verify them).
    session_lines: String,
    env: Vec<(String, String)>,
    args: Vec<String>,
    binary: Option<PathBuf>,
    /// Run the gateway with this limit on open files (soft and hard), through `prlimit`.
    open_files_limit: Option<u64>,
    /// `[conversations]` on this port, with [`CONVERSATIONS_TOKEN`] in its environment.
    conversations_port: Option<u16>,
    /// Write `[upstream]` and the top-level `policies` (the default route); off for configs
    /// of `[[route]]`s only.
    default_route: bool,
}

/// The service token of a test gateway's `[conversations]` (from `POPPY_E2E_SERVICE_TOKEN`).
pub const CONVERSATIONS_TOKEN: &str = "poppy-e2e-conversations-service-token";

/// A written config folder (kept while this value lives).
pub struct ConfigDir {
    pub dir: TempDir,
    pub config: PathBuf,
    pub listen_port: u16,
    pub admin_port: u16,
}

impl ConfigDir {
    /// Run `poppy-gateway COMMAND --config <config> args…` (`check`, `explain`) with the test
    /// keys, bounded.
    pub fn run(&self, command: &str, args: &[&str]) -> crate::Run {
        let config = self.config.to_string_lossy();
        let mut all = vec![command, "--config", &config];
        all.extend_from_slice(args);
        crate::run_binary(
            &binaries::gateway(),
            &all,
            "",
            &[("POPPY_GATEWAY_KEYS", crate::TEST_KEYS)],
            Duration::from_secs(20),
        )
    }
}

impl GatewayBuilder {
    /// In front of `upstream_url`, with `memory://`, the default policies and [`TEST_KEYS`].
    pub fn new(upstream_url: &str) -> GatewayBuilder {
        GatewayBuilder {
            upstream_url: upstream_url.to_owned(),
            store_url: "memory://".to_owned(),
            policies: Vec::new(),
            keys: Some(TEST_KEYS.to_owned()),
            max_body_bytes: 1024 * 1024,
            upstream_timeout: "30s".to_owned(),
            upstream_connect_timeout: "2s".to_owned(),
            extra_config: String::new(),
            store_lines: String::new(),
            server_lines: String::new(),
            upstream_lines: String::new(),
            session_lines: "verify = \"off\"\n".to_owned(),
            env: Vec::new(),
            args: Vec::new(),
            binary: None,
            open_files_limit: None,
            conversations_port: None,
            default_route: true,
        }
    }

    /// Leave out `[upstream]` and the top-level `policies`: the config's `[[route]]`s (in
    /// [`Self::extra_config`]) are all there is.
    pub fn without_default_route(mut self) -> GatewayBuilder {
        self.default_route = false;
        self
    }

    /// Run the operations service for Company Agents (`[conversations]`) on a free port,
    /// its token [`CONVERSATIONS_TOKEN`] read from the environment.
    pub fn conversations(mut self) -> GatewayBuilder {
        self.conversations_port = Some(free_port());
        self
    }

    /// `[store] url`: `memory://` or `redis://127.0.0.1:P/0`.
    pub fn store_url(mut self, url: &str) -> GatewayBuilder {
        self.store_url = url.to_owned();
        self
    }

    /// `[store] wait_replicas` and `wait_timeout` (e.g. `"100ms"`).
    pub fn store_wait_replicas(mut self, replicas: u32, timeout: &str) -> GatewayBuilder {
        self.store_lines.push_str(&format!(
            "wait_replicas = {replicas}\nwait_timeout = \"{timeout}\"\n"
        ));
        self
    }

    /// Add a policy file `policies/<file_name>`. Once any is added, the default policies are
    /// not written.
    pub fn policy(mut self, file_name: &str, text: &str) -> GatewayBuilder {
        self.policies.push((file_name.to_owned(), text.to_owned()));
        self
    }

    /// `POPPY_GATEWAY_KEYS`, or `None` to run without it.
    pub fn keys(mut self, keys: Option<&str>) -> GatewayBuilder {
        self.keys = keys.map(str::to_owned);
        self
    }

    /// Another `[server]` key, its value written as TOML (`"30s"` with the quotes, `4096`).
    pub fn server_option(mut self, key: &str, toml_value: &str) -> GatewayBuilder {
        self.server_lines
            .push_str(&format!("{key} = {toml_value}\n"));
        self
    }

    /// `[server] max_body_bytes`.
    pub fn max_body_bytes(mut self, bytes: u64) -> GatewayBuilder {
        self.max_body_bytes = bytes;
        self
    }

    /// `[upstream] timeout`, e.g. `"1s"`.
    /// `[upstream] connect_timeout` (default 2s). With `timeout` it sets the lease of a claim:
    /// connect_timeout + timeout + 1 s.
    pub fn upstream_connect_timeout(mut self, timeout: &str) -> GatewayBuilder {
        self.upstream_connect_timeout = timeout.to_owned();
        self
    }

    pub fn upstream_timeout(mut self, timeout: &str) -> GatewayBuilder {
        self.upstream_timeout = timeout.to_owned();
        self
    }

    /// The lines of `[session]`, replacing the default `verify = "off"`.
    pub fn session(mut self, lines: &str) -> GatewayBuilder {
        self.session_lines = format!("{}\n", lines.trim_end());
        self
    }

    /// TOML appended to gateway.toml (whole tables, e.g. `[mcp]`).
    pub fn extra_config(mut self, toml: &str) -> GatewayBuilder {
        self.extra_config.push('\n');
        self.extra_config.push_str(toml);
        self.extra_config.push('\n');
        self
    }

    /// An extra environment variable for the gateway process.
    pub fn env(mut self, name: &str, value: &str) -> GatewayBuilder {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// An extra command-line argument (after `--config FILE`), e.g. `--log-format`.
    pub fn arg(mut self, arg: &str) -> GatewayBuilder {
        self.args.push(arg.to_owned());
        self
    }

    /// Run the gateway with at most `limit` open files (`prlimit --nofile=limit:limit`, which
    /// execs it: the pid stays the gateway's).
    pub fn open_files_limit(mut self, limit: u64) -> GatewayBuilder {
        self.open_files_limit = Some(limit);
        self
    }

    /// Run another binary than [`binaries::gateway`] (the harness self-test runs a fake).
    pub fn binary(mut self, path: &Path) -> GatewayBuilder {
        self.binary = Some(path.to_owned());
        self
    }

    /// Add lines to the `[upstream]` table.
    pub fn upstream_line(mut self, lines: &str) -> GatewayBuilder {
        self.upstream_lines.push_str(lines);
        self.upstream_lines.push('\n');
        self
    }

    /// The gateway.toml text for these ports.
    pub fn render(&self, listen_port: u16, admin_port: u16) -> String {
        let text = format!(
            r#"policies = ["policies/*.toml"]

[server]
listen = "127.0.0.1:{listen_port}"
max_body_bytes = {max_body}
{server_lines}
[upstream]
url = "{upstream}"
timeout = "{timeout}"
connect_timeout = "{connect_timeout}"
{upstream_lines}
[admin]
listen = "127.0.0.1:{admin_port}"

[session]
{session_lines}
[store]
url = "{store}"
{store_lines}{conversations}{extra}"#,
            max_body = self.max_body_bytes,
            server_lines = self.server_lines,
            upstream = self.upstream_url,
            timeout = self.upstream_timeout,
            connect_timeout = self.upstream_connect_timeout,
            upstream_lines = self.upstream_lines,
            store = self.store_url,
            store_lines = self.store_lines,
            session_lines = self.session_lines,
            conversations = self.conversations_port.map_or_else(String::new, |port| format!(
                "\n[conversations]\nlisten = \"127.0.0.1:{port}\"\ntoken_env = \"POPPY_E2E_SERVICE_TOKEN\"\n"
            )),
            extra = self.extra_config,
        );
        if self.default_route {
            return text;
        }
        // The same text without the default route's two parts.
        let text = text.replacen("policies = [\"policies/*.toml\"]\n", "", 1);
        let start = text.find("[upstream]\n").unwrap_or(text.len());
        let end = text[start..]
            .find("[admin]")
            .map_or(text.len(), |i| start + i);
        format!("{}{}", &text[..start], &text[end..])
    }

    /// Write gateway.toml and the policies to a new temporary folder, with free ports.
    pub fn write(&self) -> ConfigDir {
        let dir = tempfile::Builder::new()
            .prefix("poppy-e2e-gateway-")
            .tempdir()
            .expect("temporary folder for the gateway config");
        let policies_dir = dir.path().join("policies");
        std::fs::create_dir_all(&policies_dir).expect("create policies/");
        if self.policies.is_empty() {
            write_file(
                &policies_dir.join(policies::DEFAULT_FILE),
                policies::DEFAULT,
            );
        }
        for (name, text) in &self.policies {
            write_file(&policies_dir.join(name), text);
        }
        let (listen_port, admin_port) = two_ports();
        let config = dir.path().join("gateway.toml");
        write_file(&config, &self.render(listen_port, admin_port));
        ConfigDir {
            dir,
            config,
            listen_port,
            admin_port,
        }
    }

    /// Write the config, start the gateway, and wait until `/healthz` answers 200 and the
    /// proxy port accepts connections.
    pub fn start(self) -> Gateway {
        let ConfigDir {
            dir,
            config: _,
            listen_port,
            admin_port,
        } = self.write();
        let mut gateway = Gateway {
            builder: self,
            dir,
            listen_port,
            admin_port,
            child: None,
            http: http_client(HTTP_TIMEOUT),
            starts: 0,
        };
        gateway.boot();
        gateway
    }
}

fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn two_ports() -> (u16, u16) {
    let listen = free_port();
    loop {
        let admin = free_port();
        if admin != listen {
            return (listen, admin);
        }
    }
}

/// A reqwest client that never uses a proxy, with a timeout on every call.
pub fn http_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
        .expect("build the HTTP client")
}

enum StartError {
    Exited(ExitStatus),
    NotReady,
}

/// A running `poppy-gateway`; killed on drop (its log is printed if the test is failing).
pub struct Gateway {
    builder: GatewayBuilder,
    dir: TempDir,
    listen_port: u16,
    admin_port: u16,
    child: Option<Child>,
    http: reqwest::Client,
    starts: usize,
}

impl Gateway {
    /// The process id, while it runs (to read its RSS from `/proc`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The gateway's resident set in KiB, from `/proc`.
    pub fn rss_kib(&self) -> u64 {
        let pid = self.pid().expect("the gateway runs");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    /// `http://127.0.0.1:LISTEN`
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.listen_port)
    }

    /// `http://127.0.0.1:PORT` of the operations service for Company Agents (with
    /// [`GatewayBuilder::conversations`]).
    pub fn conversations_url(&self) -> String {
        let port = self
            .builder
            .conversations_port
            .expect("the gateway runs [conversations] (GatewayBuilder::conversations)");
        format!("http://127.0.0.1:{port}")
    }

    /// `http://127.0.0.1:ADMIN`
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }

    pub fn listen_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.listen_port))
    }

    pub fn admin_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin_port))
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("gateway.toml")
    }

    /// Where the policy files are (`policies/*.toml` next to gateway.toml).
    pub fn policies_dir(&self) -> PathBuf {
        self.dir.path().join("policies")
    }

    /// Send a signal (`HUP`, `TERM`, …) to the gateway process with `kill -s`.
    pub fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the gateway is running");
        let status = Command::new("kill")
            .args(["-s", signal, &child.id().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("kill -s {signal}: {e}"));
        assert!(
            status.success(),
            "kill -s {signal} {}: {status}",
            child.id()
        );
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("gateway.log")
    }

    /// Everything the gateway printed (stdout and stderr, every start).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL: no shutdown of any kind.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM: the gateway's graceful shutdown.
    pub fn terminate(&mut self) {
        if let Some(child) = self.child.as_ref() {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .expect("run kill -TERM");
            assert!(status.success(), "kill -TERM {} failed", child.id());
        }
    }

    /// Wait (at most `limit`) for the process to exit; its exit status, or `None` if it is
    /// still running.
    pub async fn wait_for_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            let child = self.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kill it and start it again with the same config (and ports, when they are still free).
    pub fn restart(&mut self) {
        self.kill();
        // Connections pooled to the old process are dead.
        self.http = http_client(HTTP_TIMEOUT);
        self.boot();
    }

    /// A cloneable client of this gateway's proxy port (for concurrent tasks). Take a new one
    /// after [`Gateway::restart`].
    pub fn client(&self) -> Client {
        Client {
            http: self.http.clone(),
            base: self.base_url(),
        }
    }

    /// [`Gateway::client`] whose requests may take up to `timeout` (requests the upstream
    /// holds for a while).
    pub fn patient_client(&self, timeout: Duration) -> Client {
        Client {
            http: http_client(timeout),
            base: self.base_url(),
        }
    }

    /// Send `request` to the proxy port.
    pub async fn send(&self, request: &Request) -> Answer {
        self.client().send(request).await
    }

    /// `GET path` on the admin port.
    pub async fn admin_get(&self, path: &str) -> Answer {
        Client {
            http: self.http.clone(),
            base: self.admin_url(),
        }
        .send(&Request::plain("GET", path))
        .await
    }

    /// `GET /metrics`, parsed.
    pub async fn metrics(&self) -> Metrics {
        let answer = self.admin_get("/metrics").await;
        answer.assert_status(200, "GET /metrics");
        Metrics::parse(&answer.text())
    }

    fn boot(&mut self) {
        match self.spawn_and_wait() {
            Ok(()) => {}
            Err(StartError::Exited(_)) => {
                // Most likely a port taken between choosing and binding it: once more, on
                // new ports.
                let (listen, admin) = two_ports();
                self.listen_port = listen;
                self.admin_port = admin;
                if self.builder.conversations_port.is_some() {
                    self.builder.conversations_port = Some(free_port());
                }
                write_file(&self.config_path(), &self.builder.render(listen, admin));
                match self.spawn_and_wait() {
                    Ok(()) => {}
                    Err(StartError::Exited(status)) => panic!(
                        "poppy-gateway exited during startup ({status}), twice. Its output:\n{}",
                        self.log()
                    ),
                    Err(StartError::NotReady) => self.not_ready(),
                }
            }
            Err(StartError::NotReady) => self.not_ready(),
        }
    }

    fn not_ready(&mut self) -> ! {
        self.kill();
        panic!(
            "poppy-gateway did not become ready within {READY_TIMEOUT:?} (GET {}/healthz → 200 \
             and the proxy port accepting). Its output:\n{}",
            self.admin_url(),
            self.log()
        );
    }

    fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        self.starts += 1;
        let mut log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open the gateway log");
        let _ = writeln!(
            log,
            "===== poppy-e2e: start #{} (listen {}, admin {}) =====",
            self.starts, self.listen_port, self.admin_port
        );
        let log_err = log.try_clone().expect("clone the gateway log handle");
        let binary = match &self.builder.binary {
            Some(binary) => binary.clone(),
            None => binaries::gateway(),
        };
        let mut command = match self.builder.open_files_limit {
            Some(limit) => {
                let mut command = Command::new("prlimit");
                command
                    .arg(format!("--nofile={limit}:{limit}"))
                    .arg("--")
                    .arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        command
            .arg("--config")
            .arg(self.config_path())
            .args(&self.builder.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        match &self.builder.keys {
            Some(keys) => command.env("POPPY_GATEWAY_KEYS", keys),
            None => command.env_remove("POPPY_GATEWAY_KEYS"),
        };
        if self.builder.conversations_port.is_some() {
            command.env("POPPY_E2E_SERVICE_TOKEN", CONVERSATIONS_TOKEN);
        }
        for (name, value) in &self.builder.env {
            command.env(name, value);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()));
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(StartError::Exited(status));
            }
            let probe = Duration::from_millis(500);
            let healthy = rawhttp::get_status(self.admin_addr(), "/healthz", probe) == Ok(200);
            let conversations = self.builder.conversations_port.is_none_or(|port| {
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                TcpStream::connect_timeout(&addr, probe).is_ok()
            });
            if healthy && conversations && self.listen_answers_as_the_gateway(probe) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::NotReady);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Gateway {
    /// Whether this gateway, and no other process, listens on the listen port. A connect is
    /// not enough: pingora retries a bind it could not make while the admin port already says
    /// healthy, and a port `free_port` gave this gateway may meanwhile be another test's
    /// server's, which the test would then talk to as if it were the gateway. So the listening
    /// socket (`/proc/net/tcp*`, state `0A`) must be one of the gateway process's descriptors;
    /// nothing is sent to it (a probe request would be in the access log).
    fn listen_answers_as_the_gateway(&self, probe: Duration) -> bool {
        let Some(pid) = self.pid() else {
            return false;
        };
        TcpStream::connect_timeout(&self.listen_addr(), probe).is_ok()
            && ports::listens_on(pid, self.listen_port)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let from = lines.len().saturating_sub(LOG_TAIL_LINES);
            eprintln!(
                "----- poppy-gateway log ({}; last {} lines) -----\n{}\n----- end of log -----",
                self.base_url(),
                lines.len() - from,
                lines[from..].join("\n")
            );
        }
    }
}

/// A cloneable HTTP client of one base URL.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    pub fn new(base: &str) -> Client {
        Client {
            http: http_client(HTTP_TIMEOUT),
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Send `request`; panics on a transport error (the gateway must always answer).
    pub async fn send(&self, request: &Request) -> Answer {
        self.try_send(request)
            .await
            .unwrap_or_else(|e| panic!("{} to {}: no answer: {e}", request.describe(), self.base))
    }

    pub async fn try_send(&self, request: &Request) -> Result<Answer, String> {
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|e| format!("bad method {:?}: {e}", request.method))?;
        let mut builder = self
            .http
            .request(method, format!("{}{}", self.base, request.path));
        // A new Poppy-Session JWT on every send, as real agents sign them.
        for (name, value) in request.wire_headers() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        if !request.body.is_empty() {
            builder = builder.body(request.body.clone());
        }
        let response = builder.send().await.map_err(|e| format!("{e:?}"))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("reading the body: {e:?}"))?
            .to_vec();
        Ok(Answer {
            request: request.describe(),
            status,
            headers,
            body,
        })
    }
}
