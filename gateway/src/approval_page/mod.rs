//! The approval page (issue 29): the Company's own page where the User reads what a held
//! request would do, on its own listener (`[approval_page]`, off without the table), under
//! the proxy's connection cap and header deadline.
//!
//! - `GET /approve/{operation_id}?r={revision}&d=…&m=…`: the Company's name, the operation's
//!   summary (the extension's CommonMark subset, [`markdown`]), its exact terms and expiry,
//!   from a link only this gateway can make (`protocol/page_link.rs`);
//! - `GET /approval.css`: the page's only stylesheet.
//!
//! This first part shows; it approves nothing and reaches no upstream. Sign-in with the
//! Company's OpenID provider and the Approve / Decline forms are the next part.

mod html;
mod markdown;

use async_trait::async_trait;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::clock::now_millis;
use crate::config::ApprovalPage;
use crate::protocol::Keys;
use crate::protocol::page_link as link;

use html::{SECURITY_HEADERS, STYLESHEET, View, error_page, operation_page};

/// The approval page's service, as pingora runs it on `[approval_page] listen`.
pub(crate) struct ApprovalPageApp {
    company: String,
    keys: Keys,
}

/// One answer of the page.
#[derive(Debug)]
struct Page {
    status: u16,
    content_type: &'static str,
    body: String,
}

impl ApprovalPageApp {
    pub(crate) fn new(settings: &ApprovalPage, keys: Keys) -> ApprovalPageApp {
        ApprovalPageApp {
            company: settings.company_name.clone(),
            keys,
        }
    }

    /// The answer to one request, at `now` (unix seconds).
    fn handle(&self, method: &str, path: &str, query: &str, now: i64) -> Page {
        if path == "/approval.css" {
            return match method {
                "GET" | "HEAD" => Page {
                    status: 200,
                    content_type: "text/css; charset=utf-8",
                    body: STYLESHEET.to_owned(),
                },
                _ => self.error(405, "Method not allowed", "Use GET."),
            };
        }
        let Some(id) = path.strip_prefix("/approve/") else {
            return self.error(
                404,
                "Not found",
                "This page shows a request to approve: open the link you were given.",
            );
        };
        if !matches!(method, "GET" | "HEAD") {
            return self.error(405, "Method not allowed", "Use GET.");
        }
        match link::read(&self.keys, id, query) {
            Ok(link) => Page {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body: operation_page(&View {
                    company: &self.company,
                    link: &link,
                    now,
                }),
            },
            Err(e) => {
                tracing::info!(error = %e, "approval page: link refused");
                self.error(
                    404,
                    "This link is not valid",
                    &format!("{e}. Open the link exactly as you were given it."),
                )
            }
        }
    }

    fn error(&self, status: u16, title: &str, detail: &str) -> Page {
        Page {
            status,
            content_type: "text/html; charset=utf-8",
            body: error_page(&self.company, title, detail),
        }
    }
}

#[async_trait]
impl ServeHttp for ApprovalPageApp {
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        let head = session.req_header();
        let method = head.method.as_str().to_owned();
        let path = head.uri.path().to_owned();
        let query = head.uri.query().unwrap_or_default().to_owned();
        let page = self.handle(&method, &path, &query, now_millis() / 1000);
        let head_only = method == "HEAD";
        respond(page, head_only)
    }
}

fn respond(page: Page, head_only: bool) -> http::Response<Vec<u8>> {
    let length = page.body.len();
    let body = if head_only {
        Vec::new()
    } else {
        page.body.into_bytes()
    };
    let mut response = http::Response::new(body);
    *response.status_mut() =
        http::StatusCode::from_u16(page.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(page.content_type),
    );
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, http::HeaderValue::from_static(value));
    }
    headers.insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(length),
    );
    response
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value};

    use super::*;
    use crate::protocol::page_link::{Details, mint};
    use crate::protocol::{OperationId, SigningKey};

    fn app() -> ApprovalPageApp {
        ApprovalPageApp {
            company: "Shop".into(),
            keys: Keys::new(vec![SigningKey::new(
                b"page-app-test-key-0123456789abcde".to_vec(),
            )])
            .expect("a key"),
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
        };
        let link = mint(app.keys.current(), &id, "1900000000-abc", &details).expect("minted");
        let (path, query) = link.split_once('?').expect("a query");
        (path.to_owned(), query.to_owned())
    }

    #[test]
    fn a_genuine_link_shows_the_operation() {
        let app = app();
        let (path, query) = page_link(&app, "Exchange <b>**A1**</b>.");
        let page = app.handle("GET", &path, &query, 1_800_000_000);
        assert_eq!(page.status, 200);
        assert!(
            page.body.contains("&lt;b&gt;<strong>A1</strong>&lt;/b&gt;"),
            "{}",
            page.body
        );
        assert!(page.body.contains("<dt>item_id</dt><dd>A1</dd>"));
        assert!(page.body.contains("<p class=\"company\">Shop</p>"));
    }

    #[test]
    fn other_requests_get_error_pages() {
        let app = app();
        let (path, query) = page_link(&app, "x");
        assert_eq!(app.handle("POST", &path, &query, 0).status, 405);
        assert_eq!(app.handle("GET", "/", "", 0).status, 404);
        let forged = query.replace("r=1900000000-abc", "r=1900000000-abd");
        let page = app.handle("GET", &path, &forged, 0);
        assert_eq!(page.status, 404);
        assert!(page.body.contains("not made by this gateway"));
        assert_eq!(app.handle("GET", "/approval.css", "", 0).status, 200);
    }

    #[test]
    fn every_answer_has_the_security_headers() {
        let response = respond(app().handle("GET", "/", "", 0), false);
        let csp = response
            .headers()
            .get("content-security-policy")
            .expect("a CSP");
        assert!(csp.to_str().is_ok_and(
            |v| v.contains("frame-ancestors 'none'") && v.starts_with("default-src 'none'")
        ));
        assert_eq!(response.headers()["x-frame-options"], "DENY");
        assert_eq!(response.headers()["referrer-policy"], "no-referrer");
    }
}
