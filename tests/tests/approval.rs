//! Sending the approval: the approved request is forwarded once and its answer replayed; an
//! approval that fails a check performs nothing and gets a fresh revision.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::wait::{unix_now, until_clock_passes};
use poppy_e2e::{Operation, Request, Session, Stack, Store, approval_header, store_tests, tamper};
use serde_json::json;

async fn approved_request_is_performed_once_then_replayed(store: Store) {
    let stack = Stack::start(store);
    let request = Request::exchange(&Session::signed_out("ses_ok"), "o1", "i1", "s1")
        .header("Idempotency-Key", "first-key");
    let operation = stack.gateway.send(&request).await.operation();
    stack.assert_executions(0, "before the approval");

    let approved = request.clone().approve(&operation);
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    stack.assert_executions(1, "the approved request");
    let recorded = &stack.upstream.requests()[0];
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.path_and_query, "/orders/o1/exchanges");
    assert_eq!(
        recorded.body, request.body,
        "the upstream gets the approved body, byte for byte"
    );
    assert!(
        recorded.header("poppy-approval").is_none(),
        "Poppy-Approval is not forwarded"
    );

    for attempt in 1..=3 {
        let retry = stack.gateway.send(&approved).await;
        retry.assert_replay_of(&first, &format!("retry {attempt}"));
    }
    let other_key = approved.clone().header("Idempotency-Key", "second-key");
    stack
        .gateway
        .send(&other_key)
        .await
        .assert_replay_of(&first, "a retry with another Idempotency-Key");
    stack.assert_executions(1, "retries of one approval");
}

