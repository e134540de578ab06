//! Operations on an MCP server, end to end: a real MCP client (rmcp over Streamable HTTP)
//! through the gateway to a real MCP server that counts the tool calls it executes. Held
//! calls, approval in `_meta`, replays (to calls with their own JSON-RPC ids), concurrent
//! retries, JSON and SSE answers, each against memory:// and Redis where the flow matters.
//! The raw JSON-RPC cases (batches, malformed bodies, headers) are in `mcp_wire.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use poppy_e2e::mcp_client::{
    APPROVAL_KEY, HELD_TEXT, McpClient, approved, assert_performed, call, call_ok, held_operation,
    meta, text_of, try_call,
};
use poppy_e2e::{AnswerMode, McpStack, Session, Store, store_tests, tamper, wait};
use rmcp::model::CallToolRequestParams;
use serde_json::json;
use tokio::task::JoinSet;

const ARRIVAL: Duration = Duration::from_secs(5);

fn exchange(sku: &str) -> CallToolRequestParams {
    call(
        "exchange_item",
        json!({"order_id": "o1", "item_id": "i1", "replacement_sku": sku}),
    )
}

fn lookup() -> CallToolRequestParams {
    call("lookup_order", json!({"order_id": "o1"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_and_other_tools_pass_through() {
    let stack = McpStack::start(Store::Memory, AnswerMode::Json);
    let client = stack.agent(&Session::signed_out("ses_list")).await;
    let info = client.peer_info().expect("the server's initialize result");
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("counting-mcp")
    );
    let tools: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|tool| tool.name.to_string())
        .collect();
    assert_eq!(tools, ["exchange_item", "cancel_order", "lookup_order"]);

    let first = call_ok(&client, lookup()).await;
    assert_performed(&first, 1, "lookup_order", "a tool no policy names");
    stack.server.set_mode(AnswerMode::Sse);
    let second = call_ok(&client, lookup()).await;
    assert_performed(&second, 2, "lookup_order", "the same, answered as SSE");
    stack
        .server
        .assert_executions(2, "two calls of a tool that needs no approval");

    let posts = stack.server.posts();
    let initialize = &posts[0];
    assert_eq!(initialize.method(), Some("initialize"));
    assert!(
        initialize.header("poppy-session").is_some(),
        "initialize reaches the server as it was sent"
    );
    let session = posts[1]
        .header("mcp-session-id")
        .expect("later messages carry the server's Mcp-Session-Id");
    assert!(session.starts_with("mcp-session-"), "{session}");
    assert!(
        posts[1..]
            .iter()
            .all(|p| p.header("mcp-session-id") == Some(session)),
        "every later message carries it"
    );
}

/// Hold, approve, perform once, replay to later calls with their own ids.
async fn approve_and_replay(store: Store, mode: AnswerMode) {
    let stack = McpStack::start(store, mode);
    let session = Session::signed_out("ses_mcp");
    let client = stack.agent(&session).await;

    let held = call_ok(&client, exchange("s1")).await;
    let operation = held_operation(&held, "the first call");
    operation.assert_prefix("exc");
    assert_eq!(
        operation.summary,
        "Exchange item **i1** on order o1 for s1."
    );
    assert_eq!(text_of(&held), format!("{HELD_TEXT}{}", operation.summary));
    assert_eq!(
        operation.terms,
        json!({"order_id": "o1", "item_id": "i1", "replacement_sku": "s1"})
    );
    stack.server.assert_executions(0, "before the approval");

    let first = call_ok(&client, approved(exchange("s1"), &operation)).await;
    assert_performed(&first, 1, "exchange_item", "the approved call");
    let executed = &stack.server.executions()[0];
    assert_eq!(
        executed.arguments,
        json!({"order_id": "o1", "item_id": "i1", "replacement_sku": "s1"})
    );
    assert!(
        executed.params["_meta"].get(APPROVAL_KEY).is_none(),
        "the approval is not forwarded (rmcp's own progressToken is): {}",
        executed.params
    );
    assert!(
        stack
            .server
            .posts()
            .iter()
            .all(|p| p.header("poppy-approval").is_none())
    );

    // rmcp numbers its requests: each retry has a new id, and is only matched to an answer
    // that carries it.
    for attempt in 1..=3 {
        let again = call_ok(&client, approved(exchange("s1"), &operation)).await;
        assert_eq!(again, first, "retry {attempt}: the recorded answer");
    }
    let other_client = stack.agent(&session).await;
    let elsewhere = call_ok(&other_client, approved(exchange("s1"), &operation)).await;
    assert_eq!(elsewhere, first, "a retry in another MCP session");
    stack
        .server
        .assert_executions(1, "one approval, however many retries");

    let metrics = stack.gateway.metrics().await;
    assert_eq!(metrics.operations("exchange_tool", "held"), 1.0);
    assert_eq!(metrics.operations("exchange_tool", "performed"), 1.0);
    assert_eq!(metrics.operations("exchange_tool", "replayed"), 4.0);
}

async fn held_call_json(store: Store) {
    approve_and_replay(store, AnswerMode::Json).await;
}

async fn held_call_sse(store: Store) {
    approve_and_replay(store, AnswerMode::Sse).await;
}

/// Clients that each retry the same approval at the same moment, while the first is held at
/// the server: one execution; the others are told to retry (a tool result with the retry
/// advice, which rmcp takes like any result), and later get the answer.
async fn concurrent_retries_execute_once(store: Store) {
    const CLIENTS: usize = 5;
    let stack = McpStack::start(store, AnswerMode::Json);
    let session = Session::signed_out("ses_burst");
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Arc::new(stack.agent(&session).await));
    }
    let held = call_ok(&clients[0], exchange("s1")).await;
    let operation = held_operation(&held, "the first call");

    stack.server.hold();
    let answered = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let mut tasks = JoinSet::new();
    for client in &clients {
        let (client, barrier, answered): (Arc<McpClient>, _, _) = (
            Arc::clone(client),
            Arc::clone(&barrier),
            Arc::clone(&answered),
        );
        let params = approved(exchange("s1"), &operation);
        tasks.spawn(async move {
            barrier.wait().await;
            let result = try_call(&client, params).await;
            answered.fetch_add(1, Ordering::SeqCst);
            result
        });
    }
    stack.server.wait_for_executions(1, ARRIVAL).await;
    let settled = wait::until(ARRIVAL, || answered.load(Ordering::SeqCst) >= CLIENTS - 1).await;
    stack.server.release();
    assert!(
        settled,
        "the retries are answered while the first is in flight"
    );
    let mut performed = Vec::new();
    let mut refused = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let result = joined
            .expect("a call task panicked")
            .expect("every retry gets a result");
        match result["_meta"].get("personalagentprotocol.org/retry") {
            Some(advice) => refused.push(advice.clone()),
            None => performed.push(result),
        }
    }
    assert_eq!(
        performed.len(),
        1,
        "one call performs it: {performed:?} {refused:?}"
    );
    assert_performed(
        &performed[0],
        1,
        "exchange_item",
        "the call that performed it",
    );
    assert!(
        refused
            .iter()
            .all(|advice| advice["error"] == "operation_in_progress"),
        "the others are told to retry: {refused:?}"
    );
    for client in &clients {
        let retry = call_ok(client, approved(exchange("s1"), &operation)).await;
        assert_eq!(retry, performed[0], "a retry once it is done");
    }
    stack.server.assert_executions(1, "at most once means once");
}

