//! Approving on the Company's page (issue 29), through the real binary and a real OpenID
//! provider (oidc-provider, tests/deps/node/oidc): a request without the extension gets the
//! page's link; the User signs in as the account the request acts for and approves; the
//! agent's retry (a fresh Session JWT) is performed once, and every later retry replays. A
//! decline, a form without (or with another's) CSRF token, another account, an expired
//! revision and changed terms perform nothing. `proof = "company_page"` holds a Poppy
//! approval until the page approval exists. One test drives headless Chromium.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::browser::Browser;
use poppy_e2e::page::{
    PAGE_CLIENT_ID, PAGE_CLIENT_SECRET, PAGE_SECRET_ENV, PageBrowser, PageProvider,
    approve_in_browser, approve_on_page, sign_in_in_browser,
};
use poppy_e2e::policies::{DEFAULT, DEFAULT_FILE};
use poppy_e2e::{Answer, Request, Session, Stack, Store, store_tests, wait};

const ACCOUNT: &str = "acct-1";

/// A stack whose `exchange` policy has `lines` added, with `[approval_page]` on a free port
/// and its provider; returns them and the page's base URL.
fn start(store: Store, lines: &str, expires_in: &str) -> (Stack, PageProvider, String) {
    let policies = DEFAULT
        .replacen(
            "id_prefix = \"exc\"\n",
            &format!("id_prefix = \"exc\"\n{lines}"),
            1,
        )
        .replacen(
            "expires_in = \"15m\"",
            &format!("expires_in = \"{expires_in}\""),
            1,
        );
    start_with(store, &policies)
}

/// [`start`] with these policies.
fn start_with(store: Store, policies: &str) -> (Stack, PageProvider, String) {
    let (provider, table) = PageProvider::with_page();
    let page = table.url();
    let stack = Stack::start_with(store, |b| {
        b.policy(DEFAULT_FILE, policies)
            .env(PAGE_SECRET_ENV, PAGE_CLIENT_SECRET)
            .extra_config(&table.toml())
    });
    (stack, provider, page)
}

/// The page's listener answers (the harness waits only for the proxy and admin listeners).
async fn wait_for_page(page: &str) {
    let address = page.trim_start_matches("http://").to_owned();
    let up = wait::until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(&address).is_ok()
    })
    .await;
    assert!(up, "the approval page did not listen within 10 s");
}

fn either(store: Store) -> (Stack, PageProvider, String) {
    start(store, "approval = \"either\"\n", "15m")
}

fn exchange_without_extension(item: &str) -> Request {
    Request::exchange(&Session::signed_in("ses_page", ACCOUNT), "o1", item, "s1")
        .without_header("Poppy-Extensions")
}

/// The page's link from a 403 to a request without the extension.
fn link_of(answer: &Answer, context: &str) -> String {
    link_of_body(answer, context)
}

fn link_of_body(answer: &Answer, context: &str) -> String {
    let body = answer.assert_error(403, "approval_required", context);
    body["approval_url"]
        .as_str()
        .unwrap_or_else(|| panic!("{context}: no approval_url: {body}"))
        .to_owned()
}

async fn approved_on_the_page_is_performed_once(store: Store) {
    let (stack, _provider, page) = either(store);
    wait_for_page(&page).await;
    let request = exchange_without_extension("i1");
    let link = link_of(&stack.gateway.send(&request).await, "first");
    let decided = approve_on_page(&link, ACCOUNT, "approve").await;
    assert_eq!(decided.status, 200, "{}", decided.html);
    assert!(
        decided.html.contains("Approved by <strong>acct-1</strong>"),
        "{}",
        decided.html
    );
    assert!(
        decided.html.contains("Not performed yet"),
        "{}",
        decided.html
    );
    stack.assert_executions(0, "approving performs nothing by itself");
    // The agent's retry: a new Session JWT, the same terms.
    let performed = stack.gateway.send(&request).await;
    assert_eq!(performed.status, 201, "{}", performed.describe());
    stack.assert_executions(1, "performed once");
    let replayed = stack.gateway.send(&request).await;
    assert_eq!(replayed.status, 201);
    assert_eq!(replayed.body, performed.body, "the recorded answer");
    stack.assert_executions(1, "a retry replays");
    // The page says what was done.
    let shown = PageBrowser::new().go(&link, None).await;
    assert!(shown.html.contains("Performed, once"), "{}", shown.html);
}

