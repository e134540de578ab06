//! What survives: recorded answers across a SIGKILL of the gateway, claims across a crash in
//! flight, and what happens while Redis is down (fail closed) and after it is back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::{
    Answer, GatewayBuilder, RedisServer, Request, Session, Stack, Store, Upstream, wait,
};

fn assert_not_known(answer: &Answer, what: &str) {
    assert_eq!(
        answer.status,
        503,
        "{what}: an operation that may have been performed must get 503:\n{}",
        answer.describe()
    );
    assert!(
        answer.header("retry-after").is_some(),
        "{what}: 503 needs Retry-After:\n{}",
        answer.describe()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_survives_gateway_sigkill_and_restart() {
    let mut stack = Stack::start(Store::Redis);
    let request = Request::exchange(&Session::signed_out("ses_kill"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");

    stack.gateway.kill();
    stack.gateway.restart();
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry after the gateway was killed and restarted");
    stack.assert_executions(1, "one approval across a restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_killed_in_flight_never_forwards_again() {
    let mut stack = Stack::start(Store::Redis);
    let request = Request::exchange(&Session::signed_out("ses_crash"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    let doomed = stack.try_send_held(&approved, 1).await;
    stack.gateway.kill();
    let _ = doomed.await;
    stack.gateway.restart();

    assert_not_known(
        &stack.gateway.send(&approved).await,
        "a retry after the gateway died while forwarding",
    );
    stack.upstream.release();
    assert_not_known(
        &stack.gateway.send(&approved).await,
        "a retry after the upstream finished, unknown to the gateway",
    );
    stack.assert_executions(1, "an approval whose gateway crashed in flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_fails_closed_and_recovers() {
    let mut stack = Stack::start(Store::Redis);
    let session = Session::signed_out("ses_down");
    let request = Request::exchange(&session, "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    stack.redis().stop();
    let not_ready = wait::until_some(Duration::from_secs(10), || async {
        let status = stack.gateway.admin_get("/readyz/store").await.status;
        (status == 503).then_some(status)
    })
    .await;
    assert_eq!(
        not_ready,
        Some(503),
        "/readyz/store must answer 503 while Redis is down"
    );
    // The replica itself stays ready: every replica shares the store, and passthrough is
    // still served (below), so taking them all out of rotation would help nobody.
    stack
        .gateway
        .admin_get("/readyz")
        .await
        .assert_status(200, "/readyz while only the store is down");

    for attempt in 1..=2 {
        stack.gateway.send(&approved).await.assert_unavailable(
            "store_unavailable",
            &format!("approval {attempt} while Redis is down"),
        );
    }
    stack.assert_executions(0, "approvals while the store is down");
    let mint = stack
        .gateway
        .send(&Request::exchange(&session, "o1", "i2", "s1"))
        .await;
    assert!(
        mint.is_approval_required() || mint.status == 503,
        "a new request while Redis is down is refused one way or the other:\n{}",
        mint.describe()
    );
    stack.assert_executions(0, "a new request while the store is down");

    stack
        .gateway
        .send(&Request::plain("GET", "/orders/o1"))
        .await
        .assert_upstream_answer(1, "GET", "/orders/o1");

    stack.redis().restart();
    let ready = wait::until_some(Duration::from_secs(15), || async {
        let status = stack.gateway.admin_get("/readyz/store").await.status;
        (status == 200).then_some(status)
    })
    .await;
    assert_eq!(
        ready,
        Some(200),
        "/readyz/store must recover once Redis is back"
    );

    let performed = stack.gateway.send(&approved).await;
    performed.assert_upstream_answer(2, "POST", "/orders/o1/exchanges");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&performed, "a retry once Redis is back");
    assert_eq!(stack.upstream.count_for("POST", "/orders/o1/exchanges"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_on_one_redis_share_records_and_generations() {
    let redis = RedisServer::start();
    let upstream = Upstream::start();
    let a = GatewayBuilder::new(&upstream.url())
        .store_url(&redis.url())
        .start();
    let b = GatewayBuilder::new(&upstream.url())
        .store_url(&redis.url())
        .start();
    let request = Request::exchange(&Session::signed_out("ses_share"), "o1", "i1", "s1");
    let op = a.send(&request).await.operation();
    let approved = request.clone().approve(&op);
    let first = a.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    b.send(&approved)
        .await
        .assert_replay_of(&first, "the same approval through the other gateway");
    let next = b.send(&request).await.operation();
    assert_ne!(
        next.operation_id, op.operation_id,
        "the other gateway knows the operation was performed"
    );
    assert_eq!(upstream.count(), 1);
}

/// Revisions are verified from the request and the keys: a restarted gateway on Redis, with
/// the same keys, accepts an approval minted before the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_minted_before_a_restart_is_accepted_after() {
    let mut stack = Stack::start(Store::Redis);
    let request = Request::exchange(&Session::signed_out("ses_restart"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    stack.gateway.restart();
    stack
        .gateway
        .send(&request.approve(&op))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
}

/// `memory://` forgets performed operations when the process ends, so after a restart no
/// approval from before it may run again, even with the same POPPY_GATEWAY_KEYS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_restart_never_reruns_a_performed_operation() {
    let mut stack = Stack::start(Store::Memory);
    let session = Session::signed_out("ses_forget");
    let request = Request::exchange(&session, "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.clone().approve(&op);
    let first = stack.gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    let unapproved = Request::exchange(&session, "o1", "i2", "s1");
    let pending = stack.gateway.send(&unapproved).await.operation();

    stack.gateway.restart();
    let retry = stack.gateway.send(&approved).await;
    if retry.is_approval_required() {
        let fresh = retry.operation_in("a retry after a memory:// restart");
        assert_ne!(fresh.revision, op.revision);
    } else {
        retry.assert_replay_of(&first, "a retry after a memory:// restart");
    }
    stack.assert_executions(1, "a performed approval retried after a memory:// restart");
    // An approval minted before the restart and never used is refused too: the gateway
    // cannot tell it from one it performed and forgot.
    let late = stack.gateway.send(&unapproved.approve(&pending)).await;
    assert!(
        late.is_approval_required(),
        "memory:// revisions must not verify after a restart:\n{}",
        late.describe()
    );
    stack.assert_executions(1, "a pre-restart approval after a memory:// restart");
}
