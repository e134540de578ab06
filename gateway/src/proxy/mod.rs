//! The pingora glue: the HTTP service, the operation flow and the gateway's own upstream client.

mod access_log;
mod approver;
mod edge;
mod first_bytes;
mod flow;
mod forwarded;
mod h2;
mod http_api;
mod limits;
mod mcp_api;
mod mcp_forward;
mod reply;
mod service;
mod upstream;
mod well_known;

pub use access_log::{AccessLogError, AccessLogReopener, AccessLogger};
pub use approver::{Approver, ApproverError};
pub use edge::Edge;
pub use flow::{Decision, OperationFlow, OperationRequest, now_millis};
pub use forwarded::note_outcome;
pub use limits::{BodyLimits, HeldBodies, LimitedApp};
pub use mcp_api::McpEndpoint;
pub use reply::Reply;
pub use service::GatewayProxy;
pub use upstream::{ForwardError, ForwardRequest, UpstreamClient};
// The conversations service (crate::conversations) runs the HTTP API's preparation too.
pub(crate) use http_api::{ApiRequest, prepare as prepare_api_request};
pub(crate) use upstream::forwarded_headers;
