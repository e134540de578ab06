//! The approval page (issue 29, first part), through the real binary: a request without the
//! operations extension, on a policy with `approval = "either"`, gets `403 approval_required`
//! with the page's link (never an operation) and is never forwarded; the link opens the page
//! on its own listener with the Company's name, the summary (the extension's Markdown subset,
//! hostile input as text), the terms and the expiry, under a strict CSP; a changed link shows
//! nothing. Signing in, approving and declining: tests/page_approval.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::browser::Browser;
use poppy_e2e::page::{PAGE_SECRET_ENV, PageTable};
use poppy_e2e::policies::{DEFAULT, DEFAULT_FILE};
use poppy_e2e::ports::free_port;
use poppy_e2e::{
    GatewayBuilder, Request, Session, Stack, Store, TEST_KEYS, binaries, run_binary, store_tests,
    wait,
};
use serde_json::Value;

const SECRET_ENV: &str = PAGE_SECRET_ENV;

/// The default policies with `exchange` approvable on the page too.
fn policies() -> String {
    DEFAULT.replacen(
        "id_prefix = \"exc\"\n",
        "id_prefix = \"exc\"\napproval = \"either\"\n",
        1,
    )
}

/// A stack with `[approval_page]` on a free port; returns it and the page's base URL.
fn start(store: Store) -> (Stack, String) {
    let table = PageTable::new(free_port(), "http://127.0.0.1:1");
    let page = table.url();
    let stack = Stack::start_with(store, |b| {
        b.policy(DEFAULT_FILE, &policies())
            .env(SECRET_ENV, "page-client-secret-for-tests")
            .extra_config(&table.toml())
    });
    (stack, page)
}

fn exchange_without_extension(item: &str) -> Request {
    Request::exchange(&Session::signed_in("ses_page", "acct-1"), "o1", item, "s1")
        .without_header("Poppy-Extensions")
}

/// GET `url` once the page's listener answers (it starts with the gateway, but the harness
/// waits only for the proxy and admin listeners).
async fn get(url: &str) -> reqwest::Response {
    let client = reqwest::Client::new();
    wait::until_some(Duration::from_secs(10), || {
        let request = client.get(url).send();
        async move { request.await.ok() }
    })
    .await
    .unwrap_or_else(|| panic!("the approval page did not answer {url} within 10 s"))
}

/// The 403 a request without the extension gets, checked; returns the approval URL.
fn approval_url(answer: &poppy_e2e::Answer, page: &str, context: &str) -> String {
    let body = answer.assert_error(403, "approval_required", context);
    for member in ["operation", "operation_id", "revision"] {
        assert!(
            body.get(member).is_none(),
            "{context}: a request without the extension must get no operation (`{member}`): {body}"
        );
    }
    let url = body["approval_url"]
        .as_str()
        .expect("approval_url")
        .to_owned();
    assert!(
        url.starts_with(&format!("{page}/approve/exc_")),
        "{context}: {url}"
    );
    assert_eq!(
        answer.header("link"),
        Some(format!("<{url}>; rel=\"approval\"").as_str()),
        "{context}: the Link header names the same page"
    );
    assert!(body["summary"].as_str().is_some() && body["expires_at"].as_str().is_some());
    url
}

