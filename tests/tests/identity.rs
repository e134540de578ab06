//! Who approved: with `[session] verify = "off"` the gateway reads unverified claims, so a
//! recorded answer is replayed only to the credentials (or delegated key) that approved it
//! (issues 15 and 23); the approver's claims with other credentials are told it was
//! performed (`409 already_performed`), never given its answer or a new operation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use poppy_e2e::agent::unsigned_jwt;
use poppy_e2e::{Request, Session, Stack, Store, store_tests};
use serde_json::json;

/// The victim's claims (`sid`, `iss`, `sub`) in a JWT that is not the victim's: what anyone
/// can write without the agent's key.
fn forged_session(session: &Session) -> String {
    unsigned_jwt(
        &json!({"alg": "none", "typ": "poppy-session+jwt"}),
        &json!({"sid": session.sid, "iss": session.agent, "sub": session.user, "forged": true}),
    )
}

/// A forged Session with a victim's claims, operation_id and revision gets no replay of the
/// victim's answer (`409 already_performed`), nothing is performed or recorded for it, and
/// the victim still gets the replay.
async fn a_forged_replay_attempt_gets_nothing(store: Store) {
    let stack = Stack::start(store);
    let victim = Session::signed_out("ses_victim");
    let request = Request::exchange(&victim, "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.clone().approve(&op);
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");

    let forged = approved
        .clone()
        .header("Poppy-Session", &forged_session(&victim));
    for attempt in 1..=2 {
        let answer = stack.gateway.send(&forged).await;
        let body = answer.assert_error(
            409,
            "already_performed",
            &format!("forged credentials, attempt {attempt}"),
        );
        assert_eq!(body["operation_id"], op.operation_id.as_str());
        assert_ne!(
            answer.body, first.body,
            "the victim's recorded answer is never given to other credentials"
        );
    }
    stack.assert_executions(1, "forged replay attempts");

    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "the approving credentials, after the forgeries");
    stack.assert_executions(1, "one approval");
}

/// Signed in, the bearer token is part of the credentials: another token with the same claims
/// gets no replay.
async fn a_forged_bearer_token_gets_no_replay(store: Store) {
    let stack = Stack::start(store);
    let victim = Session::signed_in("ses_victim", "acct_1");
    let request = Request::exchange(&victim, "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.clone().approve(&op);
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");

    let token = unsigned_jwt(
        &json!({"alg": "none", "typ": "at+jwt"}),
        &json!({"sub": "acct_1", "client_id": victim.agent, "forged": true}),
    );
    let forged = approved
        .clone()
        .header("Authorization", &format!("Bearer {token}"));
    let answer = stack.gateway.send(&forged).await;
    answer.assert_error(
        409,
        "already_performed",
        "a forged token with the account's claims",
    );
    assert_ne!(answer.body, first.body);
    stack.assert_executions(1, "a forged token");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "the approving credentials");
}

/// A forged Session approving a victim's *pending* operation (minted, not yet approved):
/// in off mode it is the upstream's to refuse; the victim's own approval, afterwards, is not
/// answered with the forger's recorded answer (`409 already_performed`, no new operation).
async fn a_forger_s_answer_is_not_replayed_to_the_victim(store: Store) {
    let stack = Stack::start(store);
    let victim = Session::signed_out("ses_victim");
    let request = Request::exchange(&victim, "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let forged = request
        .clone()
        .approve(&op)
        .header("Poppy-Session", &forged_session(&victim));
    let forged_answer = stack.gateway.send(&forged).await;
    // The upstream would verify and refuse; the counting upstream performs it.
    forged_answer.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");

    let victim_answer = stack.gateway.send(&request.clone().approve(&op)).await;
    victim_answer.assert_error(
        409,
        "already_performed",
        "the victim after a forger used its operation",
    );
    assert_ne!(victim_answer.body, forged_answer.body);
    stack.assert_executions(1, "the victim was not given the forger's answer");
}

store_tests!(
    a_forged_replay_attempt_gets_nothing,
    a_forged_bearer_token_gets_no_replay,
    a_forger_s_answer_is_not_replayed_to_the_victim,
);
