//! `poppy-gateway check` and startup: a good config lists its routes; every config or policy
//! error names the file, line, column and key; startup refuses what it cannot run safely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use poppy_e2e::ports::free_port;
use poppy_e2e::{GatewayBuilder, TEST_KEYS, binaries};

const RUN_TIMEOUT: Duration = Duration::from_secs(20);

struct Run {
    success: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Run the gateway binary with `args` (at most 20 s; killed after that).
fn run(args: &[&str], dir: &Path, keys: Option<&str>) -> Run {
    let out = dir.join("run.stdout");
    let err = dir.join("run.stderr");
    let mut command = Command::new(binaries::gateway());
    command
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    match keys {
        Some(keys) => command.env("POPPY_GATEWAY_KEYS", keys),
        None => command.env_remove("POPPY_GATEWAY_KEYS"),
    };
    let mut child = command.spawn().expect("spawn poppy-gateway");
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for poppy-gateway") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let run = Run {
        success: status.is_some_and(|s| s.success()),
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "poppy-gateway {args:?} was still running after {RUN_TIMEOUT:?}:\n{}",
        run.describe()
    );
    run
}

fn check(config: &Path, dir: &Path) -> Run {
    run(
        &["check", "--config", config.to_str().unwrap()],
        dir,
        Some(TEST_KEYS),
    )
}

/// Positions `FILE:LINE:COLUMN:` in `text` for a file whose name ends with `file_name`.
fn positions(text: &str, file_name: &str) -> Vec<(u32, u32)> {
    let needle = format!("{file_name}:");
    text.match_indices(&needle)
        .filter_map(|(at, _)| {
            let rest = &text[at + needle.len()..];
            let mut parts = rest.splitn(3, ':');
            let line = parts.next()?.parse().ok()?;
            let column = parts.next()?.parse().ok()?;
            parts.next()?;
            Some((line, column))
        })
        .collect()
}

/// Assert `run` failed and its stderr says `FILE:LINE:COLUMN: …` with LINE in `lines`, and
/// names every one of `keys`.
fn assert_reported(run: &Run, file_name: &str, lines: &[u32], keys: &[&str], what: &str) {
    assert!(
        !run.success,
        "{what}: must exit non-zero:\n{}",
        run.describe()
    );
    let found = positions(&run.stderr, file_name);
    assert!(
        found
            .iter()
            .any(|(line, column)| lines.contains(line) && *column >= 1),
        "{what}: stderr must say `{file_name}:LINE:COLUMN: message` with LINE in {lines:?}; \
         found positions {found:?}:\n{}",
        run.describe()
    );
    for key in keys {
        assert!(
            run.stderr.contains(key),
            "{what}: stderr must name `{key}`:\n{}",
            run.describe()
        );
    }
}

/// A valid exchange policy; line numbers below refer to it.
const POLICY: &str = r#"[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku}."

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
replacement_sku = { body = "$.replacement_sku" }
"#;
const SAME_ACTION_LINE: u32 = 7;
const SUMMARY_LINE: u32 = 8;
const ITEM_TERM_LINE: u32 = 12;
const SKU_TERM_LINE: u32 = 13;