async fn without_the_extension_the_page_link_and_no_forward(store: Store) {
    let (stack, page) = start(store);
    let request = exchange_without_extension("i1");
    let first = stack.gateway.send(&request).await;
    let url = approval_url(&first, &page, "first request");
    assert_eq!(first.json()["terms"]["item_id"], "i1");
    // Retries (the same terms: the same operation) are held again. The revision carries its
    // expiry, in seconds, so a retry in a later second gets a link to a later revision.
    let again = stack.gateway.send(&request).await;
    let operation_of = |url: &str| url.split('?').next().unwrap_or_default().to_owned();
    assert_eq!(
        operation_of(&approval_url(&again, &page, "retry")),
        operation_of(&url)
    );
    // A Poppy approval sent without the extension is not read.
    let poppy = stack
        .gateway
        .send(&Request::exchange(
            &Session::signed_in("ses_page", "acct-1"),
            "o1",
            "i1",
            "s1",
        ))
        .await
        .operation();
    let approved = request.clone().approve(&poppy);
    approval_url(
        &stack.gateway.send(&approved).await,
        &page,
        "an approval without the extension",
    );
    stack.assert_executions(0, "nothing is approved on the page yet");
    // An agent with the extension still gets operations on the same policy.
    assert!(
        stack
            .gateway
            .send(&approved.extensions("\"operations\";v=\"2\""))
            .await
            .status
            == 201
    );
    stack.assert_executions(1, "the Poppy approval");
}

async fn the_page_shows_the_operation_under_a_strict_csp(store: Store) {
    let (stack, page) = start(store);
    // Request data is escaped by the summary template; the page shows it as text.
    let hostile = "<script>alert(1)</script>[x](https://evil.example)\u{202E}";
    let answer = stack
        .gateway
        .send(&exchange_without_extension(hostile))
        .await;
    let url = approval_url(&answer, &page, "hostile item");
    let response = get(&url).await;
    assert_eq!(response.status(), 200);
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.starts_with("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(response.headers()["x-frame-options"], "DENY");
    assert_eq!(response.headers()["referrer-policy"], "no-referrer");
    let html = response.text().await.unwrap();
    assert!(
        html.contains("<p class=\"company\">Example Shop</p>"),
        "{html}"
    );
    assert!(
        html.contains("<strong>"),
        "the template's strong emphasis: {html}"
    );
    assert!(
        !html.contains("<script") && !html.contains("href=\"https://evil"),
        "{html}"
    );
    assert!(html.contains("&lt;script&gt;"), "{html}");
    assert!(
        html.contains("&lt;U+202E RIGHT-TO-LEFT OVERRIDE&gt;"),
        "{html}"
    );
    assert!(html.contains("<dt>order_id</dt><dd>o1</dd>"), "{html}");
    // No script, image or third-party asset: the one reference is the page's own stylesheet.
    assert!(!html.contains("src="), "{html}");
    assert_eq!(html.matches("href=").count(), 1, "{html}");
    assert!(html.contains("href=\"/approval.css\""), "{html}");
    let css = get(&format!("{page}/approval.css")).await;
    assert_eq!(css.status(), 200);
    // A changed link (another item in its details, or another revision) shows nothing.
    let other = stack.gateway.send(&exchange_without_extension("i2")).await;
    let other_url = approval_url(&other, &page, "another item");
    let d = |u: &str| {
        u.split("&d=")
            .nth(1)
            .unwrap()
            .split('&')
            .next()
            .unwrap()
            .to_owned()
    };
    let forged = url.replace(&d(&url), &d(&other_url));
    let response = get(&forged).await;
    assert_eq!(response.status(), 404);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("not made by this gateway")
    );
    stack.assert_executions(0, "showing the page performs nothing");
}

