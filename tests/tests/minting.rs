//! The 403 `approval_required` answer: the operation, its terms and summary, and which
//! requests get the same `operation_id`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::markdown::{assert_safe_summary, unescape};
use poppy_e2e::policies::exchange_summary;
use poppy_e2e::wait::unix_now;
use poppy_e2e::{Request, Session, Stack, Store, store_tests};
use serde_json::json;

async fn approval_required_carries_the_operation(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_mint");
    let before = unix_now();
    let answer = stack
        .gateway
        .send(&Request::exchange(
            &session,
            "ord7Hk2",
            "itm4Qa",
            "stormlineM",
        ))
        .await;
    let operation = answer.operation();
    operation.assert_prefix("exc");
    assert_eq!(
        operation.summary,
        exchange_summary("ord7Hk2", "itm4Qa", "stormlineM"),
        "the summary is the policy's, with the terms filled in"
    );
    assert_eq!(
        operation.terms,
        json!({"order_id": "ord7Hk2", "item_id": "itm4Qa", "replacement_sku": "stormlineM"}),
        "terms are the values the policy extracted"
    );
    let expected_expiry = before + 15.0 * 60.0;
    assert!(
        (operation.expires_at_unix - expected_expiry).abs() < 60.0,
        "expires_at {} should be about 15 minutes from now",
        operation.expires_at
    );

    // Values with Markdown punctuation read the same once escapes are removed.
    let operation = stack
        .gateway
        .send(&Request::exchange(
            &session,
            "ord_7Hk2",
            "itm_4Qa",
            "stormline-insulated-m",
        ))
        .await
        .operation();
    assert_eq!(
        unescape(&operation.summary),
        exchange_summary("ord_7Hk2", "itm_4Qa", "stormline-insulated-m")
    );
    assert_eq!(
        operation.terms["item_id"], "itm_4Qa",
        "terms hold the raw values"
    );
    stack.assert_executions(0, "approval_required performs nothing");
}

async fn same_request_gets_the_same_operation(store: Store) {
    let stack = Stack::start(store);
    let request = Request::exchange(&Session::signed_out("ses_same"), "o1", "i1", "s1");
    let first = stack.gateway.send(&request).await.operation();
    for attempt in 2..=3 {
        let again = stack.gateway.send(&request).await.operation();
        assert_eq!(
            again.operation_id, first.operation_id,
            "attempt {attempt}: the same request is the same action"
        );
        assert_eq!(again.terms, first.terms);
    }
    stack.assert_executions(0, "unapproved requests");
}

async fn new_terms_keep_the_operation_with_a_new_revision(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_terms");
    let a = stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i1", "sku-a"))
        .await
        .operation();
    let b = stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i1", "sku-b"))
        .await
        .operation();
    assert_eq!(
        a.operation_id, b.operation_id,
        "another replacement for the same item is the same action"
    );
    assert_ne!(
        a.revision, b.revision,
        "other terms must never share a revision"
    );
    assert_ne!(a.summary, b.summary);
    assert_eq!(b.terms["replacement_sku"], "sku-b");
    stack.assert_executions(0, "unapproved requests");
}

async fn another_action_gets_another_operation(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_other");
    let base = stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i1", "s1"))
        .await
        .operation();
    let other_item = stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i2", "s1"))
        .await
        .operation();
    let other_order = stack
        .gateway
        .send(&Request::exchange(&session, "o2", "i1", "s1"))
        .await
        .operation();
    let cancel = stack
        .gateway
        .send(&Request::cancel(&session, "o1"))
        .await
        .operation();
    cancel.assert_prefix("can");
    let ids = [
        &base.operation_id,
        &other_item.operation_id,
        &other_order.operation_id,
        &cancel.operation_id,
    ];
    for (i, a) in ids.iter().enumerate() {
        for b in &ids[i + 1..] {
            assert_ne!(a, b, "different actions must have different operation_ids");
        }
    }
    stack.assert_executions(0, "unapproved requests");
}

