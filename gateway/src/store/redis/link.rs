//! The way to Redis, a single node or a cluster, behind one type: lazily connected, once per
//! Tokio runtime; every call bounded in time; a connection that failed is dropped and the
//! next call starts afresh. The store's calls do not know which kind they run on.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{Client, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use super::url::{CLUSTER_SCHEME, cluster_seeds};
use crate::store::StoreError;

const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// A bound on a whole call, whatever the client does inside it: no call hangs.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_millis(3500);
/// Connections are per Tokio runtime; past this many (runtimes come and go in tests and
/// tools), the cache is dropped and rebuilt on demand.
const MAX_CONNECTIONS: usize = 32;
/// The cluster client follows `MOVED`/`ASK` and waits out `TRYAGAIN`/`CLUSTERDOWN` during a
/// failover by retrying, quickly and a few times: all of it within [`CALL_TIMEOUT`]. A retry
/// after a lost answer may run a script twice, which every script survives: a second claim
/// finds the first one's record (the gateway answers 503), a second complete or release
/// finds nothing left to do.
const CLUSTER_RETRIES: u32 = 3;
const CLUSTER_RETRY_WAIT_MS: (u64, u64) = (10, 200);

/// What the store URL names.
enum Target {
    Node(Client),
    Cluster(ClusterClient),
}

/// One connection of either kind. Both run every command of this crate; a cluster connection
/// routes each to the primary of its key's slot (a pipeline: of its first key's slot).
#[derive(Clone)]
pub(super) enum Link {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Node(connection) => connection.req_packed_command(cmd),
            Link::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Node(connection) => connection.req_packed_commands(pipeline, offset, count),
            Link::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Node(connection) => connection.get_db(),
            Link::Cluster(connection) => connection.get_db(),
        }
    }
}

impl Link {
    /// `PING` every node that serves slots: the one node, or every primary of a cluster. A
    /// missing replica is not a reason to stop serving (`wait_replicas` decides about those).
    pub(super) async fn ping(mut self) -> RedisResult<Value> {
        let ping = redis::cmd("PING");
        match &mut self {
            Link::Node(connection) => ping.query_async(connection).await,
            Link::Cluster(connection) => {
                let primaries = RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::AllSucceeded),
                ));
                connection.route_command(ping, primaries).await
            }
        }
    }

    /// Run `cmd` on the one node, or on every primary of a cluster: each node's address (empty
    /// on a single node) and its answer (a refusal, such as a disabled `CONFIG`, comes back
    /// as a `ServerError` value).
    pub(super) async fn on_each_primary(mut self, cmd: Cmd) -> RedisResult<Vec<(String, Value)>> {
        match &mut self {
            Link::Node(connection) => {
                let answer = match cmd.query_async::<Value>(connection).await {
                    Ok(value) => value,
                    Err(error) => match error.try_into() {
                        Ok(server_error) => Value::ServerError(server_error),
                        Err(error) => return Err(error),
                    },
                };
                Ok(vec![(String::new(), answer)])
            }
            Link::Cluster(connection) => {
                let primaries = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match connection.route_command(cmd, primaries).await? {
                    Value::Map(answers) => Ok(answers
                        .into_iter()
                        .map(|(address, answer)| {
                            let address = match address {
                                Value::BulkString(bytes) => {
                                    String::from_utf8_lossy(&bytes).into_owned()
                                }
                                other => format!("{other:?}"),
                            };
                            (address, answer)
                        })
                        .collect()),
                    other => Ok(vec![(String::new(), other)]),
                }
            }
        }
    }
}

#[derive(Clone)]
struct Connection {
    /// Tells this connection apart from its replacement when forgetting a failed one.
    epoch: u64,
    link: Link,
}

/// The connections of one store.
pub(super) struct Links {
    target: Target,
    /// One lazily connected link per Tokio runtime: a connection's I/O driver is a task of the
    /// runtime that opened it, and the gateway runs services in several runtimes, so none of
    /// them may depend on another one being alive and polled.
    connections: Mutex<HashMap<tokio::runtime::Id, Connection>>,
    next_epoch: AtomicU64,
}

