//! The operation store: one behavioural suite run against the memory store, a private
//! `redis-server` and a private Redis Cluster, plus Redis-only tests (outages, corruption,
//! key layout, replica acknowledgement).

// Test code: a failed unwrap is a failed test (clippy only exempts `#[test]` bodies).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use poppy_e2e::RedisServer;
use poppy_gateway::protocol::{OperationId, ScopeKind, SigningKey};
use poppy_gateway::store::{
    self, Claim, ClaimOutcome, FollowUp, KeptAnswer, KeptDecision, KeptRound, Lease, MemoryStore,
    MessageAnswer, MessageLease, MessageSlot, OperationRecord, OperationStore, PageDecided,
    PageDecision, PageVerdict, RecordState, RecordedResponse, RedisStore, Resolution,
    ResolveOutcome, Ruling, StoreError,
};
use redis::Value;

/// The most any store call may take while Redis is down.
const UNAVAILABLE_BOUND: Duration = Duration::from_secs(5);
/// How long expiry and reconnection may take to show.
const EVENTUALLY: Duration = Duration::from_secs(10);
/// An operator's clock after every lease of a test: a resolution is only taken once the
/// record's lease ran out.
const AFTER_LEASES: i64 = i64::MAX / 4;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn key() -> SigningKey {
    SigningKey::new(b"store tests key material, long enough".to_vec())
}

/// Material for a fresh action, never used by another test.
fn fresh_action() -> Vec<u8> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        now_ms(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
    .into_bytes()
}

fn id_of(action: &[u8], generation: u64) -> OperationId {
    OperationId::derive(&key(), "exc", ScopeKind::Session, &[action], generation)
}

fn fresh_id() -> OperationId {
    id_of(&fresh_action(), 0)
}

fn claim_by(owner: &str) -> Claim {
    let now = now_ms();
    Claim {
        scope: "session:abc".into(),
        policy: "exchange".into(),
        revision: "rev_xyz".into(),
        owner: owner.into(),
        now_ms: now,
        lease_until_ms: now + 30_000,
        credentials: None,
        trace: None,
        request: None,
    }
}

/// A claim whose lease already ran out: its outcome reads as unknown.
fn lapsed_claim_by(owner: &str) -> Claim {
    let mut claim = claim_by(owner);
    claim.lease_until_ms = claim.now_ms - 1;
    claim
}

fn response() -> RecordedResponse {
    let mut body = vec![0u8, 0xff, 0xfe, 0x80, b'{', 0xc3, 0x28, 0x00];
    body.extend((0..70_000u32).map(|i| (i % 251) as u8));
    RecordedResponse {
        status: 201,
        headers: vec![
            ("content-type".into(), b"application/json".to_vec()),
            ("set-cookie".into(), b"a=1".to_vec()),
            ("set-cookie".into(), b"b=2; Path=/".to_vec()),
            ("x-binary".into(), vec![0xff, 0x00, 0x7f, 0x80]),
            ("x-empty".into(), Vec::new()),
        ],
        body: Bytes::from(body),
    }
}

/// The answer to `id`, kept until `remember_until_ms`.
fn answer_to<'a>(
    id: &'a OperationId,
    response: &'a RecordedResponse,
    remember_until_ms: i64,
) -> KeptAnswer<'a> {
    KeptAnswer {
        id,
        response,
        remember_until_ms,
    }
}

/// The round under `key` of `id`, taken at `now_ms`.
async fn take_round(
    store: &dyn OperationStore,
    id: &OperationId,
    key: &str,
    now_ms: i64,
) -> Option<Vec<u8>> {
    store
        .take_round(&FollowUp { id, key, now_ms })
        .await
        .unwrap()
}

/// Whether `owner`'s claim of `id` is leased until `until_ms` now.
async fn set_lease(
    store: &dyn OperationStore,
    id: &OperationId,
    owner: &str,
    until_ms: i64,
) -> bool {
    store
        .set_lease(&Lease {
            id,
            owner,
            until_ms,
        })
        .await
        .unwrap()
}

/// Poll `check` until it holds, failing after `EVENTUALLY`.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + EVENTUALLY;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The behavioural suite: every store must pass it unchanged.
mod suite {
    use super::*;

