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
//! `run/executor/`), once.

mod decision;
mod escape;
mod html;
mod markdown;
#[cfg(test)]
mod page_bytes;
mod signin;
mod signing_in;
#[cfg(test)]
mod tests;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::clock::now_millis;
use crate::config::ApprovalPage;
use crate::operation::page::{PageDecided, PageDecision, PageVerdict, field};
use crate::policy::LivePolicies;
use crate::protocol::Keys;
use crate::protocol::page_link::{self as link, Link};
use crate::protocol::page_session::{self as session, Purpose};
use crate::store::{OperationStore, RecordState};

use decision::decide;
use decision::keep_after;
use html::{Done, STYLESHEET, Standing, View, error_page, operation_page};
use signin::SignIn;
use wire::{csp_for, form_pairs, form_value, origin_of, page_path, redirect};

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
    /// The page's `Content-Security-Policy`: [`html::SECURITY_HEADERS`]' with the provider's origin
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
        let view = View {
            company: &self.company,
            link,
            now,
            standing,
        };
        match operation_page(&view) {
            Ok(body) => Page {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body,
                headers: Vec::new(),
            },
            Err(e) => {
                tracing::error!(operation_id = %link.operation_id, error = %e, "approval page: the page did not render");
                self.error(
                    500,
                    "The page could not be shown",
                    "Try again shortly. Nothing was changed.",
                )
            }
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

    fn error(&self, status: u16, title: &str, detail: &str) -> Page {
        Page {
            status,
            content_type: "text/html; charset=utf-8",
            body: error_page(&self.company, title, detail),
            headers: Vec::new(),
        }
    }
}
