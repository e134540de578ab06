//! At most once under concurrency: retries while in flight, a burst of identical approvals,
//! many operations at once, two gateways on one Redis, and an upstream that times out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use poppy_e2e::{
    Answer, Client, GatewayBuilder, RedisServer, Request, Session, Stack, Store, Upstream,
    store_tests, wait,
};
use tokio::task::JoinSet;

const ARRIVAL: Duration = Duration::from_secs(5);

/// Open `n` connections from `client` to the gateway and leave them idle in its pool, so a
/// burst goes out at once instead of trickling in behind TCP connects: `n` passthrough
/// requests (`GET /warm-up/…`, executions of their own) are held at the upstream until all
/// have arrived.
async fn warm_up(upstream: &Upstream, client: &Client, n: usize) {
    let base = upstream.count();
    upstream.hold();
    let mut tasks = JoinSet::new();
    for i in 0..n {
        let client = client.clone();
        tasks.spawn(async move {
            client
                .send(&Request::plain("GET", &format!("/warm-up/{i}")))
                .await
        });
    }
    upstream.wait_for_count(base + n, ARRIVAL).await;
    upstream.release();
    while let Some(joined) = tasks.join_next().await {
        joined
            .expect("a warm-up task panicked")
            .assert_status(200, "a warm-up passthrough request");
    }
}

/// Send every `(client, request)` at the same moment (a barrier releases them together) and
/// return the answers, in no particular order, each with its index.
fn fire(sends: Vec<(Client, Request)>, answered: Arc<AtomicUsize>) -> JoinSet<(usize, Answer)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(sends.len()));
    let mut tasks = JoinSet::new();
    for (index, (client, request)) in sends.into_iter().enumerate() {
        let (barrier, answered) = (Arc::clone(&barrier), Arc::clone(&answered));
        tasks.spawn(async move {
            barrier.wait().await;
            let answer = client.send(&request).await;
            answered.fetch_add(1, Ordering::SeqCst);
            (index, answer)
        });
    }
    tasks
}

async fn collect(mut tasks: JoinSet<(usize, Answer)>) -> Vec<(usize, Answer)> {
    let mut answers = Vec::with_capacity(tasks.len());
    while let Some(joined) = tasks.join_next().await {
        answers.push(joined.expect("a request task panicked"));
    }
    answers
}

/// Send `copies` of `request` through each client at once while the upstream is held; release
/// it once every copy was either answered or is held at the upstream (or after 5 s), and
/// return every answer.
async fn burst(
    upstream: &Upstream,
    clients: &[Client],
    request: &Request,
    copies: usize,
) -> Vec<Answer> {
    for client in clients {
        warm_up(upstream, client, copies).await;
    }
    let executions = || upstream.count_for(&request.method, &request.path);
    let before = executions();
    let total = clients.len() * copies;
    let sends = clients
        .iter()
        .flat_map(|client| (0..copies).map(|_| (client.clone(), request.clone())))
        .collect();
    upstream.hold();
    let answered = Arc::new(AtomicUsize::new(0));
    let tasks = fire(sends, Arc::clone(&answered));
    let settled = wait::until(ARRIVAL, || {
        answered.load(Ordering::SeqCst) + executions() - before >= total
    })
    .await;
    upstream.release();
    let answers = collect(tasks).await;
    if !settled {
        eprintln!(
            "note: after {ARRIVAL:?} only {} of {total} copies were answered or held at the \
             upstream",
            answered.load(Ordering::SeqCst) + executions() - before
        );
    }
    answers.into_iter().map(|(_, answer)| answer).collect()
}

/// The execution number the upstream gave its only execution of `method path`.
fn only_execution(upstream: &Upstream, method: &str, path: &str) -> usize {
    let executions: Vec<usize> = upstream
        .requests()
        .iter()
        .filter(|r| r.method == method && r.path == path)
        .map(|r| r.execution)
        .collect();
    assert_eq!(
        executions.len(),
        1,
        "the upstream executed {method} {path} {} times (executions {executions:?}); at most \
         once means once",
        executions.len()
    );
    executions[0]
}

/// Every answer is the one recorded 201 (byte-identical) or a 503 `operation_in_progress`
/// with Retry-After. Returns the 201 answer.
fn assert_one_outcome(answers: &[Answer]) -> Answer {
    let performed: Vec<&Answer> = answers.iter().filter(|a| a.status == 201).collect();
    let Some(first) = performed.first() else {
        panic!(
            "no request got the upstream's answer; statuses: {:?}",
            answers.iter().map(|a| a.status).collect::<Vec<_>>()
        );
    };
    for answer in answers {
        match answer.status {
            201 => answer.assert_replay_of(first, "one of the concurrent retries"),
            503 => answer.assert_unavailable("operation_in_progress", "a retry while in flight"),
            _ => panic!(
                "a concurrent retry got neither the answer nor 503:\n{}",
                answer.describe()
            ),
        }
    }
    (*first).clone()
}

