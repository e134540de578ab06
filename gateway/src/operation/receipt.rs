//! The receipt of an operation about to be forwarded; the executor adds the answer.

use super::{Approved, Prepared, terms_value};
use crate::receipts::{Receipt, rfc3339_ms};

/// A receipt for an approved operation, claimed at `approved_at_ms`: who approved which
/// terms. `performed_at`, the upstream's status and the answer's digest come once recorded.
pub(crate) fn draft_receipt(
    prepared: &Prepared,
    approved: &Approved,
    approved_at_ms: i64,
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
        session: Some(approver.who.session.clone()),
        account: approver.who.account.clone(),
        identity: Some(if approver.credentials.is_none() {
            "verified"
        } else {
            "unverified"
        }),
        approved_at: Some(rfc3339_ms(approved_at_ms)),
        performed_at: String::new(),
        upstream_status: None,
        answer_sha256: None,
    }
}
