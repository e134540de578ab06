//! The approval page (issue 29): the Company's own page where the User reads what a held
//! request would do, signs in and approves or declines it, on its own listener
//! (`[approval_page]`, off without the table), under the proxy's connection cap and header
//! deadline.
//!
//! - `GET /approve/{operation_id}?r={revision}&d=…&m=…`: the Company's name, the operation's
//!   summary (the extension's CommonMark subset, [`markdown`]), its exact terms and expiry,
//!   from a link only this gateway can make (`protocol/page_link.rs`); then, as the User
//!   stands: "Sign in to approve", the Approve and Decline forms, or what was decided and
//!   what became of it (the operation's record: performed, being performed, not yet);
//! - `POST /signin` → the provider → `GET /callback` ([`signin`]): the page session;
//! - `POST /approve/{…}`: the decision ([`decide`]), stored once per revision;
//! - `GET /approval.css`: the page's only stylesheet.
//!
//! The page never reaches the upstream: a decision is stored, and the agent's retry of the
//! same request is performed by the flow and its driver (`operation/flow.rs`,
//! `proxy/executor/`), once.

mod html;
mod markdown;
mod signin;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::clock::now_millis;
use crate::config::ApprovalPage;
use crate::operation::page::{PageDecided, PageDecision, PageVerdict, field};
use crate::policy::LivePolicies;
use crate::protocol::page_link::{self as link, Link};
use crate::protocol::page_session::{self as session, Purpose};
use crate::protocol::{Keys, constant_time_eq};
use crate::store::{KeptDecision, OperationStore, RecordState};

use html::{Done, SECURITY_HEADERS, STYLESHEET, Standing, View, error_page, operation_page};
use signin::{Pending, SignIn};

/// The page session lasts this long (a sign-in is asked for again after it).
const SESSION_SECONDS: i64 = 3600;
/// A sign-in must come back from the provider within this long.
const SIGN_IN_SECONDS: i64 = 600;
/// The longest form body read (the forms post a token and a word, or a path).
const MAX_FORM_BYTES: usize = 16 * 1024;

/// What decides how long a decision is kept ([`keep_after`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept {
    /// `[store] remember_grace`.
    pub(crate) grace: Duration,
    /// `Config::longest_execution`.
    pub(crate) longest_execution: Duration,
}

/// The approval page's service, as pingora runs it on `[approval_page] listen`.
pub(crate) struct ApprovalPageApp {
    company: String,
    keys: Keys,
    store: Arc<dyn OperationStore>,
    /// The store's `remember_grace`: a decision is kept until its revision expires, then as
    /// long as the record of the operation it approved can be kept (see [`keep_after`]).
    grace: Duration,
    /// The longest an approved forward may run (`Config::longest_execution`): one claimed just
    /// before its revision expired completes that much after, and its record is kept from then.
    longest_execution: Duration,
    /// The policies in force (every route's), for their `expires_in`.
    policies: LivePolicies,
    /// `[approval_page] public_url`, without a trailing `/`.
    public_url: String,
    signin: SignIn,
    /// The page's `Content-Security-Policy`: [`SECURITY_HEADERS`]' with the provider's origin
    /// added to `form-action` (browsers apply it to the sign-in form's redirect there).
    csp: String,
}

/// One request to the page, as read off the wire.
struct Request {
    method: String,
    path: String,
    query: String,
    /// The `Cookie` header(s), joined.
    cookies: String,
    /// `Origin`, if sent.
    origin: Option<String>,
    /// A POST's form body.
    body: Bytes,
}

/// One answer of the page.
#[derive(Debug)]
struct Page {
    status: u16,
    content_type: &'static str,
    body: String,
    /// `Set-Cookie` and `Location`.
    headers: Vec<(&'static str, String)>,
}

impl ApprovalPageApp {
    pub(crate) fn new(
        settings: &ApprovalPage,
        keys: Keys,
        store: Arc<dyn OperationStore>,
        kept: Kept,
        policies: LivePolicies,
    ) -> Result<ApprovalPageApp, String> {
        Ok(ApprovalPageApp {
            company: settings.company_name.clone(),
            keys,
            store,
            grace: kept.grace,
            longest_execution: kept.longest_execution,
            policies,
            public_url: settings.public_url.clone(),
            signin: SignIn::new(settings)?,
            csp: csp_for(&settings.issuer),
        })
    }

