//! The page's answers, from requests built here (no listener).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Map, Value};

use super::decision::keep_after;
use super::wire::{csp_for, form_pairs, form_value, origin_of, respond};
use super::*;
use crate::protocol::page_link::{Details, account_binding, mint};
use crate::protocol::{OperationId, SigningKey};
use crate::store::MemoryStore;

/// A page retry finds the record by its decision: the decision is kept at least as long
/// as the record of an operation claimed before its revision's expiry, however long its
/// forward ran (at most `longest_execution`).
#[test]
fn a_decision_outlives_the_record_of_its_operation() {
    let (expires_in, grace) = (Duration::from_secs(900), Duration::from_secs(60));
    let longest = Duration::from_secs(33);
    let expires_at = 1_900_000_000_i64;
    let kept = i64::try_from(keep_after(expires_in, longest, grace).as_millis()).unwrap();
    let remember = crate::operation::Remember {
        expires_at,
        expires_in,
        grace,
    };
    let last_completion = expires_at * 1000 + 33_000;
    for completed_ms in [
        expires_at * 1000 - 900_000,
        expires_at * 1000,
        last_completion,
    ] {
        assert!(remember.until_ms(completed_ms, None) <= expires_at * 1000 + kept);
    }
}

fn app() -> ApprovalPageApp {
    let keys = Keys::new(vec![SigningKey::new(
        b"page-app-test-key-0123456789abcde".to_vec(),
    )])
    .expect("a key");
    ApprovalPageApp {
        company: "Shop".into(),
        keys,
        store: Arc::new(MemoryStore::new()),
        grace: Duration::from_secs(60),
        longest_execution: Duration::from_secs(33),
        policies: LivePolicies::new(crate::policy::PolicySet::default()),
        public_url: "https://approve.shop.example".into(),
        csp: csp_for("https://id.shop.example"),
        signin: SignIn::new(&ApprovalPage {
            listen: "127.0.0.1:0".into(),
            public_url: "https://approve.shop.example".into(),
            company_name: "Shop".into(),
            issuer: "https://id.shop.example".into(),
            client_id: "page".into(),
            client_secret: crate::config::ClientSecret::for_tests("s"),
            client_secret_source: "test".into(),
            agents: None,
        })
        .expect("a client"),
    }
}

fn page_link(app: &ApprovalPageApp, summary: &str) -> (String, String) {
    let mut terms = Map::new();
    terms.insert("item_id".into(), Value::String("A1".into()));
    let id = OperationId::parse("exc_aAAAAAAAAAAAAAAAABBBBBBBB").expect("an id");
    let details = Details {
        policy: "exchange".into(),
        summary: summary.into(),
        terms,
        expires_at: 1_900_000_000,
        account: Some(account_binding(app.keys.current(), "verified:alice")),
        route: None,
    };
    let link = mint(app.keys.current(), &id, "1900000000-abc", &details).expect("minted");
    let (path, query) = link.split_once('?').expect("a query");
    (path.to_owned(), query.to_owned())
}

fn request(method: &str, path: &str, query: &str, cookies: &str, body: &str) -> Request {
    Request {
        method: method.into(),
        path: path.into(),
        query: query.into(),
        cookies: cookies.into(),
        origin: None,
        body: Bytes::from(body.to_owned()),
    }
}

fn signed_in(app: &ApprovalPageApp, subject: &str) -> String {
    session::seal(
        app.keys.current(),
        Purpose::Session,
        subject.as_bytes(),
        1_800_003_600,
    )
}

#[tokio::test]
async fn a_genuine_link_shows_the_operation_and_asks_to_sign_in() {
    let app = app();
    let (path, query) = page_link(&app, "Exchange <b>**A1**</b>.");
    let page = app
        .handle(&request("GET", &path, &query, "", ""), 1_800_000_000)
        .await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("&lt;b&gt;<strong>A1</strong>&lt;/b&gt;"),
        "{}",
        page.body
    );
    assert!(page.body.contains("<dt>item_id</dt><dd>A1</dd>"));
    assert!(page.body.contains("<p class=\"company\">Shop</p>"));
    assert!(page.body.contains("Sign in to approve"));
}

