//! The flow driven through every path the executor takes, against a simulated world and
//! clock (`sim.rs`): what it asks for, in which order, and what it decides.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::sim::{Upstream, World};
use super::steps::LEASE_RAN_OUT;
use super::*;
use crate::identity::Approver;
use crate::operation::outcome::Rejection;
use crate::protocol::{Operation, SigningKey};
use crate::testkit::{claims_off, unsigned_jwt};

/// 2027-01-15T08:00:00Z.
pub(super) const T0: i64 = 1_800_000_000_000;
/// A claim's lease: connect (1 s) + timeout (5 s) + 1 s.
pub(super) const LEASE_MS: i64 = 7_000;

const POLICIES: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange on order {order_id}NAME."
APPROVAL
[operation.terms]
order_id = { path = "order_id" }
LOOKUP
"#;

pub(super) struct Gateway {
    keys: Keys,
    rules: ForwardRules,
}

impl Gateway {
    pub(super) fn new() -> Gateway {
        Gateway {
            keys: Keys::new(vec![SigningKey::new(b"flow-test-key-0123456789".to_vec())]).unwrap(),
            rules: ForwardRules {
                connect_timeout: Duration::from_secs(1),
                timeout: Duration::from_secs(5),
                release_statuses: vec![401, 429],
                release_503_with_retry_after: true,
            },
        }
    }

    pub(super) fn setup(&self) -> Setup<'_> {
        Setup {
            keys: &self.keys,
            rules: &self.rules,
            route: None,
            remember_grace: Duration::from_secs(60),
            receipts: true,
        }
    }
}

/// The exchange policy; `approval`: its `approval`/`proof` lines; `lookup`: with a lookup.
pub(super) fn policy(approval: &str, lookup: bool) -> Arc<Policy> {
    let lookup = if lookup {
        "name = { lookup = \"$.name\" }\n[operation.lookup]\nurl = \"/orders/{order_id}\""
    } else {
        ""
    };
    let name = if lookup.is_empty() { "" } else { " for {name}" };
    let text = POLICIES
        .replace("NAME", name)
        .replace("APPROVAL", approval)
        .replace("LOOKUP", lookup);
    let policies = crate::config::parse_policy_file(Path::new("flow.toml"), &text).unwrap();
    Arc::new(policies[0].clone())
}

pub(super) fn poppy() -> Arc<Policy> {
    policy("", false)
}

/// A Session (unverified), signed in to `account` when given.
pub(super) fn approver(sid: &str, account: Option<&str>) -> Approver {
    let session = unsigned_jwt(&json!({"sid": sid, "iss": "agent", "sub": "user"}));
    let bearer = account.map(|a| format!("Bearer {}", unsigned_jwt(&json!({"sub": a}))));
    let bearer = bearer.as_deref().map(str::as_bytes);
    Approver::from_headers(session.as_bytes(), bearer, &claims_off()).unwrap()
}

pub(super) fn asked(policy: &Arc<Policy>, who: Approver, approval: Option<&Operation>) -> Asked {
    Asked {
        request: OperationRequest {
            policy: Arc::clone(policy),
            approver: who,
            approval: approval.map(|o| ApprovalHeader {
                operation_id: o.operation_id.clone(),
                revision: o.revision.clone(),
            }),
            terms: [("order_id".to_owned(), json!("o1"))].into_iter().collect(),
            fingerprint: b"POST /orders/o1/exchanges".to_vec(),
        },
        approves: Approves::Agent,
        follow_up: None,
    }
}

pub(super) fn alice() -> Approver {
    approver("s1", None)
}

pub(super) fn decided(end: End) -> Decided {
    match end {
        End::Decided(decided) => decided,
        other => panic!("expected a decision, got {other:?}"),
    }
}

pub(super) fn held(end: End) -> Operation {
    match decided(end).decision {
        Decision::ApprovalRequired { operation, .. } => operation,
        other => panic!("expected an operation to approve, got {other:?}"),
    }
}

pub(super) fn id(operation: &Operation) -> OperationId {
    OperationId::parse(&operation.operation_id).unwrap()
}

/// A world and the operation minted in it for Alice's request.
pub(super) fn minted(gateway: &Gateway, policy: &Arc<Policy>) -> (World, Operation) {
    let mut world = World::new(T0);
    let operation = held(world.run(gateway.setup(), asked(policy, alice(), None)));
    (world, operation)
}

/// One approved request's paths: the world as it is when the approval comes back, what
/// the flow asks for, what it decides, and how many requests reached the upstream.
struct Row {
    name: &'static str,
    given: fn(&mut World),
    needs: &'static [&'static str],
    decides: fn(&Decision) -> bool,
    forwarded: usize,
}