    /// Cookies are `__Host-` prefixed when the page is served over https: host-only, `Path=/`,
    /// `Secure`, so no other host of the domain can set them.
    fn secure(&self) -> bool {
        self.public_url.starts_with("https://")
    }

    fn cookie_name(&self, purpose: Purpose) -> String {
        let base = match purpose {
            Purpose::Session => "poppy_page",
            Purpose::SignIn => "poppy_signin",
        };
        if self.secure() {
            format!("__Host-{base}")
        } else {
            base.to_owned()
        }
    }

    fn set_cookie(&self, purpose: Purpose, value: &str, max_age: i64) -> (&'static str, String) {
        (
            "set-cookie",
            session::set_cookie(
                &self.cookie_name(purpose),
                value,
                self.secure(),
                u64::try_from(max_age).unwrap_or(0),
            ),
        )
    }

    /// The sealed cookie for `purpose`, if the request carries a genuine, unexpired one.
    fn cookie(&self, request: &Request, purpose: Purpose, now: i64) -> Option<(String, Vec<u8>)> {
        let name = self.cookie_name(purpose);
        request
            .cookies
            .split(';')
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(n, _)| *n == name)
            .find_map(|(_, value)| {
                session::open(&self.keys, purpose, value, now).map(|p| (value.to_owned(), p))
            })
    }

    /// The answer to one request, at `now` (unix seconds).
    async fn handle(&self, request: &Request, now: i64) -> Page {
        let method = request.method.as_str();
        match request.path.as_str() {
            "/approval.css" => {
                return match method {
                    "GET" | "HEAD" => Page {
                        status: 200,
                        content_type: "text/css; charset=utf-8",
                        body: STYLESHEET.to_owned(),
                        headers: Vec::new(),
                    },
                    _ => self.error(405, "Method not allowed", "Use GET."),
                };
            }
            "/signin" if method == "POST" => return self.sign_in(request, now).await,
            // GET only: a HEAD would exchange the code too.
            "/callback" if method == "GET" => {
                return self.callback(request, now).await;
            }
            "/signin" | "/callback" => {
                return self.error(405, "Method not allowed", "Use the page's buttons.");
            }
            _ => {}
        }
        let Some(id) = request.path.strip_prefix("/approve/") else {
            return self.error(
                404,
                "Not found",
                "This page shows a request to approve: open the link you were given.",
            );
        };
        let link = match link::read(&self.keys, id, &request.query) {
            Ok(link) => link,
            Err(e) => {
                tracing::info!(error = %e, "approval page: link refused");
                return self.error(
                    404,
                    "This link is not valid",
                    &format!("{e}. Open the link exactly as you were given it."),
                );
            }
        };
        match method {
            "GET" | "HEAD" => {
                let again = request.query.split('&').any(|p| p == "again=1");
                self.show(request, &link, now, again).await
            }
            "POST" => self.decide(request, &link, now).await,
            _ => self.error(405, "Method not allowed", "Use GET."),
        }
    }

    /// The page for `link`, as the User stands with it.
    async fn show(&self, request: &Request, link: &Link, now: i64, again: bool) -> Page {
        let path = page_path(link, &request.query);
        let decided = match self.decision_of(link).await {
            Ok(decided) => decided,
            Err(page) => return page,
        };
        let signed_in = self.cookie(request, Purpose::Session, now);
        let subject = signed_in
            .as_ref()
            .map(|(_, payload)| String::from_utf8_lossy(payload).into_owned());
        let csrf;
        let standing = match (&decided, &signed_in, &subject) {
            (Some((decision, done)), _, _) => Standing::Decided {
                verdict: decision.verdict,
                subject: &decision.subject,
                at_ms: decision.at_ms,
                done: match done {
                    Some(RecordState::Done(response)) => Done::Performed(response.status),
                    Some(RecordState::InFlight { .. }) => Done::InProgress,
                    None => Done::Waiting,
                },
                again,
            },
            (None, Some((sealed, _)), Some(subject)) if self.binds(link, subject) => {
                csrf = session::csrf_token(
                    self.keys.current(),
                    sealed,
                    link.operation_id.as_str(),
                    &link.revision,
                );
                Standing::Decide {
                    subject,
                    csrf: &csrf,
                    action: &path,
                }
            }
            (None, Some(_), Some(subject)) => Standing::OtherAccount { subject },
            _ => Standing::SignIn { return_to: &path },
        };
        Page {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: operation_page(&View {
                company: &self.company,
                link,
                now,
                standing,
            }),
            headers: Vec::new(),
        }
    }

