//! Redis deployments beyond one node: gateways sharing a Redis Cluster, and claims that
//! must be acknowledged by a real replica (`[store] wait_replicas`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use poppy_e2e::{
    Answer, Client, Gateway, GatewayBuilder, RedisCluster, RedisServer, Request, Session, Upstream,
    wait,
};
use tokio::task::JoinSet;

const OPERATIONS: usize = 30;
const COPIES: usize = 10;
const ARRIVAL: Duration = Duration::from_secs(10);

fn exchange_path(order: usize) -> String {
    format!("/orders/o{order}/exchanges")
}

/// 300 approvals of 30 operations (different orders, so different hash slots), spread over
/// three gateways on one Redis Cluster and sent at once: each operation is executed exactly
/// once, every answer is its recorded one or a 503, and the keys landed on several primaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_a_cluster_execute_each_operation_once() {
    let cluster = RedisCluster::start(3);
    let upstream = Upstream::start();
    let gateways: Vec<Gateway> = (0..3)
        .map(|_| {
            GatewayBuilder::new(&upstream.url())
                .store_url(&cluster.url())
                .start()
        })
        .collect();
    let clients: Vec<Client> = gateways.iter().map(Gateway::client).collect();

    let session = Session::signed_out("ses_cluster");
    let mut approvals = Vec::new();
    for order in 0..OPERATIONS {
        let request = Request::exchange(&session, &format!("o{order}"), "i1", "s1");
        let op = clients[order % 3].send(&request).await.operation();
        approvals.push(request.approve(&op));
    }

    // Copy `c` of operation `o` goes through gateway (o + c) % 3; the upstream holds the
    // executions until every copy was answered or is held, so they all contend.
    let sends: Vec<(usize, Client, Request)> = (0..OPERATIONS)
        .flat_map(|order| (0..COPIES).map(move |copy| (order, copy)))
        .map(|(order, copy)| {
            let client = clients[(order + copy) % 3].clone();
            (order, client, approvals[order].clone())
        })
        .collect();
    upstream.hold();
    let answered = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(sends.len()));
    let mut tasks = JoinSet::new();
    for (order, client, request) in sends {
        let (barrier, answered) = (Arc::clone(&barrier), Arc::clone(&answered));
        tasks.spawn(async move {
            barrier.wait().await;
            let answer = client.send(&request).await;
            answered.fetch_add(1, Ordering::SeqCst);
            (order, answer)
        });
    }
    let total = OPERATIONS * COPIES;
    let settled = wait::until(ARRIVAL, || {
        answered.load(Ordering::SeqCst) + upstream.count() >= total
    })
    .await;
    upstream.release();
    let mut answers: Vec<Vec<Answer>> = vec![Vec::new(); OPERATIONS];
    while let Some(joined) = tasks.join_next().await {
        let (order, answer) = joined.expect("a request task panicked");
        answers[order].push(answer);
    }
    if !settled {
        eprintln!("note: not every copy was answered or held within {ARRIVAL:?}");
    }
    let held_back = answers.iter().flatten().filter(|a| a.status == 503).count();
    assert!(
        held_back > 0,
        "while the upstream held the executions, some copies must have been turned away"
    );
    eprintln!("{held_back} of {total} copies were answered 503 while the first was in flight");

    for (order, answers) in answers.iter().enumerate() {
        let path = exchange_path(order);
        assert_eq!(
            upstream.count_for("POST", &path),
            1,
            "operation {order} must be executed exactly once"
        );
        let first = recorded_or_503(answers, &path);
        for client in &clients {
            let replay = client.send(&approvals[order]).await;
            match &first {
                Some(first) => replay.assert_replay_of(first, "a retry after the burst"),
                None => {
                    replay.assert_status(201, "a retry after the burst");
                }
            }
        }
    }
    assert_eq!(
        upstream.count(),
        OPERATIONS,
        "nothing but the operations ran"
    );

    let keys = cluster.keys_per_node();
    assert!(
        keys.iter().filter(|&&n| n > 0).count() > 1,
        "the operations' keys should be spread over the primaries: {keys:?}"
    );
    assert_eq!(
        keys.iter().sum::<usize>(),
        2 * OPERATIONS,
        "a record and a generation each"
    );
}

/// Every answer is the upstream's one recorded answer (byte-identical each time) or a 503
/// with Retry-After. Returns the recorded answer if any copy got it.
fn recorded_or_503(answers: &[Answer], path: &str) -> Option<Answer> {
    let first = answers.iter().find(|a| a.status == 201).cloned();
    for answer in answers {
        match answer.status {
            201 => {
                let first = first.as_ref().expect("a 201 was found");
                answer.assert_replay_of(first, &format!("a copy of the approval of {path}"));
                assert_eq!(answer.json()["path"], path, "{}", answer.describe());
            }
            503 => assert!(
                answer.header("retry-after").is_some(),
                "a 503 needs Retry-After:\n{}",
                answer.describe()
            ),
            _ => panic!(
                "a copy got neither the recorded answer nor a 503:\n{}",
                answer.describe()
            ),
        }
    }
    first
}

/// `wait_replicas = 1` with one real replica: approvals are performed while the replica
/// acknowledges; with it stopped, approvals get 503 and nothing reaches the upstream; once it
/// is back, the same approval is performed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_wait_for_a_real_replica() {
    let primary = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&primary);
    let upstream = Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url())
        .store_url(&primary.url())
        .store_wait_replicas(1, "100ms")
        .start();
    let session = Session::signed_out("ses_wait");

    let request = Request::exchange(&session, "o1", "i1", "s1");
    let approved = request
        .clone()
        .approve(&gateway.send(&request).await.operation());
    let first = gateway.send(&approved).await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");

    replica.stop();
    let request = Request::exchange(&session, "o2", "i1", "s1");
    let pending = request
        .clone()
        .approve(&gateway.send(&request).await.operation());
    for attempt in 1..=3 {
        gateway.send(&pending).await.assert_unavailable(
            "store_unavailable",
            &format!("approval {attempt} while no replica acknowledges"),
        );
    }
    assert_eq!(
        upstream.count_for("POST", "/orders/o2/exchanges"),
        0,
        "an unacknowledged claim must never be forwarded"
    );
    // Replays read; they need no acknowledgement.
    gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a replay while the replica is down");

    replica.restart();
    replica.wait_for_replication(&primary);
    let performed = gateway.send(&pending).await;
    performed.assert_upstream_answer(2, "POST", "/orders/o2/exchanges");
    gateway
        .send(&pending)
        .await
        .assert_replay_of(&performed, "a replay once the replica is back");
    assert_eq!(upstream.count(), 2, "two operations, each executed once");
}