async fn retry_while_in_flight_gets_503_with_retry_after(store: Store) {
    let stack = Stack::start(store);
    let request = Request::exchange(&Session::signed_out("ses_flight"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    let in_flight = stack.send_held(&approved, 1).await;
    for attempt in 1..=2 {
        stack.gateway.send(&approved).await.assert_unavailable(
            "operation_in_progress",
            &format!("retry {attempt} while in flight"),
        );
    }
    assert!(
        !in_flight.is_finished(),
        "the first request is still held at the upstream"
    );
    stack.upstream.release();
    let first = in_flight.await.expect("the in-flight request");
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry after it finished");
    stack.assert_executions(1, "retries while in flight");
}

async fn hundred_concurrent_retries_execute_once(store: Store) {
    let stack = Stack::start(store);
    let request = Request::exchange(&Session::signed_out("ses_100"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);

    let answers = burst(&stack.upstream, &[stack.gateway.client()], &approved, 100).await;
    let execution = only_execution(&stack.upstream, "POST", "/orders/o1/exchanges");
    let first = assert_one_outcome(&answers);
    first.assert_upstream_answer(execution, "POST", "/orders/o1/exchanges");
    stack
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&first, "a retry after the burst");
    only_execution(&stack.upstream, "POST", "/orders/o1/exchanges");
}

async fn distinct_operations_each_execute_once(store: Store) {
    let stack = Stack::start(store);
    let session = Session::signed_out("ses_many");
    let mut approvals = Vec::new();
    for i in 0..10 {
        let request = Request::exchange(&session, "o1", &format!("item{i}"), "s1");
        let op = stack.gateway.send(&request).await.operation();
        approvals.push(request.approve(&op));
    }
    let client = stack.gateway.client();
    warm_up(&stack.upstream, &client, 30).await;
    let sends = approvals
        .iter()
        .flat_map(|approved| (0..3).map(|_| (client.clone(), approved.clone())))
        .collect();
    for (index, answer) in collect(fire(sends, Arc::new(AtomicUsize::new(0)))).await {
        assert!(
            answer.status == 201 || answer.status == 503,
            "copy {} of approval {}: expected 201 or 503:\n{}",
            index % 3,
            index / 3,
            answer.describe()
        );
    }
    assert_eq!(
        stack.upstream.count_for("POST", "/orders/o1/exchanges"),
        10,
        "ten operations, three copies each, must be ten executions"
    );
    let recorded = stack.upstream.requests();
    for (i, approved) in approvals.iter().enumerate() {
        let item = format!("item{i}");
        let executions: Vec<usize> = recorded
            .iter()
            .filter(|r| {
                r.path == "/orders/o1/exchanges" && r.body_json()["item_id"] == item.as_str()
            })
            .map(|r| r.execution)
            .collect();
        assert_eq!(executions.len(), 1, "{item} must be executed exactly once");
        let replay = stack.gateway.send(approved).await;
        replay.assert_status(201, &format!("a retry of {item}'s approval"));
        assert_eq!(
            replay.json()["execution"],
            executions[0],
            "{item}'s approval replays its own answer"
        );
    }
}

/// An upstream that does not answer in time may have acted: never reported as a failure,
/// never forwarded again.
async fn upstream_timeout_is_unknown_and_never_retried(store: Store) {
    let stack = Stack::start_with(store, |b| b.upstream_timeout("1s"));
    let request = Request::exchange(&Session::signed_out("ses_timeout"), "o1", "i1", "s1");
    let op = stack.gateway.send(&request).await.operation();
    let approved = request.approve(&op);
    stack.upstream.hold();
    let assert_unknown = |answer: &Answer, what: &str| {
        assert_eq!(
            answer.status,
            503,
            "{what}: an outcome the gateway does not know is a 503, not a failure:\n{}",
            answer.describe()
        );
        assert!(
            answer.header("retry-after").is_some(),
            "{what}: 503 needs Retry-After:\n{}",
            answer.describe()
        );
        assert!(
            answer.error_code().is_some(),
            "{what}: 503 needs a JSON error:\n{}",
            answer.describe()
        );
    };
    let first = stack.gateway.send(&approved).await;
    assert_unknown(&first, "the approved request whose upstream timed out");
    stack.assert_executions(1, "the timed-out request");
    let retry = stack.gateway.send(&approved).await;
    assert_unknown(&retry, "a retry after the timeout");
    stack.upstream.release();
    let late = stack.gateway.send(&approved).await;
    assert_unknown(&late, "a retry after the upstream finally answered");
    stack.assert_executions(1, "retries of an approval whose outcome is unknown");
}

store_tests!(
    retry_while_in_flight_gets_503_with_retry_after,
    hundred_concurrent_retries_execute_once,
    distinct_operations_each_execute_once,
    upstream_timeout_is_unknown_and_never_retried,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_sharing_redis_execute_once() {
    let redis = RedisServer::start();
    let upstream = Upstream::start();
    let a = GatewayBuilder::new(&upstream.url())
        .store_url(&redis.url())
        .start();
    let b = GatewayBuilder::new(&upstream.url())
        .store_url(&redis.url())
        .start();
    let request = Request::exchange(&Session::signed_out("ses_two"), "o1", "i1", "s1");
    let op = a.send(&request).await.operation();
    let from_b = b.send(&request).await.operation();
    assert_eq!(
        from_b.operation_id, op.operation_id,
        "gateways with the same keys and store mint the same operation"
    );
    let approved = request.approve(&op);

    let answers = burst(&upstream, &[a.client(), b.client()], &approved, 20).await;
    only_execution(&upstream, "POST", "/orders/o1/exchanges");
    let first = assert_one_outcome(&answers);
    for (name, gateway) in [("A", &a), ("B", &b)] {
        gateway
            .send(&approved)
            .await
            .assert_replay_of(&first, &format!("a retry through gateway {name}"));
    }
    only_execution(&upstream, "POST", "/orders/o1/exchanges");
}
