//! Policies whose routes can match the same request (issue 25): a looser policy must not hold
//! a request whose own policy puts more in the summary. A SIGHUP reload refuses them (the
//! running policies are kept) unless the more specific one `overrides` the other, which then
//! holds every request both match, whatever the file order. (`check` and startup: cli.rs.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::metrics::Metrics;
use poppy_e2e::{Request, Session, Stack, Store, store_tests, wait};
use serde_json::json;

const RELOAD_DEADLINE: Duration = Duration::from_secs(10);

/// Any action on an order: its summary names the order and the action, nothing else.
const GENERAL: &str = r#"[[operation]]
name = "order_action"
method = "POST"
path = "/orders/{order_id}/{action}"
id_prefix = "act"
expires_in = "15m"
same_action = ["order_id", "action"]
summary = "Do {action} on order {order_id}."

[operation.terms]
order_id = { path = "order_id" }
action = { path = "action" }
"#;

/// An exchange: its summary names the item too. `OVERRIDES` marks where `overrides` goes.
const EXCHANGE: &str = r#"[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
OVERRIDES
summary = "Exchange item **{item_id}** on order {order_id}."

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
"#;

fn exchange(overrides: bool) -> String {
    EXCHANGE.replace(
        "OVERRIDES",
        if overrides {
            "overrides = [\"order_action\"]"
        } else {
            ""
        },
    )
}

fn exchange_request(session: &Session) -> Request {
    Request::agent("POST", "/Orders//o1/%65xchanges/", session).json(&json!({"item_id": "itm_9"}))
}

fn returns_request(session: &Session) -> Request {
    Request::agent("POST", "/orders/o1/returns", session).json(&json!({}))
}

/// The policy marked more specific holds the requests both match, first or last in file
/// order (files load in name order); the other holds the rest.
async fn the_more_specific_policy_wins_in_any_file_order(store: Store) {
    for (first, second) in [
        (GENERAL.to_owned(), exchange(true)),
        (exchange(true), GENERAL.to_owned()),
    ] {
        let stack = Stack::start_with(store, |b| {
            b.policy("a.toml", &first).policy("b.toml", &second)
        });
        let session = Session::signed_out("ses_overlap");
        let held = stack
            .gateway
            .send(&exchange_request(&session))
            .await
            .operation();
        held.assert_prefix("exc");
        assert!(held.summary.contains("itm_9"), "{}", held.summary);
        let other = stack
            .gateway
            .send(&returns_request(&session))
            .await
            .operation();
        other.assert_prefix("act");
        stack.assert_executions(0, "held, not forwarded");
    }
}

/// A reload that would add an overlapping policy is refused and the running ones kept; once
/// the more specific one says so, the reload applies.
async fn a_reload_with_overlapping_policies_is_refused(store: Store) {
    let stack = Stack::start_with(store, |b| b.policy("exchange.toml", &exchange(false)));
    let session = Session::signed_out("ses_reload");
    let gateway = &stack.gateway;
    let reloads =
        |m: &Metrics, result: &str| m.value("poppy_config_reloads_total", &[("result", result)]);
    let reload = |result: &'static str| async move {
        let before = reloads(&gateway.metrics().await, result);
        gateway.signal("HUP");
        wait::until_some(RELOAD_DEADLINE, || async {
            (reloads(&gateway.metrics().await, result) > before).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("a reload counted as {result}"));
    };

    std::fs::write(gateway.policies_dir().join("general.toml"), GENERAL).unwrap();
    reload("failure").await;
    assert!(
        gateway.log().contains("`exchange`") && gateway.log().contains("`order_action`"),
        "the log names both policies:\n{}",
        gateway.log()
    );
    gateway
        .send(&exchange_request(&session))
        .await
        .operation()
        .assert_prefix("exc");
    // `order_action` was not loaded: the request passes through.
    gateway
        .send(&returns_request(&session))
        .await
        .assert_upstream_answer(1, "POST", "/orders/o1/returns");

    std::fs::write(gateway.policies_dir().join("exchange.toml"), exchange(true)).unwrap();
    reload("success").await;
    gateway
        .send(&exchange_request(&session))
        .await
        .operation()
        .assert_prefix("exc");
    gateway
        .send(&returns_request(&session))
        .await
        .operation()
        .assert_prefix("act");
    stack.assert_executions(1, "only the request no policy held");
}

store_tests!(
    the_more_specific_policy_wins_in_any_file_order,
    a_reload_with_overlapping_policies_is_refused,
);
