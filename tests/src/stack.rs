//! One test's world: a counting upstream, the store (memory or a private Redis), and a
//! gateway in front of the upstream.

use crate::gateway::{Gateway, GatewayBuilder};
use crate::redis::RedisServer;
use crate::upstream::Upstream;

/// Which store the gateway runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// `memory://`
    Memory,
    /// A private `redis-server`.
    Redis,
}

/// Gateway, upstream and Redis of one test. Dropped in that order.
pub struct Stack {
    pub gateway: Gateway,
    pub upstream: Upstream,
    pub redis: Option<RedisServer>,
    pub store: Store,
}

impl Stack {
    /// Everything with the default config.
    pub fn start(store: Store) -> Stack {
        Stack::start_with(store, |builder| builder)
    }

    /// Everything, with the gateway's config changed by `configure`.
    pub fn start_with(
        store: Store,
        configure: impl FnOnce(GatewayBuilder) -> GatewayBuilder,
    ) -> Stack {
        let redis = match store {
            Store::Memory => None,
            Store::Redis => Some(RedisServer::start()),
        };
        let upstream = Upstream::start();
        let mut builder = GatewayBuilder::new(&upstream.url());
        if let Some(redis) = &redis {
            builder = builder.store_url(&redis.url());
        }
        let gateway = configure(builder).start();
        Stack {
            gateway,
            upstream,
            redis,
            store,
        }
    }

    /// The Redis server; panics for the memory store.
    pub fn redis(&mut self) -> &mut RedisServer {
        self.redis
            .as_mut()
            .expect("this test runs with the Redis store")
    }

    /// Assert the upstream executed exactly `n` requests so far.
    pub fn assert_executions(&self, n: usize, context: &str) {
        let requests = self.upstream.requests();
        assert_eq!(
            requests.len(),
            n,
            "{context}: the upstream should have executed {n} request(s), it executed {}: {:?}",
            requests.len(),
            requests
                .iter()
                .map(|r| format!("#{} {} {}", r.execution, r.method, r.path_and_query))
                .collect::<Vec<_>>()
        );
    }
}