async fn declined_on_the_page_performs_nothing(store: Store) {
    let (stack, _provider, page) = either(store);
    wait_for_page(&page).await;
    let request = exchange_without_extension("i1");
    let link = link_of(&stack.gateway.send(&request).await, "first");
    let decided = approve_on_page(&link, ACCOUNT, "decline").await;
    assert!(decided.html.contains("Declined by"), "{}", decided.html);
    for _ in 0..2 {
        stack
            .gateway
            .send(&request)
            .await
            .assert_error(403, "approval_declined", "declined");
    }
    stack.assert_executions(0, "declined");
}

/// Forms without the page's CSRF token, with another's, and another account's sign-in store
/// nothing; a second decision changes nothing.
async fn refused_decisions_store_nothing(store: Store) {
    let (stack, _provider, page) = either(store);
    wait_for_page(&page).await;
    let request = exchange_without_extension("i1");
    let link = link_of(&stack.gateway.send(&request).await, "first");
    let mut browser = PageBrowser::new();
    let page = browser.sign_in(&link, ACCOUNT).await;
    assert!(page.html.contains("id=\"approve\""), "{}", page.html);
    for token in ["", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"] {
        let refused = browser.decide(&page, "approve", Some(token)).await;
        assert_eq!(refused.status, 403, "csrf {token:?}: {}", refused.html);
    }
    // Another account signs in: no form, and a post with its own token is refused.
    let mut other = PageBrowser::new();
    let theirs = other.sign_in(&link, "acct-2").await;
    assert!(
        theirs.html.contains("acts for another account"),
        "{}",
        theirs.html
    );
    assert!(!theirs.html.contains("id=\"approve\""));
    let forged = other
        .decide(
            &theirs,
            "approve",
            Some(&poppy_e2e::page::hidden(&page.html, "csrf").unwrap()),
        )
        .await;
    assert_eq!(forged.status, 403, "{}", forged.html);
    link_of(&stack.gateway.send(&request).await, "still held");
    stack.assert_executions(0, "nothing was approved");
    // The account approves; its second decision (decline) changes nothing.
    let approved = browser.decide(&page, "approve", None).await;
    assert!(approved.html.contains("Approved by"), "{}", approved.html);
    let again = browser.decide(&page, "decline", None).await;
    assert!(
        again.html.contains("decided before; nothing was changed"),
        "{}",
        again.html
    );
    assert!(again.html.contains("Approved by"), "{}", again.html);
    assert_eq!(stack.gateway.send(&request).await.status, 201);
    stack.assert_executions(1, "approved once, performed once");
}