async fn another_session_gets_another_operation(store: Store) {
    let stack = Stack::start(store);
    let mine = stack
        .gateway
        .send(&Request::exchange(
            &Session::signed_out("ses_a"),
            "o1",
            "i1",
            "s1",
        ))
        .await
        .operation();
    let theirs = stack
        .gateway
        .send(&Request::exchange(
            &Session::signed_out("ses_b"),
            "o1",
            "i1",
            "s1",
        ))
        .await
        .operation();
    assert_ne!(
        mine.operation_id, theirs.operation_id,
        "a signed-out operation belongs to its Session"
    );
    stack.assert_executions(0, "unapproved requests");
}

/// Request data must not turn the summary into a link, an image, HTML, or reordered text.
async fn summary_values_cannot_make_links_html_or_bidi_tricks(store: Store) {
    let stack = Stack::start(store);
    let item = "x](http://evil.example/steal)";
    let sku = "![p](http://evil.example/p.png)<img src=x onerror=alert(1)>\u{202E}gnp.exe\u{2067}\u{7}\n- [ok](http://evil.example)\r\n<script>";
    let operation = stack
        .gateway
        .send(&Request::exchange(
            &Session::signed_out("ses_md"),
            "o1",
            item,
            sku,
        ))
        .await
        .operation();
    assert_safe_summary(&operation.summary);
    assert!(
        operation.summary.starts_with("Exchange item **"),
        "the policy's own Markdown stays: {:?}",
        operation.summary
    );
    assert!(
        unescape(&operation.summary).contains("x](http://evil.example/steal)"),
        "the value is shown as text, escaped, not dropped: {:?}",
        operation.summary
    );
    assert_eq!(operation.terms["item_id"], item, "terms hold the raw value");
    stack.assert_executions(0, "unapproved requests");
}

/// Terms from the query, a header and a fixed value, and approval of such an operation.
async fn terms_from_query_header_and_fixed_value(store: Store) {
    const POLICY: &str = r#"
[[operation]]
name = "rebook"
method = "POST"
path = "/bookings/{booking_id}/rebook"
id_prefix = "rbk"
expires_in = "10m"
same_action = ["booking_id"]
summary = "Move booking {booking_id} to {date}, seat {seat}, for a fee of {fee}."

[operation.terms]
booking_id = { path = "booking_id" }
date = { query = "date" }
seat = { header = "X-Seat" }
fee = { value = "25.00 USD" }
"#;
    let stack = Stack::start_with(store, |b| b.policy("rebook.toml", POLICY));
    let session = Session::signed_out("ses_rebook");
    let request = |date: &str| {
        Request::agent(
            "POST",
            &format!("/bookings/b1/rebook?date={date}"),
            &session,
        )
        .header("X-Seat", "12A")
    };
    let operation = stack.gateway.send(&request("20261008")).await.operation();
    operation.assert_prefix("rbk");
    assert_eq!(
        operation.terms,
        json!({"booking_id": "b1", "date": "20261008", "seat": "12A", "fee": "25.00 USD"})
    );
    assert_eq!(
        unescape(&operation.summary),
        "Move booking b1 to 20261008, seat 12A, for a fee of 25.00 USD."
    );
    let other_date = stack.gateway.send(&request("20261009")).await.operation();
    assert_eq!(other_date.operation_id, operation.operation_id);
    assert_ne!(other_date.revision, operation.revision);

    let body = stack
        .gateway
        .send(&request("20261008").without_header("X-Seat"))
        .await
        .assert_error(400, "missing_term", "a request without the X-Seat header");
    assert_eq!(body["term"], "seat", "missing_term names the term: {body}");
    stack.assert_executions(0, "unapproved requests");

    stack
        .gateway
        .send(&request("20261008").approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", "/bookings/b1/rebook");
    assert_eq!(
        stack.upstream.requests()[0].path_and_query,
        "/bookings/b1/rebook?date=20261008"
    );
}

store_tests!(
    approval_required_carries_the_operation,
    same_request_gets_the_same_operation,
    new_terms_keep_the_operation_with_a_new_revision,
    another_action_gets_another_operation,
    another_session_gets_another_operation,
    summary_values_cannot_make_links_html_or_bidi_tricks,
    terms_from_query_header_and_fixed_value,
);
