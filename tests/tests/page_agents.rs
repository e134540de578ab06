//! Agents with no Poppy support at all (issue 29): a request without `Poppy-Session`, with
//! only a user's bearer token, through the real binary, a real OpenID provider
//! (oidc-provider, tests/deps/node/oidc: JWT access tokens of the clients `agent` and
//! `company-web`, the Company's own front end) and `[approval_page.agents]`, on both stores.
//!
//! A listed client's token is an agent's: held with the page's link, approved on the page by
//! the account it acts for, performed once on a retry with a new token, replayed after. The
//! Company's own client passes through unchanged; an invalid token, an agent-only policy and
//! (with `every_request`) a request without a token are refused, nothing performed; another
//! account's token and other terms get links of their own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::page::{
    PAGE_CLIENT_SECRET, PAGE_SECRET_ENV, PageProvider, PageTable, approve_on_page,
};
use poppy_e2e::policies::{DEFAULT, DEFAULT_FILE};
use poppy_e2e::ports::free_port;
use poppy_e2e::{Answer, Request, Stack, Store, store_tests, wait};
use serde_json::json;

const ACCOUNT: &str = "acct-1";

/// A stack whose `exchange` policy allows the page, with `[approval_page]` and `agents` as
/// its `[approval_page.agents]` lines; tokens verified with the provider unless
/// `verified_tokens` is false (then `verify = "off"`).
async fn start(store: Store, agents: &str, verified_tokens: bool) -> (Stack, PageProvider, String) {
    let port = free_port();
    let provider = PageProvider::start(&format!("http://127.0.0.1:{port}"));
    let table = PageTable::new(port, &provider.issuer()).agents(agents);
    let policies = DEFAULT.replacen(
        "id_prefix = \"exc\"\n",
        "id_prefix = \"exc\"\napproval = \"either\"\n",
        1,
    );
    let session = if verified_tokens {
        provider.verified_tokens()
    } else {
        "verify = \"off\"".to_owned()
    };
    let stack = Stack::start_with(store, |b| {
        b.policy(DEFAULT_FILE, &policies)
            .session(&session)
            .env(PAGE_SECRET_ENV, PAGE_CLIENT_SECRET)
            .extra_config(&table.toml())
    });
    let page = table.url();
    let address = page.trim_start_matches("http://").to_owned();
    let up = wait::until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(&address).is_ok()
    })
    .await;
    assert!(up, "the approval page did not listen within 10 s");
    (stack, provider, page)
}

/// Only the client `agent`'s tokens are agents'.
async fn listed(store: Store) -> (Stack, PageProvider, String) {
    start(store, "clients = [\"agent\"]", true).await
}

/// `POST /orders/o1/exchanges` as an agent without Poppy support sends it: no Poppy header,
/// only `authorization` (if any).
fn exchange(item: &str, authorization: Option<&str>) -> Request {
    let request = Request::plain("POST", "/orders/o1/exchanges")
        .json(&json!({"item_id": item, "replacement_sku": "s1"}));
    match authorization {
        Some(value) => request.header("Authorization", value),
        None => request,
    }
}

/// The exchange with a new token of `client` for `account` (tokens are refreshed: never the
/// same bytes twice).
async fn exchange_as(provider: &PageProvider, client: &str, account: &str, item: &str) -> Request {
    let token = provider.token(client, account).await;
    exchange(item, Some(&format!("Bearer {token}")))
}

fn link_of(answer: &Answer, context: &str) -> String {
    let body = answer.assert_error(403, "approval_required", context);
    assert!(
        body.get("operation").is_none(),
        "{context}: never an operation: {body}"
    );
    body["approval_url"]
        .as_str()
        .unwrap_or_else(|| panic!("{context}: no approval_url: {body}"))
        .to_owned()
}

async fn an_agents_request_is_approved_on_the_page_and_performed_once(store: Store) {
    let (stack, provider, _page) = listed(store).await;
    let first = stack
        .gateway
        .send(&exchange_as(&provider, "agent", ACCOUNT, "i1").await)
        .await;
    let link = link_of(&first, "first");
    stack.assert_executions(0, "held");
    let decided = approve_on_page(&link, ACCOUNT, "approve").await;
    assert!(decided.html.contains("Approved by"), "{}", decided.html);
    stack.assert_executions(0, "approving performs nothing by itself");
    let performed = stack
        .gateway
        .send(&exchange_as(&provider, "agent", ACCOUNT, "i1").await)
        .await;
    assert_eq!(performed.status, 201, "{}", performed.describe());
    stack.assert_executions(1, "performed once");
    let replayed = stack
        .gateway
        .send(&exchange_as(&provider, "agent", ACCOUNT, "i1").await)
        .await;
    assert_eq!(replayed.status, 201, "{}", replayed.describe());
    assert_eq!(replayed.body, performed.body, "the recorded answer");
    stack.assert_executions(1, "a retry with a new token replays");
}

