//! The page on the wire: a pingora request read into a [`Request`], a [`Page`] written back with
//! the security headers; forms, origins and redirects.

use async_trait::async_trait;
use bytes::Bytes;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use super::html::SECURITY_HEADERS;
use super::{ApprovalPageApp, MAX_FORM_BYTES, Page, Request};
use crate::clock::now_millis;
use crate::protocol::page_link::Link;

/// The page's path for `link`: its path and the link's own query (`r`, `d`, `m`; anything
/// else dropped).
pub(super) fn page_path(link: &Link, query: &str) -> String {
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| p.starts_with("r=") || p.starts_with("d=") || p.starts_with("m="))
        .collect();
    format!("/approve/{}?{}", link.operation_id.as_str(), kept.join("&"))
}

/// The CSP of [`SECURITY_HEADERS`], whose `form-action` also allows the provider's origin.
pub(super) fn csp_for(issuer: &str) -> String {
    let base = SECURITY_HEADERS
        .iter()
        .find(|(name, _)| *name == "content-security-policy")
        .map_or("", |(_, value)| value);
    base.replace(
        "form-action 'self'",
        &format!("form-action 'self' {}", origin_of(issuer)),
    )
}

/// `https://host:port` of a URL (its scheme and authority).
pub(super) fn origin_of(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    match url[after..].find('/') {
        Some(slash) => &url[..after + slash],
        None => url,
    }
}

/// An `application/x-www-form-urlencoded` body (or query) as name–value pairs.
pub(super) fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    reqwest::Url::parse(&format!("http://form.invalid/?{text}"))
        .map(|url| url.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

pub(super) fn form_value<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// `303 See Other` to `location` (after a POST, the browser GETs it).
pub(super) fn redirect(location: &str) -> Page {
    Page {
        status: 303,
        content_type: "text/plain; charset=utf-8",
        body: String::new(),
        headers: vec![("location", location.to_owned())],
    }
}

#[async_trait]
impl ServeHttp for ApprovalPageApp {
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        let head = session.req_header();
        let joined = |name: &str| {
            head.headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join("; ")
        };
        let mut request = Request {
            method: head.method.as_str().to_owned(),
            path: head.uri.path().to_owned(),
            query: head.uri.query().unwrap_or_default().to_owned(),
            cookies: joined("cookie"),
            origin: head
                .headers
                .get("origin")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: Bytes::new(),
        };
        if request.method == "POST" {
            let mut body = Vec::new();
            loop {
                match session.read_request_body().await {
                    Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_FORM_BYTES => {
                        body.extend_from_slice(&chunk);
                    }
                    Ok(None) => break,
                    _ => {
                        let page = self.error(
                            413,
                            "Too large",
                            "This form is larger than the page reads.",
                        );
                        return respond(page, false, &self.csp);
                    }
                }
            }
            request.body = Bytes::from(body);
        }
        let page = self.handle(&request, now_millis() / 1000).await;
        let head_only = request.method == "HEAD";
        respond(page, head_only, &self.csp)
    }
}

pub(super) fn respond(page: Page, head_only: bool, csp: &str) -> http::Response<Vec<u8>> {
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
    if let Ok(csp) = http::HeaderValue::from_str(csp) {
        headers.insert("content-security-policy", csp);
    }
    for (name, value) in page.headers {
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            headers.append(name, value);
        }
    }
    headers.insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(length),
    );
    response
}
