//! The Redis store: shared by any number of gateway replicas, on one Redis node (`redis://`)
//! or a Redis Cluster (`redis+cluster://`, see [`cluster_seeds`]).
//!
//! Every write is one Lua script, so Redis runs it as one atomic step, and every call is one
//! round trip (`EVALSHA`, with `WAIT` pipelined after it when replicas must acknowledge; only
//! the first call after Redis lost its script cache sends the script again, which is safe
//! because `NOSCRIPT` means nothing ran).
//!
//! Keys, with `{…}` as the Redis Cluster hash tag so one operation lives in one slot (and every
//! script touches the keys of one slot only):
//! - record: `<ns>:op:{<action tag>}:<generation tag>`, a hash (see `codec::decode_record`);
//! - generation: `<ns>:gen:{<action tag>}`, an integer;
//! - the action's in-flight set: `<ns>:busy:{<action tag>}`, a hash operation_id → lease_until,
//!   what a mint reads with the generation (one script, one slot);
//! - the operators' index: `<ns>:inflight`, a sorted set of in-flight operation_ids by
//!   lease_until. On one node the scripts maintain it in the same atomic step. On a cluster
//!   it is one key in one slot, which a script of another slot may not touch: the gateway
//!   adds an entry before the claim (so no in-flight record can be missing from it) and
//!   removes it after the record is finished; an entry left behind by a crash is dropped by
//!   the next listing that finds its record finished. One fixed key (not one per node) keeps
//!   the listing one command and independent of resharding; it sees only claims and
//!   finishes, a small fraction of the traffic.
//!
//! Note that `Unavailable` from a write does not prove that the write did not happen (the
//! answer may have been lost on the way back); callers fail closed on it.

mod claim;
mod codec;
mod durability;
mod finish;
mod index;
mod link;
mod messages;
mod pages;
mod rounds;
mod script;
mod url;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use redis::Value;

use self::codec::{Finished, bytes_of, corrupt, decode_record, into_fields};
pub(crate) use self::durability::Durability;
#[cfg(test)]
pub(crate) use self::durability::NodeDurability;
use self::link::Links;
use self::script::{Lua, Ran};
pub(crate) use self::url::{CLUSTER_SCHEME, cluster_seeds};
use super::owner::Finisher;
use super::{
    ActionState, Claim, ClaimOutcome, FollowUp, InFlightOperation, KeptAnswer, KeptDecision,
    KeptRound, Lease, MessageAnswer, MessageLease, MessageSlot, OperationRecord, OperationStore,
    PageDecided, PageDecision, ReplicaWait, Resolution, ResolveOutcome, Ruling, StoreError,
    StoreOptions,
};
use crate::protocol::OperationId;

/// The key namespace when none is configured.
pub(crate) const DEFAULT_NAMESPACE: &str = "poppy";

/// The longest `[store] wait_timeout`: `WAIT` holds the reply (and every command behind it on
/// the same connection) that long, and the whole call must stay well within its bound.
pub(crate) const MAX_WAIT_TIMEOUT: Duration = Duration::from_secs(1);

const CLAIM_LUA: &str = include_str!("../lua/claim.lua");
// The checks before finishing an in-flight record, shared by the two scripts that finish one.
const COMPLETE_LUA: &str = concat!(
    include_str!("../lua/finish_check.lua"),
    include_str!("../lua/complete.lua")
);
const RELEASE_LUA: &str = concat!(
    include_str!("../lua/finish_check.lua"),
    include_str!("../lua/release.lua")
);
const LOOKUP_LUA: &str = include_str!("../lua/lookup.lua");
const ACTION_LUA: &str = include_str!("../lua/action.lua");

/// At most this many unknown operations are counted for the gauge per scrape.
const MAX_UNKNOWN_COUNTED: usize = 10_000;
/// The shared operation store on Redis.
pub struct RedisStore {
    links: Links,
    namespace: String,
    wait: Option<ReplicaWait>,
    claim: Lua,
    complete: Lua,
    release: Lua,
    lookup: Lua,
    action: Lua,
    /// Conversation messages (`messages.rs`).
    messages: messages::Scripts,
    /// Rounds of interim answers (`rounds.rs`).
    rounds: rounds::Scripts,
    /// Page decisions (`pages.rs`).
    pages: pages::Scripts,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the URL: it may carry a password.
        f.debug_struct("RedisStore")
            .field("namespace", &self.namespace)
            .field("cluster", &self.links.is_cluster())
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// [`RedisStore::with_options`] with this namespace and no replica acknowledgement.
    pub fn new(url: &str, namespace: &str) -> Result<RedisStore, StoreError> {
        let options = StoreOptions {
            namespace: namespace.to_owned(),
            ..StoreOptions::default()
        };
        RedisStore::with_options(url, &options)
    }

