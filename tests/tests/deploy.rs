//! `docker/` and `deploy/kubernetes/` without a Docker engine or a cluster: the Dockerfile
//! passes hadolint, the kustomize base rendered by `kubectl kustomize` passes
//! kubernetes-validate (both linters from PyPI, installed by tests/deps/install.sh; kubectl by
//! scripts/prereqs.sh), the image is the production one (numeric user, stripped binary,
//! neutral config, health check on the configured admin port), the files a pod sees pass
//! `check` (a policy added to the ConfigMap among them), the base applies no Secret, pins its
//! image, spreads its replicas and fences the admin port, and every stop grace period covers
//! the gateway's drain.
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

/// The kustomize base as `kubectl apply -k deploy/kubernetes/` applies it, in a file.
fn rendered_base(dir: &Path) -> PathBuf {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(repo().join("deploy/kubernetes"))
        .output()
        .expect("run kubectl: scripts/prereqs.sh test installs it");
    assert!(
        output.status.success(),
        "kubectl kustomize:\n{}",
        text(&output)
    );
    let path = dir.join("base.yaml");
    std::fs::write(&path, &output.stdout).unwrap();
    path
}

/// Every object of a YAML file, as JSON (PyYAML of the deploy-lint environment reads it).
fn objects(path: &Path) -> Vec<serde_json::Value> {
    let output = Command::new(python("deploy-lint"))
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
        ])
        .arg(path)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn kubernetes_validate(files: &[PathBuf]) -> Output {
    Command::new(lint_tool("kubernetes-validate"))
        // Strict: a misspelt or misplaced field fails instead of being ignored.
        .args(["--strict", "--no-warn"])
        .args(files)
        .output()
        .expect("run kubernetes-validate")
}

fn of_kind<'a>(objects: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
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
fn the_kustomize_base_passes_schema_validation() {
    let dir = tempfile::tempdir().unwrap();
    let base = rendered_base(dir.path());
    let objects = objects(&base);
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "Deployment",
        "Service",
        "ConfigMap",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ] {
        assert!(
            kinds.contains(&kind),
            "the base renders no {kind}: {kinds:?}"
        );
    }
    let output = kubernetes_validate(std::slice::from_ref(&base));
    assert!(
        output.status.success(),
        "kubernetes-validate:\n{}",
        text(&output)
    );
    let example = repo().join("deploy/kubernetes/examples/secret.yaml");
    let output = kubernetes_validate(std::slice::from_ref(&example));
    assert!(
        output.status.success(),
        "kubernetes-validate:\n{}",
        text(&output)
    );

    // A misplaced field fails validation.
    let bad = dir.path().join("bad.yaml");
    let deployment = read("deploy/kubernetes/deployment.yaml").replace(
        "terminationGracePeriodSeconds: 45",
        "terminationGracePeriod: 45",
    );
    std::fs::write(&bad, deployment).unwrap();
    let output = kubernetes_validate(&[bad]);
    assert!(!output.status.success(), "{}", text(&output));
}

/// `kubectl apply -k` (or `-f` of the folder) never overwrites the real Secret with the
/// example's placeholders.
#[test]
fn applying_the_base_leaves_the_secret_alone() {
    let dir = tempfile::tempdir().unwrap();
    let objects = objects(&rendered_base(dir.path()));
    assert!(of_kind(&objects, "Secret").is_empty(), "{objects:?}");
    let folder = repo().join("deploy/kubernetes");
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !text.contains("kind: Secret"),
                "{} is applied by -f",
                path.display()
            );
        }
    }
    let example = read("deploy/kubernetes/examples/secret.yaml");
    assert!(example.contains("kubectl create secret generic poppy-gateway"));
}

