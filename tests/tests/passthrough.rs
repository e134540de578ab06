//! What is not a Personal Agent request to a policy route passes through untouched, and
//! `Poppy-Approval` never reaches the upstream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::upstream::RecordedRequest;
use poppy_e2e::{Request, Session, Stack, Store, store_tests};
use serde_json::json;

fn assert_no_approval_header(recorded: &RecordedRequest) {
    assert!(
        recorded.header("poppy-approval").is_none(),
        "Poppy-Approval reached the upstream on {} {}: {:?}",
        recorded.method,
        recorded.path_and_query,
        recorded.headers
    );
}

/// The company's own web app (no Poppy-Session) calls a route a policy names: proxied as is.
async fn request_without_session_to_policy_route_is_proxied_unchanged(store: Store) {
    let stack = Stack::start(store);
    let body = json!({"item_id": "i1", "replacement_sku": "s1"});
    let answer = stack
        .gateway
        .send(
            &Request::plain("POST", "/orders/o1/exchanges?source=web")
                .header("X-Custom", "kept")
                .json(&body),
        )
        .await;
    answer.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    stack.assert_executions(1, "a request without Poppy-Session");
    let recorded = &stack.upstream.requests()[0];
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.path_and_query, "/orders/o1/exchanges?source=web");
    assert_eq!(recorded.header("x-custom"), Some("kept"));
    assert_eq!(
        recorded.body_json(),
        body,
        "the body reaches the upstream unchanged"
    );
}

/// Personal Agent requests to routes (or methods) no policy names: proxied as is.
async fn agent_request_to_unnamed_route_is_proxied(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_pass");
    let get = stack
        .gateway
        .send(&Request::agent("GET", "/orders/o1?expand=items", &session))
        .await;
    get.assert_upstream_answer(1, "GET", "/orders/o1");
    let note = stack
        .gateway
        .send(&Request::agent("POST", "/orders/o1/notes", &session).json(&json!({"text": "hello"})))
        .await;
    note.assert_upstream_answer(2, "POST", "/orders/o1/notes");
    let put = stack
        .gateway
        .send(
            &Request::agent("PUT", "/orders/o1/exchanges", &session)
                .json(&json!({"item_id": "i1", "replacement_sku": "s1"})),
        )
        .await;
    put.assert_upstream_answer(3, "PUT", "/orders/o1/exchanges");
    let deeper = stack
        .gateway
        .send(&Request::agent("POST", "/orders/o1/exchanges/e1", &session).json(&json!({})))
        .await;
    deeper.assert_upstream_answer(4, "POST", "/orders/o1/exchanges/e1");
    stack.assert_executions(4, "requests to routes no policy names");
    let recorded = stack.upstream.requests();
    assert_eq!(recorded[0].path_and_query, "/orders/o1?expand=items");
    // The upstream keeps its own Session checks, so Poppy-Session is forwarded (the JWT the
    // agent signed for this request).
    poppy_e2e::signer::assert_session_of(
        &session,
        recorded[0]
            .header("poppy-session")
            .expect("Poppy-Session is forwarded"),
        "GET",
        "/orders/o1?expand=items",
    );
    assert_eq!(recorded[1].body_json(), json!({"text": "hello"}));
}

/// The upstream's status codes, headers and bodies come back as they are.
async fn upstream_errors_pass_through(store: Store) {
    let stack = Stack::start(store);
    for (status, session) in [
        (404, None),
        (500, None),
        (404, Some(Session::signed_out("s"))),
    ] {
        let request = match &session {
            Some(session) => Request::agent("GET", &format!("/status/{status}"), session),
            None => Request::plain("GET", &format!("/status/{status}")),
        };
        let answer = stack.gateway.send(&request).await;
        answer.assert_status(status, "an upstream error status");
        assert_eq!(answer.header("x-upstream"), Some("counting"));
        assert_eq!(answer.json()["path"], format!("/status/{status}"));
    }
    stack.assert_executions(3, "three passthrough requests");
}