/// `POLICY` with `line` (1-based) replaced by `text`.
fn policy_with(line: u32, text: &str) -> String {
    POLICY
        .lines()
        .enumerate()
        .map(|(i, l)| if i as u32 + 1 == line { text } else { l })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn check_policy(policy: &str) -> Run {
    let config = GatewayBuilder::new("http://127.0.0.1:9")
        .policy("bad.toml", policy)
        .write();
    check(&config.config, config.dir.path())
}

#[test]
fn check_accepts_a_good_config_and_prints_the_routes() {
    let config = GatewayBuilder::new("http://127.0.0.1:9").write();
    let run = check(&config.config, config.dir.path());
    assert!(
        run.success,
        "check of the default config must pass:\n{}",
        run.describe()
    );
    let printed = format!("{}{}", run.stdout, run.stderr);
    for route in [
        "/orders/{order_id}/exchanges",
        "/orders/{order_id}/cancel",
        "/orders/{order_id}/refunds",
    ] {
        assert!(
            printed.contains(route),
            "check must print route {route}:\n{}",
            run.describe()
        );
    }
    assert!(
        printed.contains("POST"),
        "routes are printed with their method:\n{}",
        run.describe()
    );
    assert!(
        printed.contains("exchange"),
        "routes are printed with their policy name"
    );
}

#[test]
fn check_accepts_the_good_policy_alone() {
    let run = check_policy(POLICY);
    assert!(
        run.success,
        "the reference policy is valid:\n{}",
        run.describe()
    );
}

#[test]
fn check_rejects_a_summary_that_leaves_out_a_term() {
    let run = check_policy(&policy_with(
        SUMMARY_LINE,
        "summary = \"Exchange item **{item_id}** on order {order_id}.\"",
    ));
    assert_reported(
        &run,
        "bad.toml",
        &[SUMMARY_LINE, SKU_TERM_LINE],
        &["replacement_sku"],
        "a summary without {replacement_sku}",
    );
}

#[test]
fn check_rejects_a_placeholder_that_names_no_term() {
    let run = check_policy(&policy_with(
        SUMMARY_LINE,
        "summary = \"Exchange item **{item_id}** on order {order_id} for {replacement_sku} in {colour}.\"",
    ));
    assert_reported(
        &run,
        "bad.toml",
        &[SUMMARY_LINE],
        &["colour"],
        "placeholder {colour}",
    );
}

#[test]
fn check_rejects_same_action_naming_no_term() {
    let run = check_policy(&policy_with(
        SAME_ACTION_LINE,
        "same_action = [\"order_id\", \"item\"]",
    ));
    assert_reported(
        &run,
        "bad.toml",
        &[SAME_ACTION_LINE],
        &["item"],
        "same_action \"item\"",
    );
}

#[test]
fn check_rejects_unknown_keys_in_policies() {
    let run = check_policy(&policy_with(SAME_ACTION_LINE, "colour = \"red\""));
    assert_reported(
        &run,
        "bad.toml",
        &[SAME_ACTION_LINE],
        &["colour"],
        "unknown key `colour`",
    );

    let run = check_policy(&policy_with(
        ITEM_TERM_LINE,
        "item_id = { body = \"$.item_id\", fallback = \"x\" }",
    ));
    assert_reported(
        &run,
        "bad.toml",
        &[ITEM_TERM_LINE],
        &["fallback"],
        "unknown key `fallback` in a term",
    );
}

#[test]
fn check_rejects_a_term_with_two_sources() {
    let run = check_policy(&policy_with(
        ITEM_TERM_LINE,
        "item_id = { body = \"$.item_id\", path = \"order_id\" }",
    ));
    assert_reported(
        &run,
        "bad.toml",
        &[ITEM_TERM_LINE],
        &["item_id"],
        "a term with two sources",
    );
}

/// Two policies of one method whose paths can match the same request (issue 25): `check`
/// and startup refuse them, at the later one's place, naming both and the way out; marking
/// the more specific one with `overrides` makes them valid.
#[test]
fn check_rejects_overlapping_routes_naming_both() {
    let general = POLICY
        .replace("\"exchange\"", "\"order_action\"")
        .replace("/orders/{order_id}/exchanges", "/orders/{order}/{action}")
        .replace("\"exc\"", "\"act\"")
        .replace(
            "order_id = { path = \"order_id\" }",
            "order = { path = \"order\" }\naction = { path = \"action\" }",
        )
        .replace("[\"order_id\", \"item_id\"]", "[\"order\", \"action\"]")
        .replace(
            "Exchange item **{item_id}** on order {order_id} for {replacement_sku}.",
            "Do {action} on order {order} ({item_id}, {replacement_sku}).",
        );
    let overlapping = GatewayBuilder::new("http://127.0.0.1:9")
        .policy("a-general.toml", &general)
        .policy("b-exchange.toml", POLICY)
        .write();
    let checked = check(&overlapping.config, overlapping.dir.path());
    assert_reported(
        &checked,
        "b-exchange.toml",
        &[2],
        &[
            "`exchange`",
            "`order_action`",
            "a-general.toml",
            "overrides",
        ],
        "overlapping routes",
    );
    let running = run(
        &["--config", overlapping.config.to_str().unwrap()],
        overlapping.dir.path(),
        Some(TEST_KEYS),
    );
    assert_reported(
        &running,
        "b-exchange.toml",
        &[2],
        &["`exchange`", "`order_action`"],
        "starting with overlapping routes",
    );

    let marked = POLICY.replace("summary =", "overrides = [\"order_action\"]\nsummary =");
    let config = GatewayBuilder::new("http://127.0.0.1:9")
        .policy("a-general.toml", &general)
        .policy("b-exchange.toml", &marked)
        .write();
    let checked = check(&config.config, config.dir.path());
    assert!(
        checked.success,
        "marked more specific:\n{}",
        checked.describe()
    );
    assert!(
        checked
            .stdout
            .contains("overrides order_action where both match"),
        "{}",
        checked.describe()
    );
}

#[test]
fn check_rejects_toml_syntax_errors() {
    let run = check_policy(&policy_with(
        SUMMARY_LINE,
        "summary = \"Exchange item {item_id}",
    ));
    assert_reported(
        &run,
        "bad.toml",
        &[SUMMARY_LINE],
        &[],
        "an unterminated string",
    );
}

#[test]
fn check_rejects_unknown_keys_in_gateway_toml() {
    let config = GatewayBuilder::new("http://127.0.0.1:9").write();
    let text = std::fs::read_to_string(&config.config).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let server = lines.iter().position(|l| l.trim() == "[server]").unwrap();
    let mut edited: Vec<&str> = lines.clone();
    edited.insert(server + 1, "listn = \"127.0.0.1:1\"");
    std::fs::write(&config.config, edited.join("\n") + "\n").unwrap();
    let run = check(&config.config, config.dir.path());
    assert_reported(
        &run,
        "gateway.toml",
        &[server as u32 + 2],
        &["listn"],
        "unknown key `listn` in [server]",
    );
}

#[test]
fn running_with_a_bad_config_exits_with_the_same_report() {
    let config = GatewayBuilder::new("http://127.0.0.1:9")
        .policy(
            "bad.toml",
            &policy_with(SAME_ACTION_LINE, "colour = \"red\""),
        )
        .write();
    let run = run(
        &["--config", config.config.to_str().unwrap()],
        config.dir.path(),
        Some(TEST_KEYS),
    );
    assert_reported(
        &run,
        "bad.toml",
        &[SAME_ACTION_LINE],
        &["colour"],
        "running a bad config",
    );
}

#[test]
fn redis_store_without_keys_refuses_to_start() {
    let config = GatewayBuilder::new("http://127.0.0.1:9")
        .store_url(&format!("redis://127.0.0.1:{}/0", free_port()))
        .write();
    let run = run(
        &["--config", config.config.to_str().unwrap()],
        config.dir.path(),
        None,
    );
    assert!(
        !run.success,
        "Redis without POPPY_GATEWAY_KEYS must not start:\n{}",
        run.describe()
    );
    assert!(
        run.stderr.contains("POPPY_GATEWAY_KEYS"),
        "the refusal must say POPPY_GATEWAY_KEYS is needed:\n{}",
        run.describe()
    );
}

/// The placeholder secrets deploy/kubernetes/examples/secret.yaml ships (anyone can read them) are
/// refused at startup, as signing keys (also beside a real key) and as the admin token.
#[test]
fn shipped_placeholder_secrets_refuse_to_start() {
    const PLACEHOLDER: &str = "replace-me-with-openssl-rand-hex-32";
    let secret = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/examples/secret.yaml"),
    )
    .unwrap();
    assert!(
        secret.contains(PLACEHOLDER),
        "the test knows the shipped placeholder"
    );
    let config = GatewayBuilder::new("http://127.0.0.1:9").write();
    let args = ["--config", config.config.to_str().unwrap()];
    for keys in [
        PLACEHOLDER.to_owned(),
        format!("{}, {PLACEHOLDER}", "a".repeat(32)),
    ] {
        let run = run(&args, config.dir.path(), Some(&keys));
        assert!(!run.success, "{keys}:\n{}", run.describe());
        assert!(
            run.stderr.contains("POPPY_GATEWAY_KEYS is the placeholder"),
            "{}",
            run.describe()
        );
    }
    let out = config.dir.path().join("admin.stdout");
    let err = config.dir.path().join("admin.stderr");
    let mut child = Command::new(binaries::gateway())
        .args(args)
        .env("POPPY_GATEWAY_KEYS", "a".repeat(32))
        .env("POPPY_GATEWAY_ADMIN_TOKEN", PLACEHOLDER)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the gateway started with the placeholder admin token");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("POPPY_GATEWAY_ADMIN_TOKEN is the placeholder"),
        "{stderr}"
    );
}

