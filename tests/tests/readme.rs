//! The README's walkthroughs, run in README order against one shop, gateway and Company Agent
//! (as the demo starts them, on free ports): the agent, then `curl`, then MCP (docs/mcp.md),
//! then a conversation. Each acts on an order item of its own, so each prints what its
//! comments say however many ran before it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use poppy_e2e::company::Company;
use poppy_e2e::{GatewayBuilder, Shop, binaries, run_binary};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walkthroughs_print_what_the_readme_says_in_readme_order() {
    let shop = Shop::start();
    let gateway = GatewayBuilder::new(&shop.url())
        .policy("shop.toml", &read("policies/shop.toml"))
        .policy("shop-mcp.toml", &read("policies/shop-mcp.toml"))
        .extra_config("\n[mcp]\npath = \"/mcp\"\n")
        .conversations()
        .start();
    let company = Company::start(&gateway.conversations_url(), &[]);
    let scratch = tempfile::tempdir().unwrap();
    let held = scratch.path().join("held.json");
    // The demo's addresses, as the README writes them, become this test's.
    let localise = |code: String| {
        code.replace("http://127.0.0.1:8080", &gateway.base_url())
            .replace("http://127.0.0.1:8081", &gateway.admin_url())
            .replace("http://127.0.0.1:9000", &shop.url())
            .replace("http://127.0.0.1:8082", &gateway.conversations_url())
            .replace("http://127.0.0.1:8083", &company.url())
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
        let run = tokio::task::spawn_blocking(move || {
            // The agent asks y/N: the User says yes.
            run_binary(
                Path::new("bash"),
                &["-c", &script],
                "y\n",
                &[],
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
        &[r#""exchange_id": "exg_1""#, "Done: the API answered 201."],
    );
    let (name, output) = &outputs[1];
    expect(
        name,
        output,
        &[
            r#""error": "approval_required""#,
            r#""replacement_sku": "socks-wool""#,
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
            "Exchange item itm_5Tz on order ord_2Cv6",
            "70.00 USD",
            r#""exchange_id": "exg_4""#,
            "Done: the API answered 201.",
        ],
    );
}
