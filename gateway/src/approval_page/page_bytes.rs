//! The page's exact bytes for representative inputs, against files captured from the first
//! renderer (`format!` and `escape()`, before the askama templates): hostile terms and summaries,
//! hidden characters, every standing and outcome, the error page. A change to the page's
//! markup shows here as a diff of these files: after an intended change, write them anew with
//! `POPPY_WRITE_PAGE_BYTES=1 cargo test -p poppy-gateway --lib page_bytes` and read the diff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use serde_json::{Map, Value, json};

use super::html::{Done, Standing, View, error_page, operation_page};
use crate::operation::page::PageVerdict;
use crate::protocol::OperationId;
use crate::protocol::page_link::{Details, Link};

/// Before `expires_at`.
const OPEN: i64 = 1_800_000_000;
const EXPIRES_AT: i64 = 1_900_000_000;
/// A company name that needs escaping everywhere it is shown, in the title too.
const COMPANY: &str = "Shop <i>&\"'</i>\u{200B}";

fn link(summary: &str, terms: Map<String, Value>) -> Link {
    Link {
        operation_id: OperationId::parse("exc_aAAAAAAAAAAAAAAAABBBBBBBB").expect("an id"),
        revision: "1900000000-abc".into(),
        details: Details {
            policy: "exchange".into(),
            summary: summary.into(),
            terms,
            expires_at: EXPIRES_AT,
            account: None,
            route: None,
        },
    }
}

/// Terms a page must show exactly: markup, quotes, hidden characters, line breaks, JSON.
fn hostile_terms() -> Map<String, Value> {
    let mut terms = Map::new();
    terms.insert("<b>name\"'".into(), json!("<script>alert('x')</script>"));
    terms.insert("amount".into(), json!("1 000 & \"EUR\""));
    terms.insert(
        "iban".into(),
        json!("DE89\u{200B}3704\u{202E}0044\t0532\n0130"),
    );
    terms.insert("count".into(), json!({"a": [1, "\u{202E}<i>"], "b": null}));
    terms.insert("n".into(), json!(42));
    terms.insert("zero\u{200D}width".into(), json!(true));
    terms
}

const SUMMARY: &str = "Exchange *item* **A1** <b>now</b>.\n\n- one [link](https://e.example)\n- two \u{202E}x\n\n3. `code`\n\n# Heading\n\n> quoted & \"said\"";

fn page(link: &Link, now: i64, standing: Standing<'_>) -> String {
    operation_page(&View {
        company: COMPANY,
        link,
        now,
        standing,
    })
    .expect("rendered")
}

fn decided(verdict: PageVerdict, done: Done, again: bool) -> Standing<'static> {
    Standing::Decided {
        verdict,
        subject: "alice <a@e.example> \"A\"\u{202E}",
        at_ms: 1_800_000_123_456,
        done,
        again,
    }
}

/// Every page under test, by file name.
fn pages() -> Vec<(&'static str, String)> {
    let hostile = link(SUMMARY, hostile_terms());
    let plain = link("Exchange item A1.", {
        let mut terms = Map::new();
        terms.insert("item_id".into(), json!("A1"));
        terms
    });
    let action = "/approve/exc_aAAAAAAAAAAAAAAAABBBBBBBB?r=1900000000-abc&d=e30&m=x\"y<z>";
    vec![
        (
            "sign_in.html",
            page(
                &hostile,
                OPEN,
                Standing::SignIn {
                    return_to: "/approve/x?r=1&d=\"<>'&m=y",
                },
            ),
        ),
        (
            "expired.html",
            page(&hostile, EXPIRES_AT, Standing::SignIn { return_to: "/x" }),
        ),
        (
            "decide.html",
            page(
                &plain,
                OPEN,
                Standing::Decide {
                    subject: "alice<script>\u{200B}",
                    csrf: "tok\"en&<>",
                    action,
                },
            ),
        ),
        (
            "decide_expired.html",
            page(
                &plain,
                EXPIRES_AT + 1,
                Standing::Decide {
                    subject: "alice",
                    csrf: "t",
                    action,
                },
            ),
        ),
        (
            "other_account.html",
            page(
                &plain,
                OPEN,
                Standing::OtherAccount {
                    subject: "bob \"<b>\"\u{2066}",
                },
            ),
        ),
        (
            "approved_waiting_again.html",
            page(
                &hostile,
                OPEN,
                decided(PageVerdict::Approved, Done::Waiting, true),
            ),
        ),
        (
            "approved_in_progress.html",
            page(
                &plain,
                EXPIRES_AT + 5,
                decided(PageVerdict::Approved, Done::InProgress, false),
            ),
        ),
        (
            "approved_performed.html",
            page(
                &plain,
                OPEN,
                decided(PageVerdict::Approved, Done::Performed(201), false),
            ),
        ),
        (
            "declined_again.html",
            page(
                &plain,
                OPEN,
                decided(PageVerdict::Declined, Done::Performed(200), true),
            ),
        ),
        (
            "error.html",
            error_page(
                COMPANY,
                "This link is <not> \"valid\"\u{202E}",
                "It's & it <b>isn't</b>.\nOpen\tit again\u{0007}.",
            ),
        ),
    ]
}

fn captured(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/approval_page/page_bytes")
        .join(name)
}

#[test]
fn every_page_is_byte_for_byte_the_captured_one() {
    let write = std::env::var_os("POPPY_WRITE_PAGE_BYTES").is_some();
    for (name, html) in pages() {
        let path = captured(name);
        if write {
            std::fs::write(&path, &html).unwrap();
            continue;
        }
        let expected =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            html == expected,
            "{name} differs from {}:\n--- rendered\n{html}\n--- captured\n{expected}",
            path.display()
        );
    }
}

/// The captured pages themselves hold what the page promises: nothing from the inputs
/// reaches them as markup, and hidden characters are named.
#[test]
fn the_captured_pages_hold_no_markup_from_the_inputs() {
    for (name, html) in pages() {
        for raw in [
            "<script", "<b>", "<i>", "<a ", "<not>", "\u{200B}", "\u{202E}", "\u{2066}",
        ] {
            assert!(!html.contains(raw), "{name} contains {raw:?}");
        }
        assert!(!html.contains("href=\"https"), "{name}");
    }
    let sign_in = &pages()[0].1;
    assert!(sign_in.contains("&lt;U+200B ZERO WIDTH SPACE&gt;"));
    assert!(sign_in.contains("&lt;U+000A&gt;0130"));
}
