//! `docker/` and `deploy/kubernetes/` without a Docker engine or a cluster: the Dockerfile
//! passes hadolint, the manifests pass kubernetes-validate (both from PyPI, installed by
//! tests/deps/install.sh), the image is the production one (numeric user, stripped binary,
//! neutral config, health check on the configured admin port), the ConfigMap's config passes
//! `check`, and every stop grace period covers the gateway's drain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use poppy_e2e::thirdparty::{deps_dir, python};
use poppy_e2e::{Stack, Store, binaries};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    let path = repo().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A program of the `deploy-lint` virtual environment.
fn lint_tool(name: &str) -> PathBuf {
    python("deploy-lint").with_file_name(name)
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn manifests() -> Vec<PathBuf> {
    let dir = repo().join("deploy/kubernetes");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    found.sort();
    found
}

#[test]
fn dockerfile_passes_hadolint() {
    let output = Command::new(lint_tool("hadolint"))
        // Every rule, warnings and style included; the Dockerfile says why it ignores any.
        .args(["--no-color", "--failure-threshold", "style"])
        .arg(repo().join("docker/Dockerfile"))
        .output()
        .expect("run hadolint");
    assert!(output.status.success(), "hadolint:\n{}", text(&output));

    // The linter does fail on a bad Dockerfile (so a pass above means something).
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("Dockerfile");
    std::fs::write(&bad, "FROM debian\nRUN cd /tmp && apt-get install cmake\n").unwrap();
    let output = Command::new(lint_tool("hadolint"))
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!output.status.success(), "{}", text(&output));
}

#[test]
fn kubernetes_manifests_pass_schema_validation() {
    let manifests = manifests();
    let kinds: String = manifests
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    for kind in [
        "kind: Deployment",
        "kind: Service",
        "kind: ConfigMap",
        "kind: Secret",
        "kind: PodDisruptionBudget",
    ] {
        assert!(kinds.contains(kind), "deploy/kubernetes has no {kind}");
    }
    let output = Command::new(lint_tool("kubernetes-validate"))
        // Strict: a misspelt or misplaced field fails instead of being ignored.
        .args(["--strict", "--no-warn"])
        .args(&manifests)
        .output()
        .expect("run kubernetes-validate");
    assert!(
        output.status.success(),
        "kubernetes-validate:\n{}",
        text(&output)
    );

    // A misplaced field fails validation.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let deployment = read("deploy/kubernetes/deployment.yaml").replace(
        "terminationGracePeriodSeconds: 45",
        "terminationGracePeriod: 45",
    );
    std::fs::write(&bad, deployment).unwrap();
    let output = Command::new(lint_tool("kubernetes-validate"))
        .args(["--strict", "--no-warn"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!output.status.success(), "{}", text(&output));
}

#[test]
fn the_configmap_config_and_policies_pass_check() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(python("deploy-lint"))
        .arg(deps_dir().join("configmap_files.py"))
        .arg(repo().join("deploy/kubernetes/configmap.yaml"))
        .arg(dir.path())
        .output()
        .expect("extract the ConfigMap");
    assert!(output.status.success(), "{}", text(&output));
    let output = Command::new(binaries::gateway())
        .arg("check")
        .arg("--config")
        .arg(dir.path().join("gateway.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let out = text(&output);
    assert!(output.status.success(), "check:\n{out}");
    assert!(out.contains("redis://redis:6379/0"), "{out}");
    assert!(out.contains("/orders/{order_id}/exchanges"), "{out}");
}

/// Seconds of a `30s` / `2s` / `500ms` duration.
fn seconds(duration: &str) -> f64 {
    let d = duration.trim().trim_matches('"');
    if let Some(ms) = d.strip_suffix("ms") {
        ms.parse::<f64>().unwrap() / 1000.0
    } else if let Some(s) = d.strip_suffix('s') {
        s.parse().unwrap()
    } else if let Some(m) = d.strip_suffix('m') {
        m.parse::<f64>().unwrap() * 60.0
    } else {
        panic!("not a duration: {duration}")
    }
}

/// The value of the first `key: value` or `key = value` line of `text`.
fn setting<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let line = line.trim();
        let rest = line.strip_prefix(key)?.trim_start();
        let value = rest.strip_prefix(':').or_else(|| rest.strip_prefix('='))?;
        Some(value.trim())
    })
}

/// What a SIGTERM may take with the defaults (README: upstream and server sections): the
/// approved forwards in flight, at most connect_timeout + timeout + 1 s, then shutdown_grace.
fn drain_seconds(config: &str) -> f64 {
    let get = |key: &str, default: &str| seconds(setting(config, key).unwrap_or(default));
    get("connect_timeout", "2s") + get("timeout", "30s") + 1.0 + get("shutdown_grace", "2s")
}

