//! `needs_approval_when` in the flow: a false condition ends it where a new operation would
//! be held (nothing minted, recorded or forwarded by the flow); a true one, or one without a
//! value, holds as before; an approval, a replay and an unknown outcome are answered as
//! without a condition.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::sim::{Upstream, World};
use super::tests::{APPROVED_NEEDS, Gateway, LEASE_MS, T0, alice, asked, decided, held};
use super::*;

/// The demo's exchange: `difference` is computed from the looked-up prices (the world's
/// lookup gives both); `condition`: the `needs_approval_when` line.
fn exchange(condition: &str) -> Arc<Policy> {
    let text = format!(
        r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{{order_id}}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange on order {{order_id}}: {{item_price}} for {{replacement_price}} ({{difference}})."
{condition}
[operation.terms]
order_id = {{ path = "order_id" }}
item_price = {{ lookup = "$.item_price" }}
replacement_price = {{ lookup = "$.replacement_price" }}
difference = {{ compute = "replacement_price - item_price" }}
[operation.lookup]
url = "/orders/{{order_id}}"
"#
    );
    let policies = crate::config::parse_policy_file(Path::new("flow.toml"), &text).unwrap();
    Arc::new(policies[0].clone())
}

fn dearer() -> Arc<Policy> {
    exchange(r#"needs_approval_when = "difference > 0""#)
}

/// What the lookup (and the computed term, which the driver computes with it) gives.
fn prices(world: &mut World, item: &str, replacement: &str, difference: Option<Value>) {
    let mut terms = Terms::new();
    terms.insert("item_price".into(), json!(item));
    terms.insert("replacement_price".into(), json!(replacement));
    if let Some(difference) = difference {
        terms.insert("difference".into(), difference);
    }
    world.lookup = Some(terms);
}

#[test]
fn a_false_condition_ends_the_flow_unheld_where_it_would_mint() {
    let gateway = Gateway::new();
    let policy = dearer();
    let rows: [(&str, Option<Value>, bool); 6] = [
        ("same price", Some(json!("0.00")), false),
        ("cheaper", Some(json!("-20.00")), false),
        ("dearer", Some(json!("70.00")), true),
        ("a cent dearer", Some(json!("0.01")), true),
        // Cannot be evaluated: held, never passed through.
        ("no difference", None, true),
        ("not a number", Some(json!("n/a")), true),
    ];
    for (name, difference, is_held) in rows {
        let mut world = World::new(T0);
        prices(&mut world, "120.00", "190.00", difference);
        let end = world.run(gateway.setup(), asked(&policy, alice(), None));
        // Both read the record-free way: the lookup, then the action's state.
        assert_eq!(world.needs, ["terms", "action state"], "{name}");
        assert_eq!(world.forwarded, 0, "{name}");
        if is_held {
            held(end);
        } else {
            assert!(matches!(end, End::NotHeld), "{name}: {end:?}");
        }
    }
    // A lookup that refuses is refused, as without a condition.
    let mut world = World::new(T0);
    world.lookup = None;
    let end = world.run(gateway.setup(), asked(&policy, alice(), None));
    assert!(matches!(end, End::LookupRefused), "{end:?}");
    assert_eq!(world.forwarded, 0);
}

#[test]
fn a_dearer_exchange_is_held_performed_once_and_replayed() {
    let gateway = Gateway::new();
    let policy = dearer();
    let mut world = World::new(T0);
    prices(&mut world, "120.00", "190.00", Some(json!("70.00")));
    let operation = held(world.run(gateway.setup(), asked(&policy, alice(), None)));
    let approved = asked(&policy, alice(), Some(&operation));
    let performed = decided(world.run(gateway.setup(), approved.clone()));
    assert!(matches!(performed.decision, Decision::Performed(_)));
    assert_eq!(world.forwarded, 1);
    // Its retry, even once the prices say it would need no approval now: replayed from
    // its record (before the lookup), never forwarded again.
    prices(&mut world, "120.00", "120.00", Some(json!("0.00")));
    let retry = decided(world.run(gateway.setup(), approved));
    assert!(matches!(retry.decision, Decision::Replayed(_)));
    assert_eq!(world.needs, ["record"]);
    assert_eq!(world.forwarded, 1);
}

#[test]
fn an_approval_that_checks_out_is_performed_whatever_the_condition() {
    let gateway = Gateway::new();
    let mut world = World::new(T0);
    prices(&mut world, "120.00", "190.00", Some(json!("70.00")));
    let operation = held(world.run(gateway.setup(), asked(&dearer(), alice(), None)));
    // A reload raised the bar before the approval came back: the condition is false for
    // these terms now, and the approved request is still performed once, as approved.
    let raised = exchange(r#"needs_approval_when = "difference > 100""#);
    let approved = asked(&raised, alice(), Some(&operation));
    let end = decided(world.run(gateway.setup(), approved.clone()));
    // The record first (a policy with a lookup), then the approved path.
    let mut needs = vec!["record"];
    needs.extend(APPROVED_NEEDS);
    needs.extend(["read", "complete"]);
    assert_eq!(world.needs, needs);
    assert!(matches!(end.decision, Decision::Performed(_)));
    let retry = decided(world.run(gateway.setup(), approved));
    assert!(matches!(retry.decision, Decision::Replayed(_)));
    assert_eq!(world.forwarded, 1);
}

#[test]
fn a_refused_approval_of_terms_that_need_none_passes_through() {
    let gateway = Gateway::new();
    let policy = dearer();
    let mut world = World::new(T0);
    prices(&mut world, "120.00", "190.00", Some(json!("70.00")));
    let operation = held(world.run(gateway.setup(), asked(&policy, alice(), None)));
    // Bob carries Alice's approval for a same-price exchange: not his to give, and the
    // terms need none.
    prices(&mut world, "120.00", "120.00", Some(json!("0.00")));
    let bob = super::tests::approver("s2", None);
    let end = world.run(gateway.setup(), asked(&policy, bob, Some(&operation)));
    assert!(matches!(end, End::NotHeld), "{end:?}");
    assert_eq!(world.forwarded, 0);
}

#[test]
fn an_action_whose_outcome_is_unknown_is_answered_unknown_not_passed_through() {
    let gateway = Gateway::new();
    let policy = dearer();
    let mut world = World::new(T0);
    prices(&mut world, "120.00", "190.00", Some(json!("70.00")));
    let operation = held(world.run(gateway.setup(), asked(&policy, alice(), None)));
    world.upstream.push_back(Upstream::Lost);
    world.run(gateway.setup(), asked(&policy, alice(), Some(&operation)));
    world.now = T0 + LEASE_MS + 1;
    prices(&mut world, "120.00", "120.00", Some(json!("0.00")));
    let end = decided(world.run(gateway.setup(), asked(&policy, alice(), None)));
    assert!(
        matches!(end.decision, Decision::Unknown(_)),
        "{:?}",
        end.decision
    );
    assert_eq!(world.forwarded, 1);
}

#[test]
fn a_condition_changes_no_revision() {
    // An operation minted under the policy without a condition is approved under the one
    // with it (the revision covers the terms and summary, not the condition), and the
    // other way round.
    let gateway = Gateway::new();
    let without = exchange("");
    let with = dearer();
    for (mint_under, approve_under) in [(&without, &with), (&with, &without)] {
        let mut world = World::new(T0);
        prices(&mut world, "120.00", "190.00", Some(json!("70.00")));
        let operation = held(world.run(gateway.setup(), asked(mint_under, alice(), None)));
        let approved = asked(approve_under, alice(), Some(&operation));
        let end = decided(world.run(gateway.setup(), approved));
        assert!(
            matches!(end.decision, Decision::Performed(_)),
            "{:?}",
            end.decision
        );
        assert_eq!(end.rejection, None);
        assert_eq!(world.forwarded, 1);
    }
}
