//! Bidi, invisible and control characters in a term are shown by name wherever a User reads
//! it (issue 37): `s1\u{202E}gpj.exe` reads `s1<U+202E RIGHT-TO-LEFT OVERRIDE>gpj.exe`, never
//! "s1exe.jpg" nor "s1gpj.exe", and `s1z` and `s1\u{200B}z` read differently: in the HTTP
//! API's 403, on the approval page rendered by a real browser (summary and terms), and in the
//! MCP tool error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::browser::Browser;
use poppy_e2e::markdown::{assert_safe_summary, unescape};
use poppy_e2e::mcp_client::{call, call_ok, held_operation, text_of};
use poppy_e2e::page::{PAGE_SECRET_ENV, PageTable};
use poppy_e2e::policies::{DEFAULT, DEFAULT_FILE};
use poppy_e2e::ports::free_port;
use poppy_e2e::{AnswerMode, McpStack, Request, Session, Stack, Store, store_tests, wait};
use serde_json::json;

const OVERRIDE: &str = "s1\u{202E}gpj.exe";
const OVERRIDE_SHOWN: &str = "s1<U+202E RIGHT-TO-LEFT OVERRIDE>gpj.exe";
const ZERO_WIDTH: &str = "s1\u{200B}z";
const ZERO_WIDTH_SHOWN: &str = "s1<U+200B ZERO WIDTH SPACE>z";

fn exchange(session: &Session, item: &str, sku: &str) -> Request {
    Request::exchange(session, "o1", item, sku)
}

/// The 403's summary names each hidden character, and two items that differ only by a zero
/// width space get summaries that differ.
async fn the_403_summary_names_hidden_characters(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_shown");
    let held = stack
        .gateway
        .send(&exchange(&session, ZERO_WIDTH, OVERRIDE))
        .await
        .operation();
    assert_safe_summary(&held.summary);
    let read = unescape(&held.summary);
    assert!(
        read.contains(OVERRIDE_SHOWN) && read.contains(ZERO_WIDTH_SHOWN),
        "{:?}",
        held.summary
    );
    assert_eq!(
        held.terms["replacement_sku"], OVERRIDE,
        "terms hold the raw value"
    );
    let plain = stack
        .gateway
        .send(&exchange(&session, "s1z", OVERRIDE))
        .await
        .operation();
    assert_ne!(
        plain.summary, held.summary,
        "`s1z` and `s1\\u{{200B}}z` must read differently"
    );
    stack.assert_executions(0, "unapproved requests");
}

/// The page, rendered by headless Chromium: its visible text shows the names in the summary
/// and in the terms.
async fn the_page_in_a_browser_names_hidden_characters(store: Store) {
    let table = PageTable::new(free_port(), "http://127.0.0.1:1");
    let page = table.url();
    let policies = DEFAULT.replacen(
        "id_prefix = \"exc\"\n",
        "id_prefix = \"exc\"\napproval = \"either\"\n",
        1,
    );
    let stack = Stack::start_with(store, |b| {
        b.policy(DEFAULT_FILE, &policies)
            .env(PAGE_SECRET_ENV, "page-client-secret-for-tests")
            .extra_config(&table.toml())
    });
    let request = exchange(
        &Session::signed_in("ses_page", "acct-1"),
        ZERO_WIDTH,
        OVERRIDE,
    )
    .without_header("Poppy-Extensions");
    let answer = stack.gateway.send(&request).await;
    let body = answer.assert_error(403, "approval_required", "a request for the page");
    let url = body["approval_url"]
        .as_str()
        .expect("approval_url")
        .to_owned();
    assert!(url.starts_with(&format!("{page}/approve/")), "{url}");
    // The page's listener starts with the gateway; the harness waits for the proxy only.
    let client = reqwest::Client::new();
    wait::until_some(Duration::from_secs(10), || {
        let request = client.get(&url).send();
        async move { request.await.ok().filter(|r| r.status() == 200) }
    })
    .await
    .expect("the approval page answers within 10 s");
    let browser = Browser::start(412, 915).await;
    browser.goto(&url).await;
    let seen = browser
        .script(
            "return {
                text: document.body.innerText,
                summary: document.querySelector('.summary').innerText,
                terms: Array.from(document.querySelectorAll('dd')).map(e => e.innerText),
            };",
        )
        .await;
    browser.close().await;
    let summary = seen["summary"].as_str().unwrap();
    assert!(
        summary.contains(OVERRIDE_SHOWN) && summary.contains(ZERO_WIDTH_SHOWN),
        "{seen}"
    );
    assert_eq!(
        seen["terms"],
        json!([ZERO_WIDTH_SHOWN, "o1", OVERRIDE_SHOWN]),
        "item_id, order_id, replacement_sku: {seen}"
    );
    let text = seen["text"].as_str().unwrap();
    assert!(
        !text.contains('\u{202E}') && !text.contains('\u{200B}'),
        "no hidden character reaches the page's text: {seen}"
    );
    stack.assert_executions(0, "a page viewed in a browser performs nothing");
}

/// The MCP tool error's text (and its operation's summary) names them too.
async fn the_mcp_tool_error_names_hidden_characters(store: Store) {
    let stack = McpStack::start(store, AnswerMode::Json);
    let client = stack.agent(&Session::signed_out("ses_mcp_shown")).await;
    let held = call_ok(
        &client,
        call(
            "exchange_item",
            json!({"order_id": "o1", "item_id": ZERO_WIDTH, "replacement_sku": OVERRIDE}),
        ),
    )
    .await;
    let operation = held_operation(&held, "a held call");
    let text = unescape(&text_of(&held));
    assert!(
        text.contains(OVERRIDE_SHOWN) && text.contains(ZERO_WIDTH_SHOWN),
        "{text:?}"
    );
    assert_safe_summary(&operation.summary);
    stack.server.assert_executions(0, "a held call");
}

store_tests!(
    the_403_summary_names_hidden_characters,
    the_page_in_a_browser_names_hidden_characters,
    the_mcp_tool_error_names_hidden_characters,
);