    pub async fn claim_then_lookup(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        assert_eq!(store.lookup(&id).await.unwrap(), None);
        let claim = claim_by("owner-1");
        assert_eq!(
            store.claim(&id, &claim).await.unwrap(),
            ClaimOutcome::Claimed
        );
        let record = store
            .lookup(&id)
            .await
            .unwrap()
            .expect("record after claim");
        assert_eq!(record.scope, claim.scope);
        assert_eq!(record.policy, claim.policy);
        assert_eq!(record.revision, claim.revision);
        assert_eq!(record.created_at_ms, claim.now_ms);
        assert_eq!(
            record.state,
            RecordState::InFlight {
                owner: "owner-1".into(),
                lease_until_ms: claim.lease_until_ms
            }
        );
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 0);
    }

    /// The keyed credentials digest (`[session] verify = "off"`) is kept from the claim
    /// through completion and an operator's resolution; a claim without one has none.
    pub async fn credentials_digest_is_kept(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        let claim = Claim {
            credentials: Some("digest-of-the-approver".into()),
            ..claim_by("owner-1")
        };
        assert_eq!(
            store.claim(&id, &claim).await.unwrap(),
            ClaimOutcome::Claimed
        );
        let read = |id: OperationId| {
            let store = store.clone();
            async move { store.lookup(&id).await.unwrap().expect("record") }
        };
        assert_eq!(
            read(id.clone()).await.credentials.as_deref(),
            Some("digest-of-the-approver")
        );
        assert!(
            store
                .complete(&answer_to(&id, &response(), now_ms() + 60_000), "owner-1")
                .await
                .unwrap()
        );
        let done = read(id.clone()).await;
        assert!(matches!(done.state, RecordState::Done(_)));
        assert_eq!(done.credentials.as_deref(), Some("digest-of-the-approver"));
        // A second claim sees the first one's digest, not its own.
        let other = Claim {
            credentials: Some("someone else".into()),
            ..claim_by("owner-2")
        };
        match store.claim(&id, &other).await.unwrap() {
            ClaimOutcome::Exists(record) => {
                assert_eq!(
                    record.credentials.as_deref(),
                    Some("digest-of-the-approver")
                )
            }
            ClaimOutcome::Claimed => panic!("claimed twice"),
        }

        let resolved = fresh_id();
        store.claim(&resolved, &claim).await.unwrap();
        store
            .resolve(&Ruling {
                id: &resolved,
                resolution: &Resolution::Performed(response()),
                remember_until_ms: now_ms() + 60_000,
                now_ms: AFTER_LEASES,
            })
            .await
            .unwrap();
        assert_eq!(
            read(resolved).await.credentials.as_deref(),
            Some("digest-of-the-approver")
        );

        let without = fresh_id();
        store.claim(&without, &claim_by("owner-1")).await.unwrap();
        assert_eq!(read(without).await.credentials, None);
    }

    /// The executing span's `traceparent` (`[tracing]`) is kept from the claim through
    /// completion, for a replay's span to link to; a claim without one has none.
    pub async fn execution_trace_is_kept(store: Arc<dyn OperationStore>) {
        const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let id = fresh_id();
        let claim = Claim {
            trace: Some(TRACE.into()),
            ..claim_by("owner-1")
        };
        store.claim(&id, &claim).await.unwrap();
        assert_eq!(
            store
                .lookup(&id)
                .await
                .unwrap()
                .expect("record")
                .trace
                .as_deref(),
            Some(TRACE)
        );
        assert!(
            store
                .complete(&answer_to(&id, &response(), now_ms() + 60_000), "owner-1")
                .await
                .unwrap()
        );
        let done = store.lookup(&id).await.unwrap().expect("record");
        assert!(matches!(done.state, RecordState::Done(_)));
        assert_eq!(done.trace.as_deref(), Some(TRACE));
        let without = fresh_id();
        store.claim(&without, &claim_by("owner-1")).await.unwrap();
        assert_eq!(
            store.lookup(&without).await.unwrap().expect("record").trace,
            None
        );
    }

    /// The digest of the request a page approval approved is kept from the claim through
    /// completion, and written again when the record vanished before it (a restore); a claim
    /// without one (a Poppy agent's) has none.
    pub async fn page_request_digest_is_kept(store: Arc<dyn OperationStore>) {
        let claim = Claim {
            request: Some("digest-of-the-request".into()),
            ..claim_by("owner-1")
        };
        let request_of = |id: OperationId| {
            let store = store.clone();
            async move { store.lookup(&id).await.unwrap().expect("record").request }
        };
        let id = fresh_id();
        store.claim(&id, &claim).await.unwrap();
        assert_eq!(
            request_of(id.clone()).await.as_deref(),
            Some("digest-of-the-request")
        );
        assert!(
            store
                .complete(&answer_to(&id, &response(), now_ms() + 60_000), "owner-1")
                .await
                .unwrap()
        );
        assert_eq!(
            request_of(id).await.as_deref(),
            Some("digest-of-the-request")
        );
        let restored = fresh_id();
        assert!(
            store
                .complete_claim(
                    &answer_to(&restored, &response(), now_ms() + 60_000),
                    &claim
                )
                .await
                .unwrap()
        );
        assert_eq!(
            request_of(restored).await.as_deref(),
            Some("digest-of-the-request")
        );
        let without = fresh_id();
        store.claim(&without, &claim_by("owner-1")).await.unwrap();
        assert_eq!(request_of(without).await, None);
    }

    pub async fn second_claim_returns_the_existing_record(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        let first = claim_by("owner-1");
        assert_eq!(
            store.claim(&id, &first).await.unwrap(),
            ClaimOutcome::Claimed
        );
        let mut second = claim_by("owner-2");
        second.revision = "rev_other".into();
        let ClaimOutcome::Exists(record) = store.claim(&id, &second).await.unwrap() else {
            panic!("second claim must not succeed")
        };
        assert_eq!(record.revision, "rev_xyz");
        assert!(
            matches!(record.state, RecordState::InFlight { ref owner, .. } if owner == "owner-1")
        );
        // The losing claim changed nothing.
        assert_eq!(store.lookup(&id).await.unwrap(), Some(record));
    }

    pub async fn concurrent_claims_have_one_winner(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        let tasks: Vec<_> = (0..100)
            .map(|i| {
                let store = store.clone();
                let id = id.clone();
                tokio::spawn(async move {
                    let outcome = store
                        .claim(&id, &claim_by(&format!("owner-{i}")))
                        .await
                        .unwrap();
                    (i, outcome)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            let (i, outcome) = task.await.unwrap();
            match outcome {
                ClaimOutcome::Claimed => winners.push(i),
                ClaimOutcome::Exists(record) => {
                    assert!(matches!(record.state, RecordState::InFlight { .. }));
                }
            }
        }
        assert_eq!(winners.len(), 1, "winners: {winners:?}");
        let record = store.lookup(&id).await.unwrap().unwrap();
        let expected = format!("owner-{}", winners[0]);
        assert!(
            matches!(record.state, RecordState::InFlight { ref owner, .. } if *owner == expected)
        );
    }

    pub async fn complete_checks_the_owner_and_moves_the_generation(
        store: Arc<dyn OperationStore>,
    ) {
        let action = fresh_action();
        let id = id_of(&action, 0);
        let claim = claim_by("owner-1");
        store.claim(&id, &claim).await.unwrap();
        let answer = response();
        let remember = now_ms() + 60_000;

        assert!(
            !store
                .complete(&answer_to(&id, &answer, remember), "owner-2")
                .await
                .unwrap()
        );
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 0);
        assert!(matches!(
            store.lookup(&id).await.unwrap().unwrap().state,
            RecordState::InFlight { .. }
        ));

        assert!(
            store
                .complete(&answer_to(&id, &answer, remember), "owner-1")
                .await
                .unwrap()
        );
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);
        let record = store.lookup(&id).await.unwrap().unwrap();
        assert_eq!(record.state, RecordState::Done(answer.clone()));
        assert_eq!(record.scope, claim.scope);
        assert_eq!(record.policy, claim.policy);
        assert_eq!(record.revision, claim.revision);
        assert_eq!(record.created_at_ms, claim.now_ms);

        // A claim of a performed operation sees the answer.
        assert_eq!(
            store.claim(&id, &claim_by("owner-3")).await.unwrap(),
            ClaimOutcome::Exists(record.clone())
        );

        // Completing twice changes nothing, whoever tries.
        let other = RecordedResponse {
            status: 500,
            headers: Vec::new(),
            body: Bytes::from_static(b"second"),
        };
        assert!(
            !store
                .complete(&answer_to(&id, &other, remember), "owner-1")
                .await
                .unwrap()
        );
        assert!(
            !store
                .complete(&answer_to(&id, &other, remember), "owner-2")
                .await
                .unwrap()
        );
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);
        assert_eq!(store.lookup(&id).await.unwrap(), Some(record));

        // The next generation of the same action is a new operation.
        let next = id_of(&action, 1);
        assert_eq!(next.action_tag(), id.action_tag());
        assert_eq!(store.lookup(&next).await.unwrap(), None);
        store.claim(&next, &claim_by("owner-4")).await.unwrap();
        assert!(
            store
                .complete(&answer_to(&next, &other, remember), "owner-4")
                .await
                .unwrap()
        );
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 2);
    }

    pub async fn complete_without_a_claim_is_refused(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        assert!(
            !store
                .complete(&answer_to(&id, &response(), now_ms() + 60_000), "owner-1")
                .await
                .unwrap()
        );
        assert_eq!(store.lookup(&id).await.unwrap(), None);
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 0);
    }

    pub async fn release_only_by_the_owner(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        store.claim(&id, &claim_by("owner-1")).await.unwrap();

        assert!(!store.release(&id, "owner-2").await.unwrap());
        assert!(store.lookup(&id).await.unwrap().is_some());

        assert!(store.release(&id, "owner-1").await.unwrap());
        assert_eq!(store.lookup(&id).await.unwrap(), None);
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 0);
        assert!(!store.release(&id, "owner-1").await.unwrap());

        // The same approval can be claimed again, and a performed one is never released.
        assert_eq!(
            store.claim(&id, &claim_by("owner-2")).await.unwrap(),
            ClaimOutcome::Claimed
        );
        assert!(
            store
                .complete(&answer_to(&id, &response(), now_ms() + 60_000), "owner-2")
                .await
                .unwrap()
        );
        assert!(!store.release(&id, "owner-2").await.unwrap());
        assert!(matches!(
            store.lookup(&id).await.unwrap().unwrap().state,
            RecordState::Done(_)
        ));
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);
    }

    pub async fn done_records_vanish_in_flight_ones_stay(store: Arc<dyn OperationStore>) {
        let claimed = fresh_id();
        let done = fresh_id();
        store
            .claim(&claimed, &lapsed_claim_by("owner-1"))
            .await
            .unwrap();
        store.claim(&done, &claim_by("owner-1")).await.unwrap();
        assert!(
            store
                .complete(&answer_to(&done, &response(), now_ms() + 300), "owner-1")
                .await
                .unwrap()
        );
        assert!(store.lookup(&claimed).await.unwrap().is_some());
        assert_eq!(store.generation(done.action_tag()).await.unwrap(), 1);

        eventually("the performed record and its generation expire", || async {
            store.lookup(&done).await.unwrap().is_none()
                && store.generation(done.action_tag()).await.unwrap() == 0
        })
        .await;
        // Forgotten means absent: the id can be claimed again.
        assert_eq!(
            store.claim(&done, &claim_by("owner-2")).await.unwrap(),
            ClaimOutcome::Claimed
        );
        // An unknown outcome is never forgotten on its own.
        let record = store.lookup(&claimed).await.unwrap().expect("still there");
        assert!(matches!(record.state, RecordState::InFlight { .. }));
    }

    /// What a mint reads: the generation, and the action's in-flight operations with leases.
    pub async fn action_state_shows_what_is_in_flight(store: Arc<dyn OperationStore>) {
        let action = fresh_action();
        let (g0, g1) = (id_of(&action, 0), id_of(&action, 1));
        let empty = store.action_state(g0.action_tag()).await.unwrap();
        assert_eq!((empty.generation, empty.in_flight.len()), (0, 0));

        let claim = claim_by("o");
        store.claim(&g0, &claim).await.unwrap();
        let state = store.action_state(g0.action_tag()).await.unwrap();
        assert_eq!(state.generation, 0);
        assert_eq!(state.in_flight, vec![(g0.clone(), claim.lease_until_ms)]);

        assert!(
            store
                .complete(&answer_to(&g0, &response(), now_ms() + 60_000), "o")
                .await
                .unwrap()
        );
        let state = store.action_state(g0.action_tag()).await.unwrap();
        assert_eq!((state.generation, state.in_flight.len()), (1, 0));

        let lapsed = lapsed_claim_by("o");
        store.claim(&g1, &lapsed).await.unwrap();
        let state = store.action_state(g0.action_tag()).await.unwrap();
        assert_eq!(state.in_flight, vec![(g1.clone(), lapsed.lease_until_ms)]);
        assert!(store.release(&g1, "o").await.unwrap());
        assert!(
            store
                .action_state(g0.action_tag())
                .await
                .unwrap()
                .in_flight
                .is_empty()
        );
    }

    fn listed(list: &[store::InFlightOperation], id: &OperationId) -> bool {
        list.iter().any(|op| &op.id == id)
    }

    /// The operators' listing and count: claims appear, and leave when finished.
    pub async fn in_flight_operations_are_listed_until_finished(store: Arc<dyn OperationStore>) {
        let before = store.unknown_count(now_ms()).await.unwrap();
        let (unknown, running, done, released) = (fresh_id(), fresh_id(), fresh_id(), fresh_id());
        store.claim(&unknown, &lapsed_claim_by("o")).await.unwrap();
        store.claim(&running, &claim_by("o")).await.unwrap();
        store.claim(&done, &claim_by("o")).await.unwrap();
        store.claim(&released, &claim_by("o")).await.unwrap();
        assert!(
            store
                .complete(&answer_to(&done, &response(), now_ms() + 60_000), "o")
                .await
                .unwrap()
        );
        assert!(store.release(&released, "o").await.unwrap());

        let list = store.in_flight(1000).await.unwrap();
        assert!(listed(&list, &unknown) && listed(&list, &running));
        assert!(!listed(&list, &done) && !listed(&list, &released));
        assert_eq!(store.unknown_count(now_ms()).await.unwrap(), before + 1);

        let resolution = Resolution::Performed(response());
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &unknown,
                    resolution: &resolution,
                    remember_until_ms: now_ms() + 60_000,
                    now_ms: AFTER_LEASES
                })
                .await
                .unwrap(),
            ResolveOutcome::Resolved
        );
        assert_eq!(store.unknown_count(now_ms()).await.unwrap(), before);
        let list = store.in_flight(1000).await.unwrap();
        assert!(!listed(&list, &unknown) && listed(&list, &running));
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &running,
                    resolution: &Resolution::NotPerformed,
                    remember_until_ms: now_ms(),
                    now_ms: AFTER_LEASES
                })
                .await
                .unwrap(),
            ResolveOutcome::Resolved
        );
        assert!(!listed(&store.in_flight(1000).await.unwrap(), &running));
    }

    /// The gateway that performed an operation records its answer even when the record
    /// vanished meanwhile, but never over somebody else's.
    pub async fn complete_claim_writes_a_vanished_record(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        let claim = claim_by("o");
        store.claim(&id, &claim).await.unwrap();
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &id,
                    resolution: &Resolution::NotPerformed,
                    remember_until_ms: now_ms(),
                    now_ms: AFTER_LEASES
                })
                .await
                .unwrap(),
            ResolveOutcome::Resolved
        );
        assert!(
            store
                .complete_claim(&answer_to(&id, &response(), now_ms() + 60_000), &claim)
                .await
                .unwrap()
        );
        let record = store.lookup(&id).await.unwrap().expect("written");
        assert_eq!(record.state, RecordState::Done(response()));
        assert_eq!(
            (record.scope.as_str(), record.revision.as_str()),
            ("session:abc", "rev_xyz")
        );
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);
        assert!(
            !store
                .complete_claim(&answer_to(&id, &response(), now_ms() + 60_000), &claim)
                .await
                .unwrap()
        );
        assert!(!listed(&store.in_flight(1000).await.unwrap(), &id));

        let other = fresh_id();
        store
            .claim(&other, &claim_by("someone-else"))
            .await
            .unwrap();
        assert!(
            !store
                .complete_claim(&answer_to(&other, &response(), now_ms() + 60_000), &claim)
                .await
                .unwrap()
        );
        assert!(
            store
                .complete_claim(
                    &answer_to(&other, &response(), now_ms() + 60_000),
                    &claim_by("someone-else")
                )
                .await
                .unwrap()
        );
    }

    pub async fn complete_never_shortens_an_expiry(store: Arc<dyn OperationStore>) {
        // Completed with a short remember_until: the record goes with it.
        let long_claim = fresh_id();
        store.claim(&long_claim, &claim_by("o")).await.unwrap();
        // Completed with a long remember_until: the record stays.
        let short_claim = fresh_id();
        store.claim(&short_claim, &claim_by("o")).await.unwrap();
        // The generation counter, first kept long, then completed again with a short one.
        let action = fresh_action();
        let (g0, g1) = (id_of(&action, 0), id_of(&action, 1));
        store.claim(&g0, &claim_by("o")).await.unwrap();
        store.claim(&g1, &claim_by("o")).await.unwrap();
        // Made last with 300 ms: once it is gone, every other 300 ms deadline has passed.
        let sentinel = fresh_id();

        let now = now_ms();
        assert!(
            store
                .complete(&answer_to(&long_claim, &response(), now + 300), "o")
                .await
                .unwrap()
        );
        assert!(
            store
                .complete(&answer_to(&short_claim, &response(), now + 60_000), "o")
                .await
                .unwrap()
        );
        assert!(
            store
                .complete(&answer_to(&g0, &response(), now + 60_000), "o")
                .await
                .unwrap()
        );
        assert!(
            store
                .complete(&answer_to(&g1, &response(), now + 300), "o")
                .await
                .unwrap()
        );
        store.claim(&sentinel, &claim_by("o")).await.unwrap();
        store
            .complete(&answer_to(&sentinel, &response(), now_ms() + 300), "o")
            .await
            .unwrap();

        eventually("the sentinel expires", || async {
            store.lookup(&sentinel).await.unwrap().is_none()
        })
        .await;
        // An in-flight record has no expiry of its own: its completion's decides.
        assert!(store.lookup(&long_claim).await.unwrap().is_none());
        assert!(store.lookup(&short_claim).await.unwrap().is_some());
        assert_eq!(store.generation(g0.action_tag()).await.unwrap(), 2);
        // The short-lived counter of long_claim's action is gone with its deadline.
        assert_eq!(store.generation(long_claim.action_tag()).await.unwrap(), 0);
    }

    pub async fn resolve_performed_records_the_answer(store: Arc<dyn OperationStore>) {
        let answer = response();
        let performed = Resolution::Performed(answer.clone());
        let remember = now_ms() + 60_000;

        // Nothing to resolve: never claimed.
        let id = fresh_id();
        for resolution in [&performed, &Resolution::NotPerformed] {
            assert_eq!(
                store
                    .resolve(&Ruling {
                        id: &id,
                        resolution,
                        remember_until_ms: remember,
                        now_ms: AFTER_LEASES
                    })
                    .await
                    .unwrap(),
                ResolveOutcome::NoRecord
            );
        }
        assert_eq!(store.lookup(&id).await.unwrap(), None);
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 0);

        // Somebody else's claim, its lease run out: the outcome is unknown until resolved.
        let mut claim = claim_by("owner-1");
        claim.lease_until_ms = claim.now_ms - 1;
        store.claim(&id, &claim).await.unwrap();
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &id,
                    resolution: &performed,
                    remember_until_ms: remember,
                    now_ms: AFTER_LEASES
                })
                .await
                .unwrap(),
            ResolveOutcome::Resolved
        );
        let record = store.lookup(&id).await.unwrap().unwrap();
        assert_eq!(record.state, RecordState::Done(answer.clone()));
        assert_eq!(
            (
                &record.scope,
                &record.policy,
                &record.revision,
                record.created_at_ms
            ),
            (&claim.scope, &claim.policy, &claim.revision, claim.now_ms)
        );
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);

        // Done is final: no resolution, completion or release changes it.
        let other = RecordedResponse {
            status: 500,
            headers: Vec::new(),
            body: Bytes::from_static(b"other"),
        };
        for resolution in [
            Resolution::Performed(other.clone()),
            Resolution::NotPerformed,
        ] {
            assert_eq!(
                store
                    .resolve(&Ruling {
                        id: &id,
                        resolution: &resolution,
                        remember_until_ms: remember,
                        now_ms: AFTER_LEASES
                    })
                    .await
                    .unwrap(),
                ResolveOutcome::AlreadyDone
            );
        }
        assert!(
            !store
                .complete(&answer_to(&id, &other, remember), "owner-1")
                .await
                .unwrap()
        );
        assert!(!store.release(&id, "owner-1").await.unwrap());
        assert_eq!(store.lookup(&id).await.unwrap(), Some(record));
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);

        // A claim whose lease is still running is not an operator's to resolve yet (its
        // forward may be at the upstream); once the lease ran out it is (any owner).
        let live = fresh_id();
        store.claim(&live, &claim_by("owner-2")).await.unwrap();
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &live,
                    resolution: &performed,
                    remember_until_ms: remember,
                    now_ms: now_ms()
                })
                .await
                .unwrap(),
            ResolveOutcome::LeaseLive
        );
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &live,
                    resolution: &Resolution::NotPerformed,
                    remember_until_ms: remember,
                    now_ms: now_ms()
                })
                .await
                .unwrap(),
            ResolveOutcome::LeaseLive,
            "'not performed' while the forward may be at the upstream would let a retry run it again"
        );
        assert!(matches!(
            store.lookup(&live).await.unwrap().unwrap().state,
            RecordState::InFlight { .. }
        ));
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &live,
                    resolution: &performed,
                    remember_until_ms: remember,
                    now_ms: AFTER_LEASES
                })
                .await
                .unwrap(),
            ResolveOutcome::Resolved
        );
        assert!(
            !store
                .complete(&answer_to(&live, &other, remember), "owner-2")
                .await
                .unwrap()
        );
        assert_eq!(
            store.lookup(&live).await.unwrap().unwrap().state,
            RecordState::Done(answer)
        );
    }

    pub async fn resolve_not_performed_forgets_the_claim(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        let mut claim = claim_by("owner-1");
        claim.lease_until_ms = claim.now_ms - 1;
        store.claim(&id, &claim).await.unwrap();
        let remember = now_ms() + 60_000;
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &id,
                    resolution: &Resolution::NotPerformed,
                    remember_until_ms: remember,
                    now_ms: AFTER_LEASES
                })
                .await
                .unwrap(),
            ResolveOutcome::Resolved
        );
        assert_eq!(store.lookup(&id).await.unwrap(), None);
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 0);
        // The owner finds nothing left to complete, and nothing is recorded.
        assert!(
            !store
                .complete(&answer_to(&id, &response(), remember), "owner-1")
                .await
                .unwrap()
        );
        assert_eq!(store.lookup(&id).await.unwrap(), None);
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &id,
                    resolution: &Resolution::NotPerformed,
                    remember_until_ms: remember,
                    now_ms: AFTER_LEASES
                })
                .await
                .unwrap(),
            ResolveOutcome::NoRecord
        );
        // The same approval can be claimed, and performed, again.
        assert_eq!(
            store.claim(&id, &claim_by("owner-2")).await.unwrap(),
            ClaimOutcome::Claimed
        );
        assert!(
            store
                .complete(&answer_to(&id, &response(), remember), "owner-2")
                .await
                .unwrap()
        );
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);
    }

    pub async fn resolve_never_shortens_an_expiry(store: Arc<dyn OperationStore>) {
        // Claimed for a short while, resolved as performed for long: it stays.
        let id = fresh_id();
        store.claim(&id, &claim_by("o")).await.unwrap();
        let performed = Resolution::Performed(response());
        assert_eq!(
            store
                .resolve(&Ruling {
                    id: &id,
                    resolution: &performed,
                    remember_until_ms: now_ms() + 60_000,
                    now_ms: AFTER_LEASES
                })
                .await
                .unwrap(),
            ResolveOutcome::Resolved
        );
        let sentinel = fresh_id();
        store.claim(&sentinel, &claim_by("o")).await.unwrap();
        store
            .complete(&answer_to(&sentinel, &response(), now_ms() + 300), "o")
            .await
            .unwrap();
        eventually("the sentinel expires", || async {
            store.lookup(&sentinel).await.unwrap().is_none()
        })
        .await;
        assert!(store.lookup(&id).await.unwrap().is_some());
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);
    }

    /// An operator resolving while the owner completes: exactly one of them records, once.
    pub async fn resolve_and_complete_race_one_winner(store: Arc<dyn OperationStore>) {
        for _ in 0..20 {
            let id = fresh_id();
            store.claim(&id, &claim_by("owner-1")).await.unwrap();
            let remember = now_ms() + 60_000;
            let resolved = RecordedResponse {
                status: 299,
                headers: Vec::new(),
                body: Bytes::from_static(b"operator"),
            };
            let completing = {
                let (store, id) = (store.clone(), id.clone());
                tokio::spawn(async move {
                    store
                        .complete(&answer_to(&id, &response(), remember), "owner-1")
                        .await
                        .unwrap()
                })
            };
            let resolving = {
                let (store, id, resolved) = (store.clone(), id.clone(), resolved.clone());
                tokio::spawn(async move {
                    store
                        .resolve(&Ruling {
                            id: &id,
                            resolution: &Resolution::Performed(resolved),
                            remember_until_ms: remember,
                            now_ms: AFTER_LEASES,
                        })
                        .await
                        .unwrap()
                })
            };
            let completed = completing.await.unwrap();
            let resolution = resolving.await.unwrap();
            let expected = if completed {
                assert_eq!(resolution, ResolveOutcome::AlreadyDone);
                response()
            } else {
                assert_eq!(resolution, ResolveOutcome::Resolved);
                resolved
            };
            assert_eq!(
                store.lookup(&id).await.unwrap().unwrap().state,
                RecordState::Done(expected)
            );
            assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);
        }
    }

    /// What an approval reads first: the record and the action's generation, together.
    pub async fn lookup_with_generation_reads_both(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        assert_eq!(store.lookup_with_generation(&id).await.unwrap(), (None, 0));
        store.claim(&id, &claim_by("o")).await.unwrap();
        let (record, generation) = store.lookup_with_generation(&id).await.unwrap();
        assert!(matches!(
            record.map(|r| r.state),
            Some(RecordState::InFlight { .. })
        ));
        assert_eq!(generation, 0);
        assert!(
            store
                .complete(&answer_to(&id, &response(), now_ms() + 60_000), "o")
                .await
                .unwrap()
        );
        let (record, generation) = store.lookup_with_generation(&id).await.unwrap();
        assert_eq!(record.map(|r| r.state), Some(RecordState::Done(response())));
        assert_eq!(generation, 1, "the same generation generation() reads");
        assert_eq!(store.generation(id.action_tag()).await.unwrap(), 1);
    }

    pub async fn ping_answers(store: Arc<dyn OperationStore>) {
        store.ping().await.unwrap();
    }

    /// Conversations: a message is handled by one call at a time, its answer is kept for
    /// its retries, and a message let go unanswered is handled anew.
    pub async fn messages_are_taken_once_and_answered_once(store: Arc<dyn OperationStore>) {
        let key = String::from_utf8(fresh_action()).unwrap();
        let now = now_ms();
        let take = |owner: &'static str, at: i64| {
            let (store, key) = (store.clone(), key.clone());
            async move {
                store
                    .take_message(&MessageLease {
                        key: &key,
                        owner,
                        now_ms: at,
                        lease_until_ms: at + 30_000,
                    })
                    .await
            }
        };
        assert_eq!(take("a", now).await.unwrap(), MessageSlot::Taken);
        assert_eq!(take("b", now).await.unwrap(), MessageSlot::Busy);
        // Not b's to answer.
        store
            .finish_message(&MessageAnswer {
                key: &key,
                owner: "b",
                answer: Some(b"theirs"),
                remember_until_ms: now + 60_000,
            })
            .await
            .unwrap();
        assert_eq!(take("b", now).await.unwrap(), MessageSlot::Busy);
        store
            .finish_message(&MessageAnswer {
                key: &key,
                owner: "a",
                answer: Some(b"{\"first\":1}"),
                remember_until_ms: now + 60_000,
            })
            .await
            .unwrap();
        assert_eq!(
            take("c", now).await.unwrap(),
            MessageSlot::Answered(Bytes::from_static(b"{\"first\":1}"))
        );

        // A lease that ran out is taken over; let go, the message is handled anew.
        let other = String::from_utf8(fresh_action()).unwrap();
        assert_eq!(
            store
                .take_message(&MessageLease {
                    key: &other,
                    owner: "a",
                    now_ms: now,
                    lease_until_ms: now - 1
                })
                .await
                .unwrap(),
            MessageSlot::Taken
        );
        assert_eq!(
            store
                .take_message(&MessageLease {
                    key: &other,
                    owner: "b",
                    now_ms: now,
                    lease_until_ms: now + 30_000
                })
                .await
                .unwrap(),
            MessageSlot::Taken
        );
        store
            .finish_message(&MessageAnswer {
                key: &other,
                owner: "b",
                answer: None,
                remember_until_ms: 0,
            })
            .await
            .unwrap();
        assert_eq!(
            store
                .take_message(&MessageLease {
                    key: &other,
                    owner: "c",
                    now_ms: now,
                    lease_until_ms: now + 30_000
                })
                .await
                .unwrap(),
            MessageSlot::Taken
        );
    }

    pub async fn concurrent_message_takes_have_one_winner(store: Arc<dyn OperationStore>) {
        let key = String::from_utf8(fresh_action()).unwrap();
        let now = now_ms();
        let takes: Vec<_> = (0..8)
            .map(|i| {
                let (store, key) = (store.clone(), key.clone());
                tokio::spawn(async move {
                    store
                        .take_message(&MessageLease {
                            key: &key,
                            owner: &format!("owner-{i}"),
                            now_ms: now,
                            lease_until_ms: now + 30_000,
                        })
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut taken = 0;
        for take in takes {
            match take.await.unwrap() {
                MessageSlot::Taken => taken += 1,
                MessageSlot::Busy => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(taken, 1, "one delivery of a message handles it");
    }

    /// Rounds of interim answers: kept only for a claim in flight under its owner, with the
    /// claim's lease made longer (never shorter: the action's in-flight set and the lookup
    /// say so); taken once, only under their own key, only before they expire.
    pub async fn rounds_are_taken_once_under_their_key(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        let other = fresh_id();
        let now = now_ms();
        let kept =
            |key: &'static str, round: &'static [u8], owner: &'static str, until: i64| KeptRound {
                id: &id,
                key,
                round,
                owner,
                until_ms: until,
                lease_until_ms: until + 30_000,
                now_ms: now,
            };
        assert!(
            !store
                .put_round(&kept("k1", b"r", "o", now + 60_000))
                .await
                .unwrap(),
            "no claim, no round"
        );
        let claim = claim_by("o");
        store.claim(&id, &claim).await.unwrap();
        assert!(
            !store
                .put_round(&kept("k1", b"r", "p", now + 60_000))
                .await
                .unwrap(),
            "another owner's claim"
        );
        assert_eq!(take_round(&*store, &id, "k1", now).await, None);
        assert!(
            store
                .put_round(&kept("k1", b"round one", "o", now + 60_000))
                .await
                .unwrap()
        );
        let leased = |record: Option<OperationRecord>| match record.map(|r| r.state) {
            Some(RecordState::InFlight { lease_until_ms, .. }) => lease_until_ms,
            other => panic!("in flight: {other:?}"),
        };
        assert_eq!(leased(store.lookup(&id).await.unwrap()), now + 90_000);
        let state = store.action_state(id.action_tag()).await.unwrap();
        assert_eq!(state.in_flight, vec![(id.clone(), now + 90_000)]);
        assert_eq!(take_round(&*store, &id, "k2", now).await, None);
        assert_eq!(take_round(&*store, &other, "k1", now).await, None);
        assert_eq!(
            take_round(&*store, &id, "k1", now).await.as_deref(),
            Some(&b"round one"[..])
        );
        assert_eq!(take_round(&*store, &id, "k1", now).await, None, "once");
        for round in [&b"round one"[..], b"round two"] {
            let mut k = kept("k1", b"", "o", now + 60_000);
            k.round = round;
            assert!(store.put_round(&k).await.unwrap());
        }
        assert_eq!(
            take_round(&*store, &id, "k1", now).await.as_deref(),
            Some(&b"round two"[..]),
            "replaced"
        );
        // A shorter round never shortens the lease; it expires (Redis on its own clock,
        // memory:// on the caller's).
        assert!(
            store
                .put_round(&kept("k3", b"short", "o", now + 50))
                .await
                .unwrap()
        );
        assert_eq!(leased(store.lookup(&id).await.unwrap()), now + 90_000);
        eventually("the round expires", || {
            let store = store.clone();
            let id = id.clone();
            async move { take_round(&*store, &id, "k3", now_ms()).await.is_none() }
        })
        .await;
        // Done: no more rounds.
        assert!(
            store
                .complete(&answer_to(&id, &response(), now + 60_000), "o")
                .await
                .unwrap()
        );
        assert!(
            !store
                .put_round(&kept("k4", b"r", "o", now + 60_000))
                .await
                .unwrap()
        );
    }

    /// A claim's lease set longer or shorter, only by its owner while in flight: what the
    /// lookup, the action's in-flight set and the operators' listing read.
    pub async fn a_lease_is_set_only_by_its_owner(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        assert!(!set_lease(&*store, &id, "o", 1).await, "no claim");
        let claim = claim_by("o");
        store.claim(&id, &claim).await.unwrap();
        assert!(!set_lease(&*store, &id, "p", 1).await, "not p's");
        let lease_of = |record: Option<OperationRecord>| match record.map(|r| r.state) {
            Some(RecordState::InFlight { lease_until_ms, .. }) => lease_until_ms,
            other => panic!("in flight: {other:?}"),
        };
        assert_eq!(
            lease_of(store.lookup(&id).await.unwrap()),
            claim.lease_until_ms
        );
        let shorter = claim.now_ms - 1;
        assert!(set_lease(&*store, &id, "o", shorter).await);
        assert_eq!(lease_of(store.lookup(&id).await.unwrap()), shorter);
        let state = store.action_state(id.action_tag()).await.unwrap();
        assert_eq!(state.in_flight, vec![(id.clone(), shorter)]);
        assert!(
            store.unknown_count(claim.now_ms).await.unwrap() >= 1,
            "a lapsed lease reads as unknown"
        );
        assert!(
            store
                .complete(&answer_to(&id, &response(), now_ms() + 60_000), "o")
                .await
                .unwrap()
        );
        assert!(!set_lease(&*store, &id, "o", shorter).await, "done");
    }

    pub async fn concurrent_round_takes_have_one_winner(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        let now = now_ms();
        store.claim(&id, &claim_by("o")).await.unwrap();
        let kept = KeptRound {
            id: &id,
            key: "k",
            round: b"r",
            owner: "o",
            until_ms: now + 60_000,
            lease_until_ms: now + 90_000,
            now_ms: now,
        };
        assert!(store.put_round(&kept).await.unwrap());
        let takes: Vec<_> = (0..8)
            .map(|_| {
                let (store, id) = (store.clone(), id.clone());
                tokio::spawn(async move { take_round(&*store, &id, "k", now).await })
            })
            .collect();
        let mut taken = 0;
        for take in takes {
            taken += usize::from(take.await.unwrap().is_some());
        }
        assert_eq!(taken, 1, "one follow-up goes on with a round");
    }

    fn page_decision(id: &OperationId, revision: &str, verdict: PageVerdict) -> PageDecision {
        PageDecision {
            operation_id: id.clone(),
            revision: revision.into(),
            verdict,
            subject: "alice of accounts".into(),
            at_ms: now_ms(),
        }
    }

    /// One decision per revision, set once; read back with the action's state until its time
    /// is up; each revision and operation its own.
    pub async fn page_decisions_are_set_once_per_revision(store: Arc<dyn OperationStore>) {
        let action = fresh_action();
        let (id, other) = (id_of(&action, 0), id_of(&action, 1));
        let now = now_ms();
        let (state, decisions) = store.page_state(id.action_tag()).await.unwrap();
        assert_eq!((state.generation, decisions.len()), (0, 0));
        let approved = page_decision(&id, "100-r1", PageVerdict::Approved);
        assert_eq!(
            store
                .decide_on_page(&KeptDecision {
                    decision: &approved,
                    until_ms: now + 60_000,
                    now_ms: now
                })
                .await
                .unwrap(),
            PageDecided::Stored
        );
        // A second decision of the same revision changes nothing, and says what was decided.
        let declined = page_decision(&id, "100-r1", PageVerdict::Declined);
        assert_eq!(
            store
                .decide_on_page(&KeptDecision {
                    decision: &declined,
                    until_ms: now + 60_000,
                    now_ms: now
                })
                .await
                .unwrap(),
            PageDecided::Exists(approved.clone())
        );
        // Another revision, another operation of the action: their own decisions.
        let later = page_decision(&id, "200-r2", PageVerdict::Declined);
        let elsewhere = page_decision(&other, "100-r1", PageVerdict::Approved);
        for decision in [&later, &elsewhere] {
            assert_eq!(
                store
                    .decide_on_page(&KeptDecision {
                        decision,
                        until_ms: now + 60_000,
                        now_ms: now
                    })
                    .await
                    .unwrap(),
                PageDecided::Stored
            );
        }
        store.claim(&id, &claim_by("o")).await.unwrap();
        let (state, mut decisions) = store.page_state(id.action_tag()).await.unwrap();
        assert_eq!(
            state.in_flight.len(),
            1,
            "the action's state comes with them"
        );
        decisions.sort_by_key(|d| (d.operation_id.to_string(), d.revision.clone()));
        let mut expected = vec![approved, later, elsewhere];
        expected.sort_by_key(|d| (d.operation_id.to_string(), d.revision.clone()));
        assert_eq!(decisions, expected);
        // Another action sees none of them.
        let (_, none) = store.page_state(fresh_id().action_tag()).await.unwrap();
        assert!(none.is_empty());
    }

    /// A decision is gone once its time is up; its revision may then be decided again.
    pub async fn page_decisions_expire(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        let now = now_ms();
        let short = page_decision(&id, "100-r1", PageVerdict::Approved);
        assert_eq!(
            store
                .decide_on_page(&KeptDecision {
                    decision: &short,
                    until_ms: now + 300,
                    now_ms: now
                })
                .await
                .unwrap(),
            PageDecided::Stored
        );
        eventually("the decision is forgotten", || {
            let store = store.clone();
            let tag = id.action_tag().to_owned();
            async move { store.page_state(&tag).await.unwrap().1.is_empty() }
        })
        .await;
        let again = page_decision(&id, "100-r1", PageVerdict::Declined);
        let later = now_ms();
        assert_eq!(
            store
                .decide_on_page(&KeptDecision {
                    decision: &again,
                    until_ms: later + 60_000,
                    now_ms: later
                })
                .await
                .unwrap(),
            PageDecided::Stored
        );
    }

    pub async fn concurrent_page_decisions_have_one_winner(store: Arc<dyn OperationStore>) {
        let id = fresh_id();
        let now = now_ms();
        let tries: Vec<_> = (0..8)
            .map(|i| {
                let (store, id) = (store.clone(), id.clone());
                tokio::spawn(async move {
                    let verdict = if i % 2 == 0 {
                        PageVerdict::Approved
                    } else {
                        PageVerdict::Declined
                    };
                    let decision = page_decision(&id, "100-r1", verdict);
                    store
                        .decide_on_page(&KeptDecision {
                            decision: &decision,
                            until_ms: now + 60_000,
                            now_ms: now,
                        })
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut stored = 0;
        for decided in tries {
            stored += usize::from(decided.await.unwrap() == PageDecided::Stored);
        }
        assert_eq!(stored, 1, "one decision per revision");
        assert_eq!(store.page_state(id.action_tag()).await.unwrap().1.len(), 1);
    }
}

macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod memory_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::suite::$name(std::sync::Arc::new(super::MemoryStore::new())).await;
                }
            )*
        }
        mod redis_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let server = super::RedisServer::start();
                    let store = super::RedisStore::new(&server.url(), "test").unwrap();
                    super::suite::$name(std::sync::Arc::new(store)).await;
                }
            )*
        }
        /// The whole suite, in turn, on one Redis Cluster (three primaries): starting a
        /// cluster per case would cost more than the cases.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn redis_cluster_store_passes_the_suite() {
            let cluster = poppy_e2e::RedisCluster::start(3);
            let store: std::sync::Arc<dyn OperationStore> =
                std::sync::Arc::new(RedisStore::new(&cluster.url(), "test").unwrap());
            $(
                suite::$name(store.clone()).await;
            )*
            let keys = cluster.keys_per_node();
            assert!(
                keys.iter().filter(|&&n| n > 0).count() > 1,
                "the suite's keys should spread over the primaries: {keys:?}"
            );
        }
    };
}

