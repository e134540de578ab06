//! The Redis store (`redis://`): shared by any number of gateway replicas.
//!
//! Every write is one Lua script, so Redis runs it as one atomic step, and every call is one
//! round trip (`EVALSHA`; only the first call after Redis lost its script cache also sends
//! `SCRIPT LOAD` and retries, which is safe because `NOSCRIPT` means nothing ran).
//!
//! Keys, with `{…}` as the Redis Cluster hash tag so one operation lives in one slot:
//! - record: `<ns>:op:{<action tag>}:<generation tag>`, a hash (see `decode_record`);
//! - generation: `<ns>:gen:{<action tag>}`, an integer.
//!
//! Note that `Unavailable` from a write does not prove that the write did not happen (the
//! answer may have been lost on the way back); callers fail closed on it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError, RedisResult, Script, Value};

use super::{
    Claim, ClaimOutcome, OperationRecord, OperationStore, RecordState, RecordedResponse, StoreError,
};
use crate::protocol::OperationId;

/// The key namespace when none is configured.
pub const DEFAULT_NAMESPACE: &str = "poppy";

const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// A bound on a whole call, whatever the client does inside it: no call hangs.
const CALL_TIMEOUT: Duration = Duration::from_millis(3500);
/// Connections are per Tokio runtime; past this many (runtimes come and go in tests and
/// tools), the cache is dropped and rebuilt on demand.
const MAX_CONNECTIONS: usize = 32;

/// The record format written by this version; anything else reads as corrupt.
const FORMAT_VERSION: &[u8] = b"1";

const CLAIM_LUA: &str = include_str!("lua/claim.lua");
const COMPLETE_LUA: &str = include_str!("lua/complete.lua");
const RELEASE_LUA: &str = include_str!("lua/release.lua");

/// The shared operation store on Redis.
pub struct RedisStore {
    client: Client,
    namespace: String,
    claim: Script,
    complete: Script,
    release: Script,
    /// One lazily connected manager per Tokio runtime: a connection's I/O driver is a task
    /// of the runtime that opened it, and the gateway runs services in several runtimes,
    /// so none of them may depend on another one being alive and polled.
    connections: Mutex<HashMap<tokio::runtime::Id, Connection>>,
    next_epoch: AtomicU64,
}

#[derive(Clone)]
struct Connection {
    /// Tells this connection apart from its replacement when forgetting a failed one.
    epoch: u64,
    manager: ConnectionManager,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the URL: it may carry a password.
        f.debug_struct("RedisStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Check the URL and namespace. Does not connect (there may be no runtime yet, and the
    /// gateway must start while Redis is down): the first call does.
    pub fn new(url: &str, namespace: &str) -> Result<RedisStore, StoreError> {
        // A brace would move the hash tag and split an operation's keys across slots.
        if namespace.is_empty() || namespace.contains(['{', '}']) {
            return Err(StoreError::Unavailable(format!(
                "invalid Redis key namespace {namespace:?}: must be non-empty and without braces"
            )));
        }
        let client = Client::open(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis URL: {e}")))?;
        Ok(RedisStore {
            client,
            namespace: namespace.to_owned(),
            claim: Script::new(CLAIM_LUA),
            complete: Script::new(COMPLETE_LUA),
            release: Script::new(RELEASE_LUA),
            connections: Mutex::new(HashMap::new()),
            next_epoch: AtomicU64::new(0),
        })
    }

    fn record_key(&self, id: &OperationId) -> String {
        format!(
            "{}:op:{{{}}}:{}",
            self.namespace,
            id.action_tag(),
            id.generation_tag()
        )
    }

    fn generation_key(&self, action_tag: &str) -> String {
        format!("{}:gen:{{{}}}", self.namespace, action_tag)
    }

    fn connections(&self) -> MutexGuard<'_, HashMap<tokio::runtime::Id, Connection>> {
        // The map only caches connections; whatever a panic left in it is still usable.
        self.connections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// This runtime's connection, created (not connected) on first use.
    fn connection(&self) -> Result<Connection, StoreError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Unavailable("the Redis store needs a Tokio runtime".into()))?
            .id();
        let mut connections = self.connections();
        if let Some(connection) = connections.get(&runtime) {
            return Ok(connection.clone());
        }
        // No retries inside the manager: a call fails promptly while Redis is down, and the
        // next call tries again.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(0);
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        if connections.len() >= MAX_CONNECTIONS {
            connections.clear();
        }
        let connection = Connection {
            epoch: self.next_epoch.fetch_add(1, Ordering::Relaxed),
            manager,
        };
        connections.insert(runtime, connection.clone());
        Ok(connection)
    }