    /// The decision kept for the link's revision, and the operation's record state.
    #[allow(clippy::type_complexity)]
    async fn decision_of(
        &self,
        link: &Link,
    ) -> Result<Option<(PageDecision, Option<RecordState>)>, Page> {
        let id = &link.operation_id;
        let unavailable = |e: crate::store::StoreError| {
            tracing::warn!(operation_id = %id, error = %e, "approval page: store unavailable");
            self.error(
                503,
                "Try again shortly",
                "The page cannot read its records now. Nothing was changed.",
            )
        };
        let (_, decisions) = self
            .store
            .page_state(id.action_tag())
            .await
            .map_err(unavailable)?;
        let wanted = field(id, &link.revision);
        let Some(decision) = decisions.into_iter().find(|d| d.field() == wanted) else {
            return Ok(None);
        };
        let record = self.store.lookup(id).await.map_err(unavailable)?;
        // Only the record of this very revision says what became of this decision.
        let state = record
            .filter(|r| r.revision == link.revision)
            .map(|r| r.state);
        Ok(Some((decision, state)))
    }

    /// Whether `subject` is the account the link's request acts for.
    fn binds(&self, link: &Link, subject: &str) -> bool {
        link.details
            .account
            .as_deref()
            .is_some_and(|binding| link::binds_subject(&self.keys, binding, subject))
    }

    /// Defence in depth behind the CSRF token and `SameSite=Lax`: a form posted from another
    /// origin is refused. Browsers send `Origin: null` under the page's `no-referrer` policy.
    fn same_origin(&self, request: &Request) -> bool {
        match request.origin.as_deref() {
            None | Some("null") => true,
            Some(origin) => origin == origin_of(&self.public_url),
        }
    }

    /// `POST /approve/…`: the User's decision, refused (and nothing stored) unless the link
    /// is genuine and open, the User is signed in as the account the request acts for, and
    /// the form's CSRF token is this session's for this revision.
    async fn decide(&self, request: &Request, link: &Link, now: i64) -> Page {
        let refuse = |status, title: &str, detail: &str| {
            tracing::info!(operation_id = %link.operation_id, why = title, "approval page: decision refused; nothing stored");
            self.error(status, title, detail)
        };
        if !self.same_origin(request) {
            return refuse(
                403,
                "Not sent from this page",
                "Decide on the approval page itself. Nothing was changed.",
            );
        }
        if link.details.expires_at <= now {
            return refuse(
                410,
                "This request expired",
                "Nothing was changed; ask for it again.",
            );
        }
        let Some((sealed, payload)) = self.cookie(request, Purpose::Session, now) else {
            return refuse(
                401,
                "Sign in first",
                "Your sign-in is missing or expired: open the link again and sign in. Nothing was changed.",
            );
        };
        let subject = String::from_utf8_lossy(&payload).into_owned();
        let form = form_pairs(&request.body);
        let token = form_value(&form, "csrf").unwrap_or_default();
        if !session::csrf_matches(
            &self.keys,
            token,
            &sealed,
            link.operation_id.as_str(),
            &link.revision,
        ) {
            return refuse(
                403,
                "This form has expired",
                "Open the link again and decide there. Nothing was changed.",
            );
        }
        if !self.binds(link, &subject) {
            return refuse(
                403,
                "Another account",
                "You are signed in as another account than the one this request acts for: only that account can approve it. Nothing was changed.",
            );
        }
        let verdict = match form_value(&form, "decision") {
            Some("approve") => PageVerdict::Approved,
            Some("decline") => PageVerdict::Declined,
            _ => {
                return refuse(
                    400,
                    "No decision",
                    "Use the Approve or Decline button. Nothing was changed.",
                );
            }
        };
        let decision = PageDecision {
            operation_id: link.operation_id.clone(),
            revision: link.revision.clone(),
            verdict,
            subject,
            at_ms: now_millis(),
        };
        let path = page_path(link, &request.query);
        let expires_in = self
            .policies
            .snapshot()
            .iter()
            .filter(|policy| policy.name == link.details.policy)
            .map(|policy| policy.expires_in)
            .max()
            .unwrap_or_default();
        let kept_after = keep_after(expires_in, self.longest_execution, self.grace);
        match decide(self.store.as_ref(), &decision, link, kept_after).await {
            Ok(PageDecided::Stored) => redirect(&path),
            Ok(PageDecided::Exists(_)) => redirect(&format!("{path}&again=1")),
            Err(e) => {
                tracing::warn!(operation_id = %link.operation_id, error = %e, "approval page: decision not stored");
                self.error(
                    503,
                    "Try again shortly",
                    "Your decision could not be saved. Nothing was changed.",
                )
            }
        }
    }

