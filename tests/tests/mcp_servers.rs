//! Six published MCP servers, drafted by `poppy-gateway init --mcp` and held by the untouched
//! drafts (issue 38): npm `@modelcontextprotocol/server-everything`, `server-memory` and
//! `server-filesystem`, PyPI `mcp-server-git`, `mcp-server-time` and `mcp-server-fetch`, each
//! a stdio server served over Streamable HTTP by npm `supergateway` (stateless: a server
//! process per request, state in its files), installed by tests/deps/install.sh.
//!
//! For each: the draft passes `check` and leaves no tool unheld but those annotated read-only
//! (time's and fetch's tools all are: the file says `nothing_to_approve`). Then the Python
//! SDK (`mcp` 1.x, tests/deps/mcp/published_agent.py) calls write tools as a model does,
//! with the required arguments only and with optional ones: each call is held (a tool error
//! carrying the operation), performed once when approved, and replayed without reaching the
//! server, counted from the messages the server itself received (its standard input, copied
//! to a file) and shown in its own state (the memory graph, the file written, the git
//! commits). Both stores. Each test prints its figures (`figures …`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use poppy_e2e::mcp_client::MCP_PATH;
use poppy_e2e::ports::free_port;
use poppy_e2e::thirdparty::{deps_dir, node_project, python, run_script};
use poppy_e2e::{GatewayBuilder, RedisServer, Run, Session, Store, binaries, run_binary};
use serde_json::{Value, json};

/// A model's calls through a slow, busy machine: each request starts a server process.
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);
const LISTEN_LIMIT: Duration = Duration::from_secs(30);
const MCP_CONFIG: &str = "[mcp]\npath = \"/mcp\"\n";