impl Links {
    /// Check the URL. Does not connect (there may be no runtime yet, and the gateway must
    /// start while Redis is down): the first call does.
    pub(super) fn new(url: &str) -> Result<Links, StoreError> {
        let target = if url.starts_with(CLUSTER_SCHEME) {
            let (min_wait, max_wait) = CLUSTER_RETRY_WAIT_MS;
            let client = ClusterClientBuilder::new(cluster_seeds(url)?)
                .connection_timeout(CONNECTION_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(CLUSTER_RETRIES)
                .min_retry_wait(min_wait)
                .max_retry_wait(max_wait)
                .build()
                .map_err(|e| StoreError::Invalid(format!("invalid Redis Cluster URL: {e}")))?;
            Target::Cluster(client)
        } else {
            let client = Client::open(url)
                .map_err(|e| StoreError::Invalid(format!("invalid Redis URL: {e}")))?;
            Target::Node(client)
        };
        Ok(Links {
            target,
            connections: Mutex::new(HashMap::new()),
            next_epoch: AtomicU64::new(0),
        })
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    fn connections(&self) -> MutexGuard<'_, HashMap<tokio::runtime::Id, Connection>> {
        // The map only caches connections; whatever a panic left in it is still usable.
        self.connections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// This runtime's connection, created (not connected) on first use; `true` with one
    /// created now.
    fn connection(&self) -> Result<(Connection, bool), StoreError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Unavailable("the Redis store needs a Tokio runtime".into()))?
            .id();
        let mut connections = self.connections();
        if let Some(connection) = connections.get(&runtime) {
            return Ok((connection.clone(), false));
        }
        let link = match &self.target {
            Target::Node(client) => {
                // No retries inside the manager: a call fails promptly while Redis is down,
                // and the next call tries again.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECTION_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(0);
                let manager = ConnectionManager::new_lazy_with_config(client.clone(), config)
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                Link::Node(manager)
            }
            Target::Cluster(client) => {
                // Connects to the seeds and reads the slot map in the background; the first
                // call waits for it (within its bound).
                let config = ClusterConfig::new()
                    .set_connection_timeout(CONNECTION_TIMEOUT)
                    .set_response_timeout(RESPONSE_TIMEOUT);
                Link::Cluster(client.get_pending_async_connection_with_config(config))
            }
        };
        if connections.len() >= MAX_CONNECTIONS {
            connections.clear();
        }
        let connection = Connection {
            epoch: self.next_epoch.fetch_add(1, Ordering::Relaxed),
            link,
        };
        connections.insert(runtime, connection.clone());
        Ok((connection, true))
    }

    /// Drop a connection that failed, unless it was already replaced.
    fn forget(&self, failed: &Connection) {
        self.connections()
            .retain(|_, connection| connection.epoch != failed.epoch);
    }

    /// Run one request on this runtime's connection, bounded in time. A connection the
    /// server closed (a restart, a failover) is found dead by the request, which then runs
    /// once more on a new connection: a restarted Redis costs no failed call. The first try
    /// reached no server that is still there, or ran and lost its answer, and every request
    /// of this store survives running twice (a second claim finds the first one's record and
    /// the gateway answers 503; a second complete or release finds nothing left to do), as
    /// the cluster client's own retries already assume.
    pub(super) async fn run<T, F, Fut>(&self, request: F) -> Result<T, StoreError>
    where
        F: Fn(Link) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (connection, fresh) = self.connection()?;
        match self.run_on(&connection, &request).await {
            Err(Failure::Dropped(_)) if !fresh => {
                let (connection, _) = self.connection()?;
                self.run_on(&connection, &request)
                    .await
                    .map_err(Failure::into_error)
            }
            other => other.map_err(Failure::into_error),
        }
    }

    async fn run_on<T, F, Fut>(&self, connection: &Connection, request: &F) -> Result<T, Failure>
    where
        F: Fn(Link) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        // pingora's timer wheel: a tokio timer per call woke the runtime's driver (an eventfd write)
        // on every Redis call (BENCHMARKS.md).
        match pingora::prelude::fast_timeout::fast_timeout(
            CALL_TIMEOUT,
            request(connection.link.clone()),
        )
        .await
        {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.failed(connection, &error)),
            Err(_) => {
                self.forget(connection);
                Err(Failure::Other(StoreError::Unavailable(
                    "Redis did not answer in time".into(),
                )))
            }
        }
    }

    fn failed(&self, connection: &Connection, error: &RedisError) -> Failure {
        // Somebody else's data under our key, or a script refusing a malformed entry.
        if matches!(error.code(), Some("WRONGTYPE" | "CORRUPT")) {
            return Failure::Other(StoreError::Corrupt(error.to_string()));
        }
        // The manager repairs dropped connections, but not every failure (a handshake
        // error, a peer that went silent and times out): start afresh on the next call.
        if error.is_connection_dropped() || error.is_io_error() {
            // The server closed it (a restart, a failover): every other runtime's connection
            // went to the same server and is dead too. Start them all afresh, so that each
            // runtime does not find its own with a failed request.
            self.connections().clear();
            // Redis down, or slow to answer (the command may still run): no second try.
            if error.is_connection_refusal() || error.is_timeout() {
                return Failure::Other(StoreError::Unavailable(error.to_string()));
            }
            Failure::Dropped(StoreError::Unavailable(error.to_string()))
        } else {
            self.forget(connection);
            Failure::Other(StoreError::Unavailable(error.to_string()))
        }
    }
}

/// Why a request failed: on a connection the server closed (worth one more try on a new
/// one), or otherwise.
enum Failure {
    Dropped(StoreError),
    Other(StoreError),
}

impl Failure {
    fn into_error(self) -> StoreError {
        match self {
            Failure::Dropped(error) | Failure::Other(error) => error,
        }
    }
}