    /// Check the URL and options. Does not connect (there may be no runtime yet, and the
    /// gateway must start while Redis is down): the first call does.
    pub fn with_options(url: &str, options: &StoreOptions) -> Result<RedisStore, StoreError> {
        let namespace = &options.namespace;
        // A brace would move the hash tag and split an operation's keys across slots.
        if namespace.is_empty() || namespace.contains(['{', '}']) {
            return Err(StoreError::Invalid(format!(
                "invalid Redis key namespace {namespace:?}: must be non-empty and without braces"
            )));
        }
        if let Some(wait) = options.wait
            && (wait.replicas == 0 || wait.timeout.is_zero() || wait.timeout > MAX_WAIT_TIMEOUT)
        {
            // WAIT with a zero timeout would block forever.
            return Err(StoreError::Invalid(format!(
                "invalid replica wait {wait:?}: at least 1 replica, a timeout of 1ms to {MAX_WAIT_TIMEOUT:?}"
            )));
        }
        Ok(RedisStore {
            links: Links::new(url)?,
            namespace: namespace.clone(),
            wait: options.wait,
            claim: Lua::new(CLAIM_LUA),
            complete: Lua::new(COMPLETE_LUA),
            release: Lua::new(RELEASE_LUA),
            lookup: Lua::new(LOOKUP_LUA),
            action: Lua::new(ACTION_LUA),
            messages: messages::Scripts::new(),
            rounds: rounds::Scripts::new(),
            pages: pages::Scripts::new(),
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

    fn busy_key(&self, action_tag: &str) -> String {
        format!("{}:busy:{{{}}}", self.namespace, action_tag)
    }

    /// How many replicas acknowledged, if fewer than required.
    fn short_of_replicas(&self, ran: &Ran) -> Option<String> {
        let wait = self.wait?;
        let acknowledged = ran.acknowledged.unwrap_or(0);
        (acknowledged < wait.replicas).then(|| {
            format!(
                "{acknowledged} of {} replicas acknowledged within {:?}",
                wait.replicas, wait.timeout
            )
        })
    }
}

#[async_trait]
impl OperationStore for RedisStore {
    async fn generation(&self, action_tag: &str) -> Result<u64, StoreError> {
        let key = &self.generation_key(action_tag);
        let value: Value = self
            .links
            .run(|mut con| async move { redis::cmd("GET").arg(key).query_async(&mut con).await })
            .await?;
        decode_generation(value)
    }

    async fn action_state(&self, action_tag: &str) -> Result<ActionState, StoreError> {
        let call = self
            .action
            .call()
            .key(self.generation_key(action_tag))
            .key(self.busy_key(action_tag));
        let ran = script::run(&self.links, &call, None).await?;
        let Value::Array(parts) = ran.value else {
            return Err(corrupt("action script answered no pair"));
        };
        let [generation, busy]: [Value; 2] = parts
            .try_into()
            .map_err(|_| corrupt("action script answered no pair"))?;
        decode_action(generation, busy)
    }

    async fn in_flight(&self, limit: usize) -> Result<Vec<InFlightOperation>, StoreError> {
        self.listed(None, limit).await
    }

    async fn unknown_count(&self, now_ms: i64) -> Result<u64, StoreError> {
        Ok(self.listed(Some(now_ms), MAX_UNKNOWN_COUNTED).await?.len() as u64)
    }

    async fn lookup_with_generation(
        &self,
        id: &OperationId,
    ) -> Result<(Option<OperationRecord>, u64), StoreError> {
        // One script, one command: the record and the counter share the action tag's slot.
        let call = self
            .lookup
            .call()
            .key(self.record_key(id))
            .key(self.generation_key(id.action_tag()));
        let ran = script::run(&self.links, &call, None).await?;
        let Value::Array(mut parts) = ran.value else {
            return Err(corrupt("lookup script answered no pair"));
        };
        if parts.len() != 2 {
            return Err(corrupt("lookup script answered no pair"));
        }
        let generation = decode_generation(parts.pop().unwrap_or(Value::Nil))?;
        let fields = into_fields(parts.pop().unwrap_or(Value::Nil))?;
        let record = if fields.is_empty() {
            None
        } else {
            Some(decode_record(fields)?)
        };
        Ok((record, generation))
    }

    async fn lookup(&self, id: &OperationId) -> Result<Option<OperationRecord>, StoreError> {
        let key = &self.record_key(id);
        let value: Value = self
            .links
            .run(
                |mut con| async move { redis::cmd("HGETALL").arg(key).query_async(&mut con).await },
            )
            .await?;
        let fields = into_fields(value)?;
        if fields.is_empty() {
            return Ok(None);
        }
        decode_record(fields).map(Some)
    }

    async fn claim(&self, id: &OperationId, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        self.claim_now(id, claim).await
    }

    async fn complete(&self, answer: &KeptAnswer<'_>, owner: &str) -> Result<bool, StoreError> {
        self.completed(answer, Finisher::Owner(owner)).await
    }

    async fn complete_claim(
        &self,
        answer: &KeptAnswer<'_>,
        claim: &Claim,
    ) -> Result<bool, StoreError> {
        self.completed(answer, Finisher::Restore(claim)).await
    }

    async fn release(&self, id: &OperationId, owner: &str) -> Result<bool, StoreError> {
        let (finished, _) = self.forget(id, Finisher::Owner(owner), None).await?;
        Ok(finished == Finished::Yes)
    }

    async fn resolve(&self, ruling: &Ruling<'_>) -> Result<ResolveOutcome, StoreError> {
        let id = ruling.id;
        let operator = Finisher::Operator {
            now_ms: ruling.now_ms,
        };
        let (finished, ran) = match ruling.resolution {
            Resolution::Performed(response) => {
                let answer = KeptAnswer {
                    id,
                    response,
                    remember_until_ms: ruling.remember_until_ms,
                };
                self.record_answer(&answer, operator).await?
            }
            Resolution::NotPerformed => self.forget(id, operator, self.wait).await?,
        };
        match finished {
            Finished::Yes => {
                if let Some(shortfall) = self.short_of_replicas(&ran) {
                    // Lost in a failover, the record would be in flight again: unknown, 503,
                    // resolvable once more. Safe, so it stands.
                    tracing::warn!(operation_id = %id, "resolution recorded on the primary only: {shortfall}");
                }
                Ok(ResolveOutcome::Resolved)
            }
            Finished::NoRecord => Ok(ResolveOutcome::NoRecord),
            Finished::AlreadyDone => Ok(ResolveOutcome::AlreadyDone),
            Finished::LeaseLive => Ok(ResolveOutcome::LeaseLive),
            Finished::NotYours => Err(corrupt("a resolution was refused for its owner")),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.links.run(|con| con.ping()).await.map(drop)
    }

    async fn durability(&self) -> Result<Option<Durability>, StoreError> {
        durability::read(&self.links).await.map(Some)
    }

    async fn put_round(&self, kept: &KeptRound<'_>) -> Result<bool, StoreError> {
        self.put_round_now(kept).await
    }

    async fn take_round(&self, follow_up: &FollowUp<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        self.take_round_now(follow_up).await
    }

    async fn set_lease(&self, lease: &Lease<'_>) -> Result<bool, StoreError> {
        self.set_lease_now(lease).await
    }

    async fn decide_on_page(&self, kept: &KeptDecision<'_>) -> Result<PageDecided, StoreError> {
        self.decide_on_page_now(kept).await
    }

    async fn page_state(
        &self,
        action_tag: &str,
    ) -> Result<(ActionState, Vec<PageDecision>), StoreError> {
        self.page_state_now(action_tag, crate::clock::now_millis())
            .await
    }

    async fn take_message(&self, lease: &MessageLease<'_>) -> Result<MessageSlot, StoreError> {
        self.take_message_now(lease).await
    }

    async fn finish_message(&self, answer: &MessageAnswer<'_>) -> Result<(), StoreError> {
        self.finish_message_now(answer).await
    }
}

/// A generation counter as Redis returns it: absent is 0.
/// The action's state from its counter and its in-flight set, as the scripts read them.
fn decode_action(generation: Value, busy: Value) -> Result<ActionState, StoreError> {
    let busy = into_fields(busy)?;
    let generation = decode_generation(generation)?;
    let mut in_flight = Vec::with_capacity(busy.len());
    for (id, lease) in busy {
        let id =
            OperationId::parse(&id).ok_or_else(|| corrupt("in-flight set names no operation"))?;
        let lease = std::str::from_utf8(&lease)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| corrupt("in-flight lease is not a number"))?;
        in_flight.push((id, lease));
    }
    Ok(ActionState {
        generation,
        in_flight,
    })
}

fn decode_generation(value: Value) -> Result<u64, StoreError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
