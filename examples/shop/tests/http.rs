//! Starts the real `shop` binary on a free port and talks plain HTTP/1.1 to it
//! over a `TcpStream`, as any client of the legacy API would.

// clippy's allow-expect-in-tests covers `#[test]` functions, not the helpers
// they share here; in a test, a failed expectation is simply a failed test.
#![allow(clippy::expect_used, reason = "test helpers")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

/// A running shop; killed when dropped, so a failing test leaves no process behind.
struct Shop {
    child: Child,
    addr: String,
}

impl Shop {
    fn start() -> Shop {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shop"))
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn shop");
        let stdout = child.stdout.take().expect("shop stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let addr = line
            .trim()
            .strip_prefix("shop listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        Shop { child, addr }
    }

    /// One request on a fresh connection; returns the status and the JSON body.
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let mut stream = TcpStream::connect(&self.addr).expect("connect to shop");
        let body = body.unwrap_or("");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        stream.write_all(head.as_bytes()).expect("send head");
        stream.write_all(body.as_bytes()).expect("send body");

        let mut raw = String::new();
        stream.read_to_string(&mut raw).expect("read response");
        let (head, body) = raw.split_once("\r\n\r\n").expect("end of headers");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line in {head:?}"));
        let json = serde_json::from_str(body).unwrap_or_else(|e| panic!("body {body:?}: {e}"));
        (status, json)
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, None)
    }

    fn post(&self, path: &str, body: &str) -> (u16, Value) {
        self.request("POST", path, Some(body))
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_exchange_changes_the_order_and_is_counted() {
    let shop = Shop::start();

    let (status, order) = shop.get("/orders/ord_7Hk2");
    assert_eq!(status, 200);
    assert_eq!(order["customer"], "Ada");
    assert_eq!(order["items"][0]["sku"], "stormline-m");
    assert_eq!(order["items"][0]["price"], "120.00");
    assert_eq!(
        shop.get("/stats"),
        (200, json!({"exchanges": 0, "cancellations": 0}))
    );

    let body = r#"{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}"#;
    let (status, exchange) = shop.post("/orders/ord_7Hk2/exchanges", body);
    assert_eq!(status, 201);
    assert_eq!(
        exchange,
        json!({
            "exchange_id": "exg_1",
            "order_id": "ord_7Hk2",
            "item_id": "itm_4Qa",
            "from_sku": "stormline-m",
            "to_sku": "stormline-insulated-m",
            "price_difference": {"amount": "70.00", "currency": "USD"},
        })
    );

    let (_, order) = shop.get("/orders/ord_7Hk2");
    assert_eq!(order["items"][0]["sku"], "stormline-insulated-m");
    assert_eq!(order["items"][0]["name"], "Stormline Insulated Jacket (M)");
    assert_eq!(order["items"][0]["price"], "190.00");
    assert_eq!(order["exchanges"][0], exchange);
    assert_eq!(
        shop.get("/stats").1,
        json!({"exchanges": 1, "cancellations": 0})
    );

    // The legacy API has no duplicate detection: the same request again is
    // performed again. This is what the gateway is for.
    let (status, again) = shop.post("/orders/ord_7Hk2/exchanges", body);
    assert_eq!(status, 201);
    assert_eq!(again["exchange_id"], "exg_2");
    assert_eq!(shop.get("/stats").1["exchanges"], 2);
}

#[test]
fn refusals_are_json_and_perform_nothing() {
    let shop = Shop::start();

    let (status, err) = shop.get("/orders/ord_nope");
    assert_eq!(status, 404);
    assert_eq!(err["error"], "not_found");
    assert!(err["detail"].is_string());

    let exchange = |order: &str, body: &str| shop.post(&format!("/orders/{order}/exchanges"), body);
    assert_eq!(exchange("ord_7Hk2", "{not json").0, 400);
    assert_eq!(
        exchange("ord_7Hk2", r#"{"item_id": "itm_4Qa"}"#).1["error"],
        "bad_request"
    );
    assert_eq!(
        exchange(
            "ord_7Hk2",
            r#"{"item_id": "itm_zzz", "replacement_sku": "stormline-l"}"#
        )
        .0,
        404
    );
    assert_eq!(
        exchange(
            "ord_7Hk2",
            r#"{"item_id": "itm_4Qa", "replacement_sku": "no-such"}"#
        )
        .0,
        404
    );

    // Cancel with a reason, then again: the second is a conflict.
    let (status, cancelled) = shop.post(
        "/orders/ord_3Lm9/cancel",
        r#"{"reason": "changed my mind"}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(
        cancelled,
        json!({"order_id": "ord_3Lm9", "status": "cancelled"})
    );
    assert_eq!(shop.post("/orders/ord_3Lm9/cancel", "").0, 409);
    assert_eq!(
        exchange(
            "ord_3Lm9",
            r#"{"item_id": "itm_2Xy", "replacement_sku": "socks-trail"}"#
        )
        .0,
        409
    );

    assert_eq!(
        shop.get("/stats").1,
        json!({"exchanges": 0, "cancellations": 1})
    );
    assert_eq!(
        shop.get("/orders/ord_7Hk2").1["items"][0]["sku"],
        "stormline-m"
    );
}

#[test]
fn catalog_and_discovery_document() {
    let shop = Shop::start();

    assert_eq!(
        shop.get("/catalog/stormline-insulated-m"),
        (
            200,
            json!({
                "sku": "stormline-insulated-m",
                "name": "Stormline Insulated Jacket (M)",
                "price": {"amount": "190.00", "currency": "USD"},
            })
        )
    );
    assert_eq!(shop.get("/catalog/nothing").0, 404);
    // What was paid for an item: the exchange charges the difference.
    assert_eq!(
        shop.get("/orders/ord_7Hk2/items/itm_4Qa"),
        (
            200,
            json!({
                "order_id": "ord_7Hk2",
                "item_id": "itm_4Qa",
                "sku": "stormline-m",
                "name": "Stormline Jacket (M)",
                "price": {"amount": "120.00", "currency": "USD"},
            })
        )
    );
    assert_eq!(shop.get("/orders/ord_7Hk2/items/itm_none").0, 404);
    assert_eq!(shop.get("/orders/ord_none/items/itm_4Qa").0, 404);
    assert_eq!(
        shop.get("/.well-known/poppy.json"),
        (
            200,
            json!({"name": "Stormline Outfitters", "version": "0.4", "extensions": {}})
        )
    );
    assert_eq!(shop.get("/no/such/route").1["error"], "not_found");
}
