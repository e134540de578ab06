//! The Company's approval page offered to a request without the extension (issue 29): the
//! operation held for the User's approval, as the page's link and what every interface shows
//! of it. Nothing of the operation a Poppy agent reads (its ID and revision) leaves the
//! gateway except inside the link.

use serde_json::Value;

use crate::ingress::Refusal;
use crate::policy::Policy;
use crate::protocol::page_link::{self, Details, LinkError};
use crate::protocol::{ErrorBody, Operation, OperationId, SigningKey};

/// An operation held for the User's approval on the Company's page.
pub(crate) struct PageLink {
    /// The page for this operation and revision: `[approval_page] public_url` and a path
    /// MACed with the gateway's keys (`protocol/page_link.rs`).
    pub(crate) url: String,
    pub(crate) summary: String,
    pub(crate) terms: Option<Value>,
    /// RFC 3339, as the operation's.
    pub(crate) expires_at: String,
}

/// What the agent is told to do with the link.
pub(crate) const PAGE_DETAIL: &str = "this action needs the user's approval of these terms: open approval_url (the user signs in on the company's page and approves), then send the same request again; nothing was performed";

impl PageLink {
    /// The link to `operation`'s page, or `None` (logged) when the executor has no page or
    /// the link can't be made: then nothing is held for the User, and the agent is told as if
    /// the policy had no page.
    /// `public_url`: `[approval_page] public_url` (none without the table); `key`: the key
    /// that signs now.
    pub(crate) fn for_operation(
        public_url: Option<&str>,
        key: &SigningKey,
        policy: &Policy,
        operation: &Operation,
        account: Option<&str>,
        route: Option<&str>,
    ) -> Option<PageLink> {
        let public_url = public_url?;
        match mint_path(key, policy, operation, account, route) {
            Ok(path) => Some(PageLink {
                url: format!("{public_url}{path}"),
                summary: operation.summary.clone(),
                terms: operation.terms.clone(),
                expires_at: operation.expires_at.clone(),
            }),
            Err(e) => {
                tracing::warn!(policy = %policy.name, error = %e, "no approval page link for this operation");
                None
            }
        }
    }

    /// `approval_required` with `approval_url`, the summary, terms and expiry: the HTTP API's
    /// `403` body and the conversations service's.
    pub(crate) fn error_body(&self) -> ErrorBody {
        let body = ErrorBody::new("approval_required", PAGE_DETAIL)
            .with("approval_url", self.url.as_str())
            .with("summary", self.summary.as_str())
            .with("expires_at", self.expires_at.as_str());
        match &self.terms {
            Some(terms) => body.with("terms", terms.clone()),
            None => body,
        }
    }

    /// The `Link` header value that points at the page.
    pub(crate) fn link_header(&self) -> String {
        format!("<{}>; rel=\"approval\"", self.url)
    }
}

/// The page's path for `operation`: its details (what the page shows, and the account it
/// may be approved by) MACed with the gateway's signing key, with its ID and revision.
fn mint_path(
    key: &SigningKey,
    policy: &Policy,
    operation: &Operation,
    account: Option<&str>,
    route: Option<&str>,
) -> Result<String, LinkError> {
    let expires_at = time::OffsetDateTime::parse(
        &operation.expires_at,
        &time::format_description::well_known::Rfc3339,
    )
    .map_err(|_| LinkError::Malformed("operation"))?
    .unix_timestamp();
    let id =
        OperationId::parse(&operation.operation_id).ok_or(LinkError::Malformed("operation"))?;
    let details = Details {
        policy: policy.name.clone(),
        summary: operation.summary.clone(),
        terms: operation
            .terms
            .as_ref()
            .and_then(|t| t.as_object().cloned())
            .unwrap_or_default(),
        expires_at,
        account: account.map(|a| page_link::account_binding(key, a)),
        route: route.map(str::to_owned),
    };
    page_link::mint(key, &id, &operation.revision, &details)
}

/// A request without the extension whose account declined it on the approval page.
/// (The operation is not named: a request without the extension gets no operations.)
pub(crate) fn declined() -> Refusal {
    Refusal::new(
        403,
        "approval_declined",
        "the user declined this action on the company's approval page; nothing was performed. The same request gets this answer until the declined approval expires; a request with other terms gets a new approval link",
    )
}

/// A request without the extension and without a bearer token: nobody can approve it on
/// the page, which asks the account the request acts for to sign in.
pub(crate) fn sign_in_required() -> Refusal {
    Refusal::new(
        401,
        "sign_in_required",
        "this action is approved on the company's approval page by the account it acts for: send the request with the user's token (Authorization: Bearer …) to get the approval link; nothing was performed",
    )
}
