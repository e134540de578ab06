//! The serde model of `gateway.toml` and policy files, exactly as written. Unknown keys are
//! errors; values that need checking keep their span so errors can point at them.
//! [`super::compile`] turns this into the validated runtime form.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::edge::{AccessLogFile, PassthroughKeys, ProxyHeadersFile, TlsFile};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GatewayFile {
    /// Policy files or globs, relative to this file's folder (the default route's).
    pub policies: Option<Spanned<Vec<String>>>,
    pub server: ServerFile,
    /// The default route's upstream: requests no `[[route]]` matches go there.
    pub upstream: Option<Spanned<UpstreamFile>>,
    /// `[[route]]`: upstreams chosen by host and/or path prefix (see `routes.rs`).
    #[serde(default)]
    pub route: Vec<Spanned<RouteFile>>,
    pub admin: Option<AdminFile>,
    #[serde(default)]
    pub store: StoreFile,
    #[serde(default)]
    pub session: SessionFile,
    #[serde(default)]
    pub well_known: WellKnownFile,
    /// `[protocol]`: the operations versions advertised (see `protocol.rs`).
    #[serde(default)]
    pub protocol: super::protocol::ProtocolFile,
    /// `[mcp]`: operations for an MCP server behind the gateway.
    pub mcp: Option<McpFile>,
    /// `[receipts]`: where approval receipts go.
    pub receipts: Option<super::receipts::ReceiptsFile>,
    /// `[proxy_headers]` and `[access_log]` (see `edge.rs`).
    pub proxy_headers: Option<ProxyHeadersFile>,
    pub access_log: Option<AccessLogFile>,
    /// `[conversations]`: the operations service for Company Agents.
    pub conversations: Option<Spanned<super::conversations::ConversationsFile>>,
    /// `[approval_page]`: the Company's own approval page.
    pub approval_page: Option<Spanned<super::approval_page::ApprovalPageFile>>,
    /// `[webhook]`: events for the Company's systems.
    pub webhook: Option<Spanned<super::webhook::WebhookFile>>,
    /// `[tracing]`: OpenTelemetry traces over OTLP.
    pub tracing: Option<super::traces::TracingFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerFile {
    pub listen: Spanned<String>,
    pub threads: Option<Spanned<usize>>,
    pub max_body_bytes: Option<Spanned<usize>>,
    pub max_held_body_bytes: Option<Spanned<usize>>,
    pub body_read_timeout: Option<Spanned<String>>,
    pub header_read_timeout: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<usize>>,
    pub max_upstream_connections: Option<Spanned<usize>>,
    pub max_streams_per_connection: Option<Spanned<usize>>,
    pub shutdown_grace: Option<Spanned<String>>,
    /// `[server.tls]` and cleartext HTTP/2 (see `edge.rs`).
    pub tls: Option<TlsFile>,
    pub h2c: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpstreamFile {
    pub url: Spanned<String>,
    pub connect_timeout: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub release_statuses: Option<Spanned<Vec<u16>>>,
    pub release_503_with_retry_after: Option<bool>,
    // Passthrough and TLS to the upstream (see `edge.rs`).
    pub read_timeout: Option<Spanned<String>>,
    pub write_timeout: Option<Spanned<String>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub host_header: Option<Spanned<String>>,
    pub ca_file: Option<Spanned<String>>,
    pub tls_verify: Option<bool>,
    pub operation_id_header: Option<Spanned<String>>,
    /// `[upstream.approval_header]`: what was approved, signed (see `approval_header.rs`).
    pub approval_header: Option<super::approval_header::ApprovalHeaderFile>,
}

impl UpstreamFile {
    pub(crate) fn passthrough_keys(&self) -> PassthroughKeys<'_> {
        PassthroughKeys {
            read_timeout: self.read_timeout.as_ref(),
            write_timeout: self.write_timeout.as_ref(),
            idle_timeout: self.idle_timeout.as_ref(),
            host_header: self.host_header.as_ref(),
            ca_file: self.ca_file.as_ref(),
            tls_verify: self.tls_verify,
            operation_id_header: self.operation_id_header.as_ref(),
        }
    }
}