/// OpenID Connect Core 1.0, 3.1.3.7 items 3 to 5: an ID token that is also for another
/// client, or was issued to another (`azp`), signs nobody in: the page says why, and nothing
/// is decided or performed. The provider signs them with its own key, as it signs the others.
async fn id_tokens_of_other_clients_sign_nobody_in(store: Store) {
    let cases = [
        (
            serde_json::json!({"aud": [PAGE_CLIENT_ID, "other-client"], "azp": PAGE_CLIENT_ID}),
            "aud also names \"other-client\"",
        ),
        (
            serde_json::json!({"azp": "other-client"}),
            "azp \"other-client\" is not this client",
        ),
        (
            serde_json::json!({"aud": [PAGE_CLIENT_ID, PAGE_CLIENT_ID]}),
            "there is no azp",
        ),
    ];
    for (claims, why) in cases {
        let (_provider, table) = PageProvider::with_page_issuing(Some(claims.clone()));
        let page = table.url();
        let stack = Stack::start_with(store, |b| {
            b.policy(
                DEFAULT_FILE,
                &DEFAULT.replacen(
                    "id_prefix = \"exc\"\n",
                    "id_prefix = \"exc\"\napproval = \"either\"\n",
                    1,
                ),
            )
            .env(PAGE_SECRET_ENV, PAGE_CLIENT_SECRET)
            .extra_config(&table.toml())
        });
        wait_for_page(&page).await;
        let request = exchange_without_extension("i1");
        let link = link_of(&stack.gateway.send(&request).await, "first");
        let mut browser = PageBrowser::new();
        let refused = browser.sign_in(&link, ACCOUNT).await;
        assert_eq!(refused.status, 400, "{claims}: {}", refused.html);
        assert!(
            refused.html.contains("Sign-in failed"),
            "{claims}: {}",
            refused.html
        );
        let shown = refused.html.replace("&quot;", "\"").replace("&#34;", "\"");
        assert!(shown.contains(why), "{claims}: {}", refused.html);
        // Not signed in: the page asks again, and offers no decision.
        let again = browser.go(&link, None).await;
        assert!(!again.html.contains("id=\"approve\""), "{}", again.html);
        link_of(&stack.gateway.send(&request).await, "still held");
        stack.assert_executions(0, "nobody signed in, nothing approved");
    }
}

/// An approval is for its terms only: the same request with other terms is held again with
/// a link of its own.
async fn changed_terms_after_approval_are_held(store: Store) {
    let (stack, _provider, page) = either(store);
    wait_for_page(&page).await;
    let link = link_of(
        &stack.gateway.send(&exchange_without_extension("i1")).await,
        "first",
    );
    approve_on_page(&link, ACCOUNT, "approve").await;
    let other = stack.gateway.send(&exchange_without_extension("i2")).await;
    let other_link = link_of(&other, "other terms");
    assert_ne!(other_link, link);
    stack.assert_executions(0, "other terms were never approved");
}

/// A revision that expired can't be decided: nothing stored, nothing performed.
async fn an_expired_revision_is_not_decided(store: Store) {
    let (stack, _provider, page) = start(store, "approval = \"either\"\n", "3s");
    wait_for_page(&page).await;
    let request = exchange_without_extension("i1");
    let link = link_of(&stack.gateway.send(&request).await, "first");
    let mut browser = PageBrowser::new();
    let page = browser.sign_in(&link, ACCOUNT).await;
    assert!(page.html.contains("id=\"approve\""), "{}", page.html);
    let revision_expiry: f64 = link
        .split("r=")
        .nth(1)
        .and_then(|r| r.split('-').next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    wait::until_clock_passes(revision_expiry + 1.0, Duration::from_secs(10)).await;
    let refused = browser.decide(&page, "approve", None).await;
    assert_eq!(refused.status, 410, "{}", refused.html);
    let held = stack.gateway.send(&request).await;
    assert_ne!(link_of(&held, "after expiry"), link, "a new revision");
    stack.assert_executions(0, "expired");
}

/// An exchange approved on the page whose lookup reads a record the exchange itself changes
/// (`exchanges`: the POSTs the upstream performed): after the performance the same request
/// reads other terms, and no approved revision verifies against it.
const LOOKUP_THE_ACTION_CHANGES: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
approval = "either"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku} (exchanges so far: {exchanges})."

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
replacement_sku = { body = "$.replacement_sku" }
exchanges = { lookup = "$.posts" }

[operation.lookup]
url = "/orders/{order_id}"
"#;

fn exchanges_performed(stack: &Stack) -> usize {
    stack.upstream.count_for("POST", "/orders/o1/exchanges")
}