pub(super) const APPROVED_NEEDS: &[&str] =
    &["terms", "record+generation", "start", "claim", "forward"];
const APPROVED: &[&str] = APPROVED_NEEDS;

/// [`APPROVED`], then `extra`.
pub(super) fn then(extra: &[&'static str]) -> &'static [&'static str] {
    [APPROVED, extra].concat().leak()
}

#[test]
fn an_approval_takes_every_path_the_executor_takes() {
    let rows = [
        Row {
            name: "performed: claimed, forwarded once, recorded before it is answered",
            given: |_| {},
            needs: then(&["read", "complete"]),
            decides: |d| matches!(d, Decision::Performed(r) if r.status == 201),
            forwarded: 1,
        },
        Row {
            name: "a release status: the claim is released",
            given: |w| w.upstream.push_back(Upstream::Answers(429)),
            needs: then(&["release"]),
            decides: |d| matches!(d, Decision::Released(r) if r.status == 429),
            forwarded: 1,
        },
        Row {
            name: "nothing sent: the claim is released",
            given: |w| w.upstream.push_back(Upstream::NotSent),
            needs: then(&["release"]),
            decides: |d| matches!(d, Decision::UpstreamUnavailable),
            forwarded: 0,
        },
        Row {
            name: "no answer: unknown, never forwarded again",
            given: |w| w.upstream.push_back(Upstream::Lost),
            needs: APPROVED,
            decides: |d| matches!(d, Decision::Unknown(_)),
            forwarded: 1,
        },
        Row {
            name: "an answer the interface can't read: unknown",
            given: |w| w.upstream.push_back(Upstream::Unreadable),
            needs: then(&["read"]),
            decides: |d| matches!(d, Decision::Unknown(_)),
            forwarded: 1,
        },
        Row {
            name: "shutting down: nothing claimed",
            given: |w| w.shutting_down = true,
            needs: &["terms", "record+generation", "start"],
            decides: |d| matches!(d, Decision::ShuttingDown),
            forwarded: 0,
        },
        Row {
            name: "the store fails at the record: fail closed",
            given: |w| w.failing.push("record+generation"),
            needs: &["terms", "record+generation"],
            decides: |d| matches!(d, Decision::StoreUnavailable),
            forwarded: 0,
        },
        Row {
            name: "the store fails at the claim: fail closed",
            given: |w| w.failing.push("claim"),
            needs: &["terms", "record+generation", "start", "claim"],
            decides: |d| matches!(d, Decision::StoreUnavailable),
            forwarded: 0,
        },
        Row {
            name: "the store fails at the record write: the answer is still delivered",
            given: |w| w.failing.push("complete"),
            needs: then(&["read", "complete"]),
            decides: |d| matches!(d, Decision::Performed(_)),
            forwarded: 1,
        },
    ];
    let gateway = Gateway::new();
    let policy = poppy();
    for row in rows {
        let (mut world, operation) = minted(&gateway, &policy);
        (row.given)(&mut world);
        let approved = asked(&policy, alice(), Some(&operation));
        let end = decided(world.run(gateway.setup(), approved));
        assert_eq!(world.needs, row.needs, "{}", row.name);
        assert!(
            (row.decides)(&end.decision),
            "{}: {:?}",
            row.name,
            end.decision
        );
        assert_eq!(world.forwarded, row.forwarded, "{}", row.name);
    }
}

#[test]
fn a_request_without_an_approval_is_held_and_forwards_nothing() {
    let gateway = Gateway::new();
    let mut world = World::new(T0);
    let end = decided(world.run(gateway.setup(), asked(&poppy(), alice(), None)));
    assert_eq!(world.needs, ["terms", "action state"]);
    assert!(matches!(
        end.decision,
        Decision::ApprovalRequired {
            rejected: false,
            ..
        }
    ));
    assert_eq!(end.rejection, None);
    world.failing.push("action state");
    let failed = decided(world.run(gateway.setup(), asked(&poppy(), alice(), None)));
    assert!(matches!(failed.decision, Decision::StoreUnavailable));
}

#[test]
fn refused_approvals_are_answered_with_a_new_operation_or_a_challenge() {
    let gateway = Gateway::new();
    let policy = poppy();
    let (mut world, operation) = minted(&gateway, &policy);
    let forged = Operation {
        operation_id: "not-ours".into(),
        ..operation.clone()
    };
    let end = decided(world.run(gateway.setup(), asked(&policy, alice(), Some(&forged))));
    assert_eq!(world.needs, ["terms", "action state"], "no record is read");
    assert_eq!(end.rejection, Some(Rejection::NotOurs));
    // Another Session's approval: a new operation of its own.
    let bob = approver("s2", None);
    let end = decided(world.run(gateway.setup(), asked(&policy, bob, Some(&operation))));
    assert_eq!(end.rejection, Some(Rejection::NotThisApprover));
    assert!(matches!(
        end.decision,
        Decision::ApprovalRequired { rejected: true, .. }
    ));
    // A signed-out Session naming an account's operation is asked to sign in.
    let signed_in = approver("s1", Some("alice"));
    let account_op = held(world.run(gateway.setup(), asked(&policy, signed_in, None)));
    let end = decided(world.run(gateway.setup(), asked(&policy, alice(), Some(&account_op))));
    assert!(matches!(end.decision, Decision::SignInRequired));
    assert_eq!(world.forwarded, 0);
}

#[test]
fn a_performed_operation_is_replayed_and_never_forwarded_again() {
    let gateway = Gateway::new();
    let policy = poppy();
    let (mut world, operation) = minted(&gateway, &policy);
    let approved = asked(&policy, alice(), Some(&operation));
    world.run(gateway.setup(), approved.clone());
    let again = decided(world.run(gateway.setup(), approved));
    assert_eq!(world.needs, ["terms", "record+generation"]);
    assert!(matches!(again.decision, Decision::Replayed(_)));
    assert_eq!(again.linked.as_deref(), Some("trace-of-execute"));
    assert_eq!(world.forwarded, 1);
}

#[test]
fn a_claim_lost_to_another_request_is_checked_against_its_record() {
    let gateway = Gateway::new();
    let policy = poppy();
    let (_, operation) = minted(&gateway, &policy);
    // Another gateway claims it between this one's lookup and its claim.
    let approved = asked(&policy, alice(), Some(&operation));
    let mut flow = Flow::new(gateway.setup(), approved.clone());
    assert!(matches!(flow.next(), Step::Need(Need::Terms(_))));
    flow.on(Event::Terms(Some(approved.request.terms.clone())), T0);
    assert!(matches!(
        flow.next(),
        Step::Need(Need::RecordAndGeneration(_))
    ));
    flow.on(Event::RecordAndGeneration(None, 0), T0);
    assert!(matches!(flow.next(), Step::Need(Need::StartForward { .. })));
    flow.on(
        Event::Started {
            owner: "mine".into(),
            trace: None,
        },
        T0,
    );
    let Step::Need(Need::Claim(_, claim)) = flow.next() else {
        panic!("expected a claim")
    };
    let mut theirs = claim.in_flight_record();
    theirs.trace = Some("their-trace".into());
    flow.on(Event::Claimed(ClaimOutcome::Exists(theirs.clone())), T0);
    let Step::Done(end) = flow.next() else {
        panic!("a claim found taken forwards nothing")
    };
    let end = decided(end);
    assert!(matches!(end.decision, Decision::InProgress(_)));
    assert_eq!(end.linked.as_deref(), Some("their-trace"));
    // Asked again without an answer: it fails closed.
    assert!(matches!(
        flow.next(),
        Step::Done(End::Decided(Decided {
            decision: Decision::StoreUnavailable,
            ..
        }))
    ));
}

#[test]
fn a_lease_that_runs_out_makes_the_outcome_unknown_and_blocks_new_operations() {
    let gateway = Gateway::new();
    let policy = poppy();
    let (mut world, operation) = minted(&gateway, &policy);
    world.upstream.push_back(Upstream::Lost);
    let approved = asked(&policy, alice(), Some(&operation));
    world.run(gateway.setup(), approved.clone());
    // Within the lease: in progress; a new request of the action is still held.
    world.now = T0 + LEASE_MS;
    let retry = decided(world.run(gateway.setup(), approved.clone()));
    assert!(matches!(retry.decision, Decision::InProgress(_)));
    // The clock passes the lease (or the gateway restarted and came back later): unknown,
    // and no new operation for the action until an operator resolves it.
    world.now = T0 + LEASE_MS + 1;
    let retry = decided(world.run(gateway.setup(), approved));
    assert!(matches!(retry.decision, Decision::Unknown(_)));
    assert_eq!(retry.why.as_deref(), Some(LEASE_RAN_OUT));
    let fresh = decided(world.run(gateway.setup(), asked(&policy, alice(), None)));
    assert!(matches!(fresh.decision, Decision::Unknown(ref u) if *u == id(&operation)));
    assert_eq!(world.forwarded, 1);
}

#[test]
fn an_expired_revision_is_refused_by_the_simulated_clock() {
    let gateway = Gateway::new();
    let policy = poppy();
    let (mut world, operation) = minted(&gateway, &policy);
    world.now = T0 + 15 * 60 * 1000 + 1000;
    let end = decided(world.run(gateway.setup(), asked(&policy, alice(), Some(&operation))));
    assert_eq!(end.rejection, Some(Rejection::RevisionExpired));
    assert_eq!(world.forwarded, 0);
}
