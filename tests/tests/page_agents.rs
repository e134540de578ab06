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

use poppy_e2e::browser::Browser;
use poppy_e2e::conversations::{Service, assert_outcome, text_message};
use poppy_e2e::gateway::CONVERSATIONS_TOKEN;
use poppy_e2e::mcp_client::MCP_PATH;
use poppy_e2e::mcp_stack::agents_mcp_stack;
use poppy_e2e::page::{
    PAGE_CLIENT_SECRET, PAGE_SECRET_ENV, PageProvider, approve_in_browser, approve_on_page,
    sign_in_in_browser,
};
use poppy_e2e::policies::{DEFAULT, DEFAULT_FILE};
use poppy_e2e::python_mcp::PythonMcpServer;
use poppy_e2e::thirdparty::{ScriptOutput, deps_dir, python, run_script};
use poppy_e2e::{Answer, Gateway, Request, Stack, Store, store_tests, wait};
use serde_json::{Value, json};

const ACCOUNT: &str = "acct-1";

/// A stack (with the conversations service) whose `exchange` policy allows the page, with
/// `[approval_page]` and `agents` as its `[approval_page.agents]` lines (`None`: no table);
/// tokens verified with the provider unless `verified_tokens` is false (then `verify =
/// "off"`).
async fn start(
    store: Store,
    agents: Option<&str>,
    verified_tokens: bool,
) -> (Stack, PageProvider, String) {
    let (provider, mut table) = PageProvider::with_page();
    if let Some(agents) = agents {
        table = table.agents(agents);
    }
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
        b.conversations()
            .policy(DEFAULT_FILE, &policies)
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
    start(store, Some("clients = [\"agent\"]"), true).await
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

/// Send the exchange with a new token of `client` for `account`.
async fn send_as(
    stack: &Stack,
    provider: &PageProvider,
    client: &str,
    account: &str,
    item: &str,
) -> Answer {
    let request = exchange_as(provider, client, account, item).await;
    stack.gateway.send(&request).await
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
    let first = send_as(&stack, &provider, "agent", ACCOUNT, "i1").await;
    let link = link_of(&first, "first");
    stack.assert_executions(0, "held");
    let decided = approve_on_page(&link, ACCOUNT, "approve").await;
    assert!(decided.html.contains("Approved by"), "{}", decided.html);
    stack.assert_executions(0, "approving performs nothing by itself");
    let performed = send_as(&stack, &provider, "agent", ACCOUNT, "i1").await;
    assert_eq!(performed.status, 201, "{}", performed.describe());
    stack.assert_executions(1, "performed once");
    let replayed = send_as(&stack, &provider, "agent", ACCOUNT, "i1").await;
    assert_eq!(replayed.status, 201, "{}", replayed.describe());
    assert_eq!(replayed.body, performed.body, "the recorded answer");
    stack.assert_executions(1, "a retry with a new token replays");
}

/// Headless Chromium approves an agent's request: the User opens the link, signs in at the
/// provider and presses Approve; the agent's retry with a new token is performed once.
async fn a_browser_approves_an_agents_request(store: Store) {
    let (stack, provider, _page) = listed(store).await;
    let link = link_of(
        &send_as(&stack, &provider, "agent", ACCOUNT, "i1").await,
        "first",
    );
    let browser = Browser::start(412, 915).await;
    sign_in_in_browser(&browser, &link, ACCOUNT).await;
    approve_in_browser(&browser).await;
    browser.close().await;
    for _ in 0..2 {
        let answer = send_as(&stack, &provider, "agent", ACCOUNT, "i1").await;
        assert_eq!(answer.status, 201, "{}", answer.describe());
    }
    stack.assert_executions(1, "approved in a browser: performed once");
}

/// The page's decision is the account's: another user's token for the same terms gets its
/// own link (never the recorded answer), before and after the approved one is performed;
/// other terms after the approval get a new link and are not performed.
async fn another_account_and_other_terms_get_their_own_links(store: Store) {
    let (stack, provider, _page) = listed(store).await;
    let link = link_of(
        &send_as(&stack, &provider, "agent", ACCOUNT, "i1").await,
        "first",
    );
    approve_on_page(&link, ACCOUNT, "approve").await;
    let theirs = send_as(&stack, &provider, "agent", "acct-2", "i1").await;
    assert_ne!(link_of(&theirs, "another account"), link);
    stack.assert_executions(0, "another account's request is not approved");
    let other_terms = send_as(&stack, &provider, "agent", ACCOUNT, "i2").await;
    assert_ne!(link_of(&other_terms, "other terms"), link);
    stack.assert_executions(0, "other terms were never approved");
    let performed = send_as(&stack, &provider, "agent", ACCOUNT, "i1").await;
    assert_eq!(performed.status, 201, "{}", performed.describe());
    let theirs = send_as(&stack, &provider, "agent", "acct-2", "i1").await;
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
    // The Personal Agent rules are an agent's only: the Company's client keeps its headers.
    let overridden = exchange_as(&provider, "company-web", ACCOUNT, "i1")
        .await
        .header("X-HTTP-Method-Override", "PUT");
    assert_eq!(stack.gateway.send(&overridden).await.status, 201);
    let agents = exchange_as(&provider, "agent", ACCOUNT, "i1")
        .await
        .header("X-HTTP-Method-Override", "PUT");
    stack.gateway.send(&agents).await.assert_error(
        400,
        "invalid_header",
        "an agent's method override",
    );
    stack.assert_executions(3, "the agent's request was not forwarded");
    // Counted before they go upstream: the three that passed, as the Company's own client's.
    let metrics = stack.gateway.metrics().await;
    let unheld = |reason: &str| {
        metrics.value(
            "poppy_unheld_requests_total",
            &[("operation", "exchange"), ("reason", reason)],
        )
    };
    assert_eq!(unheld("company_client"), 3.0, "{}", metrics.text);
    assert_eq!(unheld("no_session"), 0.0, "{}", metrics.text);
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
    let (stack, provider, _page) = start(store, Some("every_request = true"), false).await;
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

/// The conversations service, the same rule: a Company Agent describes the request of an
/// agent without Poppy support (no `poppy_session`, the user's token as `authorization`):
/// the page's link; once approved, performed once; the Company's own client's token holds
/// nothing there.
async fn a_described_request_without_a_session_is_held_alike(store: Store) {
    let (stack, provider, _page) = listed(store).await;
    let service = Service::of(&stack.gateway);
    let body = |token: &str, message: Option<&str>| {
        let mut body = json!({
            "conversation_id": "conv_token",
            "poppy_session": "",
            "authorization": format!("Bearer {token}"),
            "poppy_extensions": "",
            "session_request": {"method": "POST", "path": "/conversations/conv_token/messages"},
            "request": {
                "method": "POST",
                "path": "/orders/o1/exchanges",
                "body": json!({"item_id": "i1", "replacement_sku": "s1"}).to_string(),
            },
        });
        if let Some(id) = message {
            body["message"] = text_message(id, "go ahead");
        }
        body
    };
    let call = |path: &'static str, body: serde_json::Value| {
        let service = &service;
        async move {
            service
                .call_with(path, &body, Some(CONVERSATIONS_TOKEN))
                .await
        }
    };
    let token = provider.token("agent", ACCOUNT).await;
    let held = call("/v1/propose", body(&token, None)).await;
    let link = link_of(&held, "propose");
    approve_on_page(&link, ACCOUNT, "approve").await;
    let token = provider.token("agent", ACCOUNT).await;
    let performed = call("/v1/perform", body(&token, Some("msg_1"))).await;
    assert_outcome(&performed, "performed", "approved on the page");
    let token = provider.token("agent", ACCOUNT).await;
    let again = call("/v1/perform", body(&token, Some("msg_2"))).await;
    assert_outcome(&again, "already_performed", "a later message");
    stack.assert_executions(1, "performed once");
    let theirs = provider.token("company-web", ACCOUNT).await;
    call("/v1/propose", body(&theirs, None)).await.assert_error(
        403,
        "not_an_agent",
        "the Company's own client",
    );
    stack.assert_executions(1, "nothing more");
}

/// Without `[approval_page.agents]`, nothing changes: an agent's token without a Session
/// passes through on a policy that allows the page, as before.
async fn without_the_rule_requests_without_a_session_pass_through(store: Store) {
    let (stack, provider, _page) = start(store, None, true).await;
    let answer = send_as(&stack, &provider, "agent", ACCOUNT, "i1").await;
    assert_eq!(answer.status, 201, "{}", answer.describe());
    stack.assert_executions(1, "passed through");
}

store_tests!(
    a_browser_approves_an_agents_request,
    a_described_request_without_a_session_is_held_alike,
    an_agents_request_is_approved_on_the_page_and_performed_once,
    another_account_and_other_terms_get_their_own_links,
    the_companys_own_client_passes_unchanged,
    invalid_tokens_and_agent_only_policies_perform_nothing,
    every_request_is_an_agents,
    without_the_rule_requests_without_a_session_pass_through,
);

// ---------------------------------------------------------------------------------------
// MCP: a plain OAuth MCP client.

/// Long enough for a slow CI machine to run the script; a hung SDK fails the test.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

/// Run tests/deps/mcp/token_agent.py in `venv` (`mode`: `legacy` or `auto`) with a new
/// token of `client` for `account`: the one line it printed.
async fn token_agent(
    venv: &str,
    mode: &str,
    gateway: &Gateway,
    upstream: &PythonMcpServer,
    token: &str,
) -> Value {
    let mut command = std::process::Command::new(python(venv));
    command.arg(deps_dir().join("mcp/token_agent.py")).args([
        mode,
        &format!("{}{MCP_PATH}", gateway.base_url()),
        &upstream.url(),
        &format!("Bearer {token}"),
    ]);
    let ScriptOutput { stdout, text } = run_script(command, "token_agent.py", SCRIPT_LIMIT).await;
    stdout
        .lines()
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
        .unwrap_or_else(|| panic!("token_agent.py printed no JSON line:\n{text}"))
}

/// The official Python SDK (`mcp` 1.x over 2025-11-25, and 2.x over 2026-07-28), with only
/// a user's bearer token: the call gets the page's link (a tool error, and the URL
/// elicitation it declared); once approved, the call with a new token is performed once,
/// and the next gets the recorded answer. The Company's own client's call is forwarded.
async fn an_oauth_mcp_client_is_approved_on_the_page(store: Store) {
    let (gateway, upstream, provider, page, _redis) = agents_mcp_stack(store);
    for (venv, mode, item_calls) in [("mcp1", "legacy", 1), ("mcp2", "auto", 2)] {
        let account = format!("acct-{venv}");
        let token = provider.token("agent", &account).await;
        let held = token_agent(venv, mode, &gateway, &upstream, &token).await;
        let context = format!("{venv} {mode}: held");
        assert_eq!(held["isError"], true, "{context}: {held}");
        let text = held["text"].as_str().unwrap_or_default();
        let start = text
            .find(&format!("{page}/approve/exc_"))
            .unwrap_or_else(|| panic!("{context}: no link: {held}"));
        let link = text[start..].split_whitespace().next().unwrap().to_owned();
        let asked = held["elicitations"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{context}: one URL elicitation: {held}");
        assert_eq!(asked[0]["mode"], "url", "{context}: {held}");
        assert!(
            !held.to_string().contains("operation_id"),
            "{context}: {held}"
        );
        assert_eq!(held["executions"], item_calls - 1, "{context}");

        approve_on_page(&link, &account, "approve").await;
        let token = provider.token("agent", &account).await;
        let done = token_agent(venv, mode, &gateway, &upstream, &token).await;
        let context = format!("{venv} {mode}: approved");
        assert_eq!(done["isError"], false, "{context}: {done}");
        assert_eq!(done["executions"], item_calls, "{context}: performed once");
        let token = provider.token("agent", &account).await;
        let again = token_agent(venv, mode, &gateway, &upstream, &token).await;
        assert_eq!(again["text"], done["text"], "{venv}: the recorded answer");
        assert_eq!(again["executions"], item_calls, "{venv}: replayed");
    }
    // The Company's own client: its call is forwarded as it came.
    let token = provider.token("company-web", "acct-1").await;
    let own = token_agent("mcp1", "legacy", &gateway, &upstream, &token).await;
    assert_eq!(own["isError"], false, "{own}");
    assert_eq!(
        own["executions"], 3,
        "the Company's client's call: executed"
    );
}

store_tests!(an_oauth_mcp_client_is_approved_on_the_page);