/// A page request's retry is answered from its record before its lookup: performed once,
/// then the recorded answer, although the lookup now reads other terms (on main it got a new
/// link). Another request of the same account and action, and the same request of another
/// account, get links of their own.
async fn a_retry_whose_lookup_the_action_changed_gets_the_recorded_answer(store: Store) {
    let (stack, _provider, page) = start_with(store, LOOKUP_THE_ACTION_CHANGES);
    stack.upstream.answer_posts("/orders/o1");
    wait_for_page(&page).await;
    let request = exchange_without_extension("i1");
    let link = link_of(&stack.gateway.send(&request).await, "first");
    approve_on_page(&link, ACCOUNT, "approve").await;
    let performed = stack.gateway.send(&request).await;
    assert_eq!(performed.status, 201, "{}", performed.describe());
    assert_eq!(exchanges_performed(&stack), 1, "performed once");
    for retry in ["a retry", "another retry"] {
        stack
            .gateway
            .send(&request)
            .await
            .assert_replay_of(&performed, retry);
    }
    assert_eq!(exchanges_performed(&stack), 1, "retries replay");
    // Other terms, same account and action: not the approved request.
    let other = stack
        .gateway
        .send(
            &Request::exchange(&Session::signed_in("ses_page", ACCOUNT), "o1", "i1", "s2")
                .without_header("Poppy-Extensions"),
        )
        .await;
    assert_ne!(link_of(&other, "other terms"), link);
    // The same request by another account: its own link.
    let theirs = stack
        .gateway
        .send(
            &Request::exchange(&Session::signed_in("ses_other", "acct-2"), "o1", "i1", "s1")
                .without_header("Poppy-Extensions"),
        )
        .await;
    assert_ne!(link_of(&theirs, "another account"), link);
    assert_eq!(exchanges_performed(&stack), 1, "nothing else performed");
}

/// A page request's retry after the approved revision expired gets the recorded answer, as
/// a Poppy agent's replay does (on main it got a new link); another request gets its own:
/// other terms, or the same terms and action at another target (`?express=1`, a query
/// parameter the policy ignores, so only the request's fingerprint tells it apart).
async fn a_retry_after_the_revision_expired_gets_the_recorded_answer(store: Store) {
    let (stack, _provider, page) = start(store, "approval = \"either\"\n", "6s");
    wait_for_page(&page).await;
    let request = exchange_without_extension("i1");
    let held = stack.gateway.send(&request).await;
    let link = link_of(&held, "first");
    let expires_at =
        poppy_e2e::rfc3339::parse(held.json()["expires_at"].as_str().expect("expires_at"))
            .expect("expires_at is RFC 3339");
    approve_on_page(&link, ACCOUNT, "approve").await;
    let performed = stack.gateway.send(&request).await;
    assert_eq!(performed.status, 201, "{}", performed.describe());
    wait::until_clock_passes(expires_at + 1.0, Duration::from_secs(10)).await;
    stack
        .gateway
        .send(&request)
        .await
        .assert_replay_of(&performed, "after the revision expired");
    stack.assert_executions(1, "performed once");
    let other = stack.gateway.send(&exchange_without_extension("i2")).await;
    assert_ne!(link_of(&other, "another request"), link);
    let elsewhere = Request::agent(
        "POST",
        "/orders/o1/exchanges?express=1",
        &Session::signed_in("ses_page", ACCOUNT),
    )
    .json(&serde_json::json!({"item_id": "i1", "replacement_sku": "s1"}))
    .without_header("Poppy-Extensions");
    let held = stack.gateway.send(&elsewhere).await;
    assert_ne!(link_of(&held, "another target"), link);
    stack.assert_executions(1, "nothing else performed");
}

/// `proof = "company_page"`: a Poppy agent's approval is held (with the page's link on the
/// operation) until the account approved the same revision on the page; then it is
/// performed once.
async fn proof_holds_a_poppy_approval_until_the_page_approval(store: Store) {
    let (stack, _provider, page) = start(store, "proof = \"company_page\"\n", "15m");
    wait_for_page(&page).await;
    let session = Session::signed_in("ses_proof", ACCOUNT);
    let first = stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i1", "s1"))
        .await;
    let body = first.assert_error(403, "approval_required", "first");
    let link = body["operation"]["approval_url"]
        .as_str()
        .unwrap_or_else(|| panic!("no approval_url on the operation: {body}"))
        .to_owned();
    let operation = first.operation();
    let approved = Request::exchange(&session, "o1", "i1", "s1").approve(&operation);
    let held = stack.gateway.send(&approved).await;
    let held_body = held.assert_error(403, "approval_required", "no page approval yet");
    assert_eq!(
        held_body["operation"]["revision"],
        operation.revision.as_str()
    );
    stack.assert_executions(0, "a Poppy approval alone is not enough");
    approve_on_page(&link, ACCOUNT, "approve").await;
    assert_eq!(stack.gateway.send(&approved).await.status, 201);
    assert_eq!(stack.gateway.send(&approved).await.status, 201);
    stack.assert_executions(1, "approved on the page too: performed once");
}