/// One published server, its stdio command run by supergateway on a port of its own; its
/// standard input copied to `log`, its state in `dir`. Killed on drop.
struct Published {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Published {
    /// `command(state dir)`: the stdio server's command line.
    fn start(command: &dyn Fn(&Path) -> String) -> Published {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.jsonl");
        let stdio = format!(
            "sh -c 'tee -a {} | exec {}'",
            log.display(),
            command(dir.path())
        );
        let gateway_bin = node_project("mcp-servers").join("node_modules/.bin/supergateway");
        for _ in 0..2 {
            let port = free_port();
            let mut child = Command::new(&gateway_bin)
                .args(["--stdio", &stdio, "--outputTransport", "streamableHttp"])
                .args(["--port", &port.to_string(), "--logLevel", "none"])
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start supergateway");
            let deadline = Instant::now() + LISTEN_LIMIT;
            while Instant::now() < deadline {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Published { child, port, dir };
                }
                if child.try_wait().unwrap().is_some() {
                    break; // the port was taken meanwhile: once more on another
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("supergateway did not listen within {LISTEN_LIMIT:?}: {stdio}");
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn state(&self) -> &Path {
        self.dir.path()
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("received.jsonl")
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn npm_server(bin: &str) -> String {
    node_project("mcp-servers")
        .join("node_modules/.bin")
        .join(bin)
        .display()
        .to_string()
}

fn pypi_server(bin: &str) -> String {
    python("mcp-servers")
        .with_file_name(bin)
        .display()
        .to_string()
}

fn gateway_cli(args: &[&str]) -> Run {
    run_binary(
        &binaries::gateway(),
        args,
        "",
        &[],
        Duration::from_secs(120),
    )
}

/// `init --mcp` of the server, which must succeed, and `check` of its file.
struct Drafted {
    run: Run,
    check: Run,
}

impl Drafted {
    fn of(server: &Published) -> Drafted {
        let run = gateway_cli(&["init", "--mcp", &format!("{}{MCP_PATH}", server.url())]);
        run.assert_code(0, "init --mcp");
        let dir = GatewayBuilder::new("http://127.0.0.1:9")
            .policy("drafts.toml", &run.stdout)
            .extra_config(MCP_CONFIG)
            .write();
        let check = gateway_cli(&["check", "--config", dir.config.to_str().unwrap()]);
        check.assert_code(0, &format!("check of the draft:\n{}", run.stdout));
        Drafted { run, check }
    }

    fn text(&self) -> &str {
        &self.run.stdout
    }

    /// The tools drafted live, in file order.
    fn held(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter_map(|l| l.strip_prefix("tool = \""))
            .map(|l| l.trim_end_matches('"').to_owned())
            .collect()
    }

    /// The tools `init` skipped as read-only.
    fn skipped(&self) -> Vec<String> {
        self.run
            .stderr
            .lines()
            .filter_map(|l| l.strip_prefix("skipped    tool "))
            .filter_map(|l| l.strip_suffix(": readOnlyHint: true"))
            .map(str::to_owned)
            .collect()
    }

    /// The server's `serverInfo`, from the file's first line.
    fn server(&self) -> String {
        let first = self.text().lines().next().unwrap_or_default();
        first
            .split_once(" (")
            .and_then(|(_, rest)| rest.split_once("), by"))
            .map(|(info, _)| info.to_owned())
            .unwrap_or_else(|| panic!("no serverInfo in the header: {first}"))
    }

    /// Every tool is held or skipped as read-only, none left commented out or unheld.
    fn assert_no_write_unheld(&self, writes: &[&str], read_only: &[&str]) {
        let text = self.text();
        assert!(!text.contains("NOT DRAFTED"), "{text}");
        assert!(!self.run.stderr.contains("UNHELD"), "{}", self.run.stderr);
        assert_eq!(self.held(), writes, "{}", self.run.stderr);
        let mut skipped = self.skipped();
        skipped.sort();
        let mut expected: Vec<String> = read_only.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(skipped, expected, "{}", self.run.stderr);
    }
}

/// One held call of the plan, as the agent printed it.
fn assert_held_once(step: &Value, label: &str) {
    let context = format!("{label}: {step}");
    let held = &step["held"];
    assert!(held.get("raised").is_none(), "{context}");
    assert_eq!(held["isError"], true, "{context}");
    let operation = &held["structuredContent"]["operation"];
    assert!(operation["operation_id"].is_string(), "{context}");
    assert!(
        held["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Not done yet.")),
        "{context}"
    );
    let approved = &step["approved"];
    assert!(approved.get("raised").is_none(), "{context}");
    assert_ne!(approved["isError"], true, "performed: {context}");
    let replayed = &step["replayed"];
    assert_eq!(
        replayed["content"], approved["content"],
        "a replay: {context}"
    );
    // What the server received: nothing while held, one call when approved, none again.
    let performed: Vec<u64> = step["performed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    let base = performed[0];
    assert_eq!(
        performed,
        vec![base, base, base + 1, base + 1],
        "held, approved once, replayed: {context}"
    );
}

/// The gateway in front of `server` with the untouched draft; the agent's plan through it.
/// Returns the steps by label.
async fn through_the_gateway(
    server: &Published,
    draft: &Drafted,
    store: Store,
    plan: &Value,
) -> std::collections::HashMap<String, Value> {
    let redis = (store == Store::Redis).then(RedisServer::start);
    let mut builder = GatewayBuilder::new(&server.url())
        .policy("tools.toml", draft.text())
        .extra_config(MCP_CONFIG);
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    let gateway = builder.start();
    let session = Session::signed_out(&format!("ses_published_{}", std::process::id()));
    let mut command = tokio::process::Command::new(python("mcp1"));
    command
        .arg(deps_dir().join("mcp/published_agent.py"))
        .arg(format!("{}{MCP_PATH}", gateway.base_url()))
        .arg(session.header())
        .arg(server.log())
        .arg(plan.to_string());
    let output = run_script(command, "published_agent.py", SCRIPT_LIMIT).await;
    let steps = output.steps();
    assert!(steps.contains_key("done"), "{}", output.text);
    for call in plan["held"].as_array().into_iter().flatten() {
        let label = call["label"].as_str().unwrap();
        let step = steps
            .get(label)
            .unwrap_or_else(|| panic!("no step {label}:\n{}", output.text));
        assert_held_once(step, label);
    }
    for call in plan["read_only"].as_array().into_iter().flatten() {
        let label = format!("read_only {}", call["tool"].as_str().unwrap());
        let step = &steps[&label];
        assert!(step["result"].get("raised").is_none(), "{step}");
        assert_ne!(step["result"]["isError"], true, "passes through: {step}");
        let performed = &step["performed"];
        assert_eq!(
            performed[1].as_u64(),
            performed[0].as_u64().map(|n| n + 1),
            "{step}"
        );
    }
    steps
}

/// The figures of one server, for the lead's note.
fn figures(draft: &Drafted, store: Store, plan: &Value) {
    let calls = match plan["held"].as_array().map_or(0, Vec::len) {
        0 => "nothing_to_approve".to_owned(),
        n => format!("{n} calls held, executed once, replayed"),
    };
    println!(
        "figures {} ({store:?}): {} tools, {} write tools drafted held, {} read-only skipped; {calls}",
        draft.server(),
        draft.held().len() + draft.skipped().len(),
        draft.held().len(),
        draft.skipped().len()
    );
}

fn held(label: &str, tool: &str, arguments: Value) -> Value {
    json!({"label": label, "tool": tool, "arguments": arguments})
}

/// `@modelcontextprotocol/server-everything`: a tool without arguments held on a constant;
/// `gzip-file-as-resource`, whose arguments all have defaults, with one of them and with all.
/// (`simulate-research-query` is a task tool, which needs a client that runs tasks.)
async fn everything(store: Store) {
    let server = Published::start(&|_| npm_server("mcp-server-everything"));
    let draft = Drafted::of(&server);
    let writes = [
        "gzip-file-as-resource",
        "toggle-simulated-logging",
        "toggle-subscriber-updates",
        "simulate-research-query",
    ];
    let read_only = [
        "echo",
        "get-annotated-message",
        "get-env",
        "get-resource-links",
        "get-resource-reference",
        "get-structured-content",
        "get-sum",
        "get-tiny-image",
        "trigger-long-running-operation",
    ];
    draft.assert_no_write_unheld(&writes, &read_only);
    for optional in ["ambiguous", "name", "data", "output_type"] {
        assert!(
            draft
                .text()
                .contains(&format!("{optional} = {{ argument = "))
                && draft.text().contains(", optional = true }"),
            "{optional}: {}",
            draft.text()
        );
    }
    // A data URI: the default is a URL on the internet, which the test can't reach.
    let tea = "data:text/plain;base64,dGVh";
    let plan = json!({
        "held": [
            held("no arguments", "toggle-simulated-logging", json!({})),
            held("one optional", "gzip-file-as-resource", json!({"data": tea})),
            held("every optional", "gzip-file-as-resource",
                 json!({"name": "tea.gz", "data": tea, "outputType": "resource"})),
        ],
        "read_only": [{"tool": "get-sum", "arguments": {"a": 2, "b": 3}}],
    });
    let steps = through_the_gateway(&server, &draft, store, &plan).await;
    let summary = |label: &str| {
        steps[label]["held"]["structuredContent"]["operation"]["summary"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // Each optional argument shown when sent, and only then.
    let one = summary("one optional");
    assert!(
        one.contains("data:text/plain;base64,dGVh") && !one.contains("tea.gz"),
        "{one}"
    );
    let every = summary("every optional");
    assert!(
        every.contains("tea.gz") && every.contains("output type resource"),
        "{every}"
    );
    assert!(
        summary("no arguments").contains("toggle-simulated-logging"),
        "{}",
        summary("no arguments")
    );
    figures(&draft, store, &plan);
}

/// `@modelcontextprotocol/server-memory`: entities created and observed once in its graph.
async fn memory(store: Store) {
    let server = Published::start(&|dir| {
        format!(
            "env MEMORY_FILE_PATH={} {}",
            dir.join("memory.jsonl").display(),
            npm_server("mcp-server-memory")
        )
    });
    let draft = Drafted::of(&server);
    let writes = [
        "create_entities",
        "create_relations",
        "add_observations",
        "delete_entities",
        "delete_observations",
        "delete_relations",
    ];
    draft.assert_no_write_unheld(&writes, &["read_graph", "search_nodes", "open_nodes"]);
    let plan = json!({
        "held": [
            held("create", "create_entities", json!({"entities": [
                {"name": "Ada", "entityType": "person", "observations": ["writes programs"]}]})),
            held("observe", "add_observations", json!({"observations": [
                {"entityName": "Ada", "contents": ["likes tea"]}]})),
        ],
        "read_only": [{"tool": "read_graph", "arguments": {}}],
    });
    through_the_gateway(&server, &draft, store, &plan).await;
    let graph = std::fs::read_to_string(server.state().join("memory.jsonl")).unwrap();
    assert_eq!(graph.matches("\"name\":\"Ada\"").count(), 1, "{graph}");
    assert_eq!(graph.matches("likes tea").count(), 1, "{graph}");
    figures(&draft, store, &plan);
}

/// `@modelcontextprotocol/server-filesystem`: a file written, then edited once (an edit
/// performed twice would double the text it adds); `dryRun` (default false) sent too.
async fn filesystem(store: Store) {
    let server = Published::start(&|dir| {
        format!("{} {}", npm_server("mcp-server-filesystem"), dir.display())
    });
    let draft = Drafted::of(&server);
    let writes = ["write_file", "edit_file", "create_directory", "move_file"];
    let read_only = [
        "read_file",
        "read_text_file",
        "read_media_file",
        "read_multiple_files",
        "list_directory",
        "list_directory_with_sizes",
        "directory_tree",
        "search_files",
        "get_file_info",
        "list_allowed_directories",
    ];
    draft.assert_no_write_unheld(&writes, &read_only);
    let note = server.state().join("note.txt").display().to_string();
    let plan = json!({
        "held": [
            held("write", "write_file", json!({"path": note, "content": "tea"})),
            held("edit required only", "edit_file", json!({"path": note,
                "edits": [{"oldText": "tea", "newText": "tea, milk"}]})),
            held("edit with optional", "edit_file", json!({"path": note,
                "edits": [{"oldText": "milk", "newText": "milk, sugar"}], "dryRun": false})),
        ],
        "read_only": [{"tool": "read_text_file", "arguments": {"path": note}}],
    });
    through_the_gateway(&server, &draft, store, &plan).await;
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "tea, milk, sugar");
    figures(&draft, store, &plan);
}

/// PyPI `mcp-server-git`: a file added and committed once (the commit count), a branch
/// created from HEAD and from a named base (`base_branch`, which has a default).
async fn git(store: Store) {
    let server = Published::start(&|dir| {
        let repo = dir.join("repo");
        std::fs::create_dir(&repo).unwrap();
        git_in(&repo, &["init", "-q", "-b", "main"]);
        git_in(&repo, &["commit", "-q", "--allow-empty", "-m", "first"]);
        std::fs::write(repo.join("notes.txt"), "tea\n").unwrap();
        format!(
            "{} --repository {}",
            pypi_server("mcp-server-git"),
            repo.display()
        )
    });
    let draft = Drafted::of(&server);
    let writes = [
        "git_commit",
        "git_add",
        "git_reset",
        "git_create_branch",
        "git_checkout",
    ];
    let read_only = [
        "git_status",
        "git_diff_unstaged",
        "git_diff_staged",
        "git_diff",
        "git_log",
        "git_show",
        "git_branch",
    ];
    draft.assert_no_write_unheld(&writes, &read_only);
    let repo = server.state().join("repo").display().to_string();
    let plan = json!({
        "held": [
            held("add", "git_add", json!({"repo_path": repo, "files": ["notes.txt"]})),
            held("commit", "git_commit", json!({"repo_path": repo, "message": "Add notes"})),
            held("branch required only", "git_create_branch", json!({"repo_path": repo, "branch_name": "tea"})),
            held("branch with optional", "git_create_branch", json!({"repo_path": repo,
                "branch_name": "milk", "base_branch": "main"})),
        ],
        "read_only": [{"tool": "git_status", "arguments": {"repo_path": repo}}],
    });
    through_the_gateway(&server, &draft, store, &plan).await;
    let repo = server.state().join("repo");
    assert_eq!(git_in(&repo, &["rev-list", "--count", "HEAD"]), "2");
    assert_eq!(
        git_in(&repo, &["branch", "--format=%(refname:short)"]),
        "main\nmilk\ntea"
    );
    figures(&draft, store, &plan);
}

fn git_in(repo: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .current_dir(repo)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .output()
        .expect("git");
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// PyPI `mcp-server-time` and `mcp-server-fetch`: every tool read-only, so the draft says
/// `nothing_to_approve`, `check` passes with a warning, and the gateway started with it passes
/// a call through.
async fn read_only_servers(store: Store) {
    let time =
        Published::start(&|_| format!("{} --local-timezone UTC", pypi_server("mcp-server-time")));
    let fetch =
        Published::start(&|_| format!("{} --ignore-robots-txt", pypi_server("mcp-server-fetch")));
    for (server, tools) in [
        (&time, vec!["get_current_time", "convert_time"]),
        (&fetch, vec!["fetch"]),
    ] {
        let draft = Drafted::of(server);
        draft.assert_no_write_unheld(&[], &tools);
        assert!(
            draft.text().contains("\nnothing_to_approve = \""),
            "{}",
            draft.text()
        );
        assert!(
            draft
                .check
                .stdout
                .contains("drafts.toml holds no policy (nothing_to_approve)"),
            "{}",
            draft.check.describe()
        );
        figures(&draft, store, &json!({}));
    }
    let draft = Drafted::of(&time);
    let plan =
        json!({"read_only": [{"tool": "get_current_time", "arguments": {"timezone": "UTC"}}]});
    through_the_gateway(&time, &draft, store, &plan).await;
}

poppy_e2e::store_tests!(everything, memory, filesystem, git, read_only_servers);