    /// Drop a connection that failed, unless it was already replaced.
    fn forget(&self, failed: &Connection) {
        self.connections()
            .retain(|_, connection| connection.epoch != failed.epoch);
    }

    /// Run one request on this runtime's connection, bounded in time.
    async fn run<F, Fut>(&self, request: F) -> Result<Value, StoreError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<Value>>,
    {
        let connection = self.connection()?;
        match tokio::time::timeout(CALL_TIMEOUT, request(connection.manager.clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.failed(&connection, &error)),
            Err(_) => {
                self.forget(&connection);
                Err(StoreError::Unavailable(
                    "Redis did not answer in time".into(),
                ))
            }
        }
    }

    fn failed(&self, connection: &Connection, error: &RedisError) -> StoreError {
        // Somebody else's data under our key, or a script refusing a malformed entry.
        if matches!(error.code(), Some("WRONGTYPE" | "CORRUPT")) {
            return StoreError::Corrupt(error.to_string());
        }
        // The manager repairs dropped connections, but not every failure (a handshake
        // error, a peer that went silent and times out): start afresh on the next call.
        self.forget(connection);
        StoreError::Unavailable(error.to_string())
    }
}

#[async_trait]
impl OperationStore for RedisStore {
    async fn generation(&self, action_tag: &str) -> Result<u64, StoreError> {
        let key = self.generation_key(action_tag);
        let value = self
            .run(|mut con| async move { redis::cmd("GET").arg(&key).query_async(&mut con).await })
            .await?;
        match value {
            Value::Nil => Ok(0),
            Value::Int(n) => u64::try_from(n).map_err(|_| corrupt("negative generation")),
            other => {
                let text = bytes_of(other)?;
                std::str::from_utf8(&text)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| corrupt("generation is not a number"))
            }
        }
    }

    async fn lookup(&self, id: &OperationId) -> Result<Option<OperationRecord>, StoreError> {
        let key = self.record_key(id);
        let value =
            self.run(|mut con| async move {
                redis::cmd("HGETALL").arg(&key).query_async(&mut con).await
            })
            .await?;
        let fields = into_fields(value)?;
        if fields.is_empty() {
            return Ok(None);
        }
        decode_record(fields).map(Some)
    }

    async fn claim(&self, id: &OperationId, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        let mut invocation = self.claim.key(self.record_key(id));
        invocation
            .arg(&claim.scope)
            .arg(&claim.policy)
            .arg(&claim.revision)
            .arg(claim.now_ms)
            .arg(&claim.owner)
            .arg(claim.lease_until_ms)
            .arg(claim.remember_until_ms);
        let invocation = &invocation;
        let value = self
            .run(|mut con| async move { invocation.invoke_async(&mut con).await })
            .await?;
        match value {
            Value::Int(1) => Ok(ClaimOutcome::Claimed),
            other => {
                let fields = into_fields(other)?;
                if fields.is_empty() {
                    return Err(corrupt("claim returned neither a record nor success"));
                }
                decode_record(fields).map(ClaimOutcome::Exists)
            }
        }
    }

    async fn complete(
        &self,
        id: &OperationId,
        owner: &str,
        response: &RecordedResponse,
        remember_until_ms: i64,
    ) -> Result<bool, StoreError> {
        let headers = encode_headers(&response.headers)?;
        let mut invocation = self.complete.key(self.record_key(id));
        invocation
            .key(self.generation_key(id.action_tag()))
            .arg(owner)
            .arg(response.status)
            .arg(headers)
            .arg(response.body.as_ref())
            .arg(remember_until_ms);
        let invocation = &invocation;
        let value = self
            .run(|mut con| async move { invocation.invoke_async(&mut con).await })
            .await?;
        flag(value)
    }

    async fn release(&self, id: &OperationId, owner: &str) -> Result<bool, StoreError> {
        let mut invocation = self.release.key(self.record_key(id));
        invocation.arg(owner);
        let invocation = &invocation;
        let value = self
            .run(|mut con| async move { invocation.invoke_async(&mut con).await })
            .await?;
        flag(value)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.run(|mut con| async move { redis::cmd("PING").query_async(&mut con).await })
            .await
            .map(|_| ())
    }
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