both_stores!(
    claim_then_lookup,
    credentials_digest_is_kept,
    execution_trace_is_kept,
    page_request_digest_is_kept,
    second_claim_returns_the_existing_record,
    concurrent_claims_have_one_winner,
    complete_checks_the_owner_and_moves_the_generation,
    complete_without_a_claim_is_refused,
    release_only_by_the_owner,
    done_records_vanish_in_flight_ones_stay,
    action_state_shows_what_is_in_flight,
    in_flight_operations_are_listed_until_finished,
    complete_claim_writes_a_vanished_record,
    complete_never_shortens_an_expiry,
    resolve_performed_records_the_answer,
    resolve_not_performed_forgets_the_claim,
    resolve_never_shortens_an_expiry,
    resolve_and_complete_race_one_winner,
    lookup_with_generation_reads_both,
    ping_answers,
    messages_are_taken_once_and_answered_once,
    concurrent_message_takes_have_one_winner,
    rounds_are_taken_once_under_their_key,
    concurrent_round_takes_have_one_winner,
    a_lease_is_set_only_by_its_owner,
    page_decisions_are_set_once_per_revision,
    page_decisions_expire,
    concurrent_page_decisions_have_one_winner,
);

type Call<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + 'a>>;

/// Every kind of call, each of which must fail with `Unavailable` within the bound.
async fn assert_all_unavailable(store: &dyn OperationStore) {
    let id = fresh_id();
    let checks: Vec<(&str, Call<'_>)> = vec![
        ("ping", Box::pin(store.ping())),
        (
            "generation",
            Box::pin(async { store.generation(id.action_tag()).await.map(drop) }),
        ),
        (
            "lookup",
            Box::pin(async { store.lookup(&id).await.map(drop) }),
        ),
        (
            "claim",
            Box::pin(async { store.claim(&id, &claim_by("o")).await.map(drop) }),
        ),
        (
            "complete",
            Box::pin(async {
                store
                    .complete(&answer_to(&id, &response(), now_ms() + 60_000), "o")
                    .await
                    .map(drop)
            }),
        ),
        (
            "release",
            Box::pin(async { store.release(&id, "o").await.map(drop) }),
        ),
        (
            "resolve",
            Box::pin(async {
                store
                    .resolve(&Ruling {
                        id: &id,
                        resolution: &Resolution::NotPerformed,
                        remember_until_ms: now_ms() + 60_000,
                        now_ms: AFTER_LEASES,
                    })
                    .await
                    .map(drop)
            }),
        ),
        (
            "put_round",
            Box::pin(async {
                let kept = KeptRound {
                    id: &id,
                    key: "k",
                    round: b"r",
                    owner: "o",
                    until_ms: now_ms() + 60_000,
                    lease_until_ms: now_ms() + 90_000,
                    now_ms: now_ms(),
                };
                store.put_round(&kept).await.map(drop)
            }),
        ),
        (
            "take_round",
            Box::pin(async {
                store
                    .take_round(&FollowUp {
                        id: &id,
                        key: "k",
                        now_ms: now_ms(),
                    })
                    .await
                    .map(drop)
            }),
        ),
        (
            "set_lease",
            Box::pin(async {
                store
                    .set_lease(&Lease {
                        id: &id,
                        owner: "o",
                        until_ms: now_ms(),
                    })
                    .await
                    .map(drop)
            }),
        ),
    ];
    for (name, call) in checks {
        let started = Instant::now();
        let result = call.await;
        let took = started.elapsed();
        assert!(
            matches!(result, Err(StoreError::Unavailable(_))),
            "{name}: {result:?}"
        );
        assert!(took < UNAVAILABLE_BOUND, "{name} took {took:?}");
    }
}

