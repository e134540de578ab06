//! Validate the file model into the runtime [`Config`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::duration::parse_duration;
use super::edge::{self, AccessLog, ProxyHeaders, Tls};
use super::env::{Applied, Overrides};
use super::error::{ConfigError, ConfigErrors};
use super::file::GatewayFile;
use super::routes::{Loading, RouteConfig, compile_routes};

use crate::identity::SessionClaims;
use crate::policy::PolicySet;
use crate::receipts::ReceiptSettings;
use crate::store::{self, MAX_WAIT_TIMEOUT, MemoryLimits, ReplicaWait, StoreOptions};

/// The validated configuration the gateway runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: PathBuf,
    pub server: Server,
    /// `[[route]]`s in file order, then the default route (`[upstream]`) when configured.
    pub routes: Vec<RouteConfig>,
    pub admin_listen: Option<String>,
    pub store: StoreSettings,
    pub session: SessionClaims,
    /// The fallback poppy.json document, read at load time.
    pub well_known: Option<serde_json::Value>,
    /// Every route's policies (metrics labels, the admin API, `explain`).
    pub policies: PolicySet,
    /// The policy files that were loaded, for `check`.
    pub policy_files: Vec<PathBuf>,
    /// `[receipts]`: where approval receipts go and what signs them (none without the table).
    pub receipts: Option<ReceiptSettings>,
    /// `[proxy_headers]`: what the upstream learns about the client.
    pub proxy_headers: ProxyHeaders,
    /// `[access_log]`: one line per request (none without the table).
    pub access_log: Option<AccessLog>,
    /// `[conversations]`: the operations service for Company Agents (off without the table).
    pub conversations: Option<super::Conversations>,
}

impl Config {
    /// The default route (`[upstream]`), when configured.
    pub fn default_route(&self) -> Option<&RouteConfig> {
        self.routes.iter().find(|r| r.is_default())
    }

    /// The first MCP endpoint configured (for `explain`, which reads one request offline).
    pub fn first_mcp(&self) -> Option<&super::Mcp> {
        self.routes.iter().find_map(|r| r.mcp.as_ref())
    }

    /// The longest an approved execution may take on any route (connect and answer).
    pub fn longest_execution(&self) -> Duration {
        self.routes
            .iter()
            .map(|r| r.upstream.connect_timeout + r.upstream.timeout)
            .max()
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: String,
    pub threads: usize,
    pub max_body_bytes: usize,
    /// Request bodies held at once, in bytes (default 64 MiB).
    pub max_held_body_bytes: usize,
    /// The whole body of a request to an action must arrive within it (default 30 s).
    pub body_read_timeout: Duration,
    /// Every request head must arrive within it, including a kept-alive connection's wait for
    /// its next request (default 60 s).
    pub header_read_timeout: Duration,
    /// Connections open at once (default 10000).
    pub max_connections: usize,
    pub shutdown_grace: Duration,
    /// `[server.tls]`: terminate TLS on `listen`.
    pub tls: Option<Tls>,
    /// Cleartext HTTP/2 (prior knowledge) on a listener without TLS.
    pub h2c: bool,
}

#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub url: String,
    pub namespace: String,
    /// How long after a revision's `expires_at` a performed operation is still remembered.
    pub remember_grace: Duration,
    /// Replicas that must acknowledge a claim before it is used; 0 = off.
    pub wait_replicas: u32,
    /// Whether `wait_replicas` was set at all: a Redis with replicas and no choice made is a
    /// startup error (see docs/redis.md).
    pub wait_replicas_set: bool,
    /// How long Redis waits for their acknowledgement.
    pub wait_timeout: Duration,
    /// Refuse to start (and `/readyz` answers 503) when Redis could forget a claim.
    pub require_durable: bool,
    /// What `memory://` may hold at once.
    pub memory_limits: MemoryLimits,
}

impl StoreSettings {
    /// The options [`crate::store::open_with`] takes.
    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            namespace: self.namespace.clone(),
            wait: (self.wait_replicas > 0).then_some(ReplicaWait {
                replicas: self.wait_replicas,
                timeout: self.wait_timeout,
            }),
            memory_limits: self.memory_limits,
        }
    }
}

