//! Decisions made on the Company's approval page (issue 29): the core's vocabulary of them,
//! and how the core reads them for a request. A decision is one per (operation ID, revision),
//! set once (`OperationStore::decide_on_page`), kept until the revision's expiry and as long
//! as a record of its operation can be kept after it, and read back by the action
//! (`OperationStore::page_state`).
//!
//! A page request's retry is first answered from the record of an operation its account
//! approved for this very request, before its lookup ([`replay_before_lookup`]); only
//! otherwise are the decisions read for it after the lookup ([`read_decisions`]).
//!
//! For a request without the extension (`Via::Page`), an Approved decision by the account the
//! request acts for is treated exactly as a `Poppy-Approval` of that operation and revision:
//! the same checks 1 to 3, the same claim, one forward. A Declined decision for a revision
//! that is still valid for this very request is answered as declined: nothing is performed.

use super::record::OperationRecord;
use super::verdict::{Answer, Approved, derive_action, from_record, revision_input, rfc3339};
use super::{Prepared, action_material, terms_value};
use crate::identity::Approver;
use crate::policy::{Policy, TermSource, Terms};
use crate::protocol::{
    ActionTag, ApprovalHeader, Keys, Operation, OperationId, Revision, SigningKey,
};

/// How many operations the account approved on the page a retry reads the records of, before
/// its lookup, at most (newest first): each is one store round trip, and an account rarely
/// approves more than one request of one action while its decisions are kept.
const REPLAY_CANDIDATES: usize = 4;

/// What the User decided on the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageVerdict {
    Approved,
    Declined,
}

impl PageVerdict {
    fn letter(self) -> char {
        match self {
            PageVerdict::Approved => 'A',
            PageVerdict::Declined => 'D',
        }
    }

    /// `approved` or `declined`, as pages, logs and receipts say it.
    pub fn as_str(self) -> &'static str {
        match self {
            PageVerdict::Approved => "approved",
            PageVerdict::Declined => "declined",
        }
    }
}

/// One decision on the page: which revision of which operation, what, by whom, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageDecision {
    pub operation_id: OperationId,
    pub revision: String,
    pub verdict: PageVerdict,
    /// The signed-in subject (the OpenID provider's `sub`).
    pub subject: String,
    /// Wall-clock ms.
    pub at_ms: i64,
}

/// What `OperationStore::decide_on_page` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageDecided {
    /// The decision is the revision's now.
    Stored,
    /// The revision had a decision already; it is unchanged, and this is it.
    Exists(PageDecision),
}

impl PageDecision {
    /// The store's field for this decision: one per operation and revision (neither holds a
    /// space).
    pub fn field(&self) -> String {
        field(&self.operation_id, &self.revision)
    }

    /// The stored value: `<A|D> <at_ms> <subject>` (the subject last: it may hold anything).
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.verdict.letter(), self.at_ms, self.subject)
    }

    /// A decision read back from its field and value; `None` if either is not one.
    pub fn decode(field: &str, value: &str) -> Option<PageDecision> {
        let (id, revision) = field.split_once(' ')?;
        let mut parts = value.splitn(3, ' ');
        let verdict = match parts.next()? {
            "A" => PageVerdict::Approved,
            "D" => PageVerdict::Declined,
            _ => return None,
        };
        let at_ms = parts.next()?.parse().ok()?;
        let subject = parts.next()?.to_owned();
        Some(PageDecision {
            operation_id: OperationId::parse(id)?,
            revision: revision.to_owned(),
            verdict,
            subject,
            at_ms,
        })
    }

    /// The approval this decision stands for, for the core's checks.
    pub(crate) fn as_approval(&self) -> ApprovalHeader {
        ApprovalHeader {
            operation_id: self.operation_id.to_string(),
            revision: self.revision.clone(),
        }
    }
}

/// The store's field for an operation's revision.
pub(crate) fn field(id: &OperationId, revision: &str) -> String {
    format!("{} {revision}", id.as_str())
}

