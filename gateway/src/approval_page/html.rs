//! The page's HTML, from the templates in `gateway/templates/approval/`: askama checks and
//! compiles them with the binary, and every value they show goes through the page's escaper
//! ([`super::escape`]); the one exception, the summary, is HTML that [`super::markdown`]
//! made and escaped itself.

use askama::Template;
use serde_json::Value;

use super::markdown::render;
use crate::operation::page::PageVerdict;
use crate::operation::rfc3339_ms;
use crate::policy::{canonical_json, shown};
use crate::protocol::page_link::Link;

/// The page's stylesheet: readable on a phone, visible focus, contrast above WCAG AA.
pub(crate) const STYLESHEET: &str = include_str!("approval.css");

/// The headers every page answer carries.
pub(crate) const SECURITY_HEADERS: [(&str, &str); 6] = [
    (
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    // The link carries the operation's details: never send it on as a referrer.
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// What the page says about one revision.
pub(crate) struct View<'a> {
    pub(crate) company: &'a str,
    pub(crate) link: &'a Link,
    /// Unix seconds now, to say whether the revision is still open.
    pub(crate) now: i64,
    /// Where the User stands with it.
    pub(crate) standing: Standing<'a>,
}

/// Where the User stands with one revision.
pub(crate) enum Standing<'a> {
    /// Not signed in: the sign-in form, returning to `return_to` (this page's path).
    SignIn { return_to: &'a str },
    /// Signed in as the account the request acts for: the Approve and Decline forms.
    Decide {
        subject: &'a str,
        csrf: &'a str,
        /// The forms' target (this page's path and query).
        action: &'a str,
    },
    /// Signed in as someone else, or a request no account can approve here.
    OtherAccount { subject: &'a str },
    /// Decided already.
    Decided {
        verdict: PageVerdict,
        subject: &'a str,
        at_ms: i64,
        done: Done,
        /// A second decision was just refused: nothing changed.
        again: bool,
    },
}

/// What became of a decided revision.
pub(crate) enum Done {
    /// Approved; the agent has not sent the request again yet.
    Waiting,
    /// Being performed now (or its outcome is unknown).
    InProgress,
    /// Performed, once; the API's status.
    Performed(u16),
}

/// `templates/approval/operation.html`.
#[derive(Template)]
#[template(path = "approval/operation.html")]
struct OperationPage<'a> {
    company: &'a str,
    standing: &'a Standing<'a>,
    /// The summary as HTML, shown as is (`|safe`): [`render`] escapes all it takes from the
    /// summary and makes only the extension's subset of markup.
    summary: String,
    /// Each term's name and value, with every hidden character named, line breaks too (a
    /// term is one value, not Markdown).
    terms: Vec<(String, String)>,
    expired: bool,
    /// The revision's expiry, RFC 3339.
    expires: String,
    /// When it was decided (if it was), RFC 3339.
    decided_at: String,
    operation_id: &'a str,
}

/// `templates/approval/error.html`.
#[derive(Template)]
#[template(path = "approval/error.html")]
struct ErrorPage<'a> {
    company: &'a str,
    title: &'a str,
    detail: &'a str,
}

/// The operation's page.
pub(crate) fn operation_page(view: &View<'_>) -> Result<String, askama::Error> {
    let details = &view.link.details;
    let terms = details
        .terms
        .iter()
        .map(|(name, value)| {
            let value = match value {
                Value::String(text) => shown(text).into_owned(),
                other => shown(&canonical_json(other)).into_owned(),
            };
            (shown(name).into_owned(), value)
        })
        .collect();
    let decided_at = match view.standing {
        Standing::Decided { at_ms, .. } => rfc3339_ms(at_ms),
        _ => String::new(),
    };
    OperationPage {
        company: view.company,
        standing: &view.standing,
        summary: render(&details.summary),
        terms,
        expired: details.expires_at <= view.now,
        expires: rfc3339_ms(details.expires_at.saturating_mul(1000)),
        decided_at,
        operation_id: view.link.operation_id.as_str(),
    }
    .render()
}

/// An error page: `title` and `detail` are plain text.
pub(crate) fn error_page(company: &str, title: &str, detail: &str) -> String {
    ErrorPage {
        company,
        title,
        detail,
    }
    .render()
    .unwrap_or_else(|e| {
        // Only a failing formatter could get here (writing to a String does not fail).
        tracing::error!(error = %e, "approval page: the error page did not render");
        FALLBACK_ERROR_PAGE.to_owned()
    })
}

