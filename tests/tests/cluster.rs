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

/// The record, generation and in-flight keys of an operation (one hash tag, one slot).
fn operation_keys(operation_id: &str) -> [String; 3] {
    // The action tag is the ID without its 8-character generation part.
    let (tag, generation) = operation_id.split_at(operation_id.len() - 8);
    [
        format!("poppy:op:{{{tag}}}:{generation}"),
        format!("poppy:gen:{{{tag}}}"),
        format!("poppy:busy:{{{tag}}}"),
    ]
}

/// Slots that move while approvals run, the way a resharding moves them (`CLUSTER SETSLOT …
/// MIGRATING/IMPORTING`, `MIGRATE`, `SETSLOT … NODE`: `ASK`, then `MOVED`, with no kill timing
/// involved): operations claimed before the move complete after it, operations approved while
/// the slot is half-moved are claimed on its new owner, and replays read it there. Every
/// request is followed to the slot's owner: none is answered `503 store_unavailable`, and each
/// operation runs exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_follow_slots_that_move() {
    const BEFORE: usize = 3;
    const DURING: usize = 3;
    let cluster = RedisCluster::start(3);
    let upstream = Upstream::start();
    let gateways: Vec<Gateway> = (0..2)
        .map(|_| {
            GatewayBuilder::new(&upstream.url())
                .store_url(&cluster.url())
                .start()
        })
        .collect();
    let session = Session::signed_out("ses_reshard");
    let mut approvals = Vec::new();
    for order in 0..BEFORE + DURING {
        let request = Request::exchange(&session, &format!("o{order}"), "i1", "s1");
        let op = gateways[order % 2].send(&request).await.operation();
        approvals.push((op.operation_id.clone(), request.approve(&op)));
    }
    let no_store_failure = |answer: &Answer, context: &str| {
        assert_ne!(
            answer.json()["error"],
            "store_unavailable",
            "{context}: a moved slot must be followed\n{}",
            answer.describe()
        );
    };

    // Claimed before the move, held upstream while their slots move.
    upstream.hold();
    let mut sent = Vec::new();
    for (i, (_, approved)) in approvals.iter().enumerate().take(BEFORE) {
        let client = gateways[i % 2].patient_client(Duration::from_secs(60));
        let approved = approved.clone();
        sent.push(tokio::spawn(async move { client.send(&approved).await }));
        assert!(
            wait::until(ARRIVAL, || upstream.count() == i + 1).await,
            "approval {i} was not forwarded"
        );
    }
    // The slots move now: every key is on its new primary, the old one answers ASK.
    let moves: Vec<_> = approvals
        .iter()
        .map(|(id, _)| {
            let keys = operation_keys(id);
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let from = cluster.primary_of(keys[0]);
            cluster.start_move(&keys, (from + 1) % 3)
        })
        .collect();

    // Approved while the slots are half-moved: the old owner answers ASK, and the new one,
    // asked, TRYAGAIN (a script that needs a key missing on both sides cannot run until the
    // move ends). The Redis client alone follows the ASK and then gives up after 3 TRYAGAIN
    // per call; once the claims have been turned away twice that often, the gateway is
    // following them itself. Then the move finishes (well within the gateway's 1.5 s of
    // following) and they land on the new owner.
    let turned_away = || -> usize { cluster.nodes().iter().map(tryagain_replies).sum() };
    let before = turned_away();
    for (i, (_, approved)) in approvals.iter().enumerate().skip(BEFORE) {
        let client = gateways[i % 2].patient_client(Duration::from_secs(60));
        let approved = approved.clone();
        sent.push(tokio::spawn(async move { client.send(&approved).await }));
    }
    assert!(
        wait::until(ARRIVAL, || turned_away() >= before + 6 * DURING).await,
        "the claims made while their slots moved were not turned away ({} TRYAGAIN)",
        turned_away() - before
    );
    for moved in moves {
        cluster.finish_move(moved);
    }
    assert!(
        wait::until(ARRIVAL, || upstream.count() == BEFORE + DURING).await,
        "{} of the {DURING} approvals sent while their slots moved were forwarded",
        upstream.count() - BEFORE
    );
    // Completions after the move: the old owner answers MOVED.
    upstream.release();
    let mut first = Vec::new();
    for (i, answer) in sent.into_iter().enumerate() {
        let answer = answer.await.expect("a request task panicked");
        no_store_failure(&answer, &format!("approval {i}"));
        answer.assert_status(201, &format!("approval {i}"));
        first.push(answer);
    }
    for (i, (_, approved)) in approvals.iter().enumerate() {
        for gateway in &gateways {
            let replay = gateway.send(approved).await;
            no_store_failure(&replay, &format!("a replay of approval {i}"));
            replay.assert_replay_of(&first[i], &format!("a replay of approval {i}"));
        }
        assert_eq!(
            upstream.count_for("POST", &exchange_path(i)),
            1,
            "operation {i} must be executed exactly once"
        );
    }
    assert_eq!(upstream.count(), BEFORE + DURING);
    // Nothing failed on the store: not the claims, and not the completions either (a failed
    // completion is still answered 201 and recorded later in the background).
    for (g, gateway) in gateways.iter().enumerate() {
        let metrics = gateway.metrics().await;
        let failed: f64 = metrics
            .samples
            .iter()
            .filter(|s| s.name == "poppy_store_errors_total")
            .map(|s| s.value)
            .sum();
        assert_eq!(
            failed, 0.0,
            "gateway {g}'s store calls that failed:\n{}",
            metrics.text
        );
    }
}

