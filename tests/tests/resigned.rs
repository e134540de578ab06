//! Issue 23: agents sign a new Session JWT for every request (new `iat`, new `jti`), with a
//! delegated key. Replays follow who may approve, not the bytes of the headers: a re-signed
//! retry of a performed approval gets the first answer (HTTP, MCP, conversations; both stores;
//! after a restart), with `verify = "off"` and with `"required"` (a [`TestAgent`]'s metadata
//! document). With `verify = "off"`, a retry that proves no possession of the delegated key
//! that approved gets `409 already_performed`, never a new operation; a request that really
//! is someone else's gets an operation of its own, as before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::conversations::{Service, Turn, approval_message, assert_outcome};
use poppy_e2e::mcp_client::{approved, assert_performed, call, call_ok, held_operation};
use poppy_e2e::{
    Answer, AnswerMode, McpStack, Request, Session, Stack, Store, TestAgent, store_tests,
};
use serde_json::{Value, json};

/// How the gateway checks Sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verify {
    /// `verify = "off"` (the harness's default): Sessions of agent `agent_1`.
    Off,
    /// `verify = "required"`: Sessions of a [`TestAgent`], verified with its metadata.
    Required,
}

/// The agent of a test: none for `off`, a metadata server for `required`.
struct Agent(Option<TestAgent>);

impl Agent {
    fn new(verify: Verify) -> Agent {
        Agent(match verify {
            Verify::Off => None,
            Verify::Required => Some(TestAgent::start()),
        })
    }

    fn signed_out(&self, sid: &str) -> Session {
        match &self.0 {
            Some(agent) => agent.signed_out(sid),
            None => Session::signed_out(sid),
        }
    }

    fn signed_in(&self, sid: &str, account: &str) -> Session {
        match &self.0 {
            Some(agent) => agent.signed_in(sid, account),
            None => Session::signed_in(sid, account),
        }
    }

    fn configure(&self, builder: poppy_e2e::GatewayBuilder) -> poppy_e2e::GatewayBuilder {
        match &self.0 {
            Some(agent) => agent.configure(builder),
            None => builder,
        }
    }
}

fn stack(store: Store, agent: &Agent) -> Stack {
    Stack::start_with(store, |b| agent.configure(b))
}

/// `409` with `error` `already_performed` naming `operation_id`: never a new operation.
fn assert_already_performed(answer: &Answer, operation_id: &str, context: &str) {
    let body = answer.assert_error(409, "already_performed", context);
    assert_eq!(
        body["operation_id"].as_str(),
        Some(operation_id),
        "{context}: the performed operation is named:\n{}",
        answer.describe()
    );
    assert!(
        body.get("operation").is_none(),
        "{context}: no operation to approve:\n{}",
        answer.describe()
    );
}

/// Hold, approve (executed once), then re-signed retries: each one's `Poppy-Session` is a new
/// JWT, and each gets the first answer.
async fn resigned_retries_replay(store: Store, verify: Verify) {
    let agent = Agent::new(verify);
    let stack = stack(store, &agent);
    let request = Request::exchange(&agent.signed_out("ses_resigned"), "o1", "i1", "s1");
    let operation = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&operation);
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    for attempt in 1..=3 {
        assert_ne!(
            approved.signed_session(),
            approved.signed_session(),
            "every send carries a new JWT"
        );
        stack
            .gateway
            .send(&approved)
            .await
            .assert_replay_of(&first, &format!("re-signed retry {attempt}"));
    }
    stack.assert_executions(1, "one approval, retried with new JWTs");
}

async fn resigned_retries_replay_off(store: Store) {
    resigned_retries_replay(store, Verify::Off).await;
}

async fn resigned_retries_replay_verified(store: Store) {
    resigned_retries_replay(store, Verify::Required).await;
}

/// While the approved request is at the upstream, a re-signed retry is told `503` with
/// `Retry-After`; once answered, it gets the answer.
async fn resigned_retry_in_flight(store: Store, verify: Verify) {
    let agent = Agent::new(verify);
    let stack = stack(store, &agent);
    let request = Request::exchange(&agent.signed_out("ses_in_flight"), "o1", "i1", "s1");
    let operation = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&operation);
    let in_flight = stack.send_held(&approved, 1).await;
    stack
        .gateway
        .send(&approved)
        .await
        .assert_unavailable("operation_in_progress", "a re-signed retry while in flight");
    stack.upstream.release();
    let first = in_flight.await.unwrap();
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a re-signed retry once answered");
    stack.assert_executions(1, "one approval");
}

