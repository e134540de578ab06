//! The example Personal Agent (`agent`), run as a real binary against the real gateway: it
//! performs an approved exchange once, shows summaries as plain text, forwards nothing the
//! User declines, and never asks twice while an approval's outcome is unknown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use poppy_e2e::{
    Client, GatewayBuilder, Request, Run, Shop, Stack, Store, binaries, run_binary, wait,
};
use serde_json::{Value, json};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
const EXCHANGE: &str = r#"{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}"#;

/// Run `agent --gateway URL args…` with `stdin` as the User's typing.
fn agent(gateway: &str, args: &[&str], stdin: &str) -> Run {
    let mut all = vec!["--gateway", gateway, "--timeout", "10s"];
    all.extend_from_slice(args);
    run_binary(&binaries::agent(), &all, stdin, &[], RUN_TIMEOUT)
}

fn prompts(run: &Run) -> usize {
    run.stderr.matches("Approve? [y/N]").count()
}

/// The repository's own example policy for the shop.
fn shop_policy() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/shop.toml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

async fn get_json(base: &str, path: &str) -> Value {
    let answer = Client::new(base).send(&Request::plain("GET", path)).await;
    answer.assert_status(200, path);
    answer.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yes_exchanges_once_through_the_real_shop() {
    let shop = Shop::start();
    let gateway = GatewayBuilder::new(&shop.url())
        .policy("shop.toml", &shop_policy())
        .extra_config(&poppy_e2e::shop::approval_page_config())
        .start();
    let base = gateway.base_url();
    let run = tokio::task::spawn_blocking(move || {
        agent(
            &base,
            &[
                "--yes",
                "POST",
                "/orders/ord_7Hk2/exchanges",
                "--json",
                EXCHANGE,
            ],
            "",
        )
    })
    .await
    .unwrap();
    run.assert_code(0, "an approved exchange is performed");
    assert!(
        run.stderr.contains("Stormline Outfitters"),
        "the company's name from poppy.json is shown:\n{}",
        run.describe()
    );
    assert!(
        run.stderr.contains("190.00 USD") && run.stderr.contains("for 70.00 USD more"),
        "the summary shows the new item's price from the catalog and the difference charged:\n{}",
        run.describe()
    );
    let answer: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is the API's JSON answer ({e}):\n{}", run.describe()));
    assert_eq!(answer["to_sku"], "stormline-insulated-m");

    let stats = get_json(&shop.url(), "/stats").await;
    assert_eq!(stats["exchanges"], 1, "performed exactly once: {stats}");
    let order = get_json(&shop.url(), "/orders/ord_7Hk2").await;
    assert_eq!(order["items"][0]["sku"], "stormline-insulated-m", "{order}");
    assert_eq!(order["exchanges"].as_array().map(Vec::len), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_markdown_link_in_the_summary_is_shown_as_text() {
    // A link from the request (escaped by the gateway), a literal link, an image, HTML and an
    // OSC 8 hyperlink escape sequence in the policy's own summary (the agent can't trust it).
    let policy = r#"
[[operation]]
name = "gift"
method = "POST"
path = "/gifts"
id_prefix = "gft"
expires_in = "15m"
same_action = ["note"]
summary = "Send a gift card with the note {note}. See [the terms](https://terms.example/t) ![logo](https://img.example/l.png) <b>now</b> \u001B]8;;https://osc.example/\u001B\\here\u001B]8;;\u001B\\."

[operation.terms]
note = { body = "$.note" }
"#;
    let stack = Stack::start_with(Store::Memory, |b| b.policy("gift.toml", policy));
    let base = stack.gateway.base_url();
    let body = json!({"note": "x](http://evil.example/steal)"}).to_string();
    let run = tokio::task::spawn_blocking(move || {
        agent(&base, &["POST", "/gifts", "--json", &body], "n\n")
    })
    .await
    .unwrap();
    run.assert_code(1, "declined");
    let output = run.output();
    assert!(
        !output.contains('\u{1b}'),
        "no escape sequence (OSC 8 hyperlinks included) reaches the terminal:\n{output:?}"
    );
    for shown in [
        "x](http[:]//evil.example/steal)",
        "[the terms](https[:]//terms.example/t)",
        "![logo](https[:]//img.example/l.png)",
        "<b>now</b>",
    ] {
        assert!(
            output.contains(shown),
            "the summary's markup is shown as its characters, `{shown}`:\n{}",
            run.describe()
        );
    }
    for url in ["http://evil", "https://terms", "https://img", "https://osc"] {
        assert!(
            !output.contains(url),
            "`{url}` would be clickable in a terminal:\n{}",
            run.describe()
        );
    }
    stack.assert_executions(0, "a declined gift");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declining_forwards_nothing() {
    let stack = Stack::start(Store::Memory);
    let base = stack.gateway.base_url();
    let body = json!({"item_id": "itm_1", "replacement_sku": "sku_2"}).to_string();
    let runs = tokio::task::spawn_blocking(move || {
        let path = "/orders/ord_1/exchanges";
        [
            agent(&base, &["POST", path, "--json", &body], "n\n"),
            // No answer at all (end of input) is No too.
            agent(&base, &["POST", path, "--json", &body], ""),
            agent(&base, &["POST", path, "--json", &body], "sure\n"),
        ]
    })
    .await
    .unwrap();
    for run in &runs {
        run.assert_code(1, "declined");
        assert_eq!(prompts(run), 1, "asked once:\n{}", run.describe());
        assert!(
            run.stderr.contains("Counting Co"),
            "the company's name is shown:\n{}",
            run.describe()
        );
        assert!(
            run.stderr.contains("not approve"),
            "says it was not approved:\n{}",
            run.describe()
        );
    }
    stack.assert_executions(0, "three declined exchanges");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_forever_makes_the_outcome_unknown_without_asking_twice() {
    // The counting upstream answers POST /status/503 with a 503 (no Retry-After): the gateway
    // records it as the operation's answer and replays it to every retry.
    let policy = r#"
[[operation]]
name = "flaky"
method = "POST"
path = "/status/{code}"
id_prefix = "flk"
expires_in = "15m"
same_action = ["code"]
summary = "Do the flaky thing {code}."

[operation.terms]
code = { path = "code" }
"#;
    let stack = Stack::start_with(Store::Memory, |b| b.policy("flaky.toml", policy));
    let base = stack.gateway.base_url();
    let run = tokio::task::spawn_blocking(move || {
        agent(
            &base,
            &["--max-wait", "3s", "POST", "/status/503", "--json", "{}"],
            "y\ny\ny\ny\n",
        )
    })
    .await
    .unwrap();
    run.assert_code(2, "503 until the budget runs out: the outcome is unknown");
    assert_eq!(prompts(&run), 1, "asked once only:\n{}", run.describe());
    assert!(
        run.stderr.contains("sending the same approval again"),
        "retries the same approval:\n{}",
        run.describe()
    );
    assert!(
        run.stderr.contains("UNKNOWN") && run.stderr.contains("check the order"),
        "says the outcome is unknown and to check the order:\n{}",
        run.describe()
    );
    assert_eq!(
        stack.upstream.count_for("POST", "/status/503"),
        1,
        "forwarded once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_without_answer_is_resent_and_gets_the_first_answer() {
    let stack = Stack::start(Store::Memory);
    let base = stack.gateway.base_url();
    let body = json!({"item_id": "itm_1", "replacement_sku": "sku_2"}).to_string();
    // The upstream holds the approved request: the agent's first attempt times out (no
    // answer), and its retries get 503 operation_in_progress until the gate opens.
    stack.upstream.hold();
    let agent_run = tokio::task::spawn_blocking(move || {
        let mut args = vec!["--gateway", &base, "--timeout", "2s", "--max-wait", "30s"];
        args.extend(["POST", "/orders/ord_1/exchanges", "--json", &body]);
        run_binary(&binaries::agent(), &args, "y\n", &[], RUN_TIMEOUT)
    });
    stack
        .upstream
        .wait_for_count(1, Duration::from_secs(20))
        .await;
    let in_progress = wait::until_some(Duration::from_secs(20), || async {
        let metrics = stack.gateway.metrics().await;
        (metrics.operations("exchange", "in_progress") >= 1.0).then_some(())
    })
    .await;
    assert!(
        in_progress.is_some(),
        "the agent resends its approval while the first is in flight"
    );
    stack.upstream.release();
    let run = agent_run.await.unwrap();
    run.assert_code(0, "the resent approval gets the recorded answer");
    assert_eq!(prompts(&run), 1, "asked once:\n{}", run.describe());
    let answer: Value = serde_json::from_str(&run.stdout).unwrap();
    // Judged on this path alone: anything else the upstream saw is not this flow's doing
    // (and is printed, to find where it came from).
    let requests = stack.upstream.requests();
    let executed: Vec<_> = requests
        .iter()
        .filter(|r| r.path == "/orders/ord_1/exchanges")
        .collect();
    if executed.len() != requests.len() {
        eprintln!(
            "the upstream also saw: {:?}",
            requests
                .iter()
                .map(|r| format!("#{} {} {}", r.execution, r.method, r.path_and_query))
                .collect::<Vec<_>>()
        );
    }
    assert_eq!(executed.len(), 1, "one approval, resent, executes once");
    assert_eq!(
        answer["execution"], executed[0].execution,
        "the first (and only) execution's answer"
    );
}
