//! A request the policy's condition does not hold (`Operated::NotHeld`): counted once as
//! unheld, and sent as a request no policy names, on a fresh connection with its answer read
//! whole (its body was read to compute the terms). The same for every interface.

use super::Runner;
use crate::ingress::ForwardRequest;
use crate::metrics::Unheld;
use crate::protocol::ErrorBody;
use crate::store::RecordedResponse;
use crate::upstream::forwarded::ProxyContext;

impl Runner {
    /// `forward`, for `policy` whose `needs_approval_when` is false, sent and counted. `Err`:
    /// the upstream did not answer; what every interface answers then (a `502`).
    pub(crate) async fn send_unheld(
        &self,
        policy: &str,
        forward: ForwardRequest,
        proxy: &ProxyContext,
    ) -> Result<RecordedResponse, ErrorBody> {
        self.metrics.unheld(policy, Unheld::ConditionFalse);
        let sent = self.executor.upstream().send(forward, proxy).await;
        sent.map_err(|e| {
            tracing::warn!(policy, error = %e, "a request not held (needs_approval_when is false) got no answer from the upstream");
            ErrorBody::new(
                "upstream_unavailable",
                "this request needs no approval (the policy's needs_approval_when is false for its terms), and the API did not answer it",
            )
        })
    }
}
