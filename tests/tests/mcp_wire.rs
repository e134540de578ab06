//! Operations on an MCP server, on the wire: raw JSON-RPC POSTs through the gateway for what
//! an MCP client library would not send (batches, malformed bodies and approvals, mismatched
//! headers), the answers (retry results, 401, 413), what reaches the server, and SSE.
//! The end-to-end flow with a real MCP client is in `mcp.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::gateway::{HTTP_TIMEOUT, http_client};
use poppy_e2e::mcp_client::{
    APPROVAL_KEY, MCP_PATH, assert_rpc_error, held_operation, rpc_response, sse_messages, text_of,
    tools_call, with_meta,
};
use poppy_e2e::{AnswerMode, McpStack, Operation, Request, Session, Store, store_tests};
use serde_json::{Value, json};

const ARRIVAL: Duration = Duration::from_secs(5);

fn exchange(id: Value) -> Value {
    tools_call(
        id,
        "exchange_item",
        json!({"order_id": "o1", "item_id": "i1", "replacement_sku": "s1"}),
    )
}

fn approved(message: Value, operation: &Operation) -> Value {
    with_meta(
        message,
        json!({APPROVAL_KEY: {"operation_id": operation.operation_id, "revision": operation.revision}}),
    )
}

/// The `result` of a JSON-RPC answer with `id`.
fn result_of(answer: &poppy_e2e::Answer, id: &Value) -> Value {
    answer.assert_status(200, "a JSON-RPC answer");
    let message = rpc_response(answer);
    assert_eq!(
        &message["id"],
        id,
        "the answer carries the call's id:\n{}",
        answer.describe()
    );
    message
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("a result:\n{}", answer.describe()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_messages_and_methods_pass_through() {
    let stack = McpStack::start(Store::Memory, AnswerMode::Json);
    let session = Session::signed_out("ses_pass");
    let raw = stack.raw(&session).await;
    assert!(
        raw.mcp_session.starts_with("mcp-session-"),
        "the server's Mcp-Session-Id"
    );
    let listed = result_of(
        &raw.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .await,
        &json!(1),
    );
    assert_eq!(listed["tools"].as_array().unwrap().len(), 3);
    // Forwarded by the gateway's own client, with the proxy headers every forward carries.
    let list = stack
        .server
        .posts()
        .into_iter()
        .rfind(|p| p.method() == Some("tools/list"))
        .expect("the server saw tools/list");
    for header in ["x-request-id", "x-forwarded-for"] {
        assert!(
            list.header(header).is_some_and(|v| !v.is_empty()),
            "tools/list reaches the MCP server with {header}: {:?}",
            list.headers
        );
    }

    // GET and DELETE take the proxy path, Mcp-Session-Id included.
    let get = Request::agent("GET", MCP_PATH, &session)
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", &raw.mcp_session);
    stack
        .gateway
        .send(&get)
        .await
        .assert_status(405, "GET, the server's answer");
    let delete = Request::agent("DELETE", MCP_PATH, &session)
        .header("Mcp-Session-Id", &raw.mcp_session)
        .approval("operation_id=\"x\", revision=\"y\"");
    stack
        .gateway
        .send(&delete)
        .await
        .assert_status(200, "DELETE");
    assert_eq!(
        stack.server.other_requests(),
        [
            ("GET".to_owned(), Some(raw.mcp_session.clone())),
            ("DELETE".to_owned(), Some(raw.mcp_session.clone()))
        ]
    );

    // Without Poppy-Session it is not a Personal Agent's call: straight through, as before.
    let other = stack.raw(&session).await;
    let script = other
        .request(&exchange(json!(2)))
        .without_header("Poppy-Session")
        .without_header("Poppy-Extensions");
    let answer = stack.gateway.send(&script).await;
    assert_eq!(
        result_of(&answer, &json!(2))["structuredContent"]["execution"],
        1
    );
    stack
        .server
        .assert_executions(1, "the company's own client");
    let posts = stack.server.posts();
    assert!(
        posts.iter().all(|p| p.header("poppy-approval").is_none()),
        "Poppy-Approval never reaches the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_with_held_calls_are_refused() {
    let stack = McpStack::start(Store::Memory, AnswerMode::Json);
    let raw = stack.raw(&Session::signed_out("ses_batch")).await;
    let posts = stack.server.posts().len();
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        exchange(json!(2)),
    ]);
    let message = assert_rpc_error(&raw.post(&batch).await, 400, -32600, "a batch");
    assert_eq!(
        message,
        "batch requests with calls that need approval are not supported; send them one by one"
    );
    assert_eq!(
        stack.server.posts().len(),
        posts,
        "nothing of the batch is forwarded"
    );

    let harmless = json!([
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        tools_call(json!(4), "lookup_order", json!({})),
    ]);
    let answer = raw.post(&harmless).await;
    answer.assert_status(200, "a batch without held calls");
    assert_eq!(answer.json().as_array().map(Vec::len), Some(2));
    stack
        .server
        .assert_executions(1, "the batch without held calls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_are_refused() {
    let stack = McpStack::start(Store::Memory, AnswerMode::Json);
    let raw = stack.raw(&Session::signed_out("ses_bad")).await;
    let posts = stack.server.posts().len();
    let send = |body: &str| raw.post_bytes(body.as_bytes().to_vec());

    assert_rpc_error(&send("{\"jsonrpc\": ").await, 400, -32700, "not JSON");
    assert_rpc_error(&send("42").await, 400, -32600, "not an object");
    assert_rpc_error(&send("[]").await, 400, -32600, "an empty batch");
    let answer = send(r#"{"jsonrpc": "2.0", "id": 7}"#).await;
    assert_rpc_error(&answer, 200, -32600, "neither request nor response");
    assert_eq!(rpc_response(&answer)["id"], 7);
    let twice = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","name":"exchange_item","arguments":{}}}"#;
    let message = assert_rpc_error(&send(twice).await, 400, -32600, "a member twice");
    assert!(message.contains("twice"), "{message}");
    let mut notification = exchange(json!(0));
    notification.as_object_mut().unwrap().remove("id");
    assert_rpc_error(
        &raw.post(&notification).await,
        400,
        -32600,
        "a held call without an id",
    );
    let answer = raw
        .post(&with_meta(
            exchange(json!(8)),
            json!({APPROVAL_KEY: {"operation_id": 5, "revision": "r"}}),
        ))
        .await;
    let message = assert_rpc_error(&answer, 200, -32602, "an approval that is not two strings");
    assert!(message.contains("operation_id"), "{message}");
    assert_eq!(rpc_response(&answer)["id"], 8);
    let bad_characters = with_meta(
        exchange(json!(9)),
        json!({APPROVAL_KEY: {"operation_id": "exc 1", "revision": "r"}}),
    );
    assert_rpc_error(
        &raw.post(&bad_characters).await,
        200,
        -32602,
        "an ID with a space",
    );

    // Mcp-Name must not name a held tool the body does not call.
    let disguised = raw
        .request(&tools_call(json!(10), "lookup_order", json!({})))
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "exchange_item");
    assert_rpc_error(
        &raw.send(
            &disguised
                .clone()
                .without_header("MCP-Protocol-Version")
                .header("MCP-Protocol-Version", "2025-11-25"),
        )
        .await,
        400,
        -32600,
        "Mcp-Name says exchange_item",
    );
    // MCP 2026-07-28 gave the mismatch its own code.
    assert_rpc_error(
        &raw.send(
            &disguised
                .without_header("MCP-Protocol-Version")
                .header("MCP-Protocol-Version", "2026-07-28"),
        )
        .await,
        400,
        -32020,
        "Mcp-Name says exchange_item, under 2026-07-28",
    );

    let missing = tools_call(
        json!(11),
        "exchange_item",
        json!({"order_id": "o1", "item_id": "i1"}),
    );
    let result = result_of(&raw.post(&missing).await, &json!(11));
    assert_eq!(result["isError"], true);
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("replacement_sku"),
        "a missing term is named: {result}"
    );
    assert_eq!(
        stack.server.posts().len(),
        posts,
        "nothing malformed is forwarded"
    );
    stack.server.assert_executions(0, "malformed messages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_stays_at_the_gateway() {
    let stack = McpStack::start(Store::Memory, AnswerMode::Json);
    let raw = stack.raw(&Session::signed_out("ses_strip")).await;
    let held = result_of(&raw.post(&exchange(json!(1))).await, &json!(1));
    let operation = held_operation(&held, "the first call");

    let request = raw
        .request(&approved(exchange(json!(2)), &operation))
        .approval("operation_id=\"exc_x\", revision=\"1-x\"")
        .header("Accept-Encoding", "gzip");
    let performed = result_of(&raw.send(&request).await, &json!(2));
    assert_eq!(performed["structuredContent"]["execution"], 1);
    let forwarded = stack.server.posts().pop().unwrap();
    assert_eq!(
        forwarded.header("accept-encoding"),
        None,
        "a held call's answer is recorded (and its id rewritten): asked for uncompressed"
    );
    let executed = &stack.server.executions()[0];
    assert!(
        executed.params.get("_meta").is_none(),
        "the approval was _meta's only member, so _meta goes too: {}",
        executed.params
    );
    // An approval sent with a call of a tool that needs none is not forwarded either.
    let other = with_meta(
        tools_call(json!(3), "lookup_order", json!({})),
        json!({APPROVAL_KEY: {"operation_id": "a", "revision": "b"}, "progressToken": 3}),
    );
    result_of(&raw.post(&other).await, &json!(3));
    assert_eq!(
        stack.server.executions()[1].params["_meta"],
        json!({"progressToken": 3})
    );
    assert!(
        stack
            .server
            .posts()
            .iter()
            .all(|p| p.header("poppy-approval").is_none()),
        "Poppy-Approval is not forwarded"
    );
}

/// The recorded SSE answer is replayed with the retry's id, and without the first call's
/// progress notification (its progressToken is no longer active).
async fn sse_replays_carry_the_retry_id(store: Store) {
    let stack = McpStack::start(store, AnswerMode::Sse);
    let raw = stack.raw(&Session::signed_out("ses_sse")).await;
    let operation = held_operation(
        &result_of(&raw.post(&exchange(json!(1))).await, &json!(1)),
        "held",
    );

    let first = raw.post(&approved(exchange(json!(10)), &operation)).await;
    assert!(
        first
            .header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    let performed = result_of(&first, &json!(10));
    assert_eq!(performed["structuredContent"]["execution"], 1);
    for id in [json!("again"), json!(11)] {
        let retry = raw.post(&approved(exchange(id.clone()), &operation)).await;
        assert_eq!(
            result_of(&retry, &id),
            performed,
            "the recorded result, for {id}"
        );
        let events = sse_messages(&retry.text());
        assert_eq!(
            events.len(),
            1,
            "the result alone, no recorded progress:\n{}",
            retry.text()
        );
        assert_eq!(events[0]["id"], id);
    }
    let first_events = sse_messages(&first.text());
    assert_eq!(
        first_events[0]["method"], "notifications/progress",
        "the first answer streams the call's own progress"
    );
    stack.server.assert_executions(1, "one approval");
}

/// The answer to a retry that can't be answered yet: HTTP 200, a tool error result with the
/// retry advice in its text and `_meta` (never an HTTP 503, which ends SDK sessions).
fn assert_retry_result(answer: &poppy_e2e::Answer, id: &Value, error: &str, context: &str) {
    let result = result_of(answer, id);
    assert_eq!(result["isError"], true, "{context}: {result}");
    let advice = &result["_meta"][RETRY_KEY];
    assert_eq!(advice["error"], error, "{context}: {result}");
    assert!(
        advice["retry_after"].as_u64().is_some(),
        "{context}: {result}"
    );
    let text = text_of(&result);
    assert!(
        text.starts_with("Not failed, and not done yet") && text.contains("same approval"),
        "{context}: {text}"
    );
    assert!(
        result.get("structuredContent").is_none(),
        "{context}: nothing an outputSchema could refuse"
    );
}

const RETRY_KEY: &str = "personalagentprotocol.org/retry";

/// While the approved call is being performed, a retry is told to come back.
async fn a_retry_in_flight_is_told_to_retry(store: Store) {
    let stack = McpStack::start(store, AnswerMode::Json);
    let raw = stack.raw(&Session::signed_out("ses_flight")).await;
    let operation = held_operation(
        &result_of(&raw.post(&exchange(json!(1))).await, &json!(1)),
        "held",
    );
    stack.server.hold();
    let first = {
        let request = raw.request(&approved(exchange(json!(2)), &operation));
        let client = stack.gateway.client();
        tokio::spawn(async move { client.send(&request).await })
    };
    stack.server.wait_for_executions(1, ARRIVAL).await;
    let retry = raw.post(&approved(exchange(json!(3)), &operation)).await;
    assert_retry_result(
        &retry,
        &json!(3),
        "operation_in_progress",
        "a retry while in flight",
    );
    assert_eq!(
        result_of(&retry, &json!(3))["_meta"][RETRY_KEY]["operation_id"],
        operation.operation_id.as_str()
    );
    stack.server.release();
    let first = first.await.unwrap();
    assert_eq!(
        result_of(&first, &json!(2))["structuredContent"]["execution"],
        1
    );
    stack.server.assert_executions(1, "in flight, then done");
}

/// On MCP too an approval is bound to the POST's headers that can change the call: the
/// approval sent with another `X-Tenant` gets a new revision (a tool error, nothing performed);
/// with the same one it is performed once. Another MCP session may still send it.
async fn a_changed_header_is_another_call(store: Store) {
    let stack = McpStack::start(store, AnswerMode::Json);
    let raw = stack.raw(&Session::signed_out("ses_mcp_tenant")).await;
    let with_tenant =
        |message: Value, tenant: &str| raw.request(&message).header("X-Tenant", tenant);
    let held = stack
        .gateway
        .send(&with_tenant(exchange(json!(1)), "a"))
        .await;
    let operation = held_operation(&result_of(&held, &json!(1)), "held with X-Tenant a");
    let other = stack
        .gateway
        .send(&with_tenant(approved(exchange(json!(2)), &operation), "b"))
        .await;
    let fresh = held_operation(
        &result_of(&other, &json!(2)),
        "the approval with X-Tenant b",
    );
    assert_eq!(fresh.operation_id, operation.operation_id);
    assert_ne!(
        fresh.revision, operation.revision,
        "another call: a new revision"
    );
    stack
        .server
        .assert_executions(0, "another tenant's approval");
    let performed = stack
        .gateway
        .send(&with_tenant(approved(exchange(json!(3)), &operation), "a"))
        .await;
    assert_eq!(
        result_of(&performed, &json!(3))["structuredContent"]["execution"],
        1
    );
}

/// A signed-out Session naming its account's operation is challenged to sign in.
async fn a_signed_out_session_is_challenged(store: Store) {
    let stack = McpStack::start(store, AnswerMode::Json);
    let signed_in = Session::signed_in("ses_acct", "acct_1");
    let raw = stack.raw(&signed_in).await;
    let operation = held_operation(
        &result_of(&raw.post(&exchange(json!(1))).await, &json!(1)),
        "held",
    );
    let raw = raw.with_session(&signed_in.signed_out_twin());
    let answer = raw.post(&approved(exchange(json!(2)), &operation)).await;
    answer.assert_error(401, "sign_in_required", "signed out");
    assert_eq!(answer.header("www-authenticate"), Some("Bearer"));
    stack
        .server
        .assert_executions(0, "a challenge performs nothing");
}

/// No store, no execution; the agent is told to retry.
async fn store_down_is_told_to_retry(store: Store) {
    let mut stack = McpStack::start(store, AnswerMode::Json);
    let raw = stack.raw(&Session::signed_out("ses_down")).await;
    let operation = held_operation(
        &result_of(&raw.post(&exchange(json!(1))).await, &json!(1)),
        "held",
    );
    stack.redis.as_mut().expect("a Redis stack").stop();
    let answer = raw.post(&approved(exchange(json!(2)), &operation)).await;
    assert_retry_result(&answer, &json!(2), "store_unavailable", "the store is down");
    stack.server.assert_executions(0, "fail closed");
}

store_tests!(
    a_changed_header_is_another_call,
    sse_replays_carry_the_retry_id,
    a_retry_in_flight_is_told_to_retry,
    a_signed_out_session_is_challenged
);

mod store_down {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis() {
        super::store_down_is_told_to_retry(poppy_e2e::Store::Redis).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_refused() {
    let stack = McpStack::start_with(Store::Memory, AnswerMode::Json, |b| b.max_body_bytes(2048));
    let raw = stack.raw(&Session::signed_out("ses_big")).await;
    let posts = stack.server.posts().len();
    let big = tools_call(json!(1), "lookup_order", json!({"pad": "x".repeat(4096)}));
    assert_rpc_error(&raw.post(&big).await, 413, -32600, "over max_body_bytes");
    assert_eq!(
        stack.server.posts().len(),
        posts,
        "it could have been a held call"
    );
}

/// A tool that needs no approval, answered as SSE: each event reaches the client when the
/// server sends it, not when the answer is complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_of_other_tools_stream() {
    let stack = McpStack::start(Store::Memory, AnswerMode::Sse);
    let raw = stack.raw(&Session::signed_out("ses_stream")).await;
    let request = raw.request(&tools_call(json!(5), "lookup_order", json!({})));
    stack.server.hold();
    let mut builder =
        http_client(HTTP_TIMEOUT).post(format!("{}{MCP_PATH}", stack.gateway.base_url()));
    for (name, value) in request.wire_headers() {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let mut response = builder.body(request.body.clone()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut received = String::new();
    while !received.contains("notifications/progress") {
        let chunk = tokio::time::timeout(ARRIVAL, response.chunk())
            .await
            .expect("the first event arrives while the server still holds the result")
            .unwrap()
            .expect("the stream is still open");
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        !received.contains("\"result\""),
        "the result is not ready yet: {received}"
    );
    stack.server.release();
    while let Some(chunk) = tokio::time::timeout(ARRIVAL, response.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    let events = sse_messages(&received);
    assert_eq!(events.last().unwrap()["id"], 5, "{received}");
    assert_eq!(
        events.last().unwrap()["result"]["structuredContent"]["execution"],
        1
    );
}

/// `/MCP/`, `//mcp`: a server may take them for its endpoint, so the gateway does too; spellings
/// it could only guess at (`/mcp;x=1`, which Tomcat reads as `/mcp`; `/mcp.json`) are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_spellings_of_the_endpoint_are_the_endpoint() {
    let stack = McpStack::start(Store::Memory, AnswerMode::Json);
    let raw = stack.raw(&Session::signed_out("ses_spell")).await;
    for (i, path) in ["/MCP/", "//mcp"].into_iter().enumerate() {
        let id = json!(i);
        let mut request = raw.request(&exchange(id.clone()));
        request.path = path.to_owned();
        let result = result_of(&raw.send(&request).await, &id);
        held_operation(&result, path);
    }
    let posts = stack.server.posts().len();
    for path in ["/mcp;jsessionid=1", "/mcp.json", "/mcp%3B"] {
        let mut request = raw.request(&exchange(json!(9)));
        request.path = path.to_owned();
        raw.send(&request)
            .await
            .assert_error(400, "invalid_path", path);
    }
    assert_eq!(
        stack.server.posts().len(),
        posts,
        "refused spellings reach nothing"
    );
    stack
        .server
        .assert_executions(0, "held whatever the spelling");
}
