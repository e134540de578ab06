//! What was approved, for an upstream that wants to check (issue 37, docs/upstream-check.md):
//! with `[upstream.approval_header]` every approved execution carries an EdDSA JWS of the
//! operation, revision, terms (the looked-up price too), policy and request line. The example
//! upstream, `examples/upstream-check/app.py` (Flask 3.1.3 and PyJWT 2.15.1 with cryptography,
//! `deps/python/upstream-check`), verifies it with the operator's public key and refuses a
//! forward whose price changed after the approval's lookup; the gateway records that refusal
//! as the outcome. A client's own copy of the header is stripped everywhere; passthrough and
//! lookups carry none; without the table no forward carries one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use poppy_e2e::openssl::ed25519_key;
use poppy_e2e::redis::RedisServer;
use poppy_e2e::{GatewayBuilder, Request, Session, Store, store_tests, thirdparty};
use serde_json::{Value, json};

const POLICY: &str = r#"
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange order {order_id} for {sku} at {price}."

[operation.terms]
order_id = { path = "order_id" }
sku = { body = "$.replacement_sku" }
price = { lookup = "$.price" }

[operation.lookup]
url = "/catalog/{sku}"
"#;

const FORGED: &str = "eyJhbGciOiJub25lIn0.eyJ0ZXJtcyI6eyJwcmljZSI6IjEuMDAifX0.";

/// The example upstream, killed on drop.
struct Shop {
    child: Child,
    port: u16,
}

impl Shop {
    fn start(public_key: &Path) -> Shop {
        let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/upstream-check/app.py");
        let mut child = Command::new(thirdparty::python("upstream-check"))
            .arg(&app)
            .arg("--public-key")
            .arg(public_key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn examples/upstream-check/app.py");
        let stdout = child.stdout.take().expect("its stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = sender.send(lines.next());
            for _ in lines {}
        });
        let port = match receiver.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(Ok(line))) => line
                .strip_prefix("PORT ")
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or_else(|| panic!("app.py printed {line:?}, not `PORT n`")),
            other => {
                let _ = child.kill();
                panic!("app.py did not start within 30 s: {other:?}");
            }
        };
        Shop { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What it saw: each request's method, path, header and verdict.
    async fn log(&self) -> Vec<Value> {
        reqwest::get(format!("{}/log", self.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The price of `sku` changes to `price` after `after_reads` more reads.
    async fn schedule_price(&self, sku: &str, price: &str, after_reads: u32) {
        let answer = reqwest::Client::new()
            .put(format!("{}/catalog/{sku}", self.url()))
            .json(&json!({"price": price, "after_reads": after_reads}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct World {
    shop: Shop,
    gateway: poppy_e2e::Gateway,
    _redis: Option<RedisServer>,
    _keys: tempfile::TempDir,
}

fn start(store: Store, header_on: bool) -> World {
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = ed25519_key(keys.path(), "approval-header");
    let shop = Shop::start(&public);
    let redis = (store == Store::Redis).then(RedisServer::start);
    let mut builder = GatewayBuilder::new(&shop.url()).policy("shop.toml", POLICY);
    if header_on {
        builder = builder.extra_config(&format!(
            "[upstream.approval_header]\nsigning_key = \"{}\"\n",
            private.display()
        ));
    }
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    World {
        gateway: builder.start(),
        shop,
        _redis: redis,
        _keys: keys,
    }
}

fn exchange(session: &Session) -> Request {
    Request::agent("POST", "/orders/o1/exchanges", session)
        .json(&json!({"replacement_sku": "s1"}))
        .header("Poppy-Approved", FORGED)
}

/// The headline: approved at 10.00, the price changes between the approved request's lookup
/// and its forward, the upstream verifies the header and refuses; that answer is the outcome
/// (a retry replays it). An unchanged price is charged once, the header verified; a client's
/// copy never arrives; lookups and passthrough carry none.
async fn an_upstream_refuses_a_forward_whose_price_changed_after_approval(store: Store) {
    let world = start(store, true);
    let session = Session::signed_out("ses_check");
    let held = world.gateway.send(&exchange(&session)).await.operation();
    assert_eq!(held.terms["price"], "10.00");
    // The approved request's own lookup still reads 10.00; right after it the price is 99.00.
    world.shop.schedule_price("s1", "99.00", 1).await;
    let approved = exchange(&session).approve(&held);
    let first_id = held.operation_id.clone();
    let refused = world.gateway.send(&approved).await;
    let body = refused.assert_error(409, "price_changed", "the upstream's refusal");
    assert_eq!(
        (&body["approved"], &body["price"]),
        (&json!("10.00"), &json!("99.00"))
    );
    world
        .gateway
        .send(&approved)
        .await
        .assert_replay_of(&refused, "the refusal is the recorded outcome");
    // At the new price: a new operation, approved, charged once.
    let held = world.gateway.send(&exchange(&session)).await.operation();
    assert_eq!(held.terms["price"], "99.00");
    world
        .gateway
        .send(&exchange(&session).approve(&held))
        .await
        .assert_status(201, "charged at the approved price");
    // Passthrough, with a client's own header.
    let passthrough = Request::plain("GET", "/orders/o1").header("Poppy-Approved", FORGED);
    world
        .gateway
        .send(&passthrough)
        .await
        .assert_status(200, "passthrough");

    let log = world.shop.log().await;
    let verdicts: Vec<&str> = log.iter().map(|r| r["verdict"].as_str().unwrap()).collect();
    assert_eq!(
        verdicts,
        [
            "lookup",
            "lookup",
            "price changed",
            "lookup",
            "lookup",
            "charged",
            "passthrough"
        ],
        "one forward per approval, each verified: {log:#?}"
    );
    for seen in &log {
        let header = seen["header"].as_str();
        assert_ne!(header, Some(FORGED), "a client's copy is stripped: {seen}");
        match seen["verdict"].as_str().unwrap() {
            "lookup" | "passthrough" => assert_eq!(header, None, "{seen}"),
            _ => assert!(header.is_some(), "{seen}"),
        }
    }
    let claims = &log[2]["claims"];
    assert_eq!(claims["jti"], claims["operation_id"]);
    assert_eq!(claims["operation_id"].as_str(), Some(first_id.as_str()));
    assert_eq!(claims["policy"], "exchange");
    assert_eq!(
        (&claims["method"], &claims["path"]),
        (&json!("POST"), &json!("/orders/o1/exchanges"))
    );
    assert_eq!(
        claims["terms"],
        json!({"order_id": "o1", "sku": "s1", "price": "10.00"})
    );
    assert!(claims["exp"].as_i64().unwrap() > claims["iat"].as_i64().unwrap());
}

/// Without `[upstream.approval_header]` no forward carries one, nor a client's copy: the
/// example upstream, which requires it, refuses the approved exchange (403), and that answer
/// is the outcome.
async fn off_by_default(store: Store) {
    let world = start(store, false);
    let session = Session::signed_out("ses_off");
    let held = world.gateway.send(&exchange(&session)).await.operation();
    world
        .gateway
        .send(&exchange(&session).approve(&held))
        .await
        .assert_error(403, "approval_not_verified", "no header to verify");
    let log = world.shop.log().await;
    assert_eq!(log.len(), 3, "two lookups and one forward: {log:#?}");
    assert!(log.iter().all(|r| r["header"].is_null()), "{log:#?}");
}

store_tests!(
    an_upstream_refuses_a_forward_whose_price_changed_after_approval,
    off_by_default,
);
