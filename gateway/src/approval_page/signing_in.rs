//! The page's side of the sign-in ([`super::signin`] is the provider's): `POST /signin` sends
//! the User to the provider with the sign-in cookie; `GET /callback` reads its answer and
//! sets the page session.

use super::signin::Pending;
use super::wire::{form_pairs, form_value, redirect};
use super::{ApprovalPageApp, Page, Request, SESSION_SECONDS, SIGN_IN_SECONDS};
use crate::protocol::constant_time_eq;
use crate::protocol::page_link as link;
use crate::protocol::page_session::{self as session, Purpose};

impl ApprovalPageApp {
    /// `POST /signin`: off to the provider, with the sign-in cookie.
    pub(super) async fn sign_in(&self, request: &Request, now: i64) -> Page {
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
    pub(super) async fn callback(&self, request: &Request, now: i64) -> Page {
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
}