async fn resigned_retry_in_flight_off(store: Store) {
    resigned_retry_in_flight(store, Verify::Off).await;
}

async fn resigned_retry_in_flight_verified(store: Store) {
    resigned_retry_in_flight(store, Verify::Required).await;
}

/// On Redis, a restarted gateway replays to a re-signed retry (signed after the restart).
async fn resigned_retries_replay_after_restart(verify: Verify) {
    let agent = Agent::new(verify);
    let mut stack = stack(Store::Redis, &agent);
    let request = Request::exchange(&agent.signed_out("ses_restart"), "o1", "i1", "s1");
    let operation = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&operation);
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    stack.gateway.restart();
    for attempt in 1..=2 {
        stack.gateway.send(&approved).await.assert_replay_of(
            &first,
            &format!("re-signed retry {attempt} after a restart"),
        );
    }
    stack.assert_executions(1, "one approval, across a restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resigned_retries_replay_after_restart_off() {
    resigned_retries_replay_after_restart(Verify::Off).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resigned_retries_replay_after_restart_verified() {
    resigned_retries_replay_after_restart(Verify::Required).await;
}

/// Signed in, verified: another Session of the same agent, user and account may approve the
/// operation (check 1), so it gets the recorded answer too.
async fn another_session_of_the_account_gets_the_replay_verified(store: Store) {
    let agent = Agent::new(Verify::Required);
    let stack = stack(store, &agent);
    let request = Request::exchange(&agent.signed_in("ses_acct_a", "acct_1"), "o1", "i1", "s1");
    let operation = stack.gateway.send(&request).await.operation();
    let first = stack.gateway.send(&request.approve(&operation)).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    let other = Request::exchange(&agent.signed_in("ses_acct_b", "acct_1"), "o1", "i1", "s1")
        .approve(&operation);
    for attempt in 1..=2 {
        stack.gateway.send(&other).await.assert_replay_of(
            &first,
            &format!("another Session of the account, attempt {attempt}"),
        );
    }
    stack.assert_executions(1, "one approval, two Sessions");
}

/// Signed in, `off`: another Session of the same account cannot prove the approving key, so
/// it is told the operation was performed (`409 already_performed`), never offered a new one.
async fn another_session_of_the_account_gets_already_performed_off(store: Store) {
    let stack = Stack::start(store);
    let request = Request::exchange(
        &Session::signed_in("ses_acct_a", "acct_1"),
        "o1",
        "i1",
        "s1",
    );
    let operation = stack.gateway.send(&request).await.operation();
    stack
        .gateway
        .send(&request.approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    let other = Request::exchange(
        &Session::signed_in("ses_acct_b", "acct_1"),
        "o1",
        "i1",
        "s1",
    )
    .approve(&operation);
    for attempt in 1..=2 {
        assert_already_performed(
            &stack.gateway.send(&other).await,
            &operation.operation_id,
            &format!("another Session of the account, attempt {attempt}"),
        );
    }
    stack.assert_executions(1, "one approval");
}

/// `off`, a new delegated key for every request: the approving request's key is never seen
/// again, so every retry gets `409 already_performed`, never a new operation.
async fn a_retry_with_a_new_delegated_key_gets_already_performed(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_per_request").with_key_per_request();
    let request = Request::exchange(&session, "o1", "i1", "s1");
    let operation = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&operation);
    stack
        .gateway
        .send(&approved)
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    for attempt in 1..=2 {
        assert_already_performed(
            &stack.gateway.send(&approved).await,
            &operation.operation_id,
            &format!("a retry with a new delegated key, attempt {attempt}"),
        );
    }
    stack.assert_executions(1, "one approval");
}

/// Requests that really are someone else's keep check 1's answer: another signed-out Session
/// (another `sid`), or a Session signed in to another account, gets an operation of its own.
async fn someone_elses_request_gets_its_own_operation(store: Store, verify: Verify) {
    let agent = Agent::new(verify);
    let stack = stack(store, &agent);
    let request = Request::exchange(&agent.signed_out("ses_mine"), "o1", "i1", "s1");
    let operation = stack.gateway.send(&request).await.operation();
    stack
        .gateway
        .send(&request.approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    let theirs = stack
        .gateway
        .send(
            &Request::exchange(&agent.signed_out("ses_theirs"), "o1", "i1", "s1")
                .approve(&operation),
        )
        .await
        .operation_in("another signed-out Session");
    assert_ne!(theirs.operation_id, operation.operation_id);

    let account = Request::exchange(&agent.signed_in("ses_acct_1", "acct_1"), "o2", "i2", "s2");
    let account_operation = stack.gateway.send(&account).await.operation();
    stack
        .gateway
        .send(&account.approve(&account_operation))
        .await
        .assert_upstream_answer(2, "POST", "/orders/o2/exchanges");
    let other_account = stack
        .gateway
        .send(
            &Request::exchange(&agent.signed_in("ses_acct_2", "acct_2"), "o2", "i2", "s2")
                .approve(&account_operation),
        )
        .await
        .operation_in("a Session of another account");
    assert_ne!(other_account.operation_id, account_operation.operation_id);
    stack.assert_executions(2, "only the two approvers' own approvals");
}

async fn someone_elses_request_gets_its_own_operation_off(store: Store) {
    someone_elses_request_gets_its_own_operation(store, Verify::Off).await;
}

async fn someone_elses_request_gets_its_own_operation_verified(store: Store) {
    someone_elses_request_gets_its_own_operation(store, Verify::Required).await;
}

// ----- MCP -----

fn exchange_call() -> rmcp::model::CallToolRequestParams {
    call(
        "exchange_item",
        json!({"order_id": "o1", "item_id": "i1", "replacement_sku": "s1"}),
    )
}

/// On MCP (rmcp, a new JWT on every POST; the approval in `_meta`): the approved call runs
/// once and every re-signed retry gets its result.
async fn mcp_resigned_retries_replay(store: Store, verify: Verify) {
    let agent = Agent::new(verify);
    let stack = McpStack::start_with(store, AnswerMode::Json, |b| agent.configure(b));
    let client = stack.agent(&agent.signed_out("ses_mcp_resigned")).await;
    let held = call_ok(&client, exchange_call()).await;
    let operation = held_operation(&held, "the first call");
    let first = call_ok(&client, approved(exchange_call(), &operation)).await;
    assert_performed(&first, 1, "exchange_item", "the approved call");
    for attempt in 1..=3 {
        let again = call_ok(&client, approved(exchange_call(), &operation)).await;
        assert_eq!(
            again, first,
            "re-signed retry {attempt}: the recorded result"
        );
    }
    stack.server.assert_executions(1, "one approval, retried");
}

async fn mcp_resigned_retries_replay_off(store: Store) {
    mcp_resigned_retries_replay(store, Verify::Off).await;
}

async fn mcp_resigned_retries_replay_verified(store: Store) {
    mcp_resigned_retries_replay(store, Verify::Required).await;
}

/// On MCP, `off`, a new delegated key for every request: the retry is a tool error
/// (`isError`) whose `_meta` retry advice says `already_performed`, never a new operation.
async fn mcp_a_retry_with_a_new_delegated_key_gets_already_performed(store: Store) {
    let stack = McpStack::start(store, AnswerMode::Json);
    let session = Session::signed_out("ses_mcp_per_request").with_key_per_request();
    let client = stack.agent(&session).await;
    let operation = held_operation(&call_ok(&client, exchange_call()).await, "the first call");
    let first = call_ok(&client, approved(exchange_call(), &operation)).await;
    assert_performed(&first, 1, "exchange_item", "the approved call");
    for attempt in 1..=2 {
        let again = call_ok(&client, approved(exchange_call(), &operation)).await;
        assert_eq!(
            again.get("isError"),
            Some(&Value::Bool(true)),
            "retry {attempt}: a tool error: {again}"
        );
        assert_eq!(
            again["_meta"]["personalagentprotocol.org/retry"]["error"], "already_performed",
            "retry {attempt}: {again}"
        );
        assert!(
            again.get("structuredContent").is_none(),
            "retry {attempt}: never a new operation: {again}"
        );
    }
    stack.server.assert_executions(1, "one approval");
}

// ----- Conversations -----

fn conversation_stack(store: Store, agent: &Agent) -> (Stack, Service) {
    let stack = Stack::start_with(store, |b| agent.configure(b.conversations()));
    let service = Service::of(&stack.gateway);
    (stack, service)
}

/// In a conversation (each call's `poppy_session` a new JWT): the same message re-sent gets
/// the original answer; a new message with the same approval is `already_performed` with the
/// first answer.
async fn conversation_resigned_retries(store: Store, verify: Verify) {
    let agent = Agent::new(verify);
    let (stack, service) = conversation_stack(store, &agent);
    let turn = Turn::exchange(
        "conv_resigned",
        &agent.signed_out("ses_conv_resigned"),
        "o1",
        "i1",
        "s1",
    );
    let operation = service.proposed(&turn).await;
    let message = approval_message("msg_resigned_1", &operation);
    let first = service.perform(&turn, &message).await;
    let performed = assert_outcome(&first, "performed", "the approval message");
    for attempt in 1..=2 {
        let again = service.perform(&turn, &message).await;
        assert_eq!(
            (again.status, again.json()),
            (first.status, first.json()),
            "re-signed retry {attempt} of the same message: the original answer"
        );
    }
    let another = service
        .perform(&turn, &approval_message("msg_resigned_2", &operation))
        .await;
    let body = assert_outcome(&another, "already_performed", "a new message");
    assert_eq!(body["response"], performed["response"], "the first answer");
    stack.assert_executions(1, "one approval message, re-sent with new JWTs");
    service.assert_answers_are_described();
}

async fn conversation_resigned_retries_off(store: Store) {
    conversation_resigned_retries(store, Verify::Off).await;
}

async fn conversation_resigned_retries_verified(store: Store) {
    conversation_resigned_retries(store, Verify::Required).await;
}

/// In a conversation, `off`, a new delegated key for every call: after the approval is
/// performed, the same message re-sent and a new message with the same approval are both
/// `409 already_performed`; nothing runs twice.
async fn conversation_retry_with_a_new_delegated_key_gets_already_performed(store: Store) {
    let (stack, service) = conversation_stack(store, &Agent::new(Verify::Off));
    let session = Session::signed_out("ses_conv_per_request").with_key_per_request();
    let turn = Turn::exchange("conv_per_request", &session, "o1", "i1", "s1");
    let operation = service.proposed(&turn).await;
    let message = approval_message("msg_per_request_1", &operation);
    assert_outcome(
        &service.perform(&turn, &message).await,
        "performed",
        "the approval message",
    );
    assert_already_performed(
        &service.perform(&turn, &message).await,
        &operation.operation_id,
        "the same message, a new delegated key",
    );
    assert_already_performed(
        &service
            .perform(&turn, &approval_message("msg_per_request_2", &operation))
            .await,
        &operation.operation_id,
        "a new message, a new delegated key",
    );
    stack.assert_executions(1, "one approval");
    service.assert_answers_are_described();
}

/// The upstream gets the Session JWT the agent signed for the request, with the path it
/// signed (the binding a verifying upstream checks).
async fn the_upstream_gets_the_jwt_signed_for_its_request(store: Store) {
    let agent = Agent::new(Verify::Required);
    let stack = stack(store, &agent);
    let session = agent.signed_out("ses_forwarded");
    let request = Request::exchange(&session, "o1", "i1", "s1");
    let operation = stack.gateway.send(&request).await.operation();
    stack
        .gateway
        .send(&request.approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    let forwarded = stack.upstream.requests()[0]
        .header("poppy-session")
        .expect("Poppy-Session forwarded")
        .to_owned();
    poppy_e2e::signer::assert_session_of(&session, &forwarded, "POST", "/orders/o1/exchanges");
    assert_eq!(
        stack.upstream.requests()[0].path_and_query,
        "/orders/o1/exchanges",
        "the path the agent signed"
    );
}

/// Every send above signs again: a sanity check of the harness, against the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_send_carries_a_new_session_jwt() {
    let stack = Stack::start(Store::Memory);
    let request = Request::agent("GET", "/orders/o1", &Session::signed_out("ses_wire"));
    for _ in 0..2 {
        stack
            .gateway
            .send(&request)
            .await
            .assert_status(200, "passthrough");
    }
    let seen = stack.upstream.requests();
    let jwts: Vec<&str> = seen
        .iter()
        .map(|r| r.header("poppy-session").unwrap())
        .collect();
    assert_ne!(jwts[0], jwts[1], "two sends, two JWTs");
}

store_tests!(
    resigned_retries_replay_off,
    resigned_retries_replay_verified,
    resigned_retry_in_flight_off,
    resigned_retry_in_flight_verified,
    another_session_of_the_account_gets_the_replay_verified,
    another_session_of_the_account_gets_already_performed_off,
    a_retry_with_a_new_delegated_key_gets_already_performed,
    someone_elses_request_gets_its_own_operation_off,
    someone_elses_request_gets_its_own_operation_verified,
    mcp_resigned_retries_replay_off,
    mcp_resigned_retries_replay_verified,
    mcp_a_retry_with_a_new_delegated_key_gets_already_performed,
    conversation_resigned_retries_off,
    conversation_resigned_retries_verified,
    conversation_retry_with_a_new_delegated_key_gets_already_performed,
    the_upstream_gets_the_jwt_signed_for_its_request,
);
