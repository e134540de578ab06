//! What every listener (the proxy's, the conversations service's, the approval page's) is
//! held to: the connection cap, the header deadline and the TLS handshake (`connections`),
//! pingora's own refusals as JSON (`watched`), which connections speak HTTP/2 (`h2`), and
//! the bodies held and upstream connections in use (`limits`). One count for all of them.

mod connections;
mod h2;
mod limits;
mod watched;

pub(crate) use connections::{Connections, LimitedApp, REFUSING_AT_ONCE, Requests, head_read};
pub(crate) use h2::server_options as h2_server_options;
pub(crate) use limits::{
    BodyLimits, HeldBodies, Reservation, UpstreamSlot, UpstreamSlots, read_body,
};
pub(crate) use watched::CONNECT_REFUSED;