/// Poppy-Approval is stripped on every path: passthrough with and without a Session, and
/// the approved execution itself.
async fn poppy_approval_is_never_forwarded(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_strip");
    let approval = "operation_id=\"exc_x\", revision=\"1-abc\"";
    stack
        .gateway
        .send(
            &Request::plain("POST", "/orders/o1/exchanges")
                .json(&json!({"item_id": "i1", "replacement_sku": "s1"}))
                .approval(approval),
        )
        .await
        .assert_status(201, "no Session: passthrough even with an approval");
    stack
        .gateway
        .send(&Request::agent("GET", "/orders/o1", &session).approval(approval))
        .await
        .assert_status(200, "unnamed route: passthrough");
    stack
        .gateway
        .send(&Request::plain("GET", "/orders/o2").approval(approval))
        .await
        .assert_status(200, "plain GET: passthrough");

    let request = Request::exchange(&session, "o1", "i1", "s1");
    let operation = stack.gateway.send(&request).await.operation();
    stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await
        .assert_status(201, "the approved request");

    stack.assert_executions(4, "three passthroughs and one approved execution");
    for recorded in stack.upstream.requests() {
        assert_no_approval_header(&recorded);
    }
}

/// A large upload of the company's own app is not bound by the agent body limit.
async fn large_passthrough_bodies_arrive_whole(store: Store) {
    let stack = Stack::start(store);
    let body: Vec<u8> = (0..2 * 1024 * 1024 + 17).map(|i| (i % 253) as u8).collect();
    stack
        .gateway
        .send(
            &Request::plain("POST", "/orders/o1/exchanges")
                .body(body.clone(), "application/octet-stream"),
        )
        .await
        .assert_status(201, "a 2 MiB passthrough upload");
    stack
        .gateway
        .send(
            &Request::agent("PUT", "/uploads/u1", &Session::signed_out("s"))
                .body(body.clone(), "application/octet-stream"),
        )
        .await
        .assert_status(200, "a 2 MiB upload to a route no policy names");
    let recorded = stack.upstream.requests();
    assert_eq!(recorded.len(), 2);
    for r in recorded {
        assert_eq!(
            r.body.len(),
            body.len(),
            "{} {}: body length",
            r.method,
            r.path
        );
        assert!(
            r.body == body,
            "{} {}: body bytes changed",
            r.method,
            r.path
        );
    }
}

/// Only an approved forward carries the operation ID header (`poppy-operation-id` unless
/// configured): a client's copy never reaches the upstream, passthrough or approved.
async fn the_operation_id_header_is_the_gateways_alone(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_opid");
    let forged = "exc_sForgedForgedForgedFor";
    stack
        .gateway
        .send(&Request::plain("GET", "/orders/o2").header("Poppy-Operation-Id", forged))
        .await
        .assert_status(200, "plain GET: passthrough");
    stack
        .gateway
        .send(&Request::agent("GET", "/orders/o1", &session).header("Poppy-Operation-Id", forged))
        .await
        .assert_status(200, "unnamed route: passthrough");
    let request =
        Request::exchange(&session, "o1", "i1", "s1").header("Poppy-Operation-Id", forged);
    let operation = stack.gateway.send(&request).await.operation();
    stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await
        .assert_status(201, "the approved request");
    let requests = stack.upstream.requests();
    assert_eq!(requests.len(), 3);
    for passthrough in &requests[..2] {
        assert_eq!(
            passthrough.header("poppy-operation-id"),
            None,
            "{passthrough:?}"
        );
    }
    assert_eq!(
        requests[2].header("poppy-operation-id"),
        Some(operation.operation_id.as_str()),
        "the approved forward carries its own operation ID, once"
    );
}

store_tests!(
    the_operation_id_header_is_the_gateways_alone,
    request_without_session_to_policy_route_is_proxied_unchanged,
    agent_request_to_unnamed_route_is_proxied,
    upstream_errors_pass_through,
    poppy_approval_is_never_forwarded,
    large_passthrough_bodies_arrive_whole,
);
