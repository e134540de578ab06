//! Helpers shared by the gateway's integration tests.

pub mod redis_server;

pub use redis_server::RedisServer;