/// `approval = "company_page"`: the page only. A request without the extension gets the
/// link and is performed once approved there; a Poppy agent still gets the operation (with
/// the link), but its approval alone is held.
async fn a_company_page_policy_is_approved_on_the_page_only(store: Store) {
    let (stack, _provider, page) = start(store, "approval = \"company_page\"\n", "15m");
    wait_for_page(&page).await;
    let request = exchange_without_extension("i1");
    let link = link_of(&stack.gateway.send(&request).await, "without the extension");
    approve_on_page(&link, ACCOUNT, "approve").await;
    assert_eq!(stack.gateway.send(&request).await.status, 201);
    stack.assert_executions(1, "approved on the page");
    let session = Session::signed_in("ses_poppy", ACCOUNT);
    let first = stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i2", "s1"))
        .await;
    let body = first.assert_error(403, "approval_required", "a Poppy agent");
    assert!(body["operation"]["approval_url"].is_string(), "{body}");
    let approved = Request::exchange(&session, "o1", "i2", "s1").approve(&first.operation());
    stack.gateway.send(&approved).await.assert_error(
        403,
        "approval_required",
        "its approval alone",
    );
    stack.assert_executions(1, "a Poppy approval alone performs nothing");
}

/// Headless Chromium walks the whole flow: the page, "Sign in to approve", the provider's
/// login form, Approve; the retry is performed once, and the page then says so. A
/// screenshot goes to the test output folder.
async fn a_browser_approves_on_the_page(store: Store) {
    let (stack, _provider, page) = either(store);
    wait_for_page(&page).await;
    let request = exchange_without_extension("i1");
    let link = link_of(&stack.gateway.send(&request).await, "first");
    let browser = Browser::start(412, 915).await;
    sign_in_in_browser(&browser, &link, ACCOUNT).await;
    let summary = browser
        .script("return document.querySelector('.summary').textContent;")
        .await;
    assert!(
        summary.as_str().unwrap_or_default().contains("i1"),
        "{summary}"
    );
    approve_in_browser(&browser).await;
    assert_eq!(stack.gateway.send(&request).await.status, 201);
    assert_eq!(stack.gateway.send(&request).await.status, 201);
    stack.assert_executions(1, "approved in a browser: performed once");
    browser.goto(&link).await;
    let outcome = browser
        .script("return document.querySelector('#outcome').textContent;")
        .await;
    assert!(
        outcome
            .as_str()
            .unwrap_or_default()
            .contains("Performed, once"),
        "{outcome}"
    );
    let png = browser.screenshot().await;
    let folder = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("approval_page");
    std::fs::create_dir_all(&folder).unwrap();
    let file = folder.join(format!("approved-{store:?}.png").to_lowercase());
    std::fs::write(&file, &png).unwrap();
    println!("screenshot: {}", file.display());
    browser.close().await;
}

store_tests!(
    approved_on_the_page_is_performed_once,
    declined_on_the_page_performs_nothing,
    refused_decisions_store_nothing,
    changed_terms_after_approval_are_held,
    an_expired_revision_is_not_decided,
    proof_holds_a_poppy_approval_until_the_page_approval,
    a_company_page_policy_is_approved_on_the_page_only,
    a_browser_approves_on_the_page,
    a_retry_whose_lookup_the_action_changed_gets_the_recorded_answer,
    a_retry_after_the_revision_expired_gets_the_recorded_answer,
    id_tokens_of_other_clients_sign_nobody_in,
);
