//! What the HTTP API and MCP adapters share to run a request for an operation: the policies,
//! the executor, who may approve, and how bodies are read.

use std::sync::Arc;

use super::executor::Executor;
use super::limits::BodyLimits;
use crate::identity::SessionClaims;
use crate::metrics::Metrics;
use crate::policy::LivePolicies;

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
