//! The example Company Agent (`company`) and the example Personal Agent (`agent
//! --conversation`), run as real binaries with the real shop behind the real gateway: the
//! jacket exchange is proposed in a conversation, approved by the User, performed once, and
//! reported in a later message; declining, or text that only says "yes", performs nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use poppy_e2e::company::Company;
use poppy_e2e::{
    Client, GatewayBuilder, OPERATIONS_V2, Request, Run, Session, Shop, binaries, run_binary,
};
use serde_json::{Value, json};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

struct Demo {
    shop: Shop,
    gateway: poppy_e2e::Gateway,
    company: Company,
}

fn policy(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../policies")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The demo's parts: the shop, the gateway with the repository's shop policy and the
/// operations service, and the Company Agent using it.
fn demo() -> Demo {
    let shop = Shop::start();
    let gateway = GatewayBuilder::new(&shop.url())
        .policy("shop.toml", &policy("shop.toml"))
        .extra_config(&poppy_e2e::shop::approval_page_config())
        .conversations()
        .start();
    let company = Company::start(&gateway.conversations_url(), &[]);
    Demo {
        shop,
        gateway,
        company,
    }
}

impl Demo {
    async fn exchanges(&self) -> u64 {
        let answer = Client::new(&self.shop.url())
            .send(&Request::plain("GET", "/stats"))
            .await;
        answer.json()["exchanges"].as_u64().unwrap()
    }

    async fn agent(&self, args: &[&str], stdin: &str) -> Run {
        let mut all = vec![
            "--gateway".to_owned(),
            self.gateway.base_url(),
            "--conversation".to_owned(),
            self.company.url(),
            "--timeout".to_owned(),
            "15s".to_owned(),
            "--max-wait".to_owned(),
            "30s".to_owned(),
        ];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let stdin = stdin.to_owned();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = all.iter().map(String::as_str).collect();
            run_binary(&binaries::agent(), &args, &stdin, &[], RUN_TIMEOUT)
        })
        .await
        .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_agents_exchange_the_jacket_once_in_a_conversation() {
    let demo = demo();
    let run = demo.agent(&[], "y\n").await;
    run.assert_code(0, "approved in the conversation, performed");
    for shown in [
        "Stormline Outfitters asks for your approval. The action has NOT been performed.",
        "Exchange item itm_5Tz (Stormline Jacket (M), paid 120.00 USD) on order ord_2Cv6 for Stormline Insulated Jacket (M) (stormline-insulated-m, 190.00 USD), for 70.00 USD more, charged to the card used for the order.",
        "Approve? [y/N]",
        "Stormline Outfitters: Done: exchange exg_1 on order ord_2Cv6",
    ] {
        assert!(
            run.stderr.contains(shown),
            "the agent shows {shown:?}:\n{}",
            run.describe()
        );
    }
    let answer: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is the shop's answer ({e}):\n{}", run.describe()));
    assert_eq!(answer["to_sku"], "stormline-insulated-m");
    assert_eq!(demo.exchanges().await, 1, "performed exactly once");
    let metrics = demo.gateway.metrics().await;
    assert_eq!(metrics.operations("exchange", "performed"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declining_in_a_conversation_performs_nothing() {
    let demo = demo();
    let run = demo.agent(&[], "n\n").await;
    run.assert_code(1, "declined");
    assert!(
        run.stderr
            .contains("Not performed: you did not approve it."),
        "{}",
        run.describe()
    );
    assert_eq!(demo.exchanges().await, 0);
    assert!(
        !demo.company.log().contains("Done:"),
        "{}",
        demo.company.log()
    );
}

/// The Company Agent hands every later message to the operations service, which decides: a
/// message whose text says "yes" gets the terms again, nothing performed; the approval in
/// `extensions.operations.approval` performs the exchange, told in a later message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_that_says_yes_is_no_approval_for_the_company_agent() {
    let demo = demo();
    let chat = Client::new(&demo.company.url());
    let session = Session::signed_out("ses_company_text");
    let with_headers = |request: Request| {
        request
            .header("Poppy-Session", &session.header())
            .header("Poppy-Extensions", OPERATIONS_V2)
    };
    let opened = chat
        .send(&with_headers(Request::plain("POST", "/conversations")))
        .await;
    opened.assert_status(201, "open a conversation");
    let conversation = opened.json()["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut after: Option<String> = None;
    let mut say = async |message: Value| -> Value {
        let sent = chat
            .send(&with_headers(
                Request::plain("POST", &format!("/conversations/{conversation}/messages"))
                    .json(&message),
            ))
            .await;
        sent.assert_status(202, "a message");
        let mut path = format!("/conversations/{conversation}/events?wait=20");
        if let Some(after) = &after {
            path.push_str(&format!("&after={after}"));
        }
        let events = chat
            .send(&with_headers(Request::plain("GET", &path)))
            .await
            .json();
        let event = events["events"][0].clone();
        assert!(
            event.is_object(),
            "the Company answers in a message: {events}"
        );
        after = event["id"].as_str().map(str::to_owned);
        event["message"].clone()
    };
    let proposal = say(json!({"id": "msg_t1", "text": "Can I get the insulated jacket?"})).await;
    let operation = proposal["extensions"]["operations"]["operation"].clone();
    assert!(
        operation["revision"].is_string(),
        "the proposal carries the operation: {proposal}"
    );
    let reply = say(json!({"id": "msg_t2", "text": "Yes, I approve, go ahead and do it."})).await;
    assert!(
        reply["extensions"]["operations"]["operation"]["revision"].is_string(),
        "{reply}"
    );
    assert!(
        reply["data"]["outcome"].is_null(),
        "nothing happened: {reply}"
    );
    assert_eq!(demo.exchanges().await, 0, "text approves nothing");
    let done = say(json!({
        "id": "msg_t3",
        "text": "The user approved the exchange.",
        "extensions": {"operations": {"approval": {
            "operation_id": operation["operation_id"], "revision": operation["revision"]}}},
    }))
    .await;
    assert_eq!(done["data"]["outcome"], "performed", "{done}");
    assert_eq!(demo.exchanges().await, 1);
}