    /// `POST /signin`: off to the provider, with the sign-in cookie.
    async fn sign_in(&self, request: &Request, now: i64) -> Page {
        if !self.same_origin(request) {
            return self.error(
                403,
                "Not sent from this page",
                "Sign in from the approval page itself.",
            );
        }
        let form = form_pairs(&request.body);
        // Only a page of this page: never an open redirect.
        let return_to = form_value(&form, "return").unwrap_or_default();
        let Some(rest) = return_to.strip_prefix("/approve/") else {
            return self.error(
                400,
                "Nothing to return to",
                "Open the link you were given, and sign in there.",
            );
        };
        let (id, query) = rest.split_once('?').unwrap_or((rest, ""));
        if link::read(&self.keys, id, query).is_err() {
            return self.error(
                400,
                "Nothing to return to",
                "Open the link you were given, and sign in there.",
            );
        }
        match self.signin.start(return_to).await {
            Ok((url, pending)) => {
                let payload = serde_json::to_vec(&pending).unwrap_or_default();
                let sealed = session::seal(
                    self.keys.current(),
                    Purpose::SignIn,
                    &payload,
                    now + SIGN_IN_SECONDS,
                );
                let mut page = redirect(&url);
                page.headers
                    .push(self.set_cookie(Purpose::SignIn, &sealed, SIGN_IN_SECONDS));
                page
            }
            Err(e) => {
                tracing::warn!(error = %e, "approval page: sign-in not started");
                self.error(503, "Sign-in is not available", &e.to_string())
            }
        }
    }

    /// `GET /callback`: the provider's answer; the page session, then back to the page.
    async fn callback(&self, request: &Request, now: i64) -> Page {
        let failed = |detail: &str| {
            tracing::info!(detail, "approval page: sign-in failed");
            self.error(
                400,
                "Sign-in failed",
                &format!("{detail}. Open the link again and sign in."),
            )
        };
        let Some((_, payload)) = self.cookie(request, Purpose::SignIn, now) else {
            return failed("This sign-in was not started here, or took too long");
        };
        let Ok(pending) = serde_json::from_slice::<Pending>(&payload) else {
            return failed("This sign-in was not started here");
        };
        let query = form_pairs(request.query.as_bytes());
        if let Some(error) = form_value(&query, "error") {
            return failed(&format!("The sign-in service answered {error}"));
        }
        let state = form_value(&query, "state").unwrap_or_default();
        if !constant_time_eq(state.as_bytes(), pending.s.as_bytes()) {
            return failed("This answer is not for this sign-in");
        }
        let Some(code) = form_value(&query, "code") else {
            return failed("The sign-in service sent no code");
        };
        match self
            .signin
            .finish(&pending, code, u64::try_from(now).unwrap_or(0))
            .await
        {
            Ok(subject) => {
                let sealed = session::seal(
                    self.keys.current(),
                    Purpose::Session,
                    subject.as_bytes(),
                    now + SESSION_SECONDS,
                );
                let mut page = redirect(&pending.r);
                page.headers
                    .push(self.set_cookie(Purpose::Session, &sealed, SESSION_SECONDS));
                page.headers.push(self.set_cookie(Purpose::SignIn, "", 0));
                page
            }
            Err(e) => failed(&e.to_string()),
        }
    }

