//! What the HTTP API and MCP adapters share to turn a request into an operation: the policies,
//! the executor, and the checks every interface makes before it (spec order: extension,
//! Session, body).

use std::sync::Arc;

use super::executor::Executor;
use super::limits::BodyLimits;
use crate::identity::{Approver, ApproverError, RequestTarget, SessionClaims};
use crate::metrics::Metrics;
use crate::policy::LivePolicies;
use crate::protocol::{ExtensionsError, declares_operations_v2};

/// The adapters' shared parts.
pub(crate) struct Operations {
    /// Swapped whole by a policy reload.
    pub(crate) policies: LivePolicies,
    pub(crate) executor: Arc<Executor>,
    pub(crate) session_claims: SessionClaims,
    /// How bodies of requests to actions are read and held.
    pub(crate) body_limits: BodyLimits,
    pub(crate) metrics: Arc<Metrics>,
}

impl Operations {
    /// Who may approve, from the request's `Poppy-Session` and `Authorization`.
    /// `target`: the request's method and path, which a verified Session must be signed for.
    pub(crate) async fn approver(
        &self,
        headers: &http::HeaderMap,
        target: &RequestTarget<'_>,
    ) -> Result<Approver, ApproverError> {
        Approver::for_request(
            headers
                .get("poppy-session")
                .map(|v| v.as_bytes())
                .unwrap_or_default(),
            headers
                .get(http::header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
            &self.session_claims,
            target,
        )
        .await
    }
}

/// Whether the request declares the operations extension (`Poppy-Extensions`).
pub(crate) fn declares_extension(headers: &http::HeaderMap) -> Result<bool, ExtensionsError> {
    declares_operations_v2(
        headers
            .get_all("poppy-extensions")
            .iter()
            .map(|v| v.as_bytes()),
    )
}