fn flag(value: Value) -> Result<bool, StoreError> {
    match value {
        Value::Int(0) => Ok(false),
        Value::Int(1) => Ok(true),
        _ => Err(corrupt("script returned an unexpected reply")),
    }
}

fn bytes_of(value: Value) -> Result<Vec<u8>, StoreError> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(text) => Ok(text.into_bytes()),
        Value::VerbatimString { text, .. } => Ok(text.into_bytes()),
        Value::Int(n) => Ok(n.to_string().into_bytes()),
        _ => Err(corrupt("expected a string reply")),
    }
}

/// A hash reply (RESP2 flat pairs or RESP3 map) as field → value.
fn into_fields(value: Value) -> Result<HashMap<String, Vec<u8>>, StoreError> {
    let mut fields = HashMap::new();
    let mut insert = |name: Value, value: Value| -> Result<(), StoreError> {
        let name = String::from_utf8(bytes_of(name)?).map_err(|_| corrupt("field name"))?;
        fields.insert(name, bytes_of(value)?);
        Ok(())
    };
    match value {
        Value::Array(items) => {
            let mut items = items.into_iter();
            while let Some(name) = items.next() {
                let value = items.next().ok_or_else(|| corrupt("odd hash reply"))?;
                insert(name, value)?;
            }
        }
        Value::Map(pairs) => {
            for (name, value) in pairs {
                insert(name, value)?;
            }
        }
        _ => return Err(corrupt("expected a hash reply")),
    }
    Ok(fields)
}

/// Hash fields: `v` (format version), `scope`, `policy`, `revision`, `created_at`, `state`
/// (`in_flight` or `done`); in flight: `owner`, `lease_until`; done: `status`, `headers`
/// (JSON array of `[name, base64 value]`), `body` (raw bytes).
fn decode_record(mut fields: HashMap<String, Vec<u8>>) -> Result<OperationRecord, StoreError> {
    let mut take = |name: &str| {
        fields
            .remove(name)
            .ok_or_else(|| StoreError::Corrupt(format!("record has no {name:?}")))
    };
    if take("v")? != FORMAT_VERSION {
        return Err(corrupt("unknown record format"));
    }
    let scope = text(take("scope")?, "scope")?;
    let policy = text(take("policy")?, "policy")?;
    let revision = text(take("revision")?, "revision")?;
    let created_at_ms = number(take("created_at")?, "created_at")?;
    let state = match take("state")?.as_slice() {
        b"in_flight" => RecordState::InFlight {
            owner: text(take("owner")?, "owner")?,
            lease_until_ms: number(take("lease_until")?, "lease_until")?,
        },
        b"done" => RecordState::Done(RecordedResponse {
            status: number(take("status")?, "status")?,
            headers: decode_headers(&take("headers")?)?,
            body: Bytes::from(take("body")?),
        }),
        _ => return Err(corrupt("unknown record state")),
    };
    Ok(OperationRecord {
        scope,
        policy,
        revision,
        created_at_ms,
        state,
    })
}

