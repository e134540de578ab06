//! Ingress: the one reading of a Personal Agent request, or its refusal.
//!
//! The gateway promises that what the upstream executes is exactly what the User approved.
//! That holds only if the gateway and the upstream's framework read a request the same way, and
//! frameworks are lenient in many different directions: Flask and Starlette route a target
//! without its leading `/`, Spring drops `;parameters`, Rails strips a `.json` suffix, Go folds
//! JSON key case, a first-wins JSON parser runs the other value of a duplicate key, Express
//! rounds integers beyond 2^53. So the gateway does not guess what an upstream will make of a
//! spelling: every Personal Agent request passes the rules here first, and a request that two
//! common readings could tell apart is refused with a `400` (or `415`) naming what to fix.
//!
//! Pure: no pingora, no store. [`admit`] is the front door every interface goes through (the
//! HTTP API, the MCP endpoint, the conversations service and `poppy-gateway explain`): the
//! steps below, in the spec's order, written once, so the interfaces can't drift.
//!
//! - [`admit`]: the front door (route, extension, body size, approval, reading, forward);
//! - `forward`: what is sent upstream once approved, built from the request's own bytes;
//! - `credentials`: where a request without a Session carries an access token, read once;
//! - [`target`]: the request target and path spelling (every Personal Agent request);
//! - [`headers`]: method overrides, URL rewrites, ambiguous header names, upgrades, encodings;
//! - [`route`]: which policy a path is, including spellings a framework maps onto it;
//! - [`query`], [`json`], `form`: strict query strings, JSON and form bodies on policy routes;
//! - [`fields`]: nothing outside the summary, every body field is a term or ignored;
//! - [`reading`]: all of it for one policy route, giving the canonical reading the flow uses.

pub(crate) mod admit;
pub(crate) mod credentials;
pub mod fields;
pub(crate) mod form;
mod forward;
pub mod headers;
pub mod json;
pub mod query;
pub mod reading;
pub mod route;
pub mod target;

use crate::protocol::ErrorBody;

pub use reading::read_policy_request;

pub(crate) use forward::{ForwardRequest, HOP_BY_HOP, forwarded_headers};

pub use reading::PolicyReading;
pub use route::{RouteMatch, match_route};
pub use target::Target;
pub use target::check_target;

/// Why the gateway refuses a request, before anything is forwarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}: {detail}")]
pub struct Refusal {
    pub status: u16,
    /// The JSON `error` code.
    pub error: &'static str,
    /// Readable, and names what to change.
    pub detail: String,
    /// The member naming the part refused (`header`, `parameter`, `field`, `term`), if any.
    pub names: Option<(&'static str, String)>,
}

impl Refusal {
    pub fn new(status: u16, error: &'static str, detail: impl Into<String>) -> Refusal {
        Refusal {
            status,
            error,
            detail: detail.into(),
            names: None,
        }
    }

    /// `400 invalid_path`.
    pub fn path(detail: impl Into<String>) -> Refusal {
        Refusal::new(400, "invalid_path", detail)
    }

    /// `400 invalid_header` naming the header.
    pub fn header(name: &str, detail: impl Into<String>) -> Refusal {
        Refusal::new(400, "invalid_header", detail).naming("header", name)
    }

    /// `400 invalid_body` naming the field (a JSONPath), when there is one.
    pub fn body(detail: impl Into<String>) -> Refusal {
        Refusal::new(400, "invalid_body", detail)
    }

    pub fn naming(mut self, member: &'static str, value: impl Into<String>) -> Refusal {
        self.names = Some((member, value.into()));
        self
    }

    /// The JSON body of the answer.
    pub(crate) fn to_error_body(&self) -> ErrorBody {
        let body = ErrorBody::new(self.error, self.detail.clone());
        match &self.names {
            Some((member, value)) => body.with(member, value.as_str()),
            None => body,
        }
    }
}
