//! The demo's walkthroughs (the agent's in README.md, then docs/demo.md's), run in their order
//! against one shop, gateway, Company Agent and example agent identity (as the demo starts them,
//! on free ports, with the gateway verifying every Session: `verify = "required"`): the agent,
//! then `curl`, then MCP (docs/mcp.md), then
//! a conversation, then the approval page (an agent without the extension; the User's sign-in
//! and Approve are driven without a browser by `poppy_e2e::page::approve_on_page`, against the
//! demo's own OpenID provider, examples/idp). Each acts on an order item of its own, so each
//! prints what its comments say however many ran before it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use poppy_e2e::company::Company;
use poppy_e2e::page::approve_on_page;
use poppy_e2e::{GatewayBuilder, Shop, binaries, ports, run_binary};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap()
}

/// The ```sh block of `doc` that contains `marker`.
fn block(doc: &str, marker: &str) -> String {
    poppy_e2e::markdown::code_block(doc, "sh", marker)
}

/// `agent identity` on a free port: the example agent's metadata document and keys, as the
/// demo serves them on 8084; killed on drop.
struct Identity {
    child: Child,
    /// `http://127.0.0.1:PORT`
    base: String,
}

impl Identity {
    fn start() -> Identity {
        let listen = format!("127.0.0.1:{}", ports::free_port());
        let mut child = Command::new(binaries::agent())
            .args(["identity", "--listen", &listen])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Its first line, once it listens: `agent identity: http://ADDR/agent.json`.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains(&listen), "agent identity said {line:?}");
        Identity {
            child,
            base: format!("http://{listen}"),
        }
    }

    /// The agent's `client_id`.
    fn agent_url(&self) -> String {
        format!("{}/agent.json", self.base)
    }
}

impl Drop for Identity {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The demo's OpenID provider (`node examples/idp/idp.mjs`, as demo.sh runs it) on a free
/// port, its one client the approval page at `page`; killed on drop.
struct DemoIdp {
    child: Child,
    /// `http://127.0.0.1:PORT`, the issuer.
    issuer: String,
}

impl DemoIdp {
    fn start(page: &str) -> DemoIdp {
        let dir = repo().join("examples/idp");
        assert!(
            dir.join("node_modules").is_dir(),
            "{}/node_modules is missing: run `bash tests/deps/install.sh` (or examples/demo.sh)",
            dir.display()
        );
        let mut child = Command::new("node")
            .arg(dir.join("idp.mjs"))
            .args(["--listen", "127.0.0.1:0", "--redirect-uri"])
            .arg(format!("{page}/callback"))
            .arg("--client-secret-file")
            .arg(repo().join("examples/shop/page-client.secret"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node examples/idp/idp.mjs");
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = sender.send(lines.next());
            for _ in lines {}
        });
        // `demo identity provider: http://127.0.0.1:PORT (…)`, once it listens.
        let line = match receiver.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(Ok(line))) => line,
            other => {
                let _ = child.kill();
                panic!("idp.mjs did not say its address within 30 s: {other:?}");
            }
        };
        let issuer = line
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no issuer in idp.mjs's first line {line:?}"))
            .to_owned();
        DemoIdp { child, issuer }
    }
}

impl Drop for DemoIdp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A walkthrough that waits for the User: `bash -c script` (stderr into stdout), its lines
/// as they come; killed on drop.
struct Waiting {
    child: Child,
    lines: mpsc::Receiver<String>,
    output: String,
}

impl Waiting {
    fn start(script: &str, env: &[(&str, &str)]) -> Waiting {
        let mut command = Command::new("bash");
        command
            .args(["-c", &format!("exec 2>&1\n{script}")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("spawn bash");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Waiting {
            child,
            lines,
            output: String::new(),
        }
    }

    /// The first line (from now) that `wanted` accepts, within `timeout`.
    fn line_where(&mut self, wanted: impl Fn(&str) -> bool, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.output.push_str(&line);
                    self.output.push('\n');
                    if wanted(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no such line within {timeout:?} (or the walkthrough ended):\n{}",
                    self.output
                ),
            }
        }
    }

    /// Everything it printed, once it exits (within `timeout`), and its exit code.
    fn finish(mut self, timeout: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.output.push_str(&line);
                    self.output.push('\n');
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("still running after {timeout:?}:\n{}", self.output)
                }
            }
        }
        let code = self.child.wait().ok().and_then(|status| status.code());
        (code, std::mem::take(&mut self.output))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shop's count of exchanges performed.
