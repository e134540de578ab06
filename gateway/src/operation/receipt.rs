//! What a receipt says (the core's vocabulary: `crate::receipts` chains, signs and keeps
//! it), and the receipt of an operation about to be forwarded; the executor adds the answer.

use serde::Serialize;
use serde_json::Value;

use super::page::PageDecision;
use super::{Approved, Prepared, terms_value};

/// One receipt. Absent facts are `null`: an operator's resolution knows no summary or terms.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Receipt {
    /// `performed`, `resolved_performed` or `resolved_not_performed`.
    pub kind: &'static str,
    pub operation_id: String,
    pub revision: String,
    pub policy: String,
    pub summary: Option<String>,
    pub terms: Option<Value>,
    /// The approver scope the operation is bound to.
    pub scope: String,
    pub agent: Option<String>,
    pub user: Option<String>,
    pub session: Option<String>,
    pub account: Option<String>,
    /// `verified` (signatures checked by the gateway) or `unverified` (`[session] verify =
    /// "off"`, or an unverified bearer token).
    pub identity: Option<&'static str>,
    /// How it was approved: `agent` (a Personal Agent's `Poppy-Approval`, its statement of
    /// the User's approval) or `page` (on the Company's approval page, signed in; issue 29).
    pub approved_via: Option<&'static str>,
    /// Who approved it on the page: the subject signed in at the Company's OpenID provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_subject: Option<String>,
    /// RFC 3339, milliseconds.
    pub approved_at: Option<String>,
    pub performed_at: String,
    pub upstream_status: Option<u16>,
    /// SHA-256 (hex) of the recorded answer: status, headers and body, framed.
    pub answer_sha256: Option<String>,
}

/// Now as RFC 3339 with milliseconds.
pub(crate) fn rfc3339_ms(unix_ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// A receipt for an approved operation, claimed at `approved_at_ms`: who approved which
/// terms. `performed_at`, the upstream's status and the answer's digest come once recorded.
/// `page`: the decision on the approval page it was approved by (then `approved_at` is its
/// time), if it was.
pub(crate) fn draft_receipt(
    prepared: &Prepared,
    approved: &Approved,
    approved_at_ms: i64,
    page: Option<&PageDecision>,
) -> Receipt {
    let request = &prepared.request;
    let approver = &request.approver;
    Receipt {
        kind: "performed",
        operation_id: approved.id.to_string(),
        revision: approved.revision.clone(),
        policy: request.policy.name.clone(),
        summary: Some(prepared.summary.clone()),
        terms: Some(terms_value(&request.terms)),
        scope: approver.scope.clone(),
        agent: Some(approver.who.agent.clone()),
        user: approver.who.user.clone(),
        // An agent's request without a Session has none (`Approver::for_token`).
        session: Some(approver.who.session.clone()).filter(|s| !s.is_empty()),
        account: approver.who.account.clone(),
        identity: Some(if approver.credentials.is_none() {
            "verified"
        } else {
            "unverified"
        }),
        approved_via: Some(if page.is_some() { "page" } else { "agent" }),
        page_subject: page.map(|d| d.subject.clone()),
        approved_at: Some(rfc3339_ms(page.map_or(approved_at_ms, |d| d.at_ms))),
        performed_at: String::new(),
        upstream_status: None,
        answer_sha256: None,
    }
}