/// Whether a signed-in `subject` is the account a request acts for: the account as the
/// approver reads it, `verified:<sub>` from a verified token, `claim:<sub>` from an
/// unverified JWT (`[session] verify = "off"`). An opaque token's account (`token:<hash>`)
/// is no subject's.
pub(crate) fn subject_is_account(subject: &str, account: Option<&str>) -> bool {
    let Some(account) = account else {
        return false;
    };
    let named = account
        .strip_prefix("verified:")
        .or_else(|| account.strip_prefix("claim:"));
    !subject.is_empty() && named == Some(subject)
}

/// What a request without the extension comes to, given its action's page decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PageRead {
    /// No decision stands for this very request: hold it for the User (mint, with the
    /// action's state already read).
    Hold,
    /// The account declined a revision minted for exactly this request, still open: answer
    /// that, perform nothing. Once it expires, the same request is held again.
    Declined(OperationId),
    /// The account approved a revision minted for exactly this request: check it as a
    /// `Poppy-Approval` of that operation and revision (its record, then checks 1 to 3).
    Approved(PageDecision),
}

/// The decision that stands for `prepared`: the latest one by the account the request acts
/// for whose revision verifies against this very request (its terms, its fingerprint, its
/// approver) and has not expired. A decision for other terms, another account or an expired
/// revision is not this request's.
pub(crate) fn read_decisions(
    keys: &Keys,
    prepared: &Prepared,
    decisions: &[PageDecision],
    now_ms: i64,
) -> PageRead {
    let account = prepared.request.approver.who.account.as_deref();
    let now = now_ms.div_euclid(1000);
    let standing = decisions
        .iter()
        .filter(|d| subject_is_account(&d.subject, account))
        .filter(|d| {
            let input = revision_input(&d.operation_id, prepared);
            matches!(
                Revision::check(keys, &d.revision, &input, now),
                Revision::Valid { .. }
            )
        })
        .max_by_key(|d| (d.at_ms, d.verdict == PageVerdict::Approved));
    match standing {
        None => PageRead::Hold,
        Some(d) if d.verdict == PageVerdict::Declined => PageRead::Declined(d.operation_id.clone()),
        Some(d) => PageRead::Approved(d.clone()),
    }
}

/// The digest of a request (its fingerprint, bound to its route) kept with the record of an
/// operation approved on the page: a page request names no operation, so its retry is known
/// for the approved one by this, before its lookup. Keyed, as the credentials digest is, so
/// that a store dump gives no way to test guesses of a request's body.
pub(crate) fn request_digest(key: &SigningKey, fingerprint: &[u8]) -> String {
    key.tag(b"poppy-page-request-v1", &[fingerprint], 43)
}

/// The action a page request is for, from the terms its request carries (before its policy's
/// lookup): the tag covers the policy, the account and the `same_action` terms, so it is
/// known before the lookup unless `same_action` names a looked-up or computed term (`None`:
/// then only the lookup can say, and the request goes the normal way).
pub(crate) fn action_before_lookup(
    keys: &Keys,
    policy: &Policy,
    approver: &Approver,
    terms: &Terms,
) -> Option<ActionTag> {
    let from_lookup = |name: &String| {
        policy.terms.iter().any(|(term, source)| {
            term == name && matches!(source, TermSource::Lookup { .. } | TermSource::Compute(_))
        })
    };
    if policy
        .same_action
        .iter()
        .any(|name| from_lookup(name) || !terms.contains_key(name))
    {
        return None;
    }
    let material = action_material(policy, approver, terms);
    Some(derive_action(keys, policy, approver.kind, &material))
}

