//! What the HTTP API and MCP adapters share to run a request for an operation: the policies,
//! the runner (the executor, who may approve), and how bodies are read.

use crate::listener::BodyLimits;
use crate::policy::LivePolicies;
use crate::run::Runner;

/// The adapters' shared parts.
pub(crate) struct Operations {
    /// Swapped whole by a policy reload.
    pub(crate) policies: LivePolicies,
    pub(crate) runner: Runner,
    /// How bodies of requests to actions are read and held.
    pub(crate) body_limits: BodyLimits,
}
