//! Rounds of interim answers on Redis (see `OperationStore::put_round`): one string per
//! round, `<ns>:round:{<action tag>}:<operation id>:<key>` (the operation's slot), expiring on
//! its own, written with the claim's longer lease; taken once by a script that reads and
//! deletes it in one step.

use redis::Value;

use super::RedisStore;
use super::codec::bytes_of;
use super::script::{self, Lua};
use crate::protocol::OperationId;
use crate::store::{FollowUp, KeptRound, Lease, StoreError};

const PUT_LUA: &str = include_str!("../lua/round_put.lua");
const TAKE_LUA: &str = include_str!("../lua/round_take.lua");
const LEASE_LUA: &str = include_str!("../lua/lease.lua");

pub(super) struct Scripts {
    put: Lua,
    take: Lua,
    lease: Lua,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            put: Lua::new(PUT_LUA),
            take: Lua::new(TAKE_LUA),
            lease: Lua::new(LEASE_LUA),
        }
    }
}

impl RedisStore {
    fn round_key(&self, id: &OperationId, key: &str) -> String {
        format!(
            "{}:round:{{{}}}:{}:{key}",
            self.namespace,
            id.action_tag(),
            id.as_str()
        )
    }

    /// `round_put.lua`, and on a cluster the index's lease (another slot) after it. No
    /// replica wait (as for messages): a round lost in a failover only leaves its operation
    /// unknown, never performs it twice.
    pub(super) async fn put_round_now(&self, kept: &KeptRound<'_>) -> Result<bool, StoreError> {
        let id = kept.id;
        let call = self
            .rounds
            .put
            .call()
            .key(self.round_key(id, kept.key))
            .key(self.record_key(id))
            .key(self.busy_key(id.action_tag()))
            .arg(kept.round)
            .arg(kept.until_ms.saturating_sub(kept.now_ms).max(1))
            .arg(kept.owner)
            .arg(kept.lease_until_ms)
            .arg(id.as_str());
        let call = self.with_index(call);
        let ran = script::run(&self.links, &call, None).await?;
        let kept_it = ran.value == Value::Int(1);
        if kept_it {
            self.index_lease(id, kept.lease_until_ms).await?;
        }
        Ok(kept_it)
    }

    /// `lease.lua`, and on a cluster the index's lease after it.
    pub(super) async fn set_lease_now(&self, lease: &Lease<'_>) -> Result<bool, StoreError> {
        let id = lease.id;
        let call = self
            .rounds
            .lease
            .call()
            .key(self.record_key(id))
            .key(self.busy_key(id.action_tag()))
            .arg(lease.owner)
            .arg(lease.until_ms)
            .arg(id.as_str());
        let call = self.with_index(call);
        let ran = script::run(&self.links, &call, None).await?;
        let set = ran.value == Value::Int(1);
        if set {
            self.index_lease(id, lease.until_ms).await?;
        }
        Ok(set)
    }

    /// On a cluster the operators' index lives in another slot: its lease is written after
    /// the script (`XX`: an entry a finish removed meanwhile is not written back).
    async fn index_lease(&self, id: &OperationId, lease_until_ms: i64) -> Result<(), StoreError> {
        if self.scripts_index() {
            return Ok(());
        }
        let (key, member) = (&self.index_key(), id.as_str());
        self.links
            .run(|mut con| async move {
                redis::cmd("ZADD")
                    .arg(key)
                    .arg("XX")
                    .arg(lease_until_ms)
                    .arg(member)
                    .query_async::<Value>(&mut con)
                    .await
            })
            .await
            .map(drop)
    }

    /// `round_take.lua` (the round's own expiry is Redis's clock: `now_ms` is not needed).
    pub(super) async fn take_round_now(
        &self,
        follow_up: &FollowUp<'_>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let key = self.round_key(follow_up.id, follow_up.key);
        let call = self.rounds.take.call().key(key);
        let ran = script::run(&self.links, &call, None).await?;
        match ran.value {
            Value::Nil => Ok(None),
            value => bytes_of(value).map(Some),
        }
    }
}
