//! Who may approve (check 1): a signed-out operation only in its Session; a signed-in one by
//! any Session of the same agent signed in to the same account.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::{Request, Session, Stack, Store, store_tests};

async fn account_operation_is_approved_by_another_session_of_the_account(store: Store) {
    let stack = Stack::start(store);
    let session_a = Session::signed_in("ses_a", "acct_1");
    let request = Request::exchange(&session_a, "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();

    // Signed out, same agent and user: a challenge for the account.
    let signed_out = request
        .clone()
        .session(&session_a.signed_out_twin())
        .approve(&op);
    let challenge = stack.gateway.send(&signed_out).await;
    challenge.assert_error(
        401,
        "sign_in_required",
        "a signed-out Session naming an account's operation",
    );
    assert!(
        challenge
            .header("www-authenticate")
            .is_some_and(|v| !v.trim().is_empty()),
        "the sign-in challenge goes in WWW-Authenticate:\n{}",
        challenge.describe()
    );
    stack.assert_executions(0, "a signed-out approval of an account's operation");

    // Another account: handled as if it had no approval.
    let other_account = request
        .clone()
        .session(&Session::signed_in("ses_c", "acct_2"))
        .approve(&op);
    let fresh = stack
        .gateway
        .send(&other_account)
        .await
        .operation_in("another account naming the operation");
    assert_ne!(fresh.operation_id, op.operation_id);
    assert_ne!(fresh.revision, op.revision);
    stack.assert_executions(0, "another account's approval");

    // Another agent signed in to the same account: not the same Personal Agent.
    let other_agent = request
        .clone()
        .session(&Session::signed_in("ses_d", "acct_1").with_agent("agent_2"))
        .approve(&op);
    let fresh = stack
        .gateway
        .send(&other_agent)
        .await
        .operation_in("another agent naming the operation");
    assert_ne!(fresh.revision, op.revision);
    stack.assert_executions(0, "another agent's approval");

    // Another Session of the same agent and account: performed, once.
    let session_b = Session::signed_in("ses_b", "acct_1");
    let approved = request.clone().session(&session_b).approve(&op);
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "the approving Session retrying the approval");
    // With `[session] verify = "off"` (the harness default) the gateway cannot tell that the
    // minting Session's unverified claims are the account's: the recorded answer goes only to
    // the credentials that approved it (the approving Session's delegated key). The minting
    // Session, same agent, user and account, is told it was performed (issue 23), never
    // offered a new operation to approve.
    let answer = stack.gateway.send(&request.approve(&op)).await;
    let body = answer.assert_error(
        409,
        "already_performed",
        "the minting Session, other credentials than the approving ones",
    );
    assert_eq!(body["operation_id"], op.operation_id.as_str());
    stack.assert_executions(1, "one account operation");
}

async fn account_operation_is_the_same_across_sessions(store: Store) {
    let stack = Stack::start(store);
    let a = stack
        .gateway
        .send(&Request::exchange(
            &Session::signed_in("ses_a", "acct_1"),
            "o1",
            "i1",
            "s1",
        ))
        .await
        .operation();
    let b = stack
        .gateway
        .send(&Request::exchange(
            &Session::signed_in("ses_b", "acct_1"),
            "o1",
            "i1",
            "s1",
        ))
        .await
        .operation();
    assert_eq!(
        a.operation_id, b.operation_id,
        "a signed-in operation belongs to the account, not the Session"
    );
    let signed_out = stack
        .gateway
        .send(&Request::exchange(
            &Session::signed_out("ses_a"),
            "o1",
            "i1",
            "s1",
        ))
        .await
        .operation();
    assert_ne!(
        signed_out.operation_id, a.operation_id,
        "signed out is another scope"
    );
    let other_account = stack
        .gateway
        .send(&Request::exchange(
            &Session::signed_in("ses_a", "acct_2"),
            "o1",
            "i1",
            "s1",
        ))
        .await
        .operation();
    assert_ne!(other_account.operation_id, a.operation_id);
    stack.assert_executions(0, "unapproved requests");
}

async fn session_operation_is_approved_only_in_its_session(store: Store) {
    let stack = Stack::start(store);
    let mine = Session::signed_out("ses_mine");
    let request = Request::exchange(&mine, "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    for (what, session) in [(
        "another signed-out Session",
        Session::signed_out("ses_other"),
    )] {
        let fresh = stack
            .gateway
            .send(&request.clone().session(&session).approve(&op))
            .await
            .operation_in(what);
        assert_ne!(fresh.revision, op.revision, "{what}");
        stack.assert_executions(0, what);
    }
    stack
        .gateway
        .send(&request.approve(&op))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
}

/// A Session is the agent's: another agent presenting the same `sid` is another Session,
/// so it neither shares the operation nor may approve it.
async fn session_ids_belong_to_their_agent(store: Store) {
    let stack = Stack::start(store);
    let mine = Session::signed_out("ses_shared_sid");
    let theirs = Session::signed_out("ses_shared_sid").with_agent("agent_2");
    let request = Request::exchange(&mine, "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let their_op = stack
        .gateway
        .send(&request.clone().session(&theirs))
        .await
        .operation();
    assert_ne!(
        their_op.operation_id, op.operation_id,
        "another agent's Session with the same sid must get its own operation"
    );
    let answer = stack
        .gateway
        .send(&request.clone().session(&theirs).approve(&op))
        .await;
    let fresh = answer.operation_in("another agent's Session (same sid) approving the operation");
    assert_ne!(fresh.revision, op.revision);
    stack.assert_executions(0, "another agent's approval");
}

store_tests!(
    account_operation_is_approved_by_another_session_of_the_account,
    account_operation_is_the_same_across_sessions,
    session_operation_is_approved_only_in_its_session,
    session_ids_belong_to_their_agent,
);
