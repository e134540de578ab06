//! Operations in conversations (spec sections 4, 6 and 7, "Conversations"): a Company Agent
//! calls the gateway's operations service (`[conversations]`), the real binary, on both
//! stores, with a counting upstream. Every answer a test gets is checked against the
//! service's OpenAPI description at its end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::agent::AGENT;
use poppy_e2e::conversations::{Service, Turn, approval_message, assert_outcome, text_message};
use poppy_e2e::gateway::CONVERSATIONS_TOKEN;
use poppy_e2e::policies::exchange_summary;
use poppy_e2e::{Request, Session, Stack, Store, identity, store_tests, wait};
use serde_json::{Value, json};

const UPSTREAM_WAIT: Duration = Duration::from_secs(10);

fn stack(store: Store) -> (Stack, Service) {
    let stack = Stack::start_with(store, |builder| builder.conversations());
    let service = Service::of(&stack.gateway);
    (stack, service)
}

/// The upstream's answer to execution `n` of the exchange on `order`, as the service
/// reports it.
fn assert_upstream_answer(body: &Value, n: usize, order: &str) {
    let response = &body["response"];
    assert_eq!(response["status"], 201, "{body}");
    let upstream: Value = serde_json::from_str(response["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        upstream,
        json!({"execution": n, "method": "POST", "path": format!("/orders/{order}/exchanges")})
    );
}

async fn propose_then_approval_message_performs_once(store: Store) {
    let (stack, service) = stack(store);
    let session = Session::signed_out("ses_conv_once");
    let turn = Turn::exchange("conv_once", &session, "o1", "i1", "s1");
    let operation = service.proposed(&turn).await;
    operation.assert_prefix("exc");
    assert_eq!(operation.summary, exchange_summary("o1", "i1", "s1"));
    assert_eq!(
        operation.terms,
        json!({"order_id": "o1", "item_id": "i1", "replacement_sku": "s1"})
    );
    stack.assert_executions(0, "a proposal performs nothing");

    let answer = service
        .perform(&turn, &approval_message("msg_once_1", &operation))
        .await;
    let body = assert_outcome(&answer, "performed", "the approval message");
    assert_eq!(body["operation_id"], operation.operation_id.as_str());
    assert_upstream_answer(&body, 1, "o1");
    stack.assert_executions(1, "one approval message");
    let executed = &stack.upstream.requests()[0];
    assert_eq!(executed.path_and_query, "/orders/o1/exchanges");
    assert_eq!(
        executed.body,
        turn.request["body"].as_str().unwrap().as_bytes(),
        "the upstream gets the described body, byte for byte"
    );
    // The Session JWT the call carried (signed for the Personal Agent's message to the
    // Company Agent, its `session_request`), forwarded as is.
    let (method, path) = turn.session_request();
    poppy_e2e::signer::assert_session_of(
        &session,
        executed
            .header("poppy-session")
            .expect("Poppy-Session forwarded"),
        &method,
        &path,
    );
    assert!(executed.header("poppy-approval").is_none());

    // One discovery document for every interface: operations v2 is listed once.
    let document = stack
        .gateway
        .send(&Request::plain("GET", "/.well-known/poppy.json"))
        .await;
    document.assert_status(200, "poppy.json");
    assert_eq!(
        document.json()["extensions"]["operations"],
        json!([{"version": "2"}])
    );

    let openapi = service.get("/openapi.json").await;
    openapi.assert_status(200, "GET /openapi.json");
    let served: Value = openapi.json();
    let kept: Value = serde_json::from_str(
        &std::fs::read_to_string(poppy_e2e::conversations::openapi_path()).unwrap(),
    )
    .unwrap();
    assert_eq!(
        served, kept,
        "the service serves the description kept in the repository"
    );
    service.assert_answers_are_described();
}

async fn the_same_message_retried_gets_the_original_answer(store: Store) {
    let (stack, service) = stack(store);
    let turn = Turn::exchange(
        "conv_retry",
        &Session::signed_out("ses_retry"),
        "o1",
        "i1",
        "s1",
    );
    let operation = service.proposed(&turn).await;
    let message = approval_message("msg_retry_1", &operation);
    let first = service.perform(&turn, &message).await;
    assert_outcome(&first, "performed", "the first delivery");
    for attempt in 1..=3 {
        let again = service.perform(&turn, &message).await;
        assert_eq!(
            (again.status, again.json()),
            (first.status, first.json()),
            "retry {attempt} of the same message gets the original answer"
        );
    }
    stack.assert_executions(1, "one message, delivered four times");
    service.assert_answers_are_described();
}

async fn a_new_message_with_the_same_approval_performs_nothing(store: Store) {
    let (stack, service) = stack(store);
    let turn = Turn::exchange(
        "conv_new",
        &Session::signed_out("ses_new"),
        "o1",
        "i1",
        "s1",
    );
    let operation = service.proposed(&turn).await;
    let first = service
        .perform(&turn, &approval_message("msg_new_1", &operation))
        .await;
    let performed = assert_outcome(&first, "performed", "the first message");
    for id in ["msg_new_2", "msg_new_3"] {
        let again = service
            .perform(&turn, &approval_message(id, &operation))
            .await;
        let body = assert_outcome(&again, "already_performed", id);
        assert_eq!(
            body["response"], performed["response"],
            "{id}: the first answer"
        );
        // That message, retried, keeps its own original answer.
        let retried = service
            .perform(&turn, &approval_message(id, &operation))
            .await;
        assert_eq!(retried.json(), body, "{id} retried");
    }
    stack.assert_executions(1, "three messages with one approval");
    service.assert_answers_are_described();
}

/// Check 1 (the Session can approve it) and check 3 (the revision is this conversation's):
/// an approval from another Session is handled as if there were none, one from another
/// conversation is answered with a new revision for this one, a signed-out Session naming an
/// account's operation is challenged. Nothing is performed by any of them.
async fn approvals_from_another_conversation_or_session_perform_nothing(store: Store) {
    let (stack, service) = stack(store);
    let session = Session::signed_out("ses_conv_a");
    let turn = Turn::exchange("conv_a", &session, "o1", "i1", "s1");
    let operation = service.proposed(&turn).await;

    let elsewhere = turn.in_conversation("conv_b");
    let answer = service
        .perform(&elsewhere, &approval_message("msg_b_1", &operation))
        .await;
    let fresh = answer.operation_in("another conversation's approval");
    assert_eq!(
        fresh.operation_id, operation.operation_id,
        "the same action"
    );
    assert_ne!(
        fresh.revision, operation.revision,
        "never the revision named"
    );

    let other = turn.from_session(&Session::signed_out("ses_other"));
    let answer = service
        .perform(&other, &approval_message("msg_other_1", &operation))
        .await;
    let theirs = answer.operation_in("another Session's approval");
    assert_ne!(
        theirs.operation_id, operation.operation_id,
        "the other Session gets an operation of its own"
    );

    let account = Session::signed_in("ses_acct", "acct_1");
    let signed_in = Turn::exchange("conv_acct", &account, "o2", "i2", "s2");
    let account_operation = service.proposed(&signed_in).await;
    let signed_out = signed_in.from_session(&account.signed_out_twin());
    service
        .perform(
            &signed_out,
            &approval_message("msg_acct_1", &account_operation),
        )
        .await
        .assert_error(
            401,
            "sign_in_required",
            "a signed-out Session names an account's operation",
        );
    stack.assert_executions(0, "approvals that fail check 1 or 3");

    // The approval in its own conversation and Session is performed, once.
    let performed = service
        .perform(&turn, &approval_message("msg_a_1", &operation))
        .await;
    assert_outcome(&performed, "performed", "its own conversation");
    // Check 2 comes before check 3 (spec 6): once performed, the approval sent in another
    // conversation of the same Session gets the first answer, and performs nothing.
    let answer = service
        .perform(&elsewhere, &approval_message("msg_b_2", &operation))
        .await;
    assert_outcome(
        &answer,
        "already_performed",
        "performed, then sent elsewhere",
    );
    stack.assert_executions(1, "one performed approval");
    service.assert_answers_are_described();
}

async fn message_text_that_approves_without_the_extension_performs_nothing(store: Store) {
    let (stack, service) = stack(store);
    let turn = Turn::exchange(
        "conv_text",
        &Session::signed_out("ses_text"),
        "o1",
        "i1",
        "s1",
    );
    let operation = service.proposed(&turn).await;
    let approving_text = format!(
        "I approve. Go ahead: {{\"operation_id\": \"{}\", \"revision\": \"{}\"}}",
        operation.operation_id, operation.revision
    );
    let messages = [
        text_message("msg_text_1", "Yes, I approve the exchange, please do it."),
        text_message("msg_text_2", &approving_text),
        json!({"id": "msg_text_3", "text": "approved", "extensions": {}}),
        json!({"id": "msg_text_4", "text": "approved", "extensions": {"operations": {}}}),
        json!({"id": "msg_text_5", "text": "approved", "data": {"approval": {
            "operation_id": operation.operation_id, "revision": operation.revision}}}),
        json!({"id": "msg_text_6", "text": "approved", "extensions": {"other": {"approval": {
            "operation_id": operation.operation_id, "revision": operation.revision}}}}),
    ];
    for message in &messages {
        let answer = service.perform(&turn, message).await;
        let held = answer.operation_in(&format!("{}", message["id"]));
        assert_eq!(held.operation_id, operation.operation_id);
    }
    stack.assert_executions(0, "text approves nothing");
    let answer = service
        .perform(&turn, &approval_message("msg_text_7", &operation))
        .await;
    assert_outcome(&answer, "performed", "the approval itself");
    stack.assert_executions(1, "only the approval performs");
    service.assert_answers_are_described();
}

/// The approval message delivered eight times at once, and four other messages with the
/// same approval: one execution. While it runs, every other delivery gets `503` (the same
/// message: `message_in_progress` or, when another message claimed the operation,
/// `operation_in_progress`), never a failure; afterwards the message that performed it gets
/// `performed` and every other one `already_performed`, with the same answer.
async fn concurrent_deliveries_of_the_approval_message_perform_once(store: Store) {
    let (stack, service) = stack(store);
    let turn = Turn::exchange(
        "conv_race",
        &Session::signed_out("ses_race"),
        "o1",
        "i1",
        "s1",
    );
    let operation = service.proposed(&turn).await;
    stack.upstream.hold();
    let mut deliveries = Vec::new();
    for i in 0..12 {
        let (service, turn) = (service.clone(), turn.clone());
        let id = if i < 8 {
            "msg_race".to_owned()
        } else {
            format!("msg_race_other_{i}")
        };
        let message = approval_message(&id, &operation);
        deliveries.push(tokio::spawn(async move {
            let answer = service.perform(&turn, &message).await;
            (message, answer)
        }));
    }
    stack.upstream.wait_for_count(1, UPSTREAM_WAIT).await;
    // Every delivery but the one held at the upstream is answered while it is held.
    let answered = wait::until(UPSTREAM_WAIT, || {
        deliveries.iter().filter(|d| d.is_finished()).count() == 11
    })
    .await;
    assert!(
        answered,
        "eleven deliveries answered while one is performed"
    );
    stack.upstream.release();
    let mut performer = None;
    let mut waited = Vec::new();
    for delivery in deliveries {
        let (message, answer) = delivery.await.unwrap();
        if answer.status == 200 {
            assert!(
                performer.is_none(),
                "a second delivery performed:\n{}",
                answer.describe()
            );
            performer = Some((message, answer));
            continue;
        }
        let code = answer.error_code().unwrap_or_default();
        let allowed: &[&str] = if message["id"] == "msg_race" {
            &["message_in_progress", "operation_in_progress"]
        } else {
            &["operation_in_progress"]
        };
        assert!(allowed.contains(&code.as_str()), "{}", answer.describe());
        answer.assert_unavailable(&code, "a delivery while the approval is performed");
        waited.push(message);
    }
    let (performing, answer) = performer.expect("one delivery performs the operation");
    let body = assert_outcome(&answer, "performed", "the delivery that performed");
    assert_upstream_answer(&body, 1, "o1");
    for message in waited {
        let expected = if message["id"] == performing["id"] {
            "performed"
        } else {
            "already_performed"
        };
        let answer = service.perform(&turn, &message).await;
        let again = assert_outcome(&answer, expected, "after the execution");
        assert_eq!(again["response"], body["response"]);
    }
    stack.assert_executions(1, "twelve concurrent deliveries");
    service.assert_answers_are_described();
}

/// Spec 7: while the outcome is unknown (the upstream timed out), the Company must not
/// respond as if it failed: `503 operation_outcome_unknown`, to the message, to new messages
/// with the approval and to a new proposal for the same action, and nothing is performed
/// again.
async fn an_unknown_outcome_is_never_a_failure_and_never_performed_again(store: Store) {
    let stack = Stack::start_with(store, |builder| {
        builder
            .conversations()
            .upstream_timeout("500ms")
            .upstream_connect_timeout("500ms")
    });
    let service = Service::of(&stack.gateway);
    let turn = Turn::exchange(
        "conv_unknown",
        &Session::signed_out("ses_unknown"),
        "o1",
        "i1",
        "s1",
    );
    let operation = service.proposed(&turn).await;
    stack.upstream.hold();
    let message = approval_message("msg_unknown_1", &operation);
    service
        .perform(&turn, &message)
        .await
        .assert_unavailable("operation_outcome_unknown", "the upstream timed out");
    // The claim's lease (connect + timeout + 1 s) runs out; until then retries hear
    // "in progress", afterwards "unknown": never performed, never a failure.
    let unknown = wait::until_some(Duration::from_secs(10), || {
        let (service, turn, message) = (service.clone(), turn.clone(), message.clone());
        async move {
            let answer = service.perform(&turn, &message).await;
            assert_eq!(answer.status, 503, "{}", answer.describe());
            (answer.error_code().as_deref() == Some("operation_outcome_unknown")).then_some(answer)
        }
    })
    .await;
    unknown
        .expect("the outcome reads as unknown once the lease ran out")
        .assert_unavailable("operation_outcome_unknown", "the same message");
    service
        .perform(&turn, &approval_message("msg_unknown_2", &operation))
        .await
        .assert_unavailable(
            "operation_outcome_unknown",
            "a new message with the approval",
        );
    service.propose(&turn).await.assert_unavailable(
        "operation_outcome_unknown",
        "a new proposal for the same action",
    );
    stack.upstream.release();
    stack.assert_executions(1, "sent once, never again");
    service.assert_answers_are_described();
}

async fn the_service_token_is_required(store: Store) {
    let (stack, service) = stack(store);
    let turn = Turn::exchange(
        "conv_token",
        &Session::signed_out("ses_token"),
        "o1",
        "i1",
        "s1",
    );
    let operation = service.proposed(&turn).await;
    let body = turn.perform_body(&approval_message("msg_token_1", &operation));
    let wrong = format!("{CONVERSATIONS_TOKEN}x");
    for (what, token) in [
        ("no token", None),
        ("a wrong token", Some(wrong.as_str())),
        ("an empty token", Some("")),
        (
            "the admin's kind of mistake: a prefix",
            Some(&CONVERSATIONS_TOKEN[..10]),
        ),
    ] {
        for path in ["/v1/perform", "/v1/propose"] {
            let answer = service.call_with(path, &body, token).await;
            answer.assert_error(401, "unauthorized", what);
            assert_eq!(answer.header("www-authenticate"), Some("Bearer"), "{what}");
        }
    }
    stack.assert_executions(0, "nothing without the service token");
    let answer = service
        .perform(&turn, &approval_message("msg_token_1", &operation))
        .await;
    assert_outcome(&answer, "performed", "with the token");
    stack.assert_executions(1, "with the token");
    assert!(
        !stack.gateway.log().contains(CONVERSATIONS_TOKEN),
        "the service token never reaches the log"
    );
    service.assert_answers_are_described();
}

/// With `[session] verify = "required"` the service reads the Session as the proxy does: an
/// unsigned one is refused (`403 invalid_session`, nothing proposed or performed); a signed
/// one proposes, and the approval message with a newly signed JWT of the same Session performs.
async fn verified_sessions_are_verified_by_the_service(store: Store) {
    let jwks = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(jwks.path(), identity::jwks_of(&["es256-a"])).unwrap();
    let lines = format!(
        "verify = \"required\"\naudience = [\"https://shop.test\"]\n\n[[session.agent]]\nissuer = \"{AGENT}\"\njwks_file = \"{}\"\n",
        jwks.path().display()
    );
    let stack = Stack::start_with(store, |b| b.session(&lines).conversations());
    let service = Service::of(&stack.gateway);
    let turn = Turn::exchange(
        "conv_verified",
        &Session::signed_out("ses_v"),
        "o1",
        "i1",
        "s1",
    );
    let signed = |jti: &str| {
        let mut claims = identity::session_claims(AGENT, "ses_v", "https://shop.test");
        claims["jti"] = json!(jti);
        identity::sign("es256-a", "poppy-session+jwt", &claims)
    };
    let call = |path: &'static str, mut body: Value, session: String| {
        body["poppy_session"] = json!(session);
        let service = service.clone();
        async move {
            service
                .call_with(path, &body, Some(CONVERSATIONS_TOKEN))
                .await
        }
    };
    call("/v1/propose", turn.propose_body(), turn.session.header())
        .await
        .assert_error(403, "invalid_session", "an unsigned Session");
    let proposed = call("/v1/propose", turn.propose_body(), signed("a")).await;
    proposed.assert_status(200, "a signed Session");
    let operation =
        poppy_e2e::conversations::operation_of(&proposed.json()["operation"], &proposed);
    let message = approval_message("msg_verified_1", &operation);
    call(
        "/v1/perform",
        turn.perform_body(&message),
        turn.session.header(),
    )
    .await
    .assert_error(
        403,
        "invalid_session",
        "the approval with an unsigned Session",
    );
    stack.assert_executions(0, "unverified Sessions");
    let performed = call("/v1/perform", turn.perform_body(&message), signed("b")).await;
    assert_outcome(
        &performed,
        "performed",
        "a newly signed JWT of the same Session",
    );
    stack.assert_executions(1, "verified");
    service.assert_answers_are_described();
}

