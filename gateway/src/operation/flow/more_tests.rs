//! The flow's other paths in the simulated world: the approval page, the page proof, a
//! policy's lookup, and the follow-up rounds of an interim answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::sim::{Upstream, World};
use super::tests::{
    Gateway, LEASE_MS, T0, alice, approver, asked, decided, held, id, minted, policy, poppy, then,
};
use super::*;
use crate::operation::page::PageVerdict;
use crate::operation::record::RecordState;
use crate::operation::round::ROUND_TTL;
use crate::protocol::Operation;

fn on_page(policy: &Arc<Policy>, who: crate::identity::Approver) -> Asked {
    Asked {
        approves: Approves::Page,
        ..asked(policy, who, None)
    }
}

fn decide(world: &mut World, operation: &Operation, verdict: PageVerdict) {
    world.decisions.push(PageDecision {
        operation_id: id(operation),
        revision: operation.revision.clone(),
        verdict,
        subject: "alice".into(),
        at_ms: world.now,
    });
}

fn lease_of(world: &World, operation: &Operation) -> i64 {
    match &world.records[&id(operation)].state {
        RecordState::InFlight { lease_until_ms, .. } => *lease_until_ms,
        RecordState::Done(_) => panic!("performed"),
    }
}

#[test]
fn a_page_request_is_held_declined_or_performed_once_and_replayed_before_its_lookup() {
    let gateway = Gateway::new();
    let policy = policy("approval = \"either\"", false);
    let mut world = World::new(T0);
    let nobody = world.run(gateway.setup(), on_page(&policy, alice()));
    assert!(matches!(nobody, End::PageSignInRequired));
    assert!(
        world.needs.is_empty(),
        "nobody can approve it: nothing read"
    );

    let account = || approver("s1", Some("alice"));
    let operation = held(world.run(gateway.setup(), on_page(&policy, account())));
    assert_eq!(world.needs, ["page state", "terms", "page state"]);

    decide(&mut world, &operation, PageVerdict::Declined);
    let end = world.run(gateway.setup(), on_page(&policy, account()));
    assert!(matches!(end, End::Declined(ref d) if *d == id(&operation)));

    world.decisions.clear();
    decide(&mut world, &operation, PageVerdict::Approved);
    let performed = decided(world.run(gateway.setup(), on_page(&policy, account())));
    assert_eq!(
        world.needs,
        [
            "page state",
            "record",
            "terms",
            "page state",
            "record+generation",
            "start",
            "claim",
            "forward",
            "read",
            "complete"
        ]
    );
    assert!(matches!(performed.decision, Decision::Performed(_)));
    assert_eq!(
        performed.approval.map(|a| a.operation_id),
        Some(operation.operation_id.clone())
    );
    let retry = decided(world.run(gateway.setup(), on_page(&policy, account())));
    assert_eq!(world.needs, ["page state", "record"], "before its lookup");
    assert!(matches!(retry.decision, Decision::Replayed(_)));
    assert_eq!(world.forwarded, 1);
}

#[test]
fn a_page_proof_holds_a_poppy_approval_until_the_page_approved_that_revision() {
    let gateway = Gateway::new();
    let policy = policy("proof = \"company_page\"", false);
    let who = || approver("s1", Some("alice"));
    let mut world = World::new(T0);
    let operation = held(world.run(gateway.setup(), asked(&policy, who(), None)));
    let approved = asked(&policy, who(), Some(&operation));
    let again = decided(world.run(gateway.setup(), approved.clone()));
    assert_eq!(world.needs, ["terms", "record+generation", "page state"]);
    let Decision::ApprovalRequired {
        operation: same,
        rejected: false,
    } = again.decision
    else {
        panic!("held again, got {:?}", again.decision)
    };
    assert_eq!(
        (same.operation_id, same.revision),
        (operation.operation_id.clone(), operation.revision.clone())
    );
    world.failing.push("page state");
    let failed = decided(world.run(gateway.setup(), approved.clone()));
    assert!(matches!(failed.decision, Decision::StoreUnavailable));
    world.failing.clear();
    decide(&mut world, &operation, PageVerdict::Approved);
    let performed = decided(world.run(gateway.setup(), approved));
    assert!(matches!(performed.decision, Decision::Performed(_)));
    assert_eq!(world.forwarded, 1);
}

#[test]
fn a_policy_with_a_lookup_answers_from_the_record_before_it_and_refuses_without_it() {
    let gateway = Gateway::new();
    let policy = policy("", true);
    let mut world = World::new(T0);
    world.lookup = Some([("name".to_owned(), serde_json::json!("Alice"))].into());
    let operation = held(world.run(gateway.setup(), asked(&policy, alice(), None)));
    let approved = asked(&policy, alice(), Some(&operation));
    let performed = decided(world.run(gateway.setup(), approved.clone()));
    assert_eq!(world.needs[..2], ["record", "terms"]);
    assert!(matches!(performed.decision, Decision::Performed(_)));
    // The upstream's records can't be read now: the performed operation is still replayed.
    world.lookup = None;
    let replayed = decided(world.run(gateway.setup(), approved));
    assert_eq!(world.needs, ["record"]);
    assert!(matches!(replayed.decision, Decision::Replayed(_)));
    let refused = world.run(gateway.setup(), asked(&policy, alice(), None));
    assert!(matches!(refused, End::LookupRefused));
    assert_eq!(world.needs, ["terms"]);
}