#[test]
fn stop_grace_periods_cover_the_drain() {
    // Compose: the gateway's stop_grace_period, with docker/gateway.toml's timeouts.
    let compose = read("docker/compose.yaml");
    let compose_grace = seconds(setting(&compose, "stop_grace_period").expect("stop_grace_period"));
    let compose_drain = drain_seconds(&read("docker/gateway.toml"));
    assert!(
        compose_grace >= compose_drain,
        "compose stop_grace_period {compose_grace}s < the drain {compose_drain}s"
    );

    // Kubernetes: terminationGracePeriodSeconds covers the preStop sleep and then the drain.
    let deployment = read("deploy/kubernetes/deployment.yaml");
    let grace: f64 = setting(&deployment, "terminationGracePeriodSeconds")
        .unwrap()
        .parse()
        .unwrap();
    let pre_stop: f64 = deployment
        .split("command: [\"sleep\", \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a preStop sleep")
        .parse()
        .unwrap();
    let configmap = read("deploy/kubernetes/configmap.yaml");
    let drain = drain_seconds(&configmap);
    assert!(
        grace >= pre_stop + drain,
        "terminationGracePeriodSeconds {grace} < preStop {pre_stop} + drain {drain}"
    );
}

#[test]
fn the_image_is_built_for_production() {
    let dockerfile = read("docker/Dockerfile");
    let final_stage = dockerfile.rsplit("\nFROM ").next().expect("a final stage");
    assert!(
        final_stage.starts_with("debian:bookworm-slim AS gateway"),
        "the gateway stage is the default (last) one:\n{final_stage}"
    );
    // A numeric user: runAsNonRoot can check it without reading /etc/passwd.
    let user = final_stage
        .lines()
        .find_map(|line| line.strip_prefix("USER "))
        .unwrap_or_default();
    assert!(
        user.split(':')
            .all(|part| part.parse::<u32>().is_ok_and(|id| id > 0)),
        "USER {user:?} is not a numeric non-root uid:gid"
    );
    assert!(
        dockerfile.contains("strip /out/poppy-gateway"),
        "the binary is stripped"
    );
    // No demo binary or demo policies in the gateway image.
    assert!(!final_stage.contains("policies/ "), "{final_stage}");
    assert!(!final_stage.contains("/out/shop"), "{final_stage}");
    assert!(
        final_stage.contains(r#"CMD ["poppy-gateway", "health"]"#),
        "the health check asks the configured admin port"
    );
    assert!(final_stage.contains("COPY docker/image.toml /etc/poppy-gateway/gateway.toml"));
}

#[test]
fn the_image_config_is_neutral() {
    let config = repo().join("docker/image.toml");
    let image_config = read("docker/image.toml");
    assert!(!image_config.contains("shop"), "{image_config}");
    // Without a policy mounted the gateway refuses to start, and says why.
    let output = Command::new(binaries::gateway())
        .arg("check")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        text(&output).contains("policies: `policies/*.toml` matches no file"),
        "{}",
        text(&output)
    );
    // With policies (mounted in the container; pointed at here) it passes. The shop's
    // exchange allows the approval page, which needs `[approval_page]`: from the environment.
    let output = Command::new(binaries::gateway())
        .arg("check")
        .arg("--config")
        .arg(&config)
        .env("POPPY_GATEWAY__POLICIES", r#"["../policies/shop.toml"]"#)
        .env("POPPY_GATEWAY__APPROVAL_PAGE__LISTEN", "127.0.0.1:8085")
        .env(
            "POPPY_GATEWAY__APPROVAL_PAGE__PUBLIC_URL",
            "https://approve.shop.example",
        )
        .env(
            "POPPY_GATEWAY__APPROVAL_PAGE__COMPANY_NAME",
            "Stormline Outfitters",
        )
        .env(
            "POPPY_GATEWAY__APPROVAL_PAGE__ISSUER",
            "https://id.shop.example",
        )
        .env(
            "POPPY_GATEWAY__APPROVAL_PAGE__CLIENT_ID",
            "poppy-approval-page",
        )
        .env(
            "POPPY_GATEWAY__APPROVAL_PAGE__CLIENT_SECRET_ENV",
            "PAGE_SECRET",
        )
        .env("PAGE_SECRET", "a-page-client-secret")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_asks_the_configured_admin_listener() {
    let mut stack = Stack::start(Store::Memory);
    let config = stack.gateway.config_path();
    let health = || {
        Command::new(binaries::gateway())
            .arg("health")
            .env("POPPY_GATEWAY_CONFIG", &config)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let output = health();
    assert!(output.status.success(), "{}", text(&output));

    stack.gateway.kill();
    let output = health();
    assert!(!output.status.success());
    let out = text(&output);
    assert!(
        out.contains(&format!(
            "unhealthy: GET http://{}/healthz",
            stack.gateway.admin_addr()
        )),
        "{out}"
    );
}
