//! The page's HTML: no script, no third-party asset, one stylesheet of its own
//! (`/approval.css`, allowed by the CSP's `style-src 'self'`). Every value from the operation
//! is escaped; the summary goes through [`super::markdown`].

use serde_json::Value;

use super::markdown::{escape, render};
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

/// The operation's page.
pub(crate) fn operation_page(view: &View<'_>) -> String {
    let details = &view.link.details;
    let company = escape(view.company);
    let expired = details.expires_at <= view.now;
    let expires = rfc3339_ms(details.expires_at.saturating_mul(1000));
    let heading = match &view.standing {
        Standing::Decided {
            verdict: PageVerdict::Approved,
            ..
        } => "You approved this request",
        Standing::Decided { .. } => "You declined this request",
        _ => "Approve this request?",
    };
    let mut body = String::new();
    body.push_str(&format!(
        "<header><p class=\"company\">{company}</p><h1>{heading}</h1></header>\n<main>\n"
    ));
    body.push_str("<section aria-labelledby=\"what\"><h2 id=\"what\">What you approve</h2>\n<div class=\"summary\">");
    body.push_str(&render(&details.summary));
    body.push_str("</div>\n</section>\n");
    body.push_str("<section aria-labelledby=\"terms\"><h2 id=\"terms\">Exact terms</h2>\n<dl>\n");
    for (name, value) in &details.terms {
        let text = match value {
            Value::String(text) => text.clone(),
            other => canonical_json(other),
        };
        // Every hidden character by name, line breaks too: a term is one value, not Markdown.
        body.push_str(&format!(
            "<dt>{}</dt><dd>{}</dd>\n",
            escape(&shown(name)),
            escape(&shown(&text))
        ));
    }
    body.push_str("</dl>\n</section>\n");
    if let Standing::Decided {
        verdict,
        subject,
        at_ms,
        done,
        again,
    } = &view.standing
    {
        body.push_str(&decided(*verdict, subject, *at_ms, done, *again));
    } else if expired {
        body.push_str(&format!(
            "<p class=\"expired\" role=\"status\">This request expired at <time datetime=\"{0}\">{0}</time>. Nothing will be done; ask for it again.</p>\n",
            escape(&expires)
        ));
    } else {
        body.push_str(&format!(
            "<p>You can approve it until <time datetime=\"{0}\">{0}</time>. Approving it lets the request be performed once, with exactly these terms.</p>\n",
            escape(&expires)
        ));
        body.push_str(&forms(&view.standing));
    }
    body.push_str(&format!(
        "<footer><p>Operation <code>{}</code></p></footer>\n</main>\n",
        escape(view.link.operation_id.as_str())
    ));
    document(&format!("Approve – {company}"), &body)
}

/// What was decided, and what became of it.
fn decided(verdict: PageVerdict, subject: &str, at_ms: i64, done: &Done, again: bool) -> String {
    let mut html = String::new();
    if again {
        html.push_str("<p class=\"notice\" role=\"status\">This request was decided before; nothing was changed.</p>\n");
    }
    let at = escape(&rfc3339_ms(at_ms));
    let (what, class) = match verdict {
        PageVerdict::Approved => ("Approved", "approved"),
        PageVerdict::Declined => ("Declined", "declined"),
    };
    html.push_str(&format!(
        "<section aria-labelledby=\"decided\" class=\"{class}\"><h2 id=\"decided\">{what}</h2>\n<p>{what} by <strong>{}</strong> at <time datetime=\"{at}\">{at}</time>.</p>\n",
        escape(subject)
    ));
    html.push_str(&match (verdict, done) {
        (PageVerdict::Declined, _) => "<p id=\"outcome\">Nothing will be done.</p>\n".to_owned(),
        (PageVerdict::Approved, Done::Waiting) => "<p id=\"outcome\">Not performed yet: it will be performed once, when the request is sent again.</p>\n".to_owned(),
        (PageVerdict::Approved, Done::InProgress) => "<p id=\"outcome\">Being performed now.</p>\n".to_owned(),
        (PageVerdict::Approved, Done::Performed(status)) => format!("<p id=\"outcome\">Performed, once (the service answered {status}).</p>\n"),
    });
    html.push_str("</section>\n");
    html
}

/// The sign-in form, or the Approve and Decline forms.
fn forms(standing: &Standing<'_>) -> String {
    match standing {
        Standing::SignIn { return_to } => format!(
            "<form method=\"post\" action=\"/signin\"><input type=\"hidden\" name=\"return\" value=\"{}\"><button type=\"submit\" class=\"approve\" id=\"signin\">Sign in to approve</button></form>\n",
            escape(return_to)
        ),
        Standing::Decide {
            subject,
            csrf,
            action,
        } => format!(
            "<p>Signed in as <strong>{}</strong>.</p>\n<form method=\"post\" action=\"{}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\" name=\"decision\" value=\"approve\" class=\"approve\" id=\"approve\">Approve</button><button type=\"submit\" name=\"decision\" value=\"decline\" class=\"decline\" id=\"decline\">Decline</button></form>\n",
            escape(subject),
            escape(action),
            escape(csrf)
        ),
        Standing::OtherAccount { subject } => format!(
            "<p class=\"notice\" role=\"status\">You are signed in as <strong>{}</strong>, but this request acts for another account: only that account can approve it. Nothing will be done.</p>\n",
            escape(subject)
        ),
        Standing::Decided { .. } => String::new(),
    }
}

/// An error page: `title` and `detail` are plain text.
pub(crate) fn error_page(company: &str, title: &str, detail: &str) -> String {
    let body = format!(
        "<header><p class=\"company\">{}</p><h1>{}</h1></header>\n<main><p>{}</p></main>\n",
        escape(company),
        escape(title),
        escape(detail)
    );
    document(&escape(title), &body)
}

/// `title` is already escaped.
fn document(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"referrer\" content=\"no-referrer\">\n<title>{title}</title>\n<link rel=\"stylesheet\" href=\"/approval.css\">\n</head>\n<body>\n{body}</body>\n</html>\n"
    )
}

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
}
