//! The core's words for what became of a request for an operation, and why an approval was
//! rejected: decided here, counted by `crate::metrics` and logged by the proxy, which use
//! these rather than the other way round.

/// What happened to one request for an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered `403 approval_required` for a request without an approval.
    Held,
    /// Approved and forwarded; the answer was recorded.
    Performed,
    /// A retry answered with the recorded answer.
    Replayed,
    /// A retry by the approver whose credentials do not prove they are the ones that
    /// approved (`verify = "off"`): told the operation was performed, without its answer.
    AlreadyPerformed,
    /// A retry while the operation is being performed.
    InProgress,
    /// A retry for an operation whose outcome is unknown (lease ran out with no answer).
    Unknown,
    /// An approval that failed check 1 or 3: answered with a new revision.
    Rejected,
    /// A signed-out Session named an account's operation: answered with a sign-in challenge.
    Challenged,
    /// The upstream's answer proved nothing was performed (a `release_statuses` answer, or a
    /// 503 with Retry-After); the claim was released.
    Released,
    /// The upstream could not be reached: nothing was sent, the claim was released.
    UpstreamUnavailable,
    /// The request did not declare the extension.
    ExtensionRequired,
    /// Malformed headers, body or terms.
    BadRequest,
    /// The store could not be reached: nothing was forwarded.
    StoreUnavailable,
    /// The gateway was shutting down and started no new forward.
    ShuttingDown,
    /// One of the policy's lookups failed, or a term computed from its answer has no value:
    /// nothing was forwarded.
    LookupFailed,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Held => "held",
            Outcome::Performed => "performed",
            Outcome::Replayed => "replayed",
            Outcome::AlreadyPerformed => "already_performed",
            Outcome::InProgress => "in_progress",
            Outcome::Unknown => "unknown",
            Outcome::Rejected => "rejected",
            Outcome::Challenged => "challenged",
            Outcome::Released => "released",
            Outcome::UpstreamUnavailable => "upstream_unavailable",
            Outcome::ExtensionRequired => "extension_required",
            Outcome::BadRequest => "bad_request",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::ShuttingDown => "shutting_down",
            Outcome::LookupFailed => "lookup_failed",
        }
    }
}

/// Why an approval was rejected (answered with a new revision, outcome `rejected`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The operation is not this requester's to approve, or not for this action: another
    /// Session or account, another route, other `same_action` values.
    NotThisApprover,
    /// The operation was of an earlier (or later) generation of the action: performed and
    /// moved on, so not approvable now.
    StaleGeneration,
    /// The revision is not one minted for exactly this request (other terms, another body,
    /// tampered, or signed with a key no longer configured).
    RevisionInvalid,
    /// The revision's `expires_at` has passed.
    RevisionExpired,
    /// The operation_id is not of this gateway's shape at all.
    NotOurs,
}

impl Rejection {
    pub(crate) const ALL: [Rejection; 5] = [
        Rejection::NotThisApprover,
        Rejection::StaleGeneration,
        Rejection::RevisionInvalid,
        Rejection::RevisionExpired,
        Rejection::NotOurs,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Rejection::NotThisApprover => "not_this_approver",
            Rejection::StaleGeneration => "stale_generation",
            Rejection::RevisionInvalid => "revision_invalid",
            Rejection::RevisionExpired => "revision_expired",
            Rejection::NotOurs => "not_ours",
        }
    }
}

/// Why a request to a policy's route passed through without being held: approval applies
/// only to a Personal Agent's requests (a `Poppy-Session`) and to those `[approval_page.agents]`
/// makes an agent's. Counted so that an operator sees the traffic a policy names that went
/// through unheld.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unheld {
    /// No `Poppy-Session`, and no `[approval_page.agents]`: no request without one is held.
    NoSession,
    /// No `Poppy-Session`, and `[approval_page.agents]` makes it the Company's own client's
    /// (no token, or a token of a client it does not list).
    CompanyClient,
    /// The policy's `needs_approval_when` is false for the request's terms.
    ConditionFalse,
}

impl Unheld {
    pub(crate) const ALL: [Unheld; 3] = [
        Unheld::NoSession,
        Unheld::CompanyClient,
        Unheld::ConditionFalse,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Unheld::NoSession => "no_session",
            Unheld::CompanyClient => "company_client",
            Unheld::ConditionFalse => "condition_false",
        }
    }
}
