//! poppy-gateway: approval of exact terms and at-most-once execution in front of existing APIs.
//!
//! The binary is thin (`main.rs`); everything lives here so tests and tools can use it.

// An item is as visible as its module says: `pub` only where the crate's API is.
#![warn(unreachable_pub)]

mod admin;
mod approval_page;
mod clock;
pub mod config;
mod conversations;
mod drain;
mod events;
pub mod explain;
mod fds;
mod hangup;
pub mod health;
mod identity;
pub mod ingress;
pub mod init;
mod listener;
pub mod log_format;
mod mcp;
mod metrics;
mod operation;
pub mod policy;
pub mod protocol;
mod proxy;
pub mod quiet_log;
pub mod receipts;
mod reload;
mod run;
pub mod server;
pub mod store;
mod telemetry;
#[cfg(test)]
mod testkit;
mod tls;
pub mod trusted_keys;
mod upstream;
