//! How long a decision on the page is kept, and the one place it is stored.

use std::time::Duration;

use crate::clock::now_millis;
use crate::operation::page::{PageDecided, PageDecision, PageVerdict};
use crate::protocol::page_link::Link;
use crate::store::{KeptDecision, OperationStore};

/// How long after its revision's expiry a decision is kept: the longest an approved forward
/// may run, the policy's `expires_in`, a second and the store's grace. The record of the
/// operation it approved is kept until its completion + `expires_in`, a second and the grace
/// (`operation::Remember`), and it completes at the latest `longest_execution` after the
/// expiry (a claim is taken only before it); a page request's retry finds that record by the
/// decision (`operation::approved_operations`): so the recorded answer is replayed as long as
/// it is kept, and never a new link offered for a performed request.
pub(super) fn keep_after(
    expires_in: Duration,
    longest_execution: Duration,
    grace: Duration,
) -> Duration {
    longest_execution
        .saturating_add(expires_in)
        .saturating_add(Duration::from_secs(1))
        .saturating_add(grace)
}

/// The one place a decision on the page is made: stored once per revision, kept until the
/// revision expires and `kept_after` ([`keep_after`]). (Events for the Company's systems,
/// "approved on the page" and "declined", go here once the webhook exists.)
pub(super) async fn decide(
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