store_tests!(
    held_call_json,
    held_call_sse,
    concurrent_retries_execute_once
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_extension_a_held_tool_is_a_tool_error() {
    let stack = McpStack::start(Store::Memory, AnswerMode::Json);
    let session = Session::signed_out("ses_plain");
    let plain = stack.undeclared_agent(&session).await;

    let refused = call_ok(&plain, exchange("s1")).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused.get("structuredContent").is_none(),
        "no operation for an agent that did not declare the extension: {refused}"
    );
    let text = text_of(&refused);
    assert!(
        text.contains("approval") && text.contains("operations") && text.contains("version 2"),
        "{text}"
    );

    // Not even with an approval another client obtained.
    let declaring = stack.agent(&session).await;
    let operation = held_operation(&call_ok(&declaring, exchange("s1")).await, "declared");
    let still = call_ok(&plain, approved(exchange("s1"), &operation)).await;
    assert_eq!(still, refused);
    stack
        .server
        .assert_executions(0, "nothing held is forwarded without the extension");

    assert_performed(
        &call_ok(&plain, lookup()).await,
        1,
        "lookup_order",
        "other tools work as before",
    );
    let metrics = stack.gateway.metrics().await;
    assert_eq!(
        metrics.operations("exchange_tool", "extension_required"),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_that_does_not_cover_the_call_gets_a_new_revision() {
    let stack = McpStack::start(Store::Memory, AnswerMode::Json);
    let client = stack.agent(&Session::signed_out("ses_rej")).await;
    let operation = held_operation(&call_ok(&client, exchange("s1")).await, "s1");

    let tampered = operation.with_revision(&tamper(&operation.revision));
    for (what, params, named) in [
        (
            "a tampered revision",
            approved(exchange("s1"), &tampered),
            &tampered,
        ),
        (
            "the approval of s1 for s2",
            approved(exchange("s2"), &operation),
            &operation,
        ),
    ] {
        let result = call_ok(&client, params).await;
        let fresh = held_operation(&result, what);
        assert_ne!(
            fresh.revision, named.revision,
            "{what}: never the named revision"
        );
        assert_eq!(
            fresh.operation_id, operation.operation_id,
            "{what}: the same action"
        );
        assert!(text_of(&result).contains("does not cover"), "{what}");
    }
    let other_meta = {
        let mut params = exchange("s1");
        params.meta = Some(meta(json!({"example.com/trace": "t1"})));
        approved(params, &operation)
    };
    assert_performed(
        &call_ok(&client, other_meta).await,
        1,
        "exchange_item",
        "the right approval, beside other _meta",
    );
    let executed = &stack.server.executions()[0];
    assert_eq!(
        executed.params["_meta"]["example.com/trace"],
        json!("t1"),
        "other _meta members reach the server: {}",
        executed.params
    );
    assert!(executed.params["_meta"].get(APPROVAL_KEY).is_none());
    stack
        .server
        .assert_executions(1, "only the approval that covers the call");
    let metrics = stack.gateway.metrics().await;
    assert_eq!(metrics.operations("exchange_tool", "rejected"), 2.0);
}