/// A member twice anywhere in a call (the approval, the message, the envelope) is refused
/// naming it, as on the HTTP path: serde would take the last `operation_id`, another reader
/// the first. Nothing is performed, and the same call sent once performs, once.
async fn a_member_twice_anywhere_in_a_call_is_refused(store: Store) {
    let (stack, service) = stack(store);
    let session = Session::signed_out("ses_conv_twice");
    let turn = Turn::exchange("conv_twice", &session, "o1", "i1", "s1");
    let operation = service.proposed(&turn).await;
    let message = approval_message("msg_twice_1", &operation);
    let id = format!(r#""operation_id":"{}""#, operation.operation_id);
    let twice = |find: &str, replace: &str| {
        let text = turn.perform_body(&message).to_string();
        assert!(text.contains(find), "{find} in {text}");
        text.replacen(find, replace, 1)
    };
    let cases = [
        (
            // Last-wins reads the approved operation: it would be performed.
            twice(&id, &format!(r#""operation_id":"exc_other",{id}"#)),
            "$.message.extensions.operations.approval.operation_id",
        ),
        (
            twice(r#""text":"#, r#""text":"approved","text":"#),
            "$.message.text",
        ),
        (
            twice(
                r#""conversation_id":"#,
                r#""conversation_id":"conv_a","conversation_id":"#,
            ),
            "$.conversation_id",
        ),
    ];
    for (body, field) in cases {
        let answer = service.call_text("/v1/perform", &body).await;
        let refused = answer.assert_error(400, "invalid_request", field);
        assert_eq!(refused["field"], field, "{refused}");
        assert!(
            refused["detail"]
                .as_str()
                .unwrap()
                .contains("appears twice"),
            "{refused}"
        );
    }
    let propose = turn.propose_body().to_string().replacen(
        r#""poppy_extensions":"#,
        r#""poppy_extensions":"x","poppy_extensions":"#,
        1,
    );
    service
        .call_text("/v1/propose", &propose)
        .await
        .assert_error(400, "invalid_request", "a propose with a member twice");
    stack.assert_executions(0, "no call with a member twice performs");

    let answer = service.perform(&turn, &message).await;
    assert_outcome(&answer, "performed", "the same message, each member once");
    stack.assert_executions(1, "performed once");
    service.assert_answers_are_described();
}

store_tests!(
    a_member_twice_anywhere_in_a_call_is_refused,
    verified_sessions_are_verified_by_the_service,
    propose_then_approval_message_performs_once,
    the_same_message_retried_gets_the_original_answer,
    a_new_message_with_the_same_approval_performs_nothing,
    approvals_from_another_conversation_or_session_perform_nothing,
    message_text_that_approves_without_the_extension_performs_nothing,
    concurrent_deliveries_of_the_approval_message_perform_once,
    an_unknown_outcome_is_never_a_failure_and_never_performed_again,
    the_service_token_is_required,
);

/// Replaced by a byte that is not UTF-8 before the call is sent.
const INVALID_UTF8_MARK: &str = "INVALID-UTF8-HERE";

/// Bad calls get a clear error (status, `error`, readable `detail`) and perform nothing;
/// descriptions the proxy would refuse are refused the same way. No store involved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_are_refused_clearly_and_perform_nothing() {
    let (stack, service) = stack(Store::Memory);
    let turn = Turn::exchange(
        "conv_bad",
        &Session::signed_out("ses_bad"),
        "o1",
        "i1",
        "s1",
    );
    let operation = service.proposed(&turn).await;
    let message = approval_message("msg_bad_1", &operation);
    let token = Some(CONVERSATIONS_TOKEN);
    let with = |change: &dyn Fn(&mut Value)| {
        let mut body = turn.perform_body(&message);
        change(&mut body);
        body
    };
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("not JSON", json!("{"), 400, "invalid_request"),
        (
            "an unknown member",
            with(&|b| b["bogus"] = json!(1)),
            400,
            "invalid_request",
        ),
        (
            "no message",
            with(&|b| drop(b.as_object_mut().unwrap().remove("message"))),
            400,
            "invalid_request",
        ),
        (
            "a conversation_id with a space",
            with(&|b| b["conversation_id"] = json!("conv 1")),
            400,
            "invalid_request",
        ),
        (
            "a message id with a slash",
            with(&|b| b["message"]["id"] = json!("m/1")),
            400,
            "invalid_request",
        ),
        (
            "a malformed approval",
            with(&|b| b["message"]["extensions"]["operations"]["approval"]["revision"] = json!(5)),
            400,
            "invalid_request",
        ),
        (
            "no declaration of the extension",
            with(&|b| b["poppy_extensions"] = json!("\"other\";v=\"1\"")),
            400,
            "extension_required",
        ),
        (
            "a Session that is no JWT",
            with(&|b| b["poppy_session"] = json!("nope")),
            403,
            "invalid_session",
        ),
        (
            "a duplicate key in the body",
            with(&|b| {
                b["request"]["body"] =
                    json!(r#"{"item_id":"i1","item_id":"i2","replacement_sku":"s1"}"#)
            }),
            400,
            "invalid_body",
        ),
        (
            "a field that is no term",
            with(&|b| {
                b["request"]["body"] =
                    json!(r#"{"item_id":"i1","replacement_sku":"s1","refund_to":"x"}"#)
            }),
            400,
            "unexpected_field",
        ),
        (
            "a method override",
            with(&|b| b["request"]["headers"] = json!([["X-HTTP-Method-Override", "DELETE"]])),
            400,
            "invalid_header",
        ),
        (
            "the credentials as a header",
            with(&|b| b["request"]["headers"] = json!([["Poppy-Session", "x.y.z"]])),
            400,
            "invalid_request",
        ),
        (
            "a dot segment",
            with(&|b| b["request"]["path"] = json!("/orders/./o1/exchanges")),
            400,
            "invalid_path",
        ),
        (
            "a raw # in a segment (the forwarder would cut the target there: another route)",
            with(&|b| b["request"]["path"] = json!("/orders/o1#x/exchanges")),
            400,
            "invalid_path",
        ),
        (
            "a fragment after the path (never sent by a client)",
            with(&|b| b["request"]["path"] = json!("/orders/o1/exchanges#x")),
            400,
            "invalid_path",
        ),
        (
            "raw < and > (no URI can carry them)",
            with(&|b| b["request"]["path"] = json!("/orders/o<1>/exchanges")),
            400,
            "invalid_path",
        ),
        (
            "a raw backtick",
            with(&|b| b["request"]["path"] = json!("/orders/o`1/exchanges")),
            400,
            "invalid_path",
        ),
        (
            "no policy names it",
            with(&|b| b["request"]["path"] = json!("/orders/o1")),
            404,
            "no_action",
        ),
        (
            "a missing term",
            with(&|b| b["request"]["body"] = json!(r#"{"item_id":"i1"}"#)),
            400,
            "missing_term",
        ),
        (
            "a compressed body (the API would read another one)",
            with(&|b| b["request"]["headers"] = json!([["Content-Encoding", "gzip"]])),
            415,
            "unsupported_content_encoding",
        ),
        (
            "an invalid UTF-8 byte in the message's text",
            with(&|b| b["message"]["text"] = json!(INVALID_UTF8_MARK)),
            400,
            "invalid_request",
        ),
    ];
    for (what, body, status, code) in cases {
        let raw = if body == json!("{") {
            Some(b"{".to_vec())
        } else {
            // The mark becomes a byte that is not UTF-8, inside a member nothing reads.
            let text = body.to_string();
            text.contains(INVALID_UTF8_MARK).then(|| {
                let (before, after) = text.split_once(INVALID_UTF8_MARK).unwrap();
                [before.as_bytes(), b"\xff", after.as_bytes()].concat()
            })
        };
        let answer = if let Some(raw) = raw {
            let request = Request::plain("POST", "/v1/perform")
                .body(raw, "application/json")
                .header("Authorization", &format!("Bearer {CONVERSATIONS_TOKEN}"));
            poppy_e2e::Client::new(&stack.gateway.conversations_url())
                .send(&request)
                .await
        } else {
            service.call_with("/v1/perform", &body, token).await
        };
        answer.assert_error(status, code, what);
    }
    // Not an operation of the description: sent without recording it.
    poppy_e2e::Client::new(&stack.gateway.conversations_url())
        .send(&Request::plain("GET", "/v1/perform"))
        .await
        .assert_error(405, "method_not_allowed", "GET /v1/perform");
    stack.assert_executions(0, "bad calls");
    let answer = service.perform(&turn, &message).await;
    assert_outcome(&answer, "performed", "the good call after the bad ones");
    service.assert_answers_are_described();
}

/// `check` names the service and where its token comes from, never the token, and refuses a
/// config whose token variable is not set, with its place in the file.
#[test]
fn check_names_the_service_and_never_its_token() {
    let config = poppy_e2e::GatewayBuilder::new("http://127.0.0.1:1")
        .conversations()
        .write();
    let path = config.config.to_str().unwrap();
    let check = |env: &[(&str, &str)]| {
        poppy_e2e::run_binary(
            &poppy_e2e::binaries::gateway(),
            &["check", "--config", path],
            "",
            env,
            Duration::from_secs(30),
        )
    };
    let run = check(&[("POPPY_E2E_SERVICE_TOKEN", CONVERSATIONS_TOKEN)]);
    run.assert_code(0, "check with the token set");
    assert!(
        run.stdout.contains("conversations service 127.0.0.1:")
            && run
                .stdout
                .contains("environment variable POPPY_E2E_SERVICE_TOKEN"),
        "{}",
        run.describe()
    );
    assert!(
        !run.output().contains(CONVERSATIONS_TOKEN),
        "{}",
        run.describe()
    );
    let run = check(&[]);
    run.assert_code(1, "check without the token");
    assert!(
        run.stderr.contains(&format!("{path}:"))
            && run.stderr.contains("POPPY_E2E_SERVICE_TOKEN` is not set"),
        "{}",
        run.describe()
    );
}
