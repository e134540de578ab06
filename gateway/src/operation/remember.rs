//! The expiry and release rules of a claimed operation: how long its claim holds, whether the
//! upstream's answer proves nothing was performed, and how long its answer is remembered.

use std::time::Duration;

/// What the expiry and release rules read of a route's `[upstream]`: its settings, as the
/// config holds them (`config::Upstream::forward_rules`), given to the core as plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ForwardRules {
    pub(crate) connect_timeout: Duration,
    /// How long an approved execution may take to answer.
    pub(crate) timeout: Duration,
    /// Statuses that prove the upstream performed nothing: the claim is released.
    pub(crate) release_statuses: Vec<u16>,
    pub(crate) release_503_with_retry_after: bool,
}

/// Until when a claim made at `now_ms` holds without an answer: the longest a forward can
/// take (connect, then the whole answer), plus a second. Past it, with no answer recorded,
/// the outcome is unknown.
pub(crate) fn lease_until_ms(upstream: &ForwardRules, now_ms: i64) -> i64 {
    let lease = upstream.connect_timeout + upstream.timeout + Duration::from_secs(1);
    now_ms.saturating_add(duration_ms(lease))
}

/// The release rule: whether the upstream's answer proves nothing was performed (a
/// `release_statuses` status, or a 503 with `Retry-After` when that is allowed), so the
/// claim is released and the same approval may be sent again.
pub(crate) fn releases(
    upstream: &ForwardRules,
    status: u16,
    headers: &[(String, Vec<u8>)],
) -> bool {
    upstream.release_statuses.contains(&status)
        || (status == 503
            && upstream.release_503_with_retry_after
            && headers.iter().any(|(n, _)| n == "retry-after"))
}

/// How long a performed operation (its record and its action's generation) is remembered:
/// while any revision of it could still be approved, plus `store.remember_grace`. Every
/// revision of an operation is minted before its completion moves the generation on, so it
/// expires by the completion time + the policy's `expires_in` (+1 s: a re-minted revision
/// may be one second later); the approved one by its own `expires_at`. A revision minted
/// under a longer `expires_in`, before a reload shortened it, is refused at check 3, so the
/// current `expires_in` is always enough; one made longer by a reload while the operation
/// was being forwarded is read at completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remember {
    /// The approved revision's, in Unix seconds.
    pub(crate) expires_at: i64,
    /// The `expires_in` of the policy the request was decided with.
    pub(crate) expires_in: Duration,
    pub(crate) grace: Duration,
}

impl Remember {
    /// Until when, for a completion at `completed_at_ms`; `reloaded`: the longest
    /// `expires_in` of the same policy among those in force at completion, if any.
    pub(crate) fn until_ms(&self, completed_at_ms: i64, reloaded: Option<Duration>) -> i64 {
        let expires_in = self.expires_in.max(reloaded.unwrap_or_default());
        let any_revision = completed_at_ms
            .saturating_add(duration_ms(expires_in))
            .saturating_add(1000);
        self.expires_at
            .saturating_mul(1000)
            .max(any_revision)
            .saturating_add(duration_ms(self.grace))
    }
}

fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