async fn unknown_approval_members_are_ignored(store: Store) {
    let stack = Stack::start(store);
    let request = Request::exchange(&Session::signed_out("ses_members"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let first = stack
        .gateway
        .send(&request.clone().approval(&format!(
            "operation_id=\"{}\", revision=\"{}\", foo=1, bar=?0, baz=(\"a\" \"b\");p=1",
            op.operation_id, op.revision
        )))
        .await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    stack
        .gateway
        .send(&request.approval(&format!(
            "future=\"x\", revision=\"{}\", operation_id=\"{}\"",
            op.revision, op.operation_id
        )))
        .await
        .assert_replay_of(&first, "members in another order");
    stack.assert_executions(1, "one approval");
}

/// An empty `Poppy-Approval` field line adds nothing, wherever it is among the lines (HTTP's
/// rule for empty list members): first, between, or last, the approval is the same.
async fn empty_approval_lines_are_ignored_anywhere(store: Store) {
    let stack = Stack::start(store);
    let request = Request::exchange(&Session::signed_out("ses_lines"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let members = [
        format!("operation_id=\"{}\"", op.operation_id),
        format!("revision=\"{}\"", op.revision),
    ];
    let mut first = None;
    for empty_at in 0..=members.len() {
        let mut lines: Vec<&str> = members.iter().map(String::as_str).collect();
        lines.insert(empty_at, "");
        let approved = lines.iter().fold(request.clone(), |r, line| {
            r.header_line("Poppy-Approval", line)
        });
        let answer = stack.gateway.send(&approved).await;
        match &first {
            None => {
                answer.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
                first = Some(answer);
            }
            Some(first) => {
                answer.assert_replay_of(first, &format!("an empty line at {empty_at}"));
            }
        }
    }
    stack.assert_executions(1, "one approval, however its lines are split");
}

/// Once performed, a new request for the same action is a new operation.
async fn new_request_after_performing_is_a_new_operation(store: Store) {
    let stack = Stack::start(store);
    let request = Request::exchange(&Session::signed_out("ses_gen"), "o1", "i1", "s1");
    let first_op = stack.gateway.send(&request).await.operation();
    let first = stack
        .gateway
        .send(&request.clone().approve(&first_op))
        .await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");

    let second_op = stack.gateway.send(&request).await.operation();
    assert_ne!(
        second_op.operation_id, first_op.operation_id,
        "after the operation was performed, the same action is a new operation"
    );
    assert_ne!(second_op.revision, first_op.revision);
    let second = stack
        .gateway
        .send(&request.clone().approve(&second_op))
        .await;
    second.assert_upstream_answer(2, "POST", "/orders/o1/exchanges");

    stack
        .gateway
        .send(&request.clone().approve(&first_op))
        .await
        .assert_replay_of(&first, "the first approval");
    stack
        .gateway
        .send(&request.approve(&second_op))
        .await
        .assert_replay_of(&second, "the second approval");
    stack.assert_executions(2, "two operations, one execution each");
}

/// Assert `answer` is a fresh operation, not the approval's revision.
fn assert_fresh(answer: &poppy_e2e::Answer, named: &Operation, what: &str) -> Operation {
    let fresh = answer.operation_in(what);
    assert_ne!(
        fresh.revision, named.revision,
        "{what}: the gateway must never answer an approval with the revision it names"
    );
    fresh
}

async fn failed_checks_perform_nothing(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_checks");
    let request = Request::exchange(&session, "o1", "i1", "sku-a");
    let op = stack.gateway.send(&request).await.operation();
    let other_terms = Request::exchange(&session, "o1", "i1", "sku-b");
    let other_terms_op = stack.gateway.send(&other_terms).await.operation();
    assert_eq!(other_terms_op.operation_id, op.operation_id);
    let other_item_op = stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i2", "sku-a"))
        .await
        .operation();

    let mut truncated = op.revision.clone();
    truncated.truncate(op.revision.len() / 2);
    let cases: Vec<(&str, Request, Operation)> = vec![
        (
            "a tampered revision",
            request.clone(),
            op.with_revision(&tamper(&op.revision)),
        ),
        (
            "a truncated revision",
            request.clone(),
            op.with_revision(&truncated),
        ),
        (
            "the revision of sku-a sent with a request for sku-b",
            other_terms.clone(),
            op.clone(),
        ),
        (
            "the revision of sku-b sent with a request for sku-a",
            request.clone(),
            other_terms_op.clone(),
        ),
        (
            "the approval of another item's operation",
            request.clone(),
            other_item_op.clone(),
        ),
        (
            "an exchange approval sent to the cancel route",
            Request::cancel(&session, "o1"),
            op.clone(),
        ),
        (
            "an approval from another signed-out Session",
            request
                .clone()
                .session(&Session::signed_out("ses_intruder")),
            op.clone(),
        ),
        (
            "the approved body with an extra member",
            request.clone().json(&json!({
                "item_id": "i1", "replacement_sku": "sku-a", "note": "gift"
            })),
            op.clone(),
        ),
        (
            "the approved request with another query string",
            Request {
                path: "/orders/o1/exchanges?express=1".to_owned(),
                ..request.clone()
            },
            op.clone(),
        ),
        (
            "the approved request to another order",
            Request::exchange(&session, "o2", "i1", "sku-a"),
            op.clone(),
        ),
    ];
    for (what, request, named) in cases {
        let answer = stack.gateway.send(&request.approve(&named)).await;
        assert_fresh(&answer, &named, what);
        stack.assert_executions(0, what);
    }

    // Failed checks consume nothing: the right approval still works, once.
    let first = stack.gateway.send(&request.clone().approve(&op)).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    assert_eq!(
        stack.upstream.requests()[0].body_json()["replacement_sku"],
        "sku-a"
    );
    stack
        .gateway
        .send(&other_terms.approve(&other_terms_op))
        .await
        .assert_replay_of(&first, "the other revision of the performed operation");
    stack.assert_executions(1, "one operation");
}

async fn expired_revision_is_refused(store: Store) {
    let stack = Stack::start(store);
    let request = Request::refund(&Session::signed_out("ses_exp"), "o1", "10.00");
    let before = unix_now();
    let op = stack.gateway.send(&request).await.operation();
    op.assert_prefix("ref");
    assert!(
        (op.expires_at_unix - (before + 2.0)).abs() < 5.0,
        "expires_in = \"2s\": expires_at {} should be about 2 s from now",
        op.expires_at
    );
    // Past expires_at (it may be rounded to the second).
    until_clock_passes(op.expires_at_unix + 1.1, Duration::from_secs(8)).await;

    let answer = stack.gateway.send(&request.clone().approve(&op)).await;
    let fresh = assert_fresh(&answer, &op, "an expired revision");
    assert!(
        fresh.expires_at_unix > op.expires_at_unix,
        "the fresh revision expires later ({} vs {})",
        fresh.expires_at,
        op.expires_at
    );
    stack.assert_executions(0, "an expired approval");

    stack
        .gateway
        .send(&request.approve(&fresh))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/refunds");
}

/// After the operation was performed, no approval naming it runs it again, whatever its
/// revision or body: each gets the recorded answer or a fresh operation.
async fn performed_operation_never_runs_again(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_once");
    let request = Request::exchange(&session, "o1", "i1", "sku-a");
    let op = stack.gateway.send(&request).await.operation();
    let other_terms = Request::exchange(&session, "o1", "i1", "sku-b");
    let other_terms_op = stack.gateway.send(&other_terms).await.operation();
    let first = stack.gateway.send(&request.clone().approve(&op)).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");

    let attempts = vec![
        (
            "a tampered revision",
            request
                .clone()
                .approve(&op.with_revision(&tamper(&op.revision))),
        ),
        (
            "the approval with other terms",
            other_terms.clone().approve(&op),
        ),
        (
            "the other revision",
            other_terms.clone().approve(&other_terms_op),
        ),
        (
            "an empty-ish revision",
            request
                .clone()
                .approval(&approval_header(&op.operation_id, "x")),
        ),
    ];
    for (what, attempt) in attempts {
        let answer = stack.gateway.send(&attempt).await;
        if answer.is_approval_required() {
            answer.operation_in(what);
        } else {
            answer.assert_replay_of(&first, what);
        }
        stack.assert_executions(1, what);
    }
}

/// The body is compared as JSON: the same terms serialised differently are the same request.
/// The revision covers the bytes that are forwarded: the same JSON re-serialized (another key
/// order, other spacing) is another request, approved separately; the operation stays the same.
async fn reserialized_json_body_is_another_request(store: Store) {
    let stack = Stack::start(store);
    let request = Request::exchange(&Session::signed_out("ses_json"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let reserialized = request.clone().body(
        b"{ \"replacement_sku\" : \"s1\",\n  \"item_id\": \"i1\" }".to_vec(),
        "application/json",
    );
    let again = stack
        .gateway
        .send(&reserialized.clone().approve(&op))
        .await
        .operation();
    assert_eq!(again.operation_id, op.operation_id, "the same action");
    assert_ne!(again.revision, op.revision, "other bytes, another revision");
    stack.assert_executions(0, "a re-serialized body was never approved");
    stack
        .gateway
        .send(&reserialized.approve(&again))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
}

/// A header that is not a term still binds the approval (`X-Tenant: a` at the request that
/// returned the operation, `b` at the approval): the changed request gets a new revision and
/// nothing is performed; the approval with the same header is performed once, with it.
/// A new trace or idempotency key changes nothing.
async fn headers_that_change_get_a_new_revision(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_tenant");
    let request = Request::exchange(&session, "o1", "i1", "s1")
        .header("X-Tenant", "a")
        .header("Idempotency-Key", "k1");
    let op = stack.gateway.send(&request).await.operation();
    let other_tenant = request.clone().header("X-Tenant", "b").approve(&op);
    let fresh = stack
        .gateway
        .send(&other_tenant)
        .await
        .operation_in("the approval with another X-Tenant");
    assert_eq!(fresh.operation_id, op.operation_id, "the same action");
    assert_ne!(fresh.revision, op.revision, "other terms: a new revision");
    stack.assert_executions(0, "an approval of another tenant's request");

    let approved = request
        .clone()
        .header("Idempotency-Key", "k2")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .approve(&op);
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    assert_eq!(stack.upstream.requests()[0].header("x-tenant"), Some("a"));
}

store_tests!(
    headers_that_change_get_a_new_revision,
    approved_request_is_performed_once_then_replayed,
    unknown_approval_members_are_ignored,
    empty_approval_lines_are_ignored_anywhere,
    new_request_after_performing_is_a_new_operation,
    failed_checks_perform_nothing,
    expired_revision_is_refused,
    performed_operation_never_runs_again,
    reserialized_json_body_is_another_request,
);
