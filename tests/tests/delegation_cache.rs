//! Issue 41: the gateway verifies a delegation's signature once per key set and remembers it
//! by its exact bytes, as a real agent sends them (one delegation per delegated key, a new
//! Session JWT per request). What must not change with the cache: a delegated key's Sessions
//! are accepted across many requests; a long-term key the agent withdraws stops vouching as
//! soon as the gateway reads the agent's keys again; a delegation that expires while
//! remembered is refused. Each refusal is `403 invalid_session` and nothing is forwarded.
//! (That a remembered delegation is not verified again is shown by the unit tests of
//! `identity::delegations`, which count verifications.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::signer::part;
use poppy_e2e::{Request, Session, Stack, Store, TestAgent, store_tests, wait};

const PATH: &str = "/orders/o1/exchanges";

fn exchange(session: &Session) -> Request {
    Request::exchange(session, "o1", "i1", "s1")
}

/// The delegation (`poppy_dlg`) a Session's JWTs carry now.
fn delegation_of(session: &Session) -> String {
    let jwt = session.signed_header("POST", PATH);
    let header = part(&jwt, 0).expect("a JWT");
    header["poppy_dlg"]
        .as_str()
        .expect("a delegation")
        .to_owned()
}

/// Assert `answer` refuses the Session: `403 invalid_session` whose `detail` says `why`.
fn assert_invalid_session(answer: &poppy_e2e::answer::Answer, why: &str, what: &str) {
    let body = answer.assert_error(403, "invalid_session", what);
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(why),
        "{what}: the detail should say {why:?}:\n{}",
        answer.describe()
    );
}

/// One delegation, signed once, vouches for every Session JWT of its key: twenty requests
/// (each with a new JWT) are held, then one is approved, executed once and replayed.
async fn a_delegation_serves_many_sessions(store: Store) {
    let agent = TestAgent::start();
    let stack = Stack::start_with(store, |b| agent.configure(b));
    let session = agent.signed_out("ses_many").with_delegation_signed_once();
    let delegation = delegation_of(&session);
    assert_eq!(
        delegation,
        delegation_of(&session),
        "the same bytes each time"
    );
    let request = exchange(&session);
    let mut operation = None;
    for n in 0..20 {
        let held = stack.gateway.send(&request).await;
        operation = Some(held.operation_in(&format!("request {n}")));
    }
    let approved = request.approve(&operation.unwrap());
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", PATH);
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "the approved request again");
    stack.assert_executions(1, "one approved execution");
    assert_eq!(agent.jwks_fetches(), 1, "the agent's keys read once");
}

/// The agent withdraws the long-term key that signed a delegation the gateway has verified
/// (and remembers), and publishes another. When a Session of the new key makes the gateway
/// read the keys again (an unknown `kid`; at most every 2 s), the old delegation vouches for
/// nothing: its Sessions are refused, and an operation held under it is not executed.
async fn a_withdrawn_key_stops_vouching_at_the_next_read(store: Store) {
    let agent = TestAgent::start();
    let stack = Stack::start_with(store, |b| agent.configure(b));
    let old = agent.signed_out("ses_old").with_delegation_signed_once();
    let request = exchange(&old);
    stack.gateway.send(&request).await.operation_in("held");
    let operation = stack
        .gateway
        .send(&request)
        .await
        .operation_in("held again");

    agent.publish(&["es256-b"]);
    let new = agent
        .signed_out("ses_new")
        .with_long_term_key("es256-b")
        .with_delegation_signed_once();
    let fetches = agent.jwks_fetches();
    let rotated = wait::until_some(Duration::from_secs(15), || {
        let stack = &stack;
        let new = &new;
        async move {
            let answer = stack.gateway.send(&exchange(new)).await;
            answer.is_approval_required().then(|| answer.operation())
        }
    })
    .await
    .expect("the new key's Sessions accepted once the gateway reads the keys again");
    assert!(agent.jwks_fetches() > fetches, "the keys were read again");

    let what = "a Session under the withdrawn key's delegation";
    let refused = stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await;
    assert_invalid_session(&refused, "no key \"es256-a\"", what);
    assert_invalid_session(
        &stack.gateway.send(&request).await,
        "no key \"es256-a\"",
        what,
    );
    stack.assert_executions(0, what);

    // The new key's delegation vouches: its approved request executes.
    stack
        .gateway
        .send(&exchange(&new).approve(&rotated))
        .await
        .assert_upstream_answer(1, "POST", PATH);
    stack.assert_executions(1, "the new key's approved request");
}

/// A delegation valid for 5 s (the gateway allowing no clock skew) is verified and
/// remembered; once its `exp` has passed, a Session under it is refused as expired and the
/// operation it holds is not executed. A Session with a new delegation is accepted.
async fn a_delegation_expiring_while_remembered_is_refused(store: Store) {
    let agent = TestAgent::start();
    let lines = agent
        .session_lines()
        .replace("clock_skew = \"60s\"", "clock_skew = \"0s\"");
    assert!(lines.contains("clock_skew = \"0s\""), "{lines}");
    let stack = Stack::start_with(store, |b| b.session(&lines));
    let session = agent
        .signed_out("ses_short")
        .with_delegation_signed_once()
        .with_delegation_lifetime(5);
    let exp = part(&delegation_of(&session), 1).expect("claims")["exp"]
        .as_i64()
        .expect("exp");
    let request = exchange(&session);
    stack.gateway.send(&request).await.operation_in("held");
    let operation = stack
        .gateway
        .send(&request)
        .await
        .operation_in("held again");

    // The gateway reads whole seconds: `exp` is past from the second after it.
    wait::until_clock_passes((exp + 1) as f64, Duration::from_secs(30)).await;
    let what = "a Session under a delegation that expired while remembered";
    let refused = stack.gateway.send(&request.approve(&operation)).await;
    assert_invalid_session(&refused, "the delegation has expired", what);
    stack.assert_executions(0, what);

    let renewed = agent
        .signed_out("ses_renewed")
        .with_delegation_signed_once();
    stack
        .gateway
        .send(&exchange(&renewed))
        .await
        .operation_in("a new delegation");
}

store_tests!(
    a_delegation_serves_many_sessions,
    a_withdrawn_key_stops_vouching_at_the_next_read,
    a_delegation_expiring_while_remembered_is_refused,
);
