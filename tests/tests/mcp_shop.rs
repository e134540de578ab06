//! The demo over MCP: the example shop's MCP tools behind the gateway with the example
//! policies (`policies/shop.toml`, `policies/shop-mcp.toml`), driven by a real MCP client, as docs/mcp.md walks it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use poppy_e2e::mcp_client::{approved, call, call_ok, connect, held_operation, text_of};
use poppy_e2e::{Client, GatewayBuilder, Request, Session, binaries};
use serde_json::json;

const SHOP_POLICIES: &str = include_str!("../../policies/shop.toml");
const SHOP_TOOLS: &str = include_str!("../../policies/shop-mcp.toml");

/// The shop binary on a free port; killed on drop.
struct Shop {
    child: Child,
    url: String,
}

impl Shop {
    fn start(args: &[&str]) -> Shop {
        let mut child = Command::new(binaries::shop())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the shop");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("the shop's stdout"))
            .read_line(&mut line)
            .expect("the shop's listening line");
        let url = line
            .trim()
            .strip_prefix("shop listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Shop { child, url }
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn exchange_once(shop_args: &[&str]) {
    let shop = Shop::start(shop_args);
    let gateway = GatewayBuilder::new(&shop.url)
        .policy("shop.toml", SHOP_POLICIES)
        .extra_config(&poppy_e2e::shop::approval_page_config())
        .policy("shop-mcp.toml", SHOP_TOOLS)
        .extra_config("[mcp]\npath = \"/mcp\"")
        .start();
    let client = connect(&gateway.base_url(), &Session::signed_out("ses_demo"), true).await;
    let tools: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(tools, ["exchange_item", "cancel_order"]);

    let exchange = || {
        call(
            "exchange_item",
            json!({"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}),
        )
    };
    let operation = held_operation(&call_ok(&client, exchange()).await, "the first call");
    assert_eq!(
        operation.summary,
        "Exchange item **itm_4Qa** on order ord_7Hk2 for stormline-insulated-m."
    );
    let done = call_ok(&client, approved(exchange(), &operation)).await;
    assert_eq!(done["structuredContent"]["exchange_id"], "exg_1", "{done}");
    assert_eq!(
        done["structuredContent"]["price_difference"]["amount"],
        "70.00"
    );
    let again = call_ok(&client, approved(exchange(), &operation)).await;
    assert_eq!(again, done, "the replay");
    assert!(text_of(&again).contains("exg_1"));

    let stats = Client::new(&shop.url)
        .send(&Request::plain("GET", "/stats"))
        .await
        .json();
    assert_eq!(stats, json!({"exchanges": 1, "cancellations": 0}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shop_exchanges_once_over_mcp() {
    exchange_once(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shop_exchanges_once_over_mcp_with_sse() {
    exchange_once(&["--mcp-sse"]).await;
}