/// Load and validate `gateway.toml` and every policy it names.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let source = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::whole_file(path, format!("cannot read: {e}")))?;
    // `POPPY_GATEWAY__SECTION__KEY` variables join the file before anything is validated.
    let Applied { file, source, env } =
        Overrides::from_env().apply::<GatewayFile>(path, &source)?;
    let folder = path.parent().unwrap_or(Path::new("."));
    let mut errors = Vec::new();
    let at = |span: std::ops::Range<usize>, message: String| {
        ConfigError::at(path, &source, Some(span), message)
    };

    let duration = |value: &Option<Spanned<String>>,
                    default: Duration,
                    key: &str,
                    errors: &mut Vec<ConfigError>| match value {
        None => default,
        Some(v) => parse_duration(v.get_ref()).unwrap_or_else(|e| {
            errors.push(at(v.span(), format!("{key}: {e}")));
            default
        }),
    };

    // [server]
    let listen = file.server.listen.get_ref().clone();
    if listen.parse::<std::net::SocketAddr>().is_err() {
        errors.push(at(
            file.server.listen.span(),
            format!("server.listen: `{listen}` is not an address like 127.0.0.1:8080"),
        ));
    }
    let threads = file
        .server
        .threads
        .as_ref()
        .map(|t| *t.get_ref())
        .unwrap_or(2);
    if let Some(t) = &file.server.threads
        && (*t.get_ref() == 0 || *t.get_ref() > 256)
    {
        errors.push(at(t.span(), "server.threads: must be 1 to 256".into()));
    }
    let max_body_bytes = file
        .server
        .max_body_bytes
        .as_ref()
        .map(|m| *m.get_ref())
        .unwrap_or(1024 * 1024);
    if let Some(m) = &file.server.max_body_bytes
        && *m.get_ref() == 0
    {
        errors.push(at(
            m.span(),
            "server.max_body_bytes: must be at least 1".into(),
        ));
    }
    let max_held_body_bytes = file
        .server
        .max_held_body_bytes
        .as_ref()
        .map(|m| *m.get_ref())
        .unwrap_or(64 * 1024 * 1024);
    if let Some(m) = &file.server.max_held_body_bytes
        && *m.get_ref() < max_body_bytes
    {
        errors.push(at(
            m.span(),
            format!("server.max_held_body_bytes: must be at least server.max_body_bytes ({max_body_bytes}), or no body could be held"),
        ));
    }
    let max_connections = file
        .server
        .max_connections
        .as_ref()
        .map(|m| *m.get_ref())
        .unwrap_or(10_000);
    if let Some(m) = &file.server.max_connections
        && *m.get_ref() == 0
    {
        errors.push(at(
            m.span(),
            "server.max_connections: must be at least 1".into(),
        ));
    }
    let body_read_timeout = duration(
        &file.server.body_read_timeout,
        Duration::from_secs(30),
        "server.body_read_timeout",
        &mut errors,
    );
    let header_read_timeout = duration(
        &file.server.header_read_timeout,
        Duration::from_secs(60),
        "server.header_read_timeout",
        &mut errors,
    );
    for (value, timeout, key) in [
        (
            &file.server.body_read_timeout,
            body_read_timeout,
            "server.body_read_timeout",
        ),
        (
            &file.server.header_read_timeout,
            header_read_timeout,
            "server.header_read_timeout",
        ),
    ] {
        if let Some(v) = value
            && timeout < Duration::from_millis(100)
        {
            errors.push(at(v.span(), format!("{key}: must be at least 100ms")));
        }
    }
    let shutdown_grace = duration(
        &file.server.shutdown_grace,
        Duration::from_secs(2),
        "server.shutdown_grace",
        &mut errors,
    );

    let listener_tls = file
        .server
        .tls
        .as_ref()
        .and_then(|t| edge::compile_tls(t, folder, &at, &mut errors));
    let h2c = file.server.h2c.unwrap_or(false);
    let proxy_headers = edge::compile_proxy_headers(file.proxy_headers.as_ref(), &at, &mut errors);
    let access_log = edge::compile_access_log(file.access_log.as_ref(), folder, &at, &mut errors);
    // [admin]
    let admin_listen = file.admin.as_ref().map(|a| {
        if a.listen.get_ref().parse::<std::net::SocketAddr>().is_err() {
            errors.push(at(
                a.listen.span(),
                format!(
                    "admin.listen: `{}` is not an address like 127.0.0.1:9100",
                    a.listen.get_ref()
                ),
            ));
        }
        a.listen.get_ref().clone()
    });

    // [store]
    let store_url = file
        .store
        .url
        .as_ref()
        .map(|u| u.get_ref().clone())
        .unwrap_or_else(|| "memory://".into());
    if let Some(u) = &file.store.url {
        let url = u.get_ref();
        if url.starts_with(store::CLUSTER_SCHEME) {
            if let Err(e) = store::cluster_seeds(url) {
                errors.push(at(u.span(), format!("store.url: {e}")));
            }
        } else if url != "memory://"
            && !url.starts_with("redis://")
            && !url.starts_with("rediss://")
        {
            errors.push(at(
                u.span(),
                format!("store.url: `{url}` is neither \"memory://\", a redis:// URL nor a redis+cluster:// one"),
            ));
        }
    }
    let namespace = file
        .store
        .namespace
        .as_ref()
        .map(|n| n.get_ref().clone())
        .unwrap_or_else(|| "poppy".into());
    if let Some(n) = &file.store.namespace
        && (n.get_ref().is_empty() || n.get_ref().contains(['{', '}']))
    {
        errors.push(at(
            n.span(),
            "store.namespace: must be non-empty and contain no braces".into(),
        ));
    }
    let remember_grace = duration(
        &file.store.remember_grace,
        Duration::from_secs(3600),
        "store.remember_grace",
        &mut errors,
    );
    let wait_replicas = file
        .store
        .wait_replicas
        .as_ref()
        .map_or(0, |n| *n.get_ref());
    let wait_timeout = duration(
        &file.store.wait_timeout,
        Duration::from_millis(50),
        "store.wait_timeout",
        &mut errors,
    );
    if let Some(n) = &file.store.wait_replicas
        && *n.get_ref() > 0
        && store_url == "memory://"
    {
        errors.push(at(
            n.span(),
            "store.wait_replicas: needs a Redis store (memory:// has no replicas)".into(),
        ));
    }
    if let Some(t) = &file.store.wait_timeout {
        if wait_replicas == 0 {
            errors.push(at(
                t.span(),
                "store.wait_timeout: has no effect without store.wait_replicas".into(),
            ));
        } else if wait_timeout.is_zero() || wait_timeout > MAX_WAIT_TIMEOUT {
            // Zero would make WAIT block forever.
            errors.push(at(
                t.span(),
                format!("store.wait_timeout: must be 1ms to {MAX_WAIT_TIMEOUT:?}"),
            ));
        }
    }

    let mut memory_limits = MemoryLimits::default();
    for (key, value, limit) in [
        (
            "memory_max_records",
            &file.store.memory_max_records,
            &mut memory_limits.max_records,
        ),
        (
            "memory_max_bytes",
            &file.store.memory_max_bytes,
            &mut memory_limits.max_bytes,
        ),
    ] {
        let Some(value) = value else { continue };
        if store_url != "memory://" {
            errors.push(at(
                value.span(),
                format!("store.{key}: only limits memory:// (Redis has maxmemory)"),
            ));
        } else if *value.get_ref() == 0 {
            errors.push(at(value.span(), format!("store.{key}: must be at least 1")));
        } else {
            *limit = *value.get_ref();
        }
    }
    let require_durable = file.store.require_durable.unwrap_or(false);

    let session = super::session::compile(&file.session, path, folder, &at, &mut errors);

    let receipts = file
        .receipts
        .as_ref()
        .and_then(|table| super::receipts::compile(table, folder, &at, &mut errors));

    let well_known = match &file.well_known.file {
        None => None,
        Some(f) => {
            let doc_path = folder.join(f.get_ref());
            match std::fs::read_to_string(&doc_path)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    serde_json::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string())
                }) {
                Ok(doc) if doc.is_object() => Some(doc),
                Ok(_) => {
                    errors.push(at(
                        f.span(),
                        format!(
                            "well_known.file: {} is not a JSON object",
                            doc_path.display()
                        ),
                    ));
                    None
                }
                Err(e) => {
                    errors.push(at(
                        f.span(),
                        format!("well_known.file: {}: {e}", doc_path.display()),
                    ));
                    None
                }
            }
        }
    };

    let taken: Vec<&str> = std::iter::once(listen.as_str())
        .chain(admin_listen.as_deref())
        .collect();
    let conversations = file
        .conversations
        .as_ref()
        .and_then(|table| super::conversations::compile(table, folder, &taken, &at, &mut errors));

    let routes = compile_routes(
        &file,
        &Loading {
            path,
            source: &source,
            folder,
            at: &at,
        },
        &mut errors,
    );
    if let Some(table) = &file.conversations
        && !routes.iter().any(RouteConfig::is_default)
    {
        errors.push(at(
            table.span(),
            "conversations: needs [upstream] (the service runs the default route's policies)"
                .into(),
        ));
    }
    if !errors.is_empty() {
        return Err(env.relocate(path, ConfigErrors(errors)));
    }
    let policies = PolicySet::new(
        routes
            .iter()
            .flat_map(|r| r.policies.iter().map(|p| crate::policy::Policy::clone(p)))
            .collect(),
    );
    let policy_files = routes
        .iter()
        .flat_map(|r| r.policy_files.iter().cloned())
        .collect();
    Ok(Config {
        path: path.to_owned(),
        server: Server {
            listen,
            threads,
            max_body_bytes,
            max_held_body_bytes,
            body_read_timeout,
            header_read_timeout,
            max_connections,
            shutdown_grace,
            tls: listener_tls,
            h2c,
        },
        admin_listen,
        store: StoreSettings {
            url: store_url,
            namespace,
            remember_grace,
            wait_replicas,
            wait_replicas_set: file.store.wait_replicas.is_some(),
            wait_timeout,
            require_durable,
            memory_limits,
        },
        session,
        well_known,
        policies,
        policy_files,
        routes,
        receipts,
        proxy_headers,
        access_log,
        conversations,
    })
}