/// Alice's approved call, answered interim with `token`: the world, the operation, and
/// the follow-up that carries `token` back.
fn interim(gateway: &Gateway, token: Option<&'static str>) -> (World, Operation, Asked) {
    let policy = poppy();
    let (mut world, operation) = minted(gateway, &policy);
    world.upstream.push_back(Upstream::Interim(token));
    let approved = asked(&policy, alice(), Some(&operation));
    let first = decided(world.run(gateway.setup(), approved.clone()));
    assert_eq!(world.needs, then(&["read", "keep round"]));
    assert!(matches!(first.decision, Decision::Interim(_)));
    let ttl = i64::try_from(ROUND_TTL.as_millis()).unwrap();
    assert_eq!(lease_of(&world, &operation), T0 + ttl + LEASE_MS);
    let follow_up = Asked {
        follow_up: Some(token.map(str::to_owned)),
        ..approved
    };
    (world, operation, follow_up)
}

const FOLLOWED: &[&str] = &["terms", "record+generation", "record", "take round"];

#[test]
fn a_follow_up_goes_on_under_the_same_claim_once() {
    let gateway = Gateway::new();
    let (mut world, operation, follow_up) = interim(&gateway, Some("t1"));
    let retry = Asked {
        follow_up: None,
        ..follow_up.clone()
    };
    let plain = decided(world.run(gateway.setup(), retry));
    assert!(matches!(plain.decision, Decision::InProgress(_)));
    let done = decided(world.run(gateway.setup(), follow_up.clone()));
    let mut needs = FOLLOWED.to_vec();
    needs.extend(["start", "forward", "read", "complete"]);
    assert_eq!(world.needs, needs);
    assert!(matches!(done.decision, Decision::Performed(_)));
    // Taken once: the same follow-up again is a replay, not a third forward.
    let again = decided(world.run(gateway.setup(), follow_up));
    assert!(matches!(again.decision, Decision::Replayed(_)));
    assert_eq!(world.forwarded, 2);
    assert!(matches!(
        world.records[&id(&operation)].state,
        RecordState::Done(_)
    ));
}

#[test]
fn a_follow_up_from_another_session_or_with_another_token_is_not_forwarded() {
    let gateway = Gateway::new();
    let (mut world, operation, follow_up) = interim(&gateway, Some("t1"));
    let mut bobs = follow_up.clone();
    bobs.request.approver = approver("s2", None);
    let bob = decided(world.run(gateway.setup(), bobs));
    assert!(matches!(bob.decision, Decision::NotTheApprover(ref n) if *n == id(&operation)));
    assert_eq!(bob.rejection, Some(Rejection::NotThisApprover));
    let other = Asked {
        follow_up: Some(Some("t0".into())),
        ..follow_up.clone()
    };
    let stale = decided(world.run(gateway.setup(), other));
    assert_eq!(world.needs, FOLLOWED);
    assert!(matches!(stale.decision, Decision::InProgress(_)));
    assert_eq!(world.forwarded, 1);
    // The round is still there for its own follow-up.
    let done = decided(world.run(gateway.setup(), follow_up));
    assert!(matches!(done.decision, Decision::Performed(_)));
}

#[test]
fn a_follow_up_not_sent_keeps_its_round_and_one_lost_ends_the_lease() {
    let gateway = Gateway::new();
    let (mut world, operation, follow_up) = interim(&gateway, None);
    world.shutting_down = true;
    let down = decided(world.run(gateway.setup(), follow_up.clone()));
    assert_eq!(world.needs, then_follow(&["start", "keep round"]));
    assert!(matches!(down.decision, Decision::ShuttingDown));
    world.shutting_down = false;
    world.upstream.push_back(Upstream::NotSent);
    let unsent = decided(world.run(gateway.setup(), follow_up.clone()));
    assert_eq!(
        world.needs,
        then_follow(&["start", "forward", "keep round"])
    );
    assert!(matches!(unsent.decision, Decision::UpstreamUnavailable));
    // Sent, and no answer: unknown, and its lease now ends as a first forward's would.
    world.now = T0 + 60_000;
    world.upstream.push_back(Upstream::Lost);
    let lost = decided(world.run(gateway.setup(), follow_up.clone()));
    assert_eq!(world.needs, then_follow(&["start", "forward", "set lease"]));
    assert!(matches!(lost.decision, Decision::Unknown(_)));
    assert_eq!(lease_of(&world, &operation), T0 + 60_000 + LEASE_MS);
    world.now = T0 + 60_000 + LEASE_MS + 1;
    let retry = decided(world.run(gateway.setup(), follow_up));
    assert!(matches!(retry.decision, Decision::Unknown(_)));
    assert_eq!(world.forwarded, 2);
}

#[test]
fn an_interim_answer_whose_round_cannot_be_kept_ends_unknown() {
    let gateway = Gateway::new();
    let policy = poppy();
    let (mut world, operation) = minted(&gateway, &policy);
    world.upstream.push_back(Upstream::Interim(Some("t1")));
    world.failing.push("keep round");
    let end = decided(world.run(gateway.setup(), asked(&policy, alice(), Some(&operation))));
    assert!(matches!(end.decision, Decision::Unknown(_)));
    assert!(end.why.unwrap().contains("could not keep the round"));
}

fn then_follow(extra: &[&'static str]) -> Vec<&'static str> {
    [FOLLOWED, extra].concat()
}