/// A real browser (headless Chromium, phone-sized) renders the page: the summary's strong
/// emphasis and the terms, no link, image or script element, the page's own stylesheet
/// applied under its CSP; a screenshot goes to the test output folder.
async fn a_browser_renders_the_page(store: Store) {
    let (stack, page) = start(store);
    let answer = stack
        .gateway
        .send(&exchange_without_extension(
            "<img src=x onerror=alert(1)>\u{202E}",
        ))
        .await;
    let url = approval_url(&answer, &page, "for the browser");
    get(&url).await;
    let browser = Browser::start(412, 915).await;
    browser.goto(&url).await;
    let seen = browser
        .script(
            "return {
                title: document.title,
                company: document.querySelector('.company').textContent,
                strong: Array.from(document.querySelectorAll('.summary strong')).map(e => e.textContent),
                terms: Array.from(document.querySelectorAll('dt')).map(e => e.textContent),
                item: document.querySelector('dd').textContent,
                links: document.querySelectorAll('main a, main img, script, iframe').length,
                background: getComputedStyle(document.body).backgroundColor,
                width: document.documentElement.scrollWidth,
                viewport: window.innerWidth,
            };",
        )
        .await;
    assert_eq!(seen["company"], "Example Shop", "{seen}");
    assert_eq!(
        seen["strong"][0], "<img src=x onerror=alert(1)><U+202E RIGHT-TO-LEFT OVERRIDE>",
        "the request's item, as text (the template names bidi characters): {seen}"
    );
    assert_eq!(
        seen["item"], "<img src=x onerror=alert(1)><U+202E RIGHT-TO-LEFT OVERRIDE>",
        "{seen}"
    );
    assert_eq!(
        seen["terms"],
        serde_json::json!(["item_id", "order_id", "replacement_sku"])
    );
    assert_eq!(seen["links"], 0, "{seen}");
    assert_eq!(
        seen["background"], "rgb(246, 246, 244)",
        "the stylesheet applies under the CSP: {seen}"
    );
    assert!(
        seen["width"].as_u64() <= seen["viewport"].as_u64(),
        "no sideways scrolling on a phone: {seen}"
    );
    let png = browser.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let folder = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("approval_page");
    std::fs::create_dir_all(&folder).unwrap();
    let file = folder.join(format!("page-{store:?}.png").to_lowercase());
    std::fs::write(&file, &png).unwrap();
    println!("screenshot: {}", file.display());
    browser.close().await;
    stack.assert_executions(0, "a page viewed in a browser performs nothing");
}

/// `check` names the page (never its secret) and the policies that offer it.
#[test]
fn check_prints_the_page_and_its_policies() {
    let port = free_port();
    let written = GatewayBuilder::new("http://127.0.0.1:1")
        .policy(DEFAULT_FILE, &policies())
        .extra_config(
            &PageTable::new(port, "https://id.shop.example")
                .public_url("https://approve.shop.example")
                .agents("every_request = true")
                .toml(),
        )
        .write();
    let run = run_binary(
        &binaries::gateway(),
        &["check", "--config", written.config.to_str().unwrap()],
        "",
        &[
            (SECRET_ENV, "page-client-secret-for-tests"),
            ("POPPY_GATEWAY_KEYS", TEST_KEYS),
        ],
        Duration::from_secs(30),
    );
    let out = run.stdout.clone();
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        out.contains(&format!(
            "approval page 127.0.0.1:{port} at https://approve.shop.example for Example Shop"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("secret from environment variable {SECRET_ENV}")),
        "{out}"
    );
    assert!(!out.contains("page-client-secret-for-tests"), "{out}");
    assert!(
        out.contains(
            "agents without Poppy support held for the page: every request without a Poppy-Session"
        ),
        "{out}"
    );
    assert_eq!(
        out.matches("approval on the page").count(),
        1,
        "only exchange offers it: {out}"
    );
}

/// A policy that keeps the default (`"poppy"`) refuses as before, page or not.
async fn a_poppy_only_policy_still_needs_the_extension(store: Store) {
    let (stack, _page) = start(store);
    let body = stack
        .gateway
        .send(
            &Request::cancel(&Session::signed_in("ses_page", "acct-1"), "o1")
                .without_header("Poppy-Extensions"),
        )
        .await
        .assert_error(400, "extension_required", "cancel has no approval key");
    assert!(body.get("approval_url").is_none(), "{body}");
    assert_eq!(body["extension"], Value::from("operations"));
    stack.assert_executions(0, "refused");
}

store_tests!(
    without_the_extension_the_page_link_and_no_forward,
    the_page_shows_the_operation_under_a_strict_csp,
    a_browser_renders_the_page,
    a_poppy_only_policy_still_needs_the_extension,
);
