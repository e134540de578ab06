//! Validate the file model into the runtime [`Config`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::edge::{self, AccessLog, ProxyHeaders};
use super::env::{Applied, Overrides};
use super::error::{ConfigError, ConfigErrors};
use super::file::GatewayFile;
use super::named_file::read_named;
use super::routes::{Loading, RouteConfig, compile_routes};
use super::server::Server;
use super::store::StoreSettings;

use crate::identity::SessionSettings;
use crate::policy::PolicySet;
use crate::receipts::ReceiptSettings;

/// The validated configuration the gateway runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: PathBuf,
    pub server: Server,
    /// `[[route]]`s in file order, then the default route (`[upstream]`) when configured.
    pub routes: Vec<RouteConfig>,
    pub admin_listen: Option<String>,
    pub store: StoreSettings,
    pub session: SessionSettings,
    /// The fallback poppy.json document, read at load time.
    pub well_known: Option<serde_json::Value>,
    /// `[protocol] operations_versions`: the operations versions poppy.json lists, each one
    /// the gateway implements.
    pub operations_versions: Vec<String>,
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
    /// `[approval_page]`: the Company's own approval page (off without the table).
    pub approval_page: Option<super::ApprovalPage>,
    /// `[webhook]`: events for the Company's systems (off without the table).
    pub webhook: Option<super::Webhook>,
    /// `[tracing]`: OpenTelemetry traces (off without the table).
    pub tracing: Option<super::TracingSettings>,
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

/// gateway.toml's `[admin] listen` alone (with its `POPPY_GATEWAY__…` overrides), for
/// `poppy-gateway health`: the running gateway is probed on the address it was started with,
/// and a later bad edit of a policy file or another section, which the running gateway does
/// not read until a reload succeeds, must not fail the probe of a healthy gateway.
pub fn admin_listen(path: &Path) -> Result<Option<String>, ConfigErrors> {
    /// Every other key is ignored: only `[admin]` is read, and checked as `load` checks it.
    #[derive(serde::Deserialize)]
    struct AdminOnly {
        admin: Option<super::file::AdminFile>,
    }
    let source = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::whole_file(path, format!("cannot read: {e}")))?;
    let Applied { file, source, env } = Overrides::from_env().apply::<AdminOnly>(path, &source)?;
    let mut errors = Vec::new();
    let at = |span: std::ops::Range<usize>, message: String| {
        ConfigError::at(path, &source, Some(span), message)
    };
    let listen = super::server::compile_admin(file.admin.as_ref(), &at, &mut errors);
    if errors.is_empty() {
        Ok(listen)
    } else {
        Err(env.relocate(path, ConfigErrors(errors)))
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

    let server = super::server::compile_server(&file.server, folder, &at, &mut errors);
    let proxy_headers = edge::compile_proxy_headers(file.proxy_headers.as_ref(), &at, &mut errors);
    let access_log = edge::compile_access_log(file.access_log.as_ref(), folder, &at, &mut errors);
    let admin_listen = super::server::compile_admin(file.admin.as_ref(), &at, &mut errors);
    let store = super::store::compile_store(&file.store, &at, &mut errors);

    let session = super::session::compile(&file.session, path, folder, &at, &mut errors);

    let receipts = file
        .receipts
        .as_ref()
        .and_then(|table| super::receipts::compile(table, folder, &at, &mut errors));

    let webhook = file
        .webhook
        .as_ref()
        .and_then(|table| super::webhook::compile(table, folder, &at, &mut errors));

    let well_known = file.well_known.file.as_ref().and_then(|doc| {
        read_named(
            doc,
            "well_known.file",
            folder,
            json_object,
            &at,
            &mut errors,
        )
    });
    let operations_versions = super::protocol::compile(&file.protocol, &at, &mut errors);
    let taken: Vec<&str> = std::iter::once(server.listen.as_str())
        .chain(admin_listen.as_deref())
        .collect();
    let conversations = file
        .conversations
        .as_ref()
        .and_then(|table| super::conversations::compile(table, folder, &taken, &at, &mut errors));
    let taken: Vec<&str> = taken
        .into_iter()
        .chain(conversations.as_ref().map(|c| c.listen.as_str()))
        .collect();
    let page_context = super::approval_page::Context {
        taken: &taken,
        well_known: well_known.as_ref(),
        tokens_verified: matches!(&session.verify, crate::identity::VerifySettings::Required(v) if v.token.is_some()),
    };
    let approval_page = file.approval_page.as_ref().and_then(|table| {
        super::approval_page::compile(table, folder, &page_context, &at, &mut errors)
    });

    let tracing = file
        .tracing
        .as_ref()
        .and_then(|table| super::traces::compile(table, &at, &mut errors));

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
    // A policy that offers the page needs the page: otherwise its agents without the
    // extension would get `extension_required` while the policy says otherwise.
    if approval_page.is_none() {
        for policy in routes.iter().flat_map(|r| r.policies.iter()) {
            if policy.approval.needs_page() {
                errors.push(ConfigError::whole_file(
                    path,
                    format!(
                        "policy `{}` ({}) has approval = \"either\" or \"company_page\", or proof = \"company_page\", which needs [approval_page] in this file",
                        policy.name, policy.source
                    ),
                ));
            }
        }
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
        server,
        admin_listen,
        store,
        session,
        well_known,
        operations_versions,
        policies,
        policy_files,
        routes,
        receipts,
        proxy_headers,
        access_log,
        conversations,
        approval_page,
        webhook,
        tracing,
    })
}

/// `[well_known] file`: the fallback poppy.json document.
fn json_object(text: Vec<u8>) -> Result<serde_json::Value, String> {
    match serde_json::from_slice::<serde_json::Value>(&text) {
        Ok(doc) if doc.is_object() => Ok(doc),
        Ok(_) => Err("is not a JSON object".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}
