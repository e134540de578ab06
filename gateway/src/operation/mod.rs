//! The operation core: the spec's decisions (sections 6 and 7), apart from any I/O.
//!
//! Every function here is a pure function of the request (as the ingress read it), its
//! policy, what the store returned, the signing keys and the time it is given: it returns a
//! [`Verdict`] and performs nothing. [`flow`] puts them in the spec's order as one state
//! machine, which the executor (`run::executor`) drives against the store and the
//! upstream. The order, for a request with an approval:
//!
//! 1. [`start`]: an ID not of this gateway's shape is refused at once (a new operation is
//!    minted); otherwise the store is asked for its record and its action's generation.
//! 2. [`check`]: check 1 (the approver can approve it), check 2 (performed or being
//!    performed: replay, or try again later), check 3 (the revision is one minted for exactly
//!    this request and still open): [`Verdict::Claim`], or a refusal answered with a new
//!    operation ([`Verdict::Mint`]).
//! 3. [`mint`]: the operation for what the request asks, unless its action has an operation
//!    whose outcome is unknown.
//! 4. After the forward, [`releases`] says whether the upstream's answer proves nothing was
//!    performed, and [`Remember`] how long a recorded answer is kept.

mod decision;
pub(crate) mod flow;
pub(crate) mod outcome;
pub(crate) mod page;
mod receipt;
pub(crate) mod record;
mod remember;
pub(crate) mod round;
mod verdict;
mod wire;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde_json::Value;

use crate::identity::Approver;
use crate::policy::{Policy, Terms, canonical_json};
use crate::protocol::{ApprovalHeader, OperationId, ScopeKind};

pub(crate) use decision::Decision;
pub(crate) use page::{
    action_before_lookup, approved_operations, held_again, proven_on_page, read_decisions,
    replay_before_lookup, request_digest,
};
pub(crate) use receipt::{Receipt, draft_receipt, rfc3339_ms};
pub(crate) use remember::{ForwardRules, Remember, lease_until_ms, releases};
pub(crate) use verdict::{
    Answer, Approved, Kept, Minted, Start, Verdict, action_tag, check, claim, existing,
    from_record, is_proven, keep, may_follow_up, mint, mint_for, record_before_lookup, start,
};
pub(crate) use wire::{IN_PROGRESS, WireError};
#[cfg(test)]
pub(crate) use wire::{Wire, every_decision};

/// A request for an operation, prepared by its interface (HTTP API or MCP).
#[derive(Debug, Clone)]
pub(crate) struct OperationRequest {
    pub(crate) policy: Arc<Policy>,
    pub(crate) approver: Approver,
    pub(crate) approval: Option<ApprovalHeader>,
    /// The terms the policy extracted.
    pub(crate) terms: Terms,
    /// A canonical fingerprint of the request itself, covered by the revision: an approval
    /// only ever approves the request that returned the operation.
    pub(crate) fingerprint: Vec<u8>,
}

/// A request with what the MACs cover, computed once.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) request: OperationRequest,
    pub(crate) terms_json: String,
    pub(crate) summary: String,
    /// What the action tag covers: the policy, the approver's scope, the `same_action` terms.
    pub(crate) action_material: Vec<Vec<u8>>,
}

impl Prepared {
    pub(crate) fn new(mut request: OperationRequest) -> Prepared {
        if names_session_operation(request.approval.as_ref())
            && request.approver.kind == ScopeKind::Account
        {
            // Returned while this Session was signed out: it stays the Session's to approve.
            request.approver = request.approver.session_only();
        }
        let action_material = action_material(&request.policy, &request.approver, &request.terms);
        Prepared {
            terms_json: canonical_json(&terms_value(&request.terms)),
            summary: request.policy.summary.render(&request.terms),
            action_material,
            request,
        }
    }

    /// This request carrying `approval`: a page decision checked as a `Poppy-Approval`.
    pub(crate) fn with_approval(&self, approval: ApprovalHeader) -> Prepared {
        let mut prepared = self.clone();
        prepared.request.approval = Some(approval);
        prepared
    }
}

/// What the action tag covers: the policy, the approver's scope, the `same_action` terms.
fn action_material(policy: &Policy, approver: &Approver, terms: &Terms) -> Vec<Vec<u8>> {
    let mut material = vec![
        policy.name.clone().into_bytes(),
        approver.scope.clone().into_bytes(),
    ];
    material.extend(policy.action_material(terms));
    material
}

/// Whether an approval names an operation returned to a signed-out Session.
fn names_session_operation(approval: Option<&ApprovalHeader>) -> bool {
    approval
        .and_then(|a| OperationId::parse(&a.operation_id))
        .is_some_and(|id| id.kind() == ScopeKind::Session)
}

fn terms_value(terms: &Terms) -> Value {
    Value::Object(terms.clone().into_iter().collect())
}