#[tokio::test]
async fn the_account_decides_once_with_its_csrf_token() {
    let app = app();
    let (path, query) = page_link(&app, "x");
    let now = 1_800_000_000;
    let sealed = signed_in(&app, "alice");
    let cookie = format!("__Host-poppy_page={sealed}");
    let shown = app
        .handle(&request("GET", &path, &query, &cookie, ""), now)
        .await;
    assert!(shown.body.contains("id=\"approve\""), "{}", shown.body);
    let id = path.strip_prefix("/approve/").unwrap();
    let csrf = session::csrf_token(app.keys.current(), &sealed, id, "1900000000-abc");
    // Without a token, with another's, or as another account: nothing stored.
    for (cookie, body) in [
        (cookie.clone(), "decision=approve".to_owned()),
        (cookie.clone(), "decision=approve&csrf=AAAA".to_owned()),
        (
            format!("__Host-poppy_page={}", signed_in(&app, "bob")),
            format!("decision=approve&csrf={csrf}"),
        ),
    ] {
        let page = app
            .handle(&request("POST", &path, &query, &cookie, &body), now)
            .await;
        assert_eq!(page.status, 403, "{}", page.body);
    }
    let (_, kept) = app.store.page_state(&id[4..20]).await.unwrap();
    assert!(kept.is_empty());
    let body = format!("decision=approve&csrf={csrf}");
    let page = app
        .handle(&request("POST", &path, &query, &cookie, &body), now)
        .await;
    assert_eq!(page.status, 303);
    let again = app
        .handle(
            &request(
                "POST",
                &path,
                &query,
                &cookie,
                &body.replace("approve", "decline"),
            ),
            now,
        )
        .await;
    assert!(again.headers.iter().any(|(_, v)| v.ends_with("again=1")));
    let shown = app
        .handle(&request("GET", &path, &query, &cookie, ""), now)
        .await;
    assert!(
        shown.body.contains("Approved by <strong>alice</strong>"),
        "{}",
        shown.body
    );
    assert!(shown.body.contains("Not performed yet"));
}

#[tokio::test]
async fn other_requests_get_error_pages() {
    let app = app();
    let (path, query) = page_link(&app, "x");
    let get = |p: &str, q: &str| request("GET", p, q, "", "");
    assert_eq!(
        app.handle(&request("PUT", &path, &query, "", ""), 0)
            .await
            .status,
        405
    );
    assert_eq!(app.handle(&get("/", ""), 0).await.status, 404);
    let forged = query.replace("r=1900000000-abc", "r=1900000000-abd");
    let page = app.handle(&get(&path, &forged), 0).await;
    assert_eq!(page.status, 404);
    assert!(page.body.contains("not made by this gateway"));
    assert_eq!(app.handle(&get("/approval.css", ""), 0).await.status, 200);
    // A sign-in that returns elsewhere is refused: no open redirect.
    let page = app
        .handle(
            &request("POST", "/signin", "", "", "return=https://evil.example/"),
            0,
        )
        .await;
    assert_eq!(page.status, 400);
}

#[tokio::test]
async fn every_answer_has_the_security_headers() {
    let app = app();
    let response = respond(
        app.handle(&request("GET", "/", "", "", ""), 0).await,
        false,
        &app.csp,
    );
    let csp = response
        .headers()
        .get("content-security-policy")
        .expect("a CSP");
    assert!(
        csp.to_str().is_ok_and(
            |v| v.contains("frame-ancestors 'none'") && v.starts_with("default-src 'none'")
        )
    );
    assert!(
        csp.to_str()
            .is_ok_and(|v| v.contains("form-action 'self' https://id.shop.example;"))
    );
    assert_eq!(response.headers()["x-frame-options"], "DENY");
    assert_eq!(response.headers()["referrer-policy"], "no-referrer");
}

#[test]
fn origins_and_forms_read_as_meant() {
    assert_eq!(
        origin_of("https://a.example:8443/x"),
        "https://a.example:8443"
    );
    assert_eq!(origin_of("http://127.0.0.1:9"), "http://127.0.0.1:9");
    let pairs = form_pairs(b"a=1&return=%2Fapprove%2Fx%3Fr%3D1&b=x+y");
    assert_eq!(form_value(&pairs, "return"), Some("/approve/x?r=1"));
    assert_eq!(form_value(&pairs, "b"), Some("x y"));
}
