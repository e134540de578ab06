//! What handling a request came to, for pingora's `request_filter`.

use std::sync::Arc;

use super::reply::Reply;
use crate::metrics::Unheld;
use crate::policy::Policy;
use crate::run::RequestOutcome;

/// What a request step decided.
pub(crate) enum Step {
    /// Let pingora proxy the request as it is.
    Continue,
    /// Let pingora proxy as it is a request to this policy's route that is not held: counted
    /// with the operations' outcomes, as it goes on.
    Unheld(Arc<Policy>, Unheld),
    /// Answer with this, without proxying.
    Respond(Reply),
    /// Answer a request for an operation with this; its outcome is counted and logged once,
    /// as the answer is written.
    Operation(Reply, RequestOutcome),
    /// Already answered (streamed from the upstream); `Err` if that failed part way.
    Answered(pingora::Result<()>),
    /// A request for an operation already answered, streamed as its forward ran (an MCP
    /// call's server requests); its outcome is counted and logged once, now.
    OperationStreamed(pingora::Result<()>, RequestOutcome),
}

impl Step {
    /// A request not held for approval (`why`): proxied as it is, counted if `policy` names
    /// its route.
    pub(crate) fn unheld(policy: Option<Arc<Policy>>, why: Unheld) -> Step {
        match policy {
            Some(policy) => Step::Unheld(policy, why),
            None => Step::Continue,
        }
    }

    /// A request for an operation refused before the flow: nothing decided, nothing
    /// forwarded.
    pub(crate) fn refused(policy: &str, outcome: crate::metrics::Outcome, reply: Reply) -> Step {
        let status = reply.status;
        Step::Operation(reply, RequestOutcome::refused(policy, outcome, status))
    }
}