/// The page's decision is the account's: another user's token for the same terms gets its
/// own link (never the recorded answer), before and after the approved one is performed;
/// other terms after the approval get a new link and are not performed.
async fn another_account_and_other_terms_get_their_own_links(store: Store) {
    let (stack, provider, _page) = listed(store).await;
    let link = link_of(
        &stack
            .gateway
            .send(&exchange_as(&provider, "agent", ACCOUNT, "i1").await)
            .await,
        "first",
    );
    approve_on_page(&link, ACCOUNT, "approve").await;
    let theirs = stack
        .gateway
        .send(&exchange_as(&provider, "agent", "acct-2", "i1").await)
        .await;
    assert_ne!(link_of(&theirs, "another account"), link);
    stack.assert_executions(0, "another account's request is not approved");
    let other_terms = stack
        .gateway
        .send(&exchange_as(&provider, "agent", ACCOUNT, "i2").await)
        .await;
    assert_ne!(link_of(&other_terms, "other terms"), link);
    stack.assert_executions(0, "other terms were never approved");
    let performed = stack
        .gateway
        .send(&exchange_as(&provider, "agent", ACCOUNT, "i1").await)
        .await;
    assert_eq!(performed.status, 201, "{}", performed.describe());
    let theirs = stack
        .gateway
        .send(&exchange_as(&provider, "agent", "acct-2", "i1").await)
        .await;
    link_of(&theirs, "another account, after the performance");
    stack.assert_executions(1, "performed once, for the account that approved");
}

/// The Company's own client (a token of a client not listed), and a request without a
/// token, pass through as they came: the upstream sees the same body and `Authorization`.
async fn the_companys_own_client_passes_unchanged(store: Store) {
    let (stack, provider, _page) = listed(store).await;
    let request = exchange_as(&provider, "company-web", ACCOUNT, "i1").await;
    let answer = stack.gateway.send(&request).await;
    assert_eq!(answer.status, 201, "{}", answer.describe());
    stack.assert_executions(1, "passed through");
    let seen = stack.upstream.requests().pop().unwrap();
    assert_eq!(seen.body, request.body, "the body as sent");
    assert_eq!(
        seen.header("authorization"),
        request.header_value("Authorization"),
        "the token as sent"
    );
    let anonymous = stack.gateway.send(&exchange("i1", None)).await;
    assert_eq!(anonymous.status, 201, "{}", anonymous.describe());
    stack.assert_executions(2, "without a token: not an agent's");
}

/// Never forwarded unverified: a token that fails verification is `401 invalid_token`; an
/// agent's request to a policy the page can't approve is `400 extension_required`.
async fn invalid_tokens_and_agent_only_policies_perform_nothing(store: Store) {
    let (stack, provider, _page) = listed(store).await;
    let token = provider.token("agent", ACCOUNT).await;
    let forged = format!("{}x", &token[..token.len() - 1]);
    for value in ["Bearer opaque-unknown", &format!("Bearer {forged}")] {
        stack
            .gateway
            .send(&exchange("i1", Some(value)))
            .await
            .assert_error(401, "invalid_token", value);
    }
    let cancel = Request::plain("POST", "/orders/o1/cancel")
        .json(&json!({}))
        .header("Authorization", &format!("Bearer {token}"));
    stack.gateway.send(&cancel).await.assert_error(
        400,
        "extension_required",
        "an agent-only policy",
    );
    stack.assert_executions(0, "nothing forwarded");
}

/// `every_request = true` (tokens not verified here: `verify = "off"`): a request without
/// a token is `401 sign_in_required`; with one it is held for the page.
async fn every_request_is_an_agents(store: Store) {
    let (stack, provider, _page) = start(store, "every_request = true", false).await;
    stack
        .gateway
        .send(&exchange("i1", None))
        .await
        .assert_error(401, "sign_in_required", "no token");
    let token = provider.token("company-web", ACCOUNT).await;
    link_of(
        &stack
            .gateway
            .send(&exchange("i1", Some(&format!("Bearer {token}"))))
            .await,
        "any client's token",
    );
    stack.assert_executions(0, "nothing forwarded");
}

store_tests!(
    an_agents_request_is_approved_on_the_page_and_performed_once,
    another_account_and_other_terms_get_their_own_links,
    the_companys_own_client_passes_unchanged,
    invalid_tokens_and_agent_only_policies_perform_nothing,
    every_request_is_an_agents,
);
