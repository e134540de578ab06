//! The page's HTML: no script, no third-party asset, one stylesheet of its own
//! (`/approval.css`, allowed by the CSP's `style-src 'self'`). Every value from the operation
//! is escaped; the summary goes through [`super::markdown`].

use serde_json::Value;

use super::markdown::{escape, render};
use crate::operation::rfc3339_ms;
use crate::policy::canonical_json;
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
}

/// The operation's page.
pub(crate) fn operation_page(view: &View<'_>) -> String {
    let details = &view.link.details;
    let company = escape(view.company);
    let expired = details.expires_at <= view.now;
    let expires = rfc3339_ms(details.expires_at.saturating_mul(1000));
    let mut body = String::new();
    body.push_str(&format!(
        "<header><p class=\"company\">{company}</p><h1>Approve this request?</h1></header>\n<main>\n"
    ));
    body.push_str("<section aria-labelledby=\"what\"><h2 id=\"what\">What you approve</h2>\n<div class=\"summary\">");
    body.push_str(&render(&details.summary));
    body.push_str("</div>\n</section>\n");
    body.push_str("<section aria-labelledby=\"terms\"><h2 id=\"terms\">Exact terms</h2>\n<dl>\n");
    for (name, value) in &details.terms {
        let shown = match value {
            Value::String(text) => text.clone(),
            other => canonical_json(other),
        };
        body.push_str(&format!(
            "<dt>{}</dt><dd>{}</dd>\n",
            escape(name),
            escape(&shown)
        ));
    }
    body.push_str("</dl>\n</section>\n");
    if expired {
        body.push_str(&format!(
            "<p class=\"expired\" role=\"status\">This request expired at <time datetime=\"{0}\">{0}</time>. Nothing will be done; ask for it again.</p>\n",
            escape(&expires)
        ));
    } else {
        body.push_str(&format!(
            "<p>You can approve it until <time datetime=\"{0}\">{0}</time>. Approving it lets the request be performed once, with exactly these terms.</p>\n",
            escape(&expires)
        ));
        // Sign-in (and with it the Approve and Decline forms) is the next part of issue 29.
        body.push_str("<p class=\"notice\" role=\"status\">Approving on this page is not available yet: nothing will be done.</p>\n");
    }
    body.push_str(&format!(
        "<footer><p>Operation <code>{}</code></p></footer>\n</main>\n",
        escape(view.link.operation_id.as_str())
    ));
    document(&format!("Approve – {company}"), &body)
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
            },
        }
    }

    #[test]
    fn the_page_escapes_the_company_the_terms_and_the_summary() {
        let mut terms = Map::new();
        terms.insert("<b>name".into(), Value::String("<script>x</script>".into()));
        terms.insert("count".into(), serde_json::json!({"a": [1, "\u{202E}"]}));
        let link = link("[x](https://e.example) **ok**", terms);
        let html = operation_page(&View {
            company: "Shop <i>&</i>",
            link: &link,
            now: 1_800_000_000,
        });
        assert!(html.contains("Shop &lt;i&gt;&amp;&lt;/i&gt;"), "{html}");
        assert!(html.contains("<dt>&lt;b&gt;name</dt><dd>&lt;script&gt;x&lt;/script&gt;</dd>"));
        assert!(html.contains("&lt;U+202E&gt;"));
        assert!(html.contains("[x](https://e.example) <strong>ok</strong>"));
        assert!(!html.contains("<script") && !html.contains("href=\"https"));
        assert!(html.contains("2030-03-17T17:46:40"), "{html}");
        assert!(!html.contains("expired"));
    }

    #[test]
    fn an_expired_revision_says_so() {
        let link = link("x", Map::new());
        let html = operation_page(&View {
            company: "Shop",
            link: &link,
            now: 1_900_000_000,
        });
        assert!(html.contains("This request expired"));
    }
}
