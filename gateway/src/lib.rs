//! poppy-gateway: approval of exact terms and at-most-once execution in front of existing APIs.
//!
//! The binary is thin (`main.rs`); everything lives here so tests and tools can use it.

pub mod admin;
pub mod config;
pub(crate) mod conversations;
pub mod drain;
pub mod explain;
pub mod health;
pub mod identity;
pub mod ingress;
pub mod mcp;
pub mod metrics;
pub mod policy;
pub mod protocol;
pub mod proxy;
pub mod quiet_log;
pub mod receipts;
pub mod reload;
pub mod server;
pub mod store;
pub mod tls;
