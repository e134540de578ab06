//! poppy-gateway: approval of exact terms and at-most-once execution in front of existing APIs.
//!
//! The binary is thin (`main.rs`); everything lives here so tests and tools can use it.

pub mod admin;
mod clock;
pub mod config;
pub mod drain;
pub mod explain;
pub mod health;
pub mod identity;
pub mod ingress;
pub mod mcp;
pub mod metrics;
mod operation;
pub mod policy;
pub mod protocol;
pub mod proxy;
pub mod receipts;
pub mod reload;
pub mod server;
pub mod store;