fn text(bytes: Vec<u8>, name: &str) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|_| StoreError::Corrupt(format!("{name} is not UTF-8")))
}

fn number<T: std::str::FromStr>(bytes: Vec<u8>, name: &str) -> Result<T, StoreError> {
    std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("{name} is not a number")))
}

fn encode_headers(headers: &[(String, Vec<u8>)]) -> Result<String, StoreError> {
    let encoded: Vec<(&str, String)> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), BASE64.encode(value)))
        .collect();
    serde_json::to_string(&encoded)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode headers: {e}")))
}

fn decode_headers(json: &[u8]) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    let encoded: Vec<(String, String)> =
        serde_json::from_slice(json).map_err(|_| corrupt("headers are not a JSON list"))?;
    encoded
        .into_iter()
        .map(|(name, value)| {
            BASE64
                .decode(value)
                .map(|value| (name, value))
                .map_err(|_| corrupt("header value is not base64"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done_fields() -> HashMap<String, Vec<u8>> {
        let headers = encode_headers(&[
            ("content-type".into(), b"application/json".to_vec()),
            ("x-raw".into(), vec![0xff, 0x00, 0x80]),
        ])
        .unwrap();
        [
            ("v", b"1".to_vec()),
            ("scope", b"s:1".to_vec()),
            ("policy", b"exchange".to_vec()),
            ("revision", b"rev_1".to_vec()),
            ("created_at", b"1700000000000".to_vec()),
            ("state", b"done".to_vec()),
            ("status", b"201".to_vec()),
            ("headers", headers.into_bytes()),
            ("body", vec![0, 159, 146, 150, 255]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    #[test]
    fn decodes_a_done_record() {
        let record = decode_record(done_fields()).unwrap();
        assert_eq!(record.created_at_ms, 1_700_000_000_000);
        let RecordState::Done(response) = record.state else {
            panic!("not done")
        };
        assert_eq!(response.status, 201);
        assert_eq!(
            response.headers[1],
            ("x-raw".into(), vec![0xff, 0x00, 0x80])
        );
        assert_eq!(response.body.as_ref(), &[0, 159, 146, 150, 255]);
    }

    #[test]
    fn malformed_records_are_corrupt() {
        for (field, bad) in [
            ("v", &b"2"[..]),
            ("state", b"weird"),
            ("status", b"two hundred"),
            ("headers", b"{"),
            ("headers", b"[[\"a\",\"!!\"]]"),
            ("created_at", b""),
        ] {
            let mut fields = done_fields();
            fields.insert(field.into(), bad.to_vec());
            assert!(
                matches!(decode_record(fields), Err(StoreError::Corrupt(_))),
                "{field}"
            );
        }
        let mut fields = done_fields();
        fields.remove("body");
        assert!(matches!(decode_record(fields), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn hash_replies_in_both_protocols() {
        let flat = Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"1".to_vec()),
        ]);
        let map = Value::Map(vec![(
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"1".to_vec()),
        )]);
        assert_eq!(into_fields(flat).unwrap(), into_fields(map).unwrap());
        assert!(into_fields(Value::Array(vec![Value::Nil])).is_err());
    }

    #[test]
    fn keys_share_the_action_hash_tag() {
        let store = RedisStore::new("redis://127.0.0.1:1/", "ns").unwrap();
        let id = OperationId::parse("exc_aAAAAAAAAAAAAAAAABBBBBBBB").unwrap();
        assert_eq!(
            store.record_key(&id),
            "ns:op:{exc_aAAAAAAAAAAAAAAAA}:BBBBBBBB"
        );
        assert_eq!(
            store.generation_key(id.action_tag()),
            "ns:gen:{exc_aAAAAAAAAAAAAAAAA}"
        );
        assert!(RedisStore::new("redis://127.0.0.1:1/", "a{b").is_err());
        assert!(RedisStore::new("redis://127.0.0.1:1/", "").is_err());
    }
}
