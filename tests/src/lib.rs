//! End-to-end harness of poppy-gateway: the real binary, a counting upstream and a private
//! `redis-server` (or a replica, or a whole Redis Cluster), each on free loopback ports, all
//! stopped when the test ends.
//!
//! A test harness fails tests by panicking, so `unwrap`/`expect` are fine here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod agent;
pub mod announced;
pub mod answer;
pub mod auth_server;
pub mod binaries;
pub mod browser;
pub mod company;
pub mod config_files;
pub mod conversations;
pub mod curl;
pub mod frameworks;
pub mod gateway;
pub mod h2client;
pub mod identity;
pub mod markdown;
pub mod mcp_client;
pub mod mcp_server;
pub mod mcp_stack;
pub mod metrics;
pub mod openssl;
pub mod otlp;
pub mod page;
pub mod policies;
pub mod ports;
pub mod prism;
pub mod prometheus;
pub mod python_mcp;
pub mod rawhttp;
pub mod redis;
pub mod redis_cluster;
pub mod rfc3339;
pub mod run;
pub mod served;
pub mod shop;
pub mod signer;
pub mod stack;
pub mod tcp_front;
pub mod test_agent;
pub mod testtls;
pub mod thirdparty;
pub mod upstream;
pub mod wait;
pub mod webhook;

pub use agent::{OPERATIONS_V2, Request, Session, approval_header};
pub use answer::{Answer, Operation, tamper};
pub use gateway::{Client, Gateway, GatewayBuilder, TEST_KEYS};
pub use mcp_server::{AnswerMode, McpServer};
pub use mcp_stack::McpStack;
pub use redis::RedisServer;
pub use redis_cluster::RedisCluster;
pub use run::{Run, run_binary};
pub use shop::Shop;
pub use signer::{Fault, PUBLIC_ORIGIN};
pub use stack::{Stack, Store};
pub use test_agent::{Serving, TestAgent};
pub use upstream::Upstream;

/// Run each named `async fn NAME(store: Store)` once per store, as the tests
/// `NAME::memory` and `NAME::redis`.
///
/// ```text
/// async fn replays(store: Store) { /* … */ }
/// poppy_e2e::store_tests!(replays);
/// ```
#[macro_export]
macro_rules! store_tests {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$name($crate::Store::Memory).await
                }

                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    super::$name($crate::Store::Redis).await
                }
            }
        )+
    };
}
