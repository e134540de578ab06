//! The same rule on every interface (issues 24 and 29): a Personal Agent's request without the
//! operations extension, on a policy the User may approve on the Company's page
//! (`approval = "either"`), gets the page's link, and no operation, whether it comes to the
//! HTTP API itself or is described to the conversations service by a Company Agent. Nothing is
//! forwarded. (MCP's form of the same answer: tests/tests/mcp_page.rs.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::conversations::{Service, Turn};
use poppy_e2e::page::{PAGE_SECRET_ENV, PageTable};
use poppy_e2e::policies::{DEFAULT, DEFAULT_FILE};
use poppy_e2e::ports::free_port;
use poppy_e2e::{Answer, Request, Session, Stack, Store, store_tests};
use serde_json::Value;

/// A stack with the conversations service and `[approval_page]`, `exchange` approvable on the
/// page; returns it and the page's base URL.
fn start(store: Store) -> (Stack, String) {
    let table = PageTable::new(free_port(), "http://127.0.0.1:1");
    let page = table.url();
    let policies = DEFAULT.replacen(
        "id_prefix = \"exc\"\n",
        "id_prefix = \"exc\"\napproval = \"either\"\n",
        1,
    );
    let stack = Stack::start_with(store, |b| {
        b.conversations()
            .policy(DEFAULT_FILE, &policies)
            .env(PAGE_SECRET_ENV, "page-client-secret-for-tests")
            .extra_config(&table.toml())
    });
    (stack, page)
}

/// The page's 403, checked the same way for every interface: the link, the summary, terms and
/// expiry, and none of the operation's Poppy members. Returns the body.
fn page_answer(answer: &Answer, page: &str, context: &str) -> Value {
    let body = answer.assert_error(403, "approval_required", context);
    for member in ["operation", "operation_id", "revision"] {
        assert!(
            body.get(member).is_none(),
            "{context}: no operation for a request without the extension (`{member}`): {body}"
        );
    }
    let url = body["approval_url"].as_str().expect("approval_url");
    assert!(
        url.starts_with(&format!("{page}/approve/exc_")),
        "{context}: {url}"
    );
    assert!(body["expires_at"].as_str().is_some(), "{context}: {body}");
    body
}

async fn the_api_and_the_conversations_service_both_give_the_page(store: Store) {
    let (stack, page) = start(store);
    let session = Session::signed_in("ses_page_both", "acct-1");
    let direct = stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i1", "s1").without_header("Poppy-Extensions"))
        .await;
    let direct = page_answer(&direct, &page, "the HTTP API");

    let service = Service::of(&stack.gateway);
    let mut turn = Turn::exchange("conv_page", &session, "o1", "i1", "s1");
    turn.extensions = "\"other\";v=\"1\"".to_owned();
    let described = page_answer(
        &service.propose(&turn).await,
        &page,
        "the conversations service's propose",
    );
    assert_eq!(described["summary"], direct["summary"], "the same summary");
    assert_eq!(described["terms"], direct["terms"], "the same terms");
    // A perform without the extension: its message's approval is not read.
    let performed = service
        .perform(
            &turn,
            &poppy_e2e::conversations::text_message("msg_page_1", "approved"),
        )
        .await;
    page_answer(&performed, &page, "the conversations service's perform");

    stack.assert_executions(0, "nothing is approved on the page");
    service.assert_answers_are_described();
}

store_tests!(the_api_and_the_conversations_service_both_give_the_page);