/// The error page when even that could not be rendered.
const FALLBACK_ERROR_PAGE: &str = "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Something went wrong</title>\n</head>\n<body>\n<h1>Something went wrong</h1>\n<p>Nothing was changed. Try again shortly.</p>\n</body>\n</html>\n";

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;
    use crate::protocol::OperationId;
    use crate::protocol::page_link::Details;

    fn link(summary: &str, terms: Map<String, Value>) -> Link {
        Link {
            operation_id: OperationId::parse("exc_aAAAAAAAAAAAAAAAABBBBBBBB").expect("an id"),
            revision: "1900000000-abc".into(),
            details: Details {
                policy: "exchange".into(),
                summary: summary.into(),
                terms,
                expires_at: 1_900_000_000,
                account: None,
                route: None,
            },
        }
    }

    /// The page of `link` to someone not signed in.
    fn signed_out_page(company: &str, link: &Link, now: i64) -> String {
        operation_page(&View {
            company,
            link,
            now,
            standing: Standing::SignIn { return_to: "/x" },
        })
        .expect("rendered")
    }

    #[test]
    fn the_page_escapes_the_company_the_terms_and_the_summary() {
        let mut terms = Map::new();
        terms.insert("<b>name".into(), Value::String("<script>x</script>".into()));
        terms.insert("count".into(), serde_json::json!({"a": [1, "\u{202E}"]}));
        let link = link("[x](https://e.example) **ok**", terms);
        let html = signed_out_page("Shop <i>&</i>", &link, 1_800_000_000);
        assert!(html.contains("Shop &lt;i&gt;&amp;&lt;/i&gt;"), "{html}");
        assert!(html.contains("<dt>&lt;b&gt;name</dt><dd>&lt;script&gt;x&lt;/script&gt;</dd>"));
        assert!(
            html.contains("&lt;U+202E RIGHT-TO-LEFT OVERRIDE&gt;"),
            "{html}"
        );
        assert!(html.contains("[x](https://e.example) <strong>ok</strong>"));
        assert!(!html.contains("<script") && !html.contains("href=\"https"));
        assert!(html.contains("2030-03-17T17:46:40"), "{html}");
        assert!(!html.contains("expired"));
    }

    /// A term is one value: every hidden character by name, a line break too, and two terms
    /// that differ only by an invisible character read differently.
    #[test]
    fn the_terms_show_hidden_characters_by_name() {
        let mut terms = Map::new();
        terms.insert("a".into(), Value::String("s1z".into()));
        terms.insert("b".into(), Value::String("s1\u{200B}z".into()));
        terms.insert("c".into(), Value::String("s1\u{202E}gpj.exe\nx".into()));
        let link = link("x", terms);
        let html = signed_out_page("Shop", &link, 1_800_000_000);
        assert!(html.contains("<dt>a</dt><dd>s1z</dd>"), "{html}");
        assert!(
            html.contains("<dt>b</dt><dd>s1&lt;U+200B ZERO WIDTH SPACE&gt;z</dd>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<dt>c</dt><dd>s1&lt;U+202E RIGHT-TO-LEFT OVERRIDE&gt;gpj.exe&lt;U+000A&gt;x</dd>"
            ),
            "{html}"
        );
    }

    #[test]
    fn an_expired_revision_says_so() {
        let link = link("x", Map::new());
        let html = signed_out_page("Shop", &link, 1_900_000_000);
        assert!(html.contains("This request expired"));
    }

    /// The summary, which `markdown.rs` escapes itself, is the one value shown as HTML: any
    /// other `|safe` in a template would put a value on the page unescaped.
    #[test]
    fn only_the_summary_is_shown_unescaped() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/approval");
        let mut safe = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("the templates") {
            let path = entry.expect("an entry").path();
            let text = std::fs::read_to_string(&path).expect("a template");
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            for (at, _) in text.match_indices("safe") {
                let start = text[..at].rfind("{{").unwrap_or(0);
                safe.push((name.clone(), text[start..at + 4].to_owned()));
            }
            // `|e(…)`/`|escape(…)` would choose another escaper than the page's.
            assert!(!text.contains("|e"), "{name} chooses an escaper");
        }
        assert_eq!(
            safe,
            [("operation.html".to_owned(), "{{ summary|safe".to_owned())]
        );
    }
}