#[test]
fn memory_store_without_keys_starts_and_warns() {
    let upstream = poppy_e2e::Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url()).keys(None).start();
    let log = gateway.log();
    assert!(
        log.contains("POPPY_GATEWAY_KEYS") || log.to_lowercase().contains("random"),
        "without keys the gateway must warn that it made a random key:\n{log}"
    );
}

/// `check` says what the start would refuse or ignore although the files are right (issue 39):
/// a Redis store without `POPPY_GATEWAY_KEYS`, a mistyped `POPPY_GATEWAY_…` variable, and that
/// requests without a Session pass through policy routes when no agents rule is configured.
#[test]
fn check_warns_about_what_the_start_would_refuse_or_ignore() {
    let config = GatewayBuilder::new("http://127.0.0.1:9")
        .store_url(&format!("redis://127.0.0.1:{}/0", free_port()))
        .write();
    let output = Command::new(binaries::gateway())
        .args(["check", "--config", config.config.to_str().unwrap()])
        .env_remove("POPPY_GATEWAY_KEYS")
        .env("POPPY_GATEWAY_ADMINTOKEN", "typo")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let describe = format!("--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    assert!(output.status.success(), "the files are right:\n{describe}");
    assert!(
        stderr.contains("warning: with this environment the gateway would not start")
            && stderr.contains("POPPY_GATEWAY_KEYS"),
        "{describe}"
    );
    assert!(
        stderr.contains("POPPY_GATEWAY_ADMINTOKEN is set but the gateway reads no such variable"),
        "{describe}"
    );
    assert!(
        stdout.contains("note: only requests with a Poppy-Session are held"),
        "{describe}"
    );
}