/// The files a pod sees, laid out as the kubelet mounts them (`..data` and all), pass `check`;
/// a policy added to the policies ConfigMap is one of them, read once.
#[test]
fn the_configmap_config_and_policies_pass_check() {
    let dir = tempfile::tempdir().unwrap();
    let base = rendered_base(dir.path());
    let added = dir.path().join("refund.toml");
    std::fs::write(
        &added,
        r#"[[operation]]
name = "refund"
method = "POST"
path = "/orders/{order_id}/refunds"
id_prefix = "ref"
expires_in = "15m"
same_action = ["order_id"]
summary = "Refund order {order_id}."
[operation.terms]
order_id = { path = "order_id" }
"#,
    )
    .unwrap();
    let pod = dir.path().join("pod");
    let output = Command::new(python("deploy-lint"))
        .arg(deps_dir().join("configmap_files.py"))
        .arg(&base)
        .arg(&pod)
        .arg("--add")
        .arg(format!("refund.toml={}", added.display()))
        .output()
        .expect("lay out the pod's files");
    assert!(output.status.success(), "{}", text(&output));
    let output = Command::new(binaries::gateway())
        .arg("check")
        .arg("--config")
        .arg(pod.join("gateway.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let out = text(&output);
    assert!(output.status.success(), "check:\n{out}");
    assert!(out.contains("redis://redis:6379/0"), "{out}");
    assert_eq!(
        out.matches("/orders/{order_id}/exchanges").count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("/orders/{order_id}/refunds"),
        "a policy added to the ConfigMap reaches the pod:\n{out}"
    );
}

/// A pinned image (the crate version), replicas spread over nodes and zones, a store that
/// must be durable, and the admin port open only to monitoring.
#[test]
fn the_base_is_pinned_spread_durable_and_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let objects = objects(&rendered_base(dir.path()));
    let version = read("Cargo.toml")
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap();
    let deployment = of_kind(&objects, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        format!("poppy-gateway:{version}")
    );
    let spread = pod["topologySpreadConstraints"].as_array().unwrap();
    let keys: Vec<&str> = spread
        .iter()
        .filter_map(|c| c["topologyKey"].as_str())
        .collect();
    assert_eq!(
        keys,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    );
    let labels = &deployment["spec"]["selector"]["matchLabels"];
    assert!(
        spread
            .iter()
            .all(|c| &c["labelSelector"]["matchLabels"] == labels)
    );

    let config = read("deploy/kubernetes/configmap.yaml");
    assert_eq!(setting(&config, "require_durable"), Some("true"));

    let policy = of_kind(&objects, "NetworkPolicy")[0];
    assert_eq!(&policy["spec"]["podSelector"]["matchLabels"], labels);
    let rules = policy["spec"]["ingress"].as_array().unwrap();
    for rule in rules {
        let ports: Vec<&str> = rule["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["port"].as_str())
            .collect();
        if ports.contains(&"admin") {
            assert!(
                rule["from"].as_array().is_some_and(|f| !f.is_empty()),
                "{rule}"
            );
        } else {
            assert_eq!(ports, ["http"], "{rule}");
        }
    }
    assert!(rules.iter().any(|r| r.to_string().contains("\"admin\"")));
}

/// The optional ServiceMonitor (a kustomize Component) scrapes the admin Service's port.
#[test]
fn the_service_monitor_selects_the_admin_service() {
    let component = read("deploy/kubernetes/servicemonitor/kustomization.yaml");
    assert!(component.contains("kind: Component"), "{component}");
    assert!(component.contains("- servicemonitor.yaml"), "{component}");
    let monitors = objects(&repo().join("deploy/kubernetes/servicemonitor/servicemonitor.yaml"));
    let monitor = of_kind(&monitors, "ServiceMonitor")[0];
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    let dir = tempfile::tempdir().unwrap();
    let objects = objects(&rendered_base(dir.path()));
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    let selected: Vec<_> = of_kind(&objects, "Service")
        .into_iter()
        .filter(|s| {
            selector
                .iter()
                .all(|(k, v)| &s["metadata"]["labels"][k] == v)
        })
        .collect();
    assert_eq!(selected.len(), 1, "{selected:?}");
    assert_eq!(selected[0]["metadata"]["name"], "poppy-gateway-admin");
    let port = &monitor["spec"]["endpoints"][0]["port"];
    assert!(
        selected[0]["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| &p["name"] == port),
        "{port}"
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    // The job docker/alerts.yml's `up` rules name.
    let job_label = monitor["spec"]["jobLabel"].as_str().unwrap();
    assert_eq!(
        selected[0]["metadata"]["labels"][job_label],
        "poppy-gateway"
    );
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

/// What a SIGTERM may take with the defaults (docs/configuration.md: [upstream] and [server]): the
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

/// docker/README.md says what podman does differently: no HEALTHCHECK in its default OCI
/// format, and podman-compose ignores `stop_grace_period`.
#[test]
fn the_docker_readme_covers_podman() {
    let readme = read("docker/README.md");
    for needed in [
        "podman build --format docker",
        "podman stop -t 40",
        "--stop-timeout 40",
        "podman-compose ignores",
    ] {
        assert!(readme.contains(needed), "docker/README.md lacks {needed:?}");
    }
}