async fn ping_eventually(store: &dyn OperationStore) {
    eventually("the store reconnects", || async {
        store.ping().await.is_ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_fails_fast_and_recovers_by_itself() {
    let mut server = RedisServer::start();
    let store = RedisStore::new(&server.url(), "test").unwrap();
    let before = fresh_id();
    assert_eq!(
        store.claim(&before, &claim_by("o")).await.unwrap(),
        ClaimOutcome::Claimed
    );

    server.stop();
    assert_all_unavailable(&store).await;
    // Still failing promptly on a second round (no call got stuck on a dead connection).
    assert_all_unavailable(&store).await;

    server.restart();
    ping_eventually(&store).await;
    let after = fresh_id();
    assert_eq!(
        store.claim(&after, &claim_by("o")).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert!(store.lookup(&after).await.unwrap().is_some());
    // The server kept nothing across the restart (no persistence): that is Redis' business.
    assert_eq!(store.lookup(&before).await.unwrap(), None);
}

/// After Redis restarted, no call fails: the first one to find its connection dead runs again
/// on a new one (and starts every runtime's connection afresh), so the gateway's threads
/// (each with its own connection) neither fail one by one nor at all. Claims too: a claim
/// run twice finds its own record, which the flow answers as in progress, never forwarding.
#[test]
fn a_restarted_redis_costs_no_failed_call() {
    const RUNTIMES: usize = 4;
    let mut server = RedisServer::start();
    let store = RedisStore::new(&server.url(), "test").unwrap();
    let runtimes: Vec<tokio::runtime::Runtime> = (0..RUNTIMES)
        .map(|_| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        })
        .collect();
    for runtime in &runtimes {
        runtime.block_on(store.ping()).expect("connected");
    }
    server.restart();
    let deadline = Instant::now() + EVENTUALLY;
    while !server.ping() {
        assert!(Instant::now() < deadline, "redis-server did not come back");
        std::thread::sleep(Duration::from_millis(20));
    }
    let back = Instant::now();
    let failed = runtimes
        .iter()
        .filter(|runtime| runtime.block_on(store.ping()).is_err())
        .count();
    assert_eq!(
        failed, 0,
        "{failed} of {RUNTIMES} runtimes failed a call on a connection Redis had closed"
    );
    let first = fresh_id();
    assert_eq!(
        runtimes[0]
            .block_on(store.claim(&first, &claim_by("o")))
            .unwrap(),
        ClaimOutcome::Claimed
    );
    eprintln!(
        "redis back → every runtime served and a claim made: {:?}",
        back.elapsed()
    );
    // Again after a second restart, a claim first: it runs on a new connection once.
    server.restart();
    let deadline = Instant::now() + EVENTUALLY;
    while !server.ping() {
        assert!(Instant::now() < deadline, "redis-server did not come back");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = fresh_id();
    assert_eq!(
        runtimes[1]
            .block_on(store.claim(&second, &claim_by("o")))
            .unwrap(),
        ClaimOutcome::Claimed,
        "the first claim after a restart succeeds"
    );
    for runtime in &runtimes {
        runtime
            .block_on(store.ping())
            .expect("every runtime works again");
    }
}

/// A server that accepts but never answers (frozen, or a silent network) must not hang calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stalled_server_times_out_and_recovers() {
    let server = RedisServer::start();
    let store = RedisStore::new(&server.url(), "test").unwrap();
    // Connected, and the claim script cached by Redis.
    let warm = fresh_id();
    store.claim(&warm, &claim_by("o")).await.unwrap();

    server.pause();
    let id = fresh_id();
    for attempt in 0..2 {
        let started = Instant::now();
        let result = store.claim(&id, &claim_by("o")).await;
        let took = started.elapsed();
        assert!(
            matches!(result, Err(StoreError::Unavailable(_))),
            "{attempt}: {result:?}"
        );
        assert!(took < UNAVAILABLE_BOUND, "{attempt} took {took:?}");
    }

    server.resume();
    ping_eventually(&store).await;
    // Unavailable did not mean "not written": the claim sent into the stall ran once Redis
    // woke up. That is why the gateway fails closed on it and never re-forwards.
    let record = store
        .lookup(&id)
        .await
        .unwrap()
        .expect("the stalled claim ran");
    assert!(matches!(record.state, RecordState::InFlight { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_at_startup_then_up() {
    let port = RedisServer::reserve_port();
    let mut server = RedisServer::stopped_on(port);
    let store = RedisStore::new(&server.url(), "test").unwrap();
    assert_all_unavailable(&store).await;

    server.restart();
    assert_eq!(server.port(), port);
    ping_eventually(&store).await;
    let id = fresh_id();
    assert_eq!(
        store.claim(&id, &claim_by("o")).await.unwrap(),
        ClaimOutcome::Claimed
    );
}

#[test]
fn redis_store_rejects_bad_configuration() {
    for url in ["not a url", "", "http://127.0.0.1:1/", "redis://"] {
        assert!(RedisStore::new(url, "poppy").is_err(), "{url:?}");
        assert!(store::open(url).is_err(), "{url:?}");
    }
    assert!(RedisStore::new("redis://127.0.0.1:1/", "").is_err());
    assert!(RedisStore::new("redis://127.0.0.1:1/", "po{ppy").is_err());
}

/// Made at startup, before any runtime; used later from runtimes that come and go.
#[test]
fn redis_store_made_outside_a_runtime() {
    let server = RedisServer::start();
    let store = Arc::new(RedisStore::new(&server.url(), "test").unwrap());
    let id = fresh_id();

    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    first.block_on(async {
        assert_eq!(
            store.claim(&id, &claim_by("o")).await.unwrap(),
            ClaimOutcome::Claimed
        );
    });
    drop(first);

    // A connection belongs to the runtime that opened it; a new runtime must not depend on a
    // dead one, and two live ones work side by side.
    let second = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let third = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    second.block_on(async {
        assert!(store.lookup(&id).await.unwrap().is_some());
    });
    let on_third = {
        let (store, id) = (store.clone(), id.clone());
        std::thread::spawn(move || third.block_on(async { store.release(&id, "o").await.unwrap() }))
    };
    assert!(on_third.join().unwrap());
    second.block_on(async {
        assert_eq!(store.lookup(&id).await.unwrap(), None);
    });
    assert!(started.elapsed() < UNAVAILABLE_BOUND);
}

#[test]
fn redis_store_outside_a_runtime_errors_instead_of_panicking() {
    let store = RedisStore::new("redis://127.0.0.1:1/", "test").unwrap();
    let result = futures_lite_block_on(store.ping());
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "{result:?}"
    );
}

/// Poll a future to completion on this thread, with no Tokio runtime around it.
fn futures_lite_block_on<F: Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn raw_cmd(con: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> Value {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(con).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keys_share_a_hash_tag_and_expire() {
    let server = RedisServer::start();
    let store = store::open(&server.url()).unwrap();
    let id = fresh_id();
    store.claim(&id, &claim_by("o")).await.unwrap();
    assert!(
        store
            .complete(&answer_to(&id, &response(), now_ms() + 120_000), "o")
            .await
            .unwrap()
    );

    let mut con = raw(&server).await;
    let record = format!("poppy:op:{{{}}}:{}", id.action_tag(), id.generation_tag());
    let generation = format!("poppy:gen:{{{}}}", id.action_tag());
    for (key, at_least) in [(&record, 100_000), (&generation, 100_000)] {
        let Value::Int(ttl) = raw_cmd(&mut con, &["PTTL", key]).await else {
            panic!("PTTL")
        };
        assert!(ttl > at_least && ttl <= 120_000, "{key}: {ttl}");
    }
    assert_eq!(
        raw_cmd(&mut con, &["GET", &generation]).await,
        Value::BulkString(b"1".to_vec())
    );
    let Value::BulkString(body) = raw_cmd(&mut con, &["HGET", &record, "body"]).await else {
        panic!("body")
    };
    assert_eq!(body, response().body.to_vec(), "the body is stored raw");

    // Another namespace on the same server is another store.
    let other = RedisStore::new(&server.url(), "other").unwrap();
    assert_eq!(other.lookup(&id).await.unwrap(), None);
    assert_eq!(other.generation(id.action_tag()).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_malformed_entries_are_corrupt_and_fail_closed() {
    let server = RedisServer::start();
    let store = RedisStore::new(&server.url(), "test").unwrap();
    let mut con = raw(&server).await;
    let record_key =
        |id: &OperationId| format!("test:op:{{{}}}:{}", id.action_tag(), id.generation_tag());

    // A hash that is not a record: lookup and claim both refuse it.
    let id = fresh_id();
    raw_cmd(
        &mut con,
        &["HSET", &record_key(&id), "v", "1", "state", "weird"],
    )
    .await;
    assert!(matches!(
        store.lookup(&id).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.claim(&id, &claim_by("o")).await,
        Err(StoreError::Corrupt(_))
    ));
    for resolution in [Resolution::NotPerformed, Resolution::Performed(response())] {
        assert!(matches!(
            store
                .resolve(&Ruling {
                    id: &id,
                    resolution: &resolution,
                    remember_until_ms: now_ms() + 60_000,
                    now_ms: AFTER_LEASES
                })
                .await,
            Err(StoreError::Corrupt(_))
        ));
    }

    // Something else under the key.
    let id = fresh_id();
    raw_cmd(&mut con, &["SET", &record_key(&id), "x"]).await;
    assert!(matches!(
        store.lookup(&id).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.claim(&id, &claim_by("o")).await,
        Err(StoreError::Corrupt(_))
    ));

    // A broken generation counter: complete refuses before writing anything.
    let id = fresh_id();
    store.claim(&id, &claim_by("o")).await.unwrap();
    let generation = format!("test:gen:{{{}}}", id.action_tag());
    raw_cmd(&mut con, &["SET", &generation, "abc"]).await;
    assert!(matches!(
        store.generation(id.action_tag()).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store
            .complete(&answer_to(&id, &response(), now_ms() + 60_000), "o")
            .await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.lookup(&id).await.unwrap().unwrap().state,
        RecordState::InFlight { .. }
    ));

    // Corruption is not an outage: the connection stays usable.
    store.ping().await.unwrap();
}

#[tokio::test]
async fn open_picks_the_store_from_the_url() {
    let memory = store::open("memory://").unwrap();
    let id = fresh_id();
    assert_eq!(
        memory.claim(&id, &claim_by("o")).await.unwrap(),
        ClaimOutcome::Claimed
    );
    // A Redis URL opens without connecting, even with nothing listening.
    let port = RedisServer::reserve_port();
    let redis = store::open(&format!("redis://127.0.0.1:{port}/0")).unwrap();
    assert!(matches!(
        redis.ping().await,
        Err(StoreError::Unavailable(_))
    ));
}

/// How long Redis waits for replicas in these tests.
const WAIT_TIMEOUT: Duration = Duration::from_millis(100);

fn waiting_store(url: &str, replicas: u32) -> RedisStore {
    let options = store::StoreOptions {
        namespace: "test".into(),
        wait: Some(store::ReplicaWait {
            replicas,
            timeout: WAIT_TIMEOUT,
        }),
        ..store::StoreOptions::default()
    };
    RedisStore::with_options(url, &options).unwrap()
}

fn record_key(id: &OperationId) -> String {
    format!("test:op:{{{}}}:{}", id.action_tag(), id.generation_tag())
}

fn assert_unreplicated(result: Result<ClaimOutcome, StoreError>, took: Duration) {
    match result {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("replicas acknowledged"), "{message}")
        }
        other => panic!("a claim no replica acknowledged must not be used: {other:?}"),
    }
    assert!(took < UNAVAILABLE_BOUND, "took {took:?}");
}

/// `wait_replicas = 1` on one primary with one replica: a claim is used only once the replica
/// has it; with the replica gone, claims fail closed and leave nothing behind, while answers
/// and resolutions are still recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_claims_wait_for_a_replica() {
    let primary = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&primary);
    let store = waiting_store(&primary.url(), 1);

    let id = fresh_id();
    assert_eq!(
        store.claim(&id, &claim_by("o")).await.unwrap(),
        ClaimOutcome::Claimed
    );
    // Acknowledged means the replica holds it already, before anything is forwarded.
    assert_eq!(
        replica.command(&["EXISTS", &record_key(&id)]),
        Ok("1".into())
    );
    let unknown = fresh_id();
    store.claim(&unknown, &claim_by("o")).await.unwrap();

    // Needing two replicas when there is one: every claim is refused and released.
    let greedy = waiting_store(&primary.url(), 2);
    let refused = fresh_id();
    let started = Instant::now();
    let result = greedy.claim(&refused, &claim_by("o")).await;
    assert_unreplicated(result, started.elapsed());
    assert_eq!(store.lookup(&refused).await.unwrap(), None);

    replica.stop();
    let lonely = fresh_id();
    for attempt in 0..2 {
        let started = Instant::now();
        let result = store.claim(&lonely, &claim_by("o")).await;
        assert_unreplicated(result, started.elapsed());
        assert_eq!(
            store.lookup(&lonely).await.unwrap(),
            None,
            "attempt {attempt}"
        );
    }
    // The answer was delivered and is on the primary: complete succeeds (with a warning).
    assert!(
        store
            .complete(&answer_to(&id, &response(), now_ms() + 60_000), "o")
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .resolve(&Ruling {
                id: &unknown,
                resolution: &Resolution::NotPerformed,
                remember_until_ms: now_ms() + 60_000,
                now_ms: AFTER_LEASES
            })
            .await
            .unwrap(),
        ResolveOutcome::Resolved
    );

    replica.restart();
    let deadline = Instant::now() + EVENTUALLY;
    while primary.info_field("replication", "connected_slaves") != Some("1".into()) {
        assert!(Instant::now() < deadline, "the replica did not reconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eventually("claims are acknowledged again", || async {
        store.claim(&fresh_id(), &claim_by("o")).await.is_ok()
    })
    .await;
}

/// In a cluster, WAIT goes to the primary that wrote the claim: with one primary's replica
/// gone, claims in its slots fail closed and claims in the other primaries' slots succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_claims_wait_for_their_own_primary_s_replica() {
    let mut cluster = poppy_e2e::RedisCluster::start_with_replicas(3, 1);
    let store = waiting_store(&cluster.url(), 1);
    // Find a primary, and operations on it and elsewhere.
    let ids: Vec<OperationId> = (0..40).map(|_| fresh_id()).collect();
    let primary = cluster.primary_of(&record_key(&ids[0]));
    let (mine, others): (Vec<_>, Vec<_>) = ids
        .into_iter()
        .partition(|id| cluster.primary_of(&record_key(id)) == primary);
    assert!(
        mine.len() > 1 && !others.is_empty(),
        "40 operations, {} on the chosen primary",
        mine.len()
    );

    for id in mine.iter().take(1) {
        assert_eq!(
            store.claim(id, &claim_by("o")).await.unwrap(),
            ClaimOutcome::Claimed
        );
    }
    // The topology a node reports can lag behind replicas that just attached: wait until the
    // chosen primary's replica is listed, or the test would stop nothing.
    let deadline = Instant::now() + EVENTUALLY;
    let replicas = loop {
        let replicas = cluster.replicas_of(primary);
        if !replicas.is_empty() {
            break replicas;
        }
        assert!(
            Instant::now() < deadline,
            "no replica of the chosen primary is listed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for replica in replicas {
        cluster.stop_node(replica);
    }
    // Readiness is about the primaries; a missing replica is WAIT's business.
    store.ping().await.unwrap();
    for id in mine.iter().skip(1) {
        let started = Instant::now();
        let result = store.claim(id, &claim_by("o")).await;
        assert_unreplicated(result, started.elapsed());
        assert_eq!(store.lookup(id).await.unwrap(), None);
    }
    for id in &others {
        assert_eq!(
            store.claim(id, &claim_by("o")).await.unwrap(),
            ClaimOutcome::Claimed,
            "a claim on a primary whose replica is up"
        );
    }
}

/// Cluster down before the first call, then up; then down again and back: calls fail fast
/// while it is down and work again once it is back, with no restart of the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_outage_fails_fast_and_recovers_by_itself() {
    let mut cluster = poppy_e2e::RedisCluster::start(3);
    cluster.stop();
    let store = RedisStore::new(&cluster.url(), "test").unwrap();
    assert_all_unavailable(&store).await;

    cluster.start_again();
    ping_eventually(&store).await;
    let id = fresh_id();
    assert_eq!(
        store.claim(&id, &claim_by("o")).await.unwrap(),
        ClaimOutcome::Claimed
    );

    cluster.stop();
    assert_all_unavailable(&store).await;
    assert_all_unavailable(&store).await;
    cluster.start_again();
    ping_eventually(&store).await;
    let after = fresh_id();
    assert_eq!(
        store.claim(&after, &claim_by("o")).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert!(store.lookup(&after).await.unwrap().is_some());
}

/// A slot moved to another primary after the store learned the slot map (as in a failover or
/// a resharding): the scripts follow the `MOVED` answer instead of failing with
/// `Unavailable`, with and without replica acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_scripts_follow_a_moved_slot() {
    let cluster = poppy_e2e::RedisCluster::start(3);
    let plain = RedisStore::new(&cluster.url(), "test").unwrap();
    // No replicas here, so WAIT answers 0 at once (a completion stands without them); what
    // matters is that the call is a pipeline.
    let waiting = waiting_store(&cluster.url(), 1);
    for completing in [&plain, &waiting] {
        let id = fresh_id();
        let record = record_key(&id);
        let busy = format!("test:busy:{{{}}}", id.action_tag());
        plain.claim(&id, &claim_by("o")).await.unwrap();
        // Both stores know the slot map from before the move.
        assert!(completing.lookup(&id).await.unwrap().is_some());

        let from = cluster.primary_of(&record);
        let to = (from + 1) % 3;
        let nodes = cluster.nodes();
        let slot = nodes[0].command(&["CLUSTER", "KEYSLOT", &record]).unwrap();
        let id_of_node = |i: usize| nodes[i].command(&["CLUSTER", "MYID"]).unwrap();
        let (from_id, to_id) = (id_of_node(from), id_of_node(to));
        let to_port = nodes[to].port().to_string();
        nodes[to]
            .command(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id])
            .unwrap();
        nodes[from]
            .command(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id])
            .unwrap();
        nodes[from]
            .command(&[
                "MIGRATE",
                "127.0.0.1",
                &to_port,
                "",
                "0",
                "5000",
                "KEYS",
                &record,
                &busy,
            ])
            .unwrap();
        for node in nodes.iter().take(3) {
            node.command(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id])
                .unwrap();
        }
        assert_eq!(cluster.primary_of(&record), to, "the slot moved");

        assert!(
            completing
                .complete(&answer_to(&id, &response(), now_ms() + 60_000), "o")
                .await
                .expect("a moved slot is followed, not a store error")
        );
        let (found, generation) = completing.lookup_with_generation(&id).await.unwrap();
        assert!(matches!(found.unwrap().state, RecordState::Done(_)));
        assert_eq!(generation, 1);
    }
}

/// The durability check reads every primary: a single node, and a cluster's primaries with
/// their replicas. The test servers run without persistence, so each has a finding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_durability_is_read_from_every_primary() {
    let server = RedisServer::start();
    let node = RedisStore::new(&server.url(), "test").unwrap();
    let durability = node
        .durability()
        .await
        .unwrap()
        .expect("Redis has settings");
    assert_eq!(durability.nodes.len(), 1);
    assert_eq!(durability.nodes[0].appendonly.as_deref(), Some("no"));
    assert_eq!(durability.replicas(), Some(0));
    assert_eq!(
        durability.problems().len(),
        1,
        "{:?}",
        durability.problems()
    );

    let cluster = poppy_e2e::RedisCluster::start_with_replicas(3, 1);
    let store = RedisStore::new(&cluster.url(), "test").unwrap();
    let durability = store
        .durability()
        .await
        .unwrap()
        .expect("Redis has settings");
    assert_eq!(durability.nodes.len(), 3, "{durability:?}");
    assert!(durability.nodes.iter().all(|n| !n.address.is_empty()));
    assert_eq!(durability.replicas(), Some(1), "{durability:?}");
    assert_eq!(durability.problems().len(), 3);
    assert_eq!(MemoryStore::new().durability().await.unwrap(), None);
}