/// How many `TRYAGAIN` errors a Redis node has answered (`INFO errorstats`).
fn tryagain_replies(node: &RedisServer) -> usize {
    node.info_field("errorstats", "errorstat_TRYAGAIN")
        .and_then(|stat| stat.strip_prefix("count=")?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// A primary killed while approvals for its slots keep coming (no replica to take over): each
/// is answered `503 store_unavailable` and nothing is forwarded; the gateway's log shows the
/// Redis client's connection warnings, at most one per module per 10 s however many attempts
/// fail; once the node is back, the approvals are performed, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_is_warned_about_within_the_rate_limit() {
    const ATTEMPTS: usize = 12;
    let mut cluster = RedisCluster::start(3);
    let upstream = Upstream::start();
    let gateway = GatewayBuilder::new(&upstream.url())
        .store_url(&cluster.url())
        .start();
    let session = Session::signed_out("ses_dead_node");
    let mut approvals = Vec::new();
    for order in 0..3 {
        let request = Request::exchange(&session, &format!("o{order}"), "i1", "s1");
        let op = gateway.send(&request).await.operation();
        approvals.push((op.operation_id.clone(), request.approve(&op)));
    }
    let victim = cluster.primary_of(&operation_keys(&approvals[0].0)[0]);

    cluster.stop_node(victim);
    let down = std::time::Instant::now();
    for attempt in 0..ATTEMPTS {
        gateway.send(&approvals[0].1).await.assert_unavailable(
            "store_unavailable",
            &format!("attempt {attempt} while its primary is down"),
        );
    }
    let down_for = down.elapsed();
    let log = gateway.log();
    // Each attempt connected to the dead node anew, and the client would warn about each.
    let refused = log.matches("store unavailable; nothing forwarded").count();
    assert!(
        refused >= ATTEMPTS,
        "each attempt failed on the store:\n{log}"
    );
    let mut warnings: std::collections::BTreeMap<&str, usize> = Default::default();
    for line in log.lines().filter(|line| line.contains(" WARN redis")) {
        let target = line
            .split(" WARN ")
            .nth(1)
            .and_then(|rest| rest.split(": ").next())
            .unwrap_or_default();
        *warnings.entry(target).or_default() += 1;
    }
    eprintln!("{ATTEMPTS} attempts in {down_for:?}: Redis client warnings {warnings:?}");
    assert!(
        !warnings.is_empty(),
        "the Redis client's warnings reach the log:\n{log}"
    );
    // The client did try to warn more often than the log shows.
    let suppressed = gateway
        .metrics()
        .await
        .value("poppy_log_lines_suppressed_total", &[]);
    assert!(
        suppressed >= 1.0,
        "no warning was held back ({warnings:?}):\n{log}"
    );
    let allowed = 1 + down_for.as_secs() as usize / 10;
    for (target, count) in &warnings {
        assert!(
            *count <= allowed,
            "{target} warned {count} times in {down_for:?} (at most {allowed}):\n{log}"
        );
    }
    assert_eq!(upstream.count(), 0, "nothing is forwarded without a claim");

    cluster.start_node(victim);
    for (i, (_, approved)) in approvals.iter().enumerate() {
        let performed = wait::until_some(ARRIVAL, || async {
            let answer = gateway.send(approved).await;
            (answer.status == 201).then_some(answer)
        })
        .await
        .unwrap_or_else(|| panic!("approval {i} was not performed once the node was back"));
        gateway
            .send(approved)
            .await
            .assert_replay_of(&performed, &format!("a replay of approval {i}"));
    }
    assert_eq!(upstream.count(), approvals.len(), "each performed once");
}
