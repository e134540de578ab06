//! The README's walkthroughs, run in README order against one shop, gateway, Company Agent and
//! example agent identity (as the demo starts them, on free ports, with the gateway verifying
//! every Session: `verify = "required"`): the agent, then `curl`, then MCP (docs/mcp.md), then
//! a conversation. Each acts on an order item of its own, so each prints what its comments say
//! however many ran before it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use poppy_e2e::company::Company;
use poppy_e2e::{GatewayBuilder, Shop, binaries, ports, run_binary};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap()
}

/// The ```sh block of `doc` that contains `marker`.
fn block(doc: &str, marker: &str) -> String {
    doc.split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .find(|code| code.contains(marker))
        .unwrap_or_else(|| panic!("no sh block with {marker:?}"))
        .to_owned()
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

/// demo.sh's `[session]`: verified, for these public origins (quoted TOML strings).
fn session_lines(origins: &[String]) -> String {
    let quoted: Vec<String> = origins.iter().map(|o| format!("\"{o}\"")).collect();
    format!("verify = \"required\"\norigins = [{}]\n", quoted.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walkthroughs_print_what_the_readme_says_in_readme_order() {
    let shop = Shop::start();
    let identity = Identity::start();
    // The origins are the gateway's and the Company Agent's, whose ports are known only once
    // both run: the gateway starts with a stand-in, then again with the real ones (a restart
    // keeps its ports).
    let stand_in = session_lines(&["http://127.0.0.1:1".to_owned()]);
    let mut gateway = GatewayBuilder::new(&shop.url())
        .policy("shop.toml", &read("policies/shop.toml"))
        .policy("shop-mcp.toml", &read("policies/shop-mcp.toml"))
        .session(&stand_in)
        .extra_config(&format!(
            "\n[mcp]\npath = \"/mcp\"\n\n[[session.agent]]\nclient_id = \"{}\"\n",
            identity.agent_url()
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
    // The demo's addresses, as the README writes them, become this test's.
    let localise = |code: String| {
        code.replace("http://127.0.0.1:8080", &gateway.base_url())
            .replace("http://127.0.0.1:8081", &gateway.admin_url())
            .replace("http://127.0.0.1:9000", &shop.url())
            .replace("http://127.0.0.1:8082", &gateway.conversations_url())
            .replace("http://127.0.0.1:8083", &company.url())
            .replace("http://127.0.0.1:8084", &identity.base)
            .replace("target/debug/agent", binaries::agent().to_str().unwrap())
            .replace("/tmp/held.json", held.to_str().unwrap())
    };
    let readme = read("README.md");
    let walkthroughs = [
        (
            "the agent",
            localise(block(&readme, "target/debug/agent --gateway $G POST")),
        ),
        ("curl", localise(block(&readme, "BODY='"))),
        ("MCP", localise(block(&read("docs/mcp.md"), "mcp() {"))),
        (
            "conversation",
            localise(block(&readme, "--conversation http://127.0.0.1:8083")),
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
}