    fn error(&self, status: u16, title: &str, detail: &str) -> Page {
        Page {
            status,
            content_type: "text/html; charset=utf-8",
            body: error_page(&self.company, title, detail),
            headers: Vec::new(),
        }
    }
}

/// How long after its revision's expiry a decision is kept: the longest an approved forward
/// may run, the policy's `expires_in`, a second and the store's grace. The record of the
/// operation it approved is kept until its completion + `expires_in`, a second and the grace
/// (`operation::Remember`), and it completes at the latest `longest_execution` after the
/// expiry (a claim is taken only before it); a page request's retry finds that record by the
/// decision (`operation::approved_operations`): so the recorded answer is replayed as long as
/// it is kept, and never a new link offered for a performed request.
fn keep_after(expires_in: Duration, longest_execution: Duration, grace: Duration) -> Duration {
    longest_execution
        .saturating_add(expires_in)
        .saturating_add(Duration::from_secs(1))
        .saturating_add(grace)
}

/// The one place a decision on the page is made: stored once per revision, kept until the
/// revision expires and `kept_after` ([`keep_after`]). (Events for the Company's systems,
/// "approved on the page" and "declined", go here once the webhook exists.)
pub(crate) async fn decide(
    store: &dyn OperationStore,
    decision: &PageDecision,
    link: &Link,
    kept_after: Duration,
) -> Result<PageDecided, crate::store::StoreError> {
    let kept_ms = i64::try_from(kept_after.as_millis()).unwrap_or(i64::MAX);
    let until_ms = link
        .details
        .expires_at
        .saturating_mul(1000)
        .saturating_add(kept_ms);
    let kept = KeptDecision {
        decision,
        until_ms,
        now_ms: now_millis(),
    };
    let decided = store.decide_on_page(&kept).await?;
    match &decided {
        PageDecided::Stored => {
            tracing::info!(
                operation_id = %decision.operation_id,
                policy = %link.details.policy,
                decision = decision.verdict.as_str(),
                "decided on the approval page"
            );
            // For the Company's systems (`[webhook]`): the decision as stored, once.
            crate::events::page_decided(
                decision.verdict == PageVerdict::Approved,
                decision.operation_id.as_str(),
                &link.details.policy,
                link.details.route.as_deref(),
                &decision.subject,
            );
        }
        PageDecided::Exists(kept) => tracing::info!(
            operation_id = %decision.operation_id,
            kept = kept.verdict.as_str(),
            "approval page: decided before; nothing changed"
        ),
    }
    Ok(decided)
}

/// The page's path for `link`: its path and the link's own query (`r`, `d`, `m`; anything
/// else dropped).
fn page_path(link: &Link, query: &str) -> String {
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| p.starts_with("r=") || p.starts_with("d=") || p.starts_with("m="))
        .collect();
    format!("/approve/{}?{}", link.operation_id.as_str(), kept.join("&"))
}

/// The CSP of [`SECURITY_HEADERS`], whose `form-action` also allows the provider's origin.
fn csp_for(issuer: &str) -> String {
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
fn origin_of(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    match url[after..].find('/') {
        Some(slash) => &url[..after + slash],
        None => url,
    }
}

/// An `application/x-www-form-urlencoded` body (or query) as name–value pairs.
fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    reqwest::Url::parse(&format!("http://form.invalid/?{text}"))
        .map(|url| url.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

fn form_value<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// `303 See Other` to `location` (after a POST, the browser GETs it).
fn redirect(location: &str) -> Page {
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

fn respond(page: Page, head_only: bool, csp: &str) -> http::Response<Vec<u8>> {
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

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value};

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
        assert!(csp.to_str().is_ok_and(
            |v| v.contains("frame-ancestors 'none'") && v.starts_with("default-src 'none'")
        ));
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
}
