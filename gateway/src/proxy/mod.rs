//! The pingora glue: the HTTP service, the adapters that turn requests into operations, the
//! executor that drives the operation flow (`crate::operation::flow`), and the gateway's own
//! upstream client.
//!
//! One request for an operation, in order: `service` (pingora's hooks; routes it through the
//! front door's first step, `crate::ingress::admit::route`) → `http_api` or `mcp_api` (what
//! the request is, read off the wire) → `runner` (the front door's other steps, in the
//! spec's order, then the executor) → `executor` (the flow's driver: carries out each need of
//! `crate::operation::flow` (records, the lookup, the claim, the forward with `upstream`,
//! the record write) and feeds the answer back) → `reply` (renders the decision or the refusal) →
//! `service` (`outcome`: counted and logged once, noted for the access log, then the reply
//! written). The conversations service takes the same runner.
//!
//! Around every request, operation or not: `edge` (request IDs, the proxy headers of
//! `forwarded`, the `access_log` line, JSON answers when passthrough fails), and `limits` and
//! `h2` around pingora's app (connection cap, header deadline, which connections speak
//! HTTP/2; `first_bytes` tells when a TLS HTTP/2 connection's preface has arrived).

mod access_log;
mod connections;
mod edge;
mod executor;
mod forwarded;
mod h2;
mod http_api;
mod limits;
mod lookup;
mod mcp_api;
mod mcp_calls;
mod mcp_clients;
mod mcp_forward;
mod mcp_stream;
mod operations;
mod outcome;
mod page_offer;
mod reply;
mod routes;
mod runner;
mod service;
mod step;
mod upstream;
mod upstream_head;
mod watched;
mod well_known;

pub(crate) use access_log::{AccessLogError, AccessLogger};
pub(crate) use connections::{Connections, LimitedApp, REFUSING_AT_ONCE, Requests, head_read};
pub(crate) use edge::Edge;
pub(crate) use executor::{Executor, ExecutorParts};
pub(crate) use h2::server_options as h2_server_options;
pub(crate) use limits::{BodyLimits, HeldBodies, Reservation, UpstreamSlots};
pub(crate) use mcp_api::McpEndpoint;
pub(crate) use operations::Operations;
pub(crate) use routes::{RouteRuntime, Routes};
pub(crate) use service::GatewayProxy;
pub(crate) use upstream::UpstreamClient;
// The conversations service (`crate::conversations`) runs described requests through the same
// runner (front door, executor) as the HTTP API, and records their outcomes the same way.
pub(crate) use executor::Operated;
pub(crate) use forwarded::ProxyContext;
pub(crate) use outcome::RequestOutcome;
pub(crate) use runner::{
    Admission, Arrival, Door, Ran, admit_request, offer_page, refused_outcome,
};
