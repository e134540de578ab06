//! The pingora glue: the HTTP service, and the adapters that turn requests into operations
//! (the HTTP API, the MCP endpoint) and render what they came to.
//!
//! One request for an operation, in order: `service` (pingora's hooks; routes it through the
//! front door's first step, `crate::ingress::admit::route`) → `http_api` or `mcp_api` (what
//! the request is, read off the wire) → `crate::run` (the front door's other steps, then the
//! executor, the driver of `crate::operation::flow`) → `reply` (renders the decision or the
//! refusal) → `service` (the outcome counted and logged once, noted for the access log, then
//! the reply written). The conversations service takes the same `crate::run`.
//!
//! Around every request, operation or not: `edge` (request IDs, the proxy headers of
//! `crate::upstream::forwarded`, the `access_log` line, JSON answers when passthrough
//! fails); around pingora's app, `crate::listener` (connection cap, header deadline, HTTP/2,
//! bodies held).

mod access_log;
mod edge;
mod http_api;
mod mcp_api;
mod mcp_calls;
mod mcp_clients;
mod mcp_forward;
mod mcp_held;
mod mcp_reply;
mod mcp_stream;
mod operations;
mod reply;
mod routes;
mod service;
mod step;
mod well_known;

pub(crate) use access_log::{AccessLogError, AccessLogger};
pub(crate) use edge::Edge;
pub(crate) use mcp_api::McpEndpoint;
pub(crate) use operations::Operations;
pub(crate) use routes::{RouteRuntime, Routes};
pub(crate) use service::GatewayProxy;