/// The operations the account a request acts for approved on the page, newest decision
/// first, each once, at most [`REPLAY_CANDIDATES`]: those whose record may hold the answer to
/// its retry. Whether a revision is still valid does not matter here: a performed operation
/// is replayed as long as its record is kept.
pub(crate) fn approved_operations(
    decisions: &[PageDecision],
    account: Option<&str>,
) -> Vec<OperationId> {
    let mut approved: Vec<&PageDecision> = decisions
        .iter()
        .filter(|d| d.verdict == PageVerdict::Approved && subject_is_account(&d.subject, account))
        .collect();
    approved.sort_by_key(|d| std::cmp::Reverse(d.at_ms));
    let mut ids: Vec<OperationId> = Vec::new();
    for decision in approved {
        if ids.len() == REPLAY_CANDIDATES {
            break;
        }
        if !ids.contains(&decision.operation_id) {
            ids.push(decision.operation_id.clone());
        }
    }
    ids
}

/// Checks 1 and 2 for a page request before its lookup, against the record of an operation
/// its account approved on the page: answered as a Poppy agent's retry of that operation
/// would be (the recorded answer, in progress, unknown, already performed), but only when
/// the record was claimed for this very request (the digest of its fingerprint, under any
/// key), under this policy, by this approver. `None`: the request goes the normal way (its
/// lookup, then the page's decisions): another request of the same action by the same
/// account, or a record written before it kept the digest.
pub(crate) fn replay_before_lookup(
    keys: &Keys,
    policy: &Policy,
    approver: &Approver,
    fingerprint: &[u8],
    id: &OperationId,
    record: OperationRecord,
    now_ms: i64,
) -> Option<Answer> {
    let kept = record.request.as_deref()?;
    if !keys
        .all()
        .iter()
        .any(|key| request_digest(key, fingerprint) == kept)
    {
        return None;
    }
    from_record(keys, policy, approver, id, record, now_ms)
}

/// Whether a `Poppy-Approval` of `approved` may be used under `proof = "company_page"`: the
/// account approved that very revision on the page.
pub(crate) fn proven_on_page(
    prepared: &Prepared,
    id: &OperationId,
    revision: &str,
    decisions: &[PageDecision],
) -> Option<PageDecision> {
    let account = prepared.request.approver.who.account.as_deref();
    decisions
        .iter()
        .find(|d| {
            d.operation_id == *id
                && d.revision == revision
                && d.verdict == PageVerdict::Approved
                && subject_is_account(&d.subject, account)
        })
        .cloned()
}

/// The operation an approval names, held again as it is (same ID, same revision): under
/// `proof = "company_page"` until the account approved that revision on the page.
pub(crate) fn held_again(prepared: &Prepared, approved: &Approved) -> Operation {
    Operation {
        operation_id: approved.id.to_string(),
        revision: approved.revision.clone(),
        summary: prepared.summary.clone(),
        terms: Some(terms_value(&prepared.request.terms)),
        expires_at: rfc3339(approved.expires_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ScopeKind, SigningKey};

    #[test]
    fn a_decision_reads_back_as_written() {
        let key = SigningKey::new(b"page-decision-test-key-0123456789".to_vec());
        let id = OperationId::derive(&key, "exc", ScopeKind::Account, &[b"a"], 0);
        let decision = PageDecision {
            operation_id: id,
            revision: "1900000000-abc".into(),
            verdict: PageVerdict::Declined,
            subject: "alice with spaces".into(),
            at_ms: 12,
        };
        assert_eq!(
            PageDecision::decode(&decision.field(), &decision.encode()),
            Some(decision.clone())
        );
        assert_eq!(PageDecision::decode(&decision.field(), "X 1 s"), None);
        assert_eq!(PageDecision::decode("nospace", &decision.encode()), None);
    }

    #[test]
    fn the_subject_must_be_the_account() {
        assert!(subject_is_account("alice", Some("verified:alice")));
        assert!(subject_is_account("alice", Some("claim:alice")));
        assert!(!subject_is_account("alice", Some("alice")));
        assert!(!subject_is_account("alice", Some("token:alice")));
        assert!(!subject_is_account("bob", Some("verified:alice")));
        assert!(!subject_is_account("alice", None));
        assert!(!subject_is_account("", Some("")));
    }
}