async fn shop_exchanges(shop: &Shop) -> u64 {
    let stats: serde_json::Value = reqwest::get(format!("{}/stats", shop.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    stats["exchanges"].as_u64().unwrap()
}

/// demo.sh's `[session]`: verified, for these public origins (quoted TOML strings), the
/// example agent's documents allowed on loopback (examples/shop/gateway.toml).
fn session_lines(origins: &[String]) -> String {
    let quoted: Vec<String> = origins.iter().map(|o| format!("\"{o}\"")).collect();
    format!(
        "verify = \"required\"\norigins = [{}]\n{}",
        quoted.join(", "),
        poppy_e2e::test_agent::ALLOW_LOOPBACK
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walkthroughs_print_what_the_readme_says_in_readme_order() {
    let shop = Shop::start();
    let identity = Identity::start();
    // The approval page and its provider, as demo.sh runs them (examples/shop/gateway.toml's
    // [approval_page], with the demo's client secret file).
    let page = format!("http://127.0.0.1:{}", ports::free_port());
    let idp = DemoIdp::start(&page);
    // The origins are the gateway's and the Company Agent's, whose ports are known only once
    // both run: the gateway starts with a stand-in, then again with the real ones (a restart
    // keeps its ports).
    let stand_in = session_lines(&["http://127.0.0.1:1".to_owned()]);
    let mut gateway = GatewayBuilder::new(&shop.url())
        .policy("shop.toml", &read("policies/shop.toml"))
        .policy("shop-mcp.toml", &read("policies/shop-mcp.toml"))
        .session(&stand_in)
        .extra_config(&format!(
            "\n[mcp]\npath = \"/mcp\"\n\n[[session.agent]]\nclient_id = \"{}\"\n\n[approval_page]\nlisten = \"{}\"\npublic_url = \"{page}\"\ncompany_name = \"Stormline Outfitters\"\nissuer = \"{}\"\nclient_id = \"poppy-approval-page\"\nclient_secret_file = \"{}\"\n",
            identity.agent_url(),
            page.trim_start_matches("http://"),
            idp.issuer,
            repo().join("examples/shop/page-client.secret").display()
        ))
        .conversations()
        .start();
    let company = Company::start(&gateway.conversations_url(), &[]);
    let config = std::fs::read_to_string(gateway.config_path()).unwrap();
    assert!(config.contains(&stand_in), "{config}");
    let verified = session_lines(&[gateway.base_url(), company.url()]);
    std::fs::write(gateway.config_path(), config.replace(&stand_in, &verified)).unwrap();
    let port = gateway.listen_addr().port();
    gateway.restart();
    assert_eq!(gateway.listen_addr().port(), port, "restarted on its ports");
    let scratch = tempfile::tempdir().unwrap();
    let held = scratch.path().join("held.json");
    // The demo's addresses, as the docs write them, become this test's.
    let localise = |code: String| {
        code.replace("http://127.0.0.1:8080", &gateway.base_url())
            .replace("http://127.0.0.1:8081", &gateway.admin_url())
            .replace("http://127.0.0.1:9000", &shop.url())
            .replace("http://127.0.0.1:8082", &gateway.conversations_url())
            .replace("http://127.0.0.1:8083", &company.url())
            .replace("http://127.0.0.1:8084", &identity.base)
            .replace("http://127.0.0.1:8085", &page)
            .replace("http://127.0.0.1:8086", &idp.issuer)
            .replace("target/debug/agent", binaries::agent().to_str().unwrap())
            .replace("/tmp/held.json", held.to_str().unwrap())
    };
    let readme = read("README.md");
    let demo = read("docs/demo.md");
    let walkthroughs = [
        (
            "the agent",
            localise(block(&readme, "target/debug/agent --gateway $G POST")),
        ),
        ("curl", localise(block(&demo, "BODY='"))),
        ("MCP", localise(block(&read("docs/mcp.md"), "mcp() {"))),
        (
            "conversation",
            localise(block(&demo, "--conversation http://127.0.0.1:8083")),
        ),
    ];
    let mut outputs = Vec::new();
    for (name, code) in walkthroughs {
        let script = format!("set -euo pipefail\n{code}\n");
        let agent_url = identity.agent_url();
        let run = tokio::task::spawn_blocking(move || {
            // The agent asks y/N: the User says yes. It signs as the agent served here (the
            // demo's is its default, on 8084).
            run_binary(
                Path::new("bash"),
                &["-c", &script],
                "y\n",
                &[("POPPY_AGENT_URL", &agent_url)],
                Duration::from_secs(60),
            )
        })
        .await
        .unwrap();
        assert!(
            run.success(),
            "the {name} walkthrough failed:\n{}",
            run.describe()
        );
        outputs.push((name, run.output()));
    }

    // The approval page: the agent without the extension prints the link and waits; the User
    // signs in as the account and approves (no browser: the page's own forms, posted); the
    // agent's retry is performed once, and curl's retry after it is not performed again.
    let before = shop_exchanges(&shop).await;
    let agent_url = identity.agent_url();
    let mut waiting = Waiting::start(
        &format!(
            "set -euo pipefail\n{}\n",
            localise(block(&demo, "--no-extension"))
        ),
        &[("POPPY_AGENT_URL", &agent_url)],
    );
    let link = waiting
        .line_where(
            |line| line.starts_with(&format!("{page}/approve/")),
            Duration::from_secs(60),
        )
        .trim()
        .to_owned();
    assert_eq!(
        shop_exchanges(&shop).await,
        before,
        "nothing performed before the approval"
    );
    let decided = approve_on_page(&link, "ada", "approve").await;
    assert_eq!(decided.status, 200, "{}", decided.html);
    assert!(
        decided.html.contains("Approved by <strong>ada</strong>"),
        "{}",
        decided.html
    );
    let (code, output) = waiting.finish(Duration::from_secs(60));
    assert_eq!(code, Some(0), "the page walkthrough's agent:\n{output}");
    let retry = localise(block(
        &demo,
        "Authorization: Bearer $(target/debug/agent demo-token",
    ));
    let run = tokio::task::spawn_blocking(move || {
        run_binary(
            Path::new("bash"),
            &["-c", &format!("set -euo pipefail\n{retry}\n")],
            "",
            &[("POPPY_AGENT_URL", &agent_url)],
            Duration::from_secs(60),
        )
    })
    .await
    .unwrap();
    assert!(
        run.success(),
        "the page walkthrough's retry failed:\n{}",
        run.describe()
    );
    assert_eq!(
        shop_exchanges(&shop).await,
        before + 1,
        "approved on the page: performed once, and not again on a retry"
    );
    outputs.push(("approval page", output));
    outputs.push(("approval page retry", run.output()));

    let expect = |name: &str, output: &str, wanted: &[&str]| {
        for text in wanted {
            assert!(
                output.contains(text),
                "the {name} walkthrough did not print {text:?}:\n{output}"
            );
        }
    };
    let (name, output) = &outputs[0];
    expect(
        name,
        output,
        &[
            "for 70.00 USD more, charged to the card used for the order.",
            r#""exchange_id": "exg_1""#,
            "Done: the API answered 201.",
        ],
    );
    let (name, output) = &outputs[1];
    expect(
        name,
        output,
        &[
            r#""error": "approval_required""#,
            r#""replacement_sku": "socks-wool""#,
            r#""difference": "6.00""#,
            "**for 6.00 USD more**, charged to the card used for the order.",
            r#""exchange_id": "exg_2""#,
            "performed: 1\n",
            r#""version": "2""#,
            r#"poppy_operations_total{operation="exchange",outcome="performed"} 2"#,
        ],
    );
    assert_eq!(
        output.matches(r#""exchange_id": "exg_2""#).count(),
        2,
        "approve, then replay:\n{output}"
    );
    let (name, output) = &outputs[2];
    expect(
        name,
        output,
        &[
            "202\n",
            r#"["exchange_item","cancel_order"]"#,
            r#""exchange_id": "exg_3""#,
            r#"{"id":5,"exchange":"exg_3"}"#,
            "performed: 1\n",
            r#"poppy_operations_total{operation="exchange_tool",outcome="performed"} 1"#,
        ],
    );
    let (name, output) = &outputs[3];
    expect(
        name,
        output,
        &[
            "Stormline Outfitters asks for your approval. The action has NOT been performed.",
            "Exchange item itm_5Tz (Stormline Jacket (M), paid 120.00 USD) on order ord_2Cv6",
            "for 70.00 USD more, charged to the card used for the order.",
            r#""exchange_id": "exg_4""#,
            "Done: the API answered 201.",
        ],
    );
    let (name, output) = &outputs[4];
    expect(
        name,
        output,
        &[
            "Stormline Outfitters asks for your approval on its own page. The action has NOT been performed.",
            "Exchange item itm_3Hb (Stormline Jacket (M), paid 120.00 USD) on order ord_9Pg4",
            "for 70.00 USD more, charged to the card used for the order.",
            r#""exchange_id": "exg_5""#,
            "Done: the API answered 201.",
        ],
    );
    // The retry after it: the order changed, so after the lookup the same request would read
    // as another exchange; it is answered from its record before the lookup (the recorded
    // answer), and nothing is performed again.
    let (name, output) = &outputs[5];
    expect(
        name,
        output,
        &[r#""error": null"#, r#""exchange_id": "exg_5""#, "\n5\n"],
    );
}
