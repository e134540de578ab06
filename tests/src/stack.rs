//! One test's world: a counting upstream, the store (memory or a private Redis), and a
//! gateway in front of the upstream.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::agent::Request;
use crate::answer::Answer;
use crate::gateway::{Gateway, GatewayBuilder};
use crate::redis::RedisServer;
use crate::upstream::Upstream;

/// How long a held request may take to reach the upstream.
const ARRIVAL: Duration = Duration::from_secs(10);

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

    /// Hold the upstream's answers, send `request` and wait (at most 10 s) until the upstream
    /// has received `received` requests in all: the request is being forwarded when this
    /// returns, and is answered once [`Upstream::release`] is called.
    pub async fn send_held(&self, request: &Request, received: usize) -> JoinHandle<Answer> {
        let (client, request) = (self.gateway.client(), request.clone());
        self.held(received, async move { client.send(&request).await })
            .await
    }

    /// [`Stack::send_held`], for a request whose connection may be cut (`Err`: no answer).
    pub async fn try_send_held(
        &self,
        request: &Request,
        received: usize,
    ) -> JoinHandle<Result<Answer, String>> {
        let (client, request) = (self.gateway.client(), request.clone());
        self.held(received, async move { client.try_send(&request).await })
            .await
    }

    async fn held<T: Send + 'static>(
        &self,
        received: usize,
        send: impl Future<Output = T> + Send + 'static,
    ) -> JoinHandle<T> {
        self.upstream.hold();
        let in_flight = tokio::spawn(send);
        self.upstream.wait_for_count(received, ARRIVAL).await;
        in_flight
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