/// One `[[route]]`: what it matches, its upstream, policies and MCP endpoint.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RouteFile {
    pub name: Spanned<String>,
    pub host: Option<Spanned<String>>,
    pub path_prefix: Option<Spanned<String>>,
    pub policies: Spanned<Vec<String>>,
    pub upstream: UpstreamFile,
    pub mcp: Option<McpFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdminFile {
    pub listen: Spanned<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreFile {
    pub url: Option<Spanned<String>>,
    pub namespace: Option<Spanned<String>>,
    pub remember_grace: Option<Spanned<String>>,
    /// Replicas that must acknowledge a claim before it is used (0 = off).
    pub wait_replicas: Option<Spanned<u32>>,
    pub wait_timeout: Option<Spanned<String>>,
    /// Refuse to start (and report not ready) when Redis could forget a claim.
    pub require_durable: Option<bool>,
    /// `memory://` caps: records, and estimated bytes.
    pub memory_max_records: Option<Spanned<usize>>,
    pub memory_max_bytes: Option<Spanned<usize>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionFile {
    /// `"required"` (the gateway verifies Poppy-Session signatures) or `"off"` (the upstream
    /// does). No default: every deployment chooses.
    pub verify: Option<Spanned<String>>,
    /// With `verify = "required"`: one of these must be in the `aud` of a Session signed by
    /// a static key set (and of a delegated one that has `aud`).
    pub audience: Option<Spanned<Vec<String>>>,
    /// With `verify = "required"`: the public origins agents sign their requests for
    /// (`htu`), such as `https://api.shop.example`.
    pub origins: Option<Spanned<Vec<String>>>,
    /// Extra certificate authorities (PEM) for the gateway's own fetches, relative to
    /// gateway.toml's folder.
    pub ca_file: Option<Spanned<String>>,
    /// Hosts (names or IP addresses, as URLs write them) that agents' documents may be
    /// fetched from although they are on non-global addresses (loopback, private, …).
    pub allow_private_hosts: Option<Spanned<Vec<String>>>,
    /// Allowance on `exp` and `nbf` for clocks that disagree (default 60s).
    pub clock_skew: Option<Spanned<String>>,
    /// `[[session.agent]]`: the Personal Agents whose Sessions are accepted.
    #[serde(default)]
    pub agent: Vec<Spanned<AgentFile>>,
    /// `[session.token]`: how bearer tokens are verified (with `verify = "required"`).
    pub token: Option<Spanned<TokenFile>>,
    pub session_claim: Option<String>,
    pub agent_claim: Option<String>,
    pub user_claim: Option<String>,
    pub account_claim: Option<String>,
}

/// `[[session.agent]]`: a trusted Personal Agent and where its keys are: its metadata
/// document (`client_id`), or a static key set (`issuer` with `jwks_file` or `jwks_url`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentFile {
    /// The URL of its client metadata document: its identity, the `iss` of its Sessions.
    pub client_id: Option<String>,
    /// The `iss` of its Session JWTs, signed by the keys of `jwks_file` / `jwks_url`.
    pub issuer: Option<String>,
    /// A JWKS document, relative to gateway.toml's folder.
    pub jwks_file: Option<String>,
    /// A JWKS URL, fetched at startup, on an unknown `kid` and every `jwks_refresh`.
    pub jwks_url: Option<String>,
    pub jwks_refresh: Option<String>,
}

/// `[session.token]`: the authorization server whose access tokens the gateway verifies.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenFile {
    /// The `iss` of JWT access tokens (with `jwks_file` or `jwks_url`).
    pub issuer: Option<String>,
    pub jwks_file: Option<String>,
    pub jwks_url: Option<String>,
    pub jwks_refresh: Option<String>,
    /// `aud` values accepted in access tokens, JWT or introspected (default: `[session]
    /// audience`).
    pub audience: Option<Vec<String>>,
    /// RFC 7662 endpoint for opaque tokens, and the gateway's client credentials there.
    pub introspection_url: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    /// An active token's answer is remembered until its `exp`, at most this long.
    pub introspection_cache: Option<String>,
    /// A refused token's answer (inactive, expired, another audience) is remembered this long.
    pub introspection_cache_refused: Option<String>,
    /// Answers remembered at most.
    pub introspection_cache_entries: Option<u64>,
    /// Calls to the introspection endpoint per second, and at once beyond that.
    pub introspection_rate: Option<u64>,
    pub introspection_burst: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WellKnownFile {
    /// Served (with operations merged in) when the upstream has no poppy.json.
    pub file: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyFile {
    /// Says the file holds no policy on purpose (an MCP server whose tools are all read-only),
    /// and why: without it, a file without tables is an error (every block commented out).
    pub nothing_to_approve: Option<Spanned<String>>,
    #[serde(default)]
    pub operation: Vec<OperationFile>,
    #[serde(default)]
    pub tool: Vec<ToolFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperationFile {
    pub name: Spanned<String>,
    pub method: Spanned<String>,
    pub path: Spanned<String>,
    pub id_prefix: Spanned<String>,
    pub expires_in: Spanned<String>,
    pub same_action: Spanned<Vec<String>>,
    pub summary: Spanned<String>,
    #[serde(default)]
    pub terms: BTreeMap<Spanned<String>, Spanned<TermFile>>,
    /// `[operation.lookup]`: an upstream record that `lookup` terms are read from.
    pub lookup: Option<Spanned<LookupFile>>,
    /// `[operation.lookups.NAME]`: more of them, each read by `{ lookup = "NAME", at = "$…" }`.
    #[serde(default)]
    pub lookups: BTreeMap<Spanned<String>, Spanned<LookupFile>>,
    /// Body fields that are not terms and do not affect the action: JSONPaths, or for a form
    /// body, field names.
    pub ignore: Option<Spanned<Vec<String>>>,
    /// Query parameters that are not terms and do not affect the action.
    pub ignore_query: Option<Spanned<Vec<String>>>,
    /// Request headers that do not affect the action, besides those no revision covers
    /// (`ingress::UNBOUND_HEADERS`): every other header is bound to the approval.
    pub ignore_headers: Option<Spanned<Vec<String>>>,
    /// Policies of the same route whose requests this more specific one holds where both
    /// match (policies/README.md, "Overlapping routes").
    pub overrides: Option<Spanned<Vec<String>>>,
    /// How the User approves: `"poppy"` (default), `"either"` (also on the approval page,
    /// for requests without the extension) or `"company_page"` (on the page only).
    pub approval: Option<Spanned<String>>,
    /// `"company_page"`: a Poppy agent's approval counts only once the User approved the
    /// same revision on the approval page, signed in.
    pub proof: Option<Spanned<String>>,
    /// A condition over the terms: the action needs approval only when it holds
    /// (`policy::Condition`).
    pub needs_approval_when: Option<Spanned<String>>,
}

/// One term: exactly one of these keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TermFile {
    pub path: Option<String>,
    pub body: Option<String>,
    /// A form body's field, by name (`[[operation]]` only).
    pub form: Option<String>,
    pub query: Option<String>,
    pub header: Option<String>,
    pub value: Option<toml::Value>,
    /// A JSONPath into the answer of the operation's `[operation.lookup]`; or, with `at`, the
    /// name of one of its `[operation.lookups.NAME]`.
    pub lookup: Option<String>,
    /// With `lookup = "NAME"`: the JSONPath into that lookup's answer.
    pub at: Option<String>,
    /// An expression over other terms (`policy::compute`).
    pub compute: Option<String>,
    /// A JSONPath into an MCP tool call's `arguments` (`[[tool]]` only).
    pub argument: Option<String>,
    /// The request may leave the term out (`path`, `body`, `form`, `query`, `header` and
    /// `argument` terms): absent, it is absent from the terms.
    pub optional: Option<Spanned<bool>>,
}

/// `[operation.lookup]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LookupFile {
    /// A path on the upstream, with `{term}` placeholders filled from request terms.
    pub url: Spanned<String>,
    /// `GET` (the default), or `POST`: a quote, sent the request's own body.
    pub method: Option<Spanned<String>>,
}

/// `[mcp]` in gateway.toml.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpFile {
    /// The MCP endpoint (Streamable HTTP) of the upstream, e.g. `/mcp`.
    pub path: Spanned<String>,
}

/// One `[[tool]]`: an MCP tool that needs approval. The keys of `[[operation]]`, with the
/// tool's name instead of method and path.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolFile {
    pub name: Spanned<String>,
    /// The MCP tool name, as in `tools/call` `params.name`.
    pub tool: Spanned<String>,
    pub id_prefix: Spanned<String>,
    pub expires_in: Spanned<String>,
    pub same_action: Spanned<Vec<String>>,
    pub summary: Spanned<String>,
    #[serde(default)]
    pub terms: BTreeMap<Spanned<String>, Spanned<TermFile>>,
    /// JSONPaths of `arguments` that are not terms and do not affect the action.
    pub ignore: Option<Spanned<Vec<String>>>,
    /// How the User approves, as on `[[operation]]`: `"poppy"` (default), `"either"` or
    /// `"company_page"`.
    pub approval: Option<Spanned<String>>,
    /// As on `[[operation]]`: a Poppy agent's approval counts only once the User approved the
    /// same revision on the approval page.
    pub proof: Option<Spanned<String>>,
    /// As on `[[operation]]`: the call needs approval only when this holds.
    pub needs_approval_when: Option<Spanned<String>>,
}
