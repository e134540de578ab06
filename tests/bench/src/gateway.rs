//! The gateway under test: the release `poppy-gateway` binary with a config written for one
//! row (threads, store, body limit), in front of the bench upstream.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::http1::call_blocking;
use crate::procs::{Proc, Spawn, free_port, loopback};

/// The signing keys of every bench gateway (Redis needs them set).
pub const KEYS: &str = "poppy-bench-signing-key-0123456789abcdef";

/// The policy of the PA rows: the spec's exchange example.
pub const POLICY: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku}."
# The memory measurement pads bodies with a note, which is not a term.
ignore = ["$.note"]

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
replacement_sku = { body = "$.replacement_sku" }
"#;

/// Issue 38's size of policy: a payment with 71 terms, 68 of them optional (`opt01`–`opt66`
/// flat, `shipping` a nested object, `items` an array of objects), its summary one sentence
/// and the generic list of the values a request sets (`{...}`).
pub fn large_policy() -> String {
    let mut out = String::from(
        r#"
[[operation]]
name = "payment"
method = "POST"
path = "/orders/{order_id}/payments"
id_prefix = "pay"
expires_in = "15m"
same_action = ["order_id"]
summary = "Pay {amount} {currency} for order {order_id}.\n\n{...}"

[operation.terms]
order_id = { path = "order_id" }
amount = { body = "$.amount" }
currency = { body = "$.currency" }
shipping = { body = "$.shipping", optional = true }
items = { body = "$.items", optional = true }
"#,
    );
    for i in 1..=66 {
        out.push_str(&format!(
            "opt{i:02} = {{ body = \"$.opt{i:02}\", optional = true }}\n"
        ));
    }
    out
}

#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub threads: usize,
    pub store_url: String,
    pub upstream: SocketAddr,
    pub max_body_bytes: usize,
    /// Policies in the policy file: `policies - 1` generated ones, then [`POLICY`], last in
    /// file order (the policy-scaling rows; 1 elsewhere).
    pub policies: usize,
    /// `RUST_LOG` of the gateway.
    pub log_level: String,
    /// `[tracing]`: traces sampled per 10 000, and the OTLP collector (none: off).
    pub tracing: Option<(u32, SocketAddr)>,
    /// The `[session]` table ([`crate::signer::session_table`]).
    pub session: String,
    /// Also the payment policy of [`large_policy`].
    pub large_policy: bool,
}

/// The policy file of `count` policies: `count - 1` others first, then [`POLICY`], so a
/// request of the PA rows matches the last policy in file order. The others are POSTs (as the
/// exchange is) on `/orders/{order_id}/act{i}`: the same method and the same first two
/// segments as the exchange's path, so neither a scan by method nor the first segments tell
/// them apart, and no two of them can match the same request (no overlap to declare).
pub fn policy_file(count: usize) -> String {
    let mut out = String::with_capacity(count * 260 + POLICY.len());
    for i in 1..count {
        out.push_str(&format!(
            r#"
[[operation]]
name = "act{i}"
method = "POST"
path = "/orders/{{order_id}}/act{i}"
id_prefix = "a{i}"
expires_in = "15m"
same_action = ["order_id"]
summary = "Action {i} on order {{order_id}}."

[operation.terms]
order_id = {{ path = "order_id" }}
"#
        ));
    }
    out.push_str(POLICY);
    out
}

/// gateway.toml for these ports.
pub fn config_toml(config: &GatewayConfig, listen: u16, admin: u16) -> String {
    format!(
        r#"policies = ["policies/*.toml"]

[server]
listen = "127.0.0.1:{listen}"
threads = {threads}
max_body_bytes = {max_body}

[upstream]
url = "http://{upstream}"

[admin]
listen = "127.0.0.1:{admin}"

[store]
url = "{store}"

{session}"#,
        threads = config.threads,
        max_body = config.max_body_bytes,
        upstream = config.upstream,
        store = config.store_url,
        session = config.session,
    ) + &config
        .tracing
        .map(|(sampled, sink)| {
            format!(
                "\n[tracing]\nendpoint = \"http://{sink}\"\nsampling_ratio = {}\n",
                f64::from(sampled) / 10_000.0
            )
        })
        .unwrap_or_default()
}

/// Where the binary is unless given: next to this executable (the same target profile).
pub fn default_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("path of poppy-bench")?;
    let dir = exe.parent().context("poppy-bench has no folder")?;
    // Integration tests run from target/<profile>/deps.
    let dir = if dir.ends_with("deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    Ok(dir.join("poppy-gateway"))
}

/// Write the config into `dir`, start the gateway and wait for `/healthz` and its port.
pub fn start(
    binary: &Path,
    dir: &Path,
    config: &GatewayConfig,
    cpus: Option<&str>,
) -> anyhow::Result<(Proc, SocketAddr)> {
    if !binary.is_file() {
        bail!(
            "no gateway binary at {}: build it with `cargo build --release -p poppy-gateway` \
             (same CARGO_TARGET_DIR), or pass --gateway-bin",
            binary.display()
        );
    }
    std::fs::create_dir_all(dir.join("policies"))?;
    let mut policies = policy_file(config.policies.max(1));
    if config.large_policy {
        policies.push_str(&large_policy());
    }
    std::fs::write(dir.join("policies/bench.toml"), policies)?;
    let listen = free_port()?;
    let admin = loop {
        let port = free_port()?;
        if port != listen {
            break port;
        }
    };
    let path = dir.join("gateway.toml");
    std::fs::write(&path, config_toml(config, listen, admin))?;
    let mut proc = Spawn {
        name: "poppy-gateway",
        program: binary,
        args: vec!["--config".into(), path.display().to_string()],
        env: vec![
            ("POPPY_GATEWAY_KEYS".into(), KEYS.into()),
            ("RUST_LOG".into(), config.log_level.clone()),
        ],
        cpus,
        log: Some(dir.join("gateway.log")),
        stdin_piped: false,
        terminate: false,
    }
    .start()?;
    let (listen, admin) = (loopback(listen), loopback(admin));
    // Generous: 10000 policies are compiled (and checked for overlaps) at start-up.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        proc.check_running()?;
        let healthy = matches!(
            call_blocking(admin, "GET", "/healthz", Duration::from_millis(500)),
            Ok((200, _))
        );
        if healthy {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "poppy-gateway did not answer /healthz on {admin}; its output:\n{}",
                proc.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    proc.wait_for_port(listen, Duration::from_secs(10))?;
    Ok((proc, listen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exchange_is_the_last_of_the_generated_policies() {
        let file = policy_file(3);
        assert_eq!(file.matches("[[operation]]").count(), 3);
        let exchange = file.find("name = \"exchange\"").unwrap();
        assert!(file.find("name = \"act2\"").unwrap() < exchange);
        assert!(file.contains("path = \"/orders/{order_id}/act1\""));
        assert_eq!(policy_file(1), POLICY);
    }

    #[test]
    fn the_large_policy_has_71_terms_68_optional() {
        let policy = large_policy();
        let terms = policy.split("[operation.terms]").nth(1).unwrap();
        assert_eq!(terms.lines().filter(|l| l.contains(" = {")).count(), 71);
        assert_eq!(policy.matches("optional = true").count(), 68);
    }
}
