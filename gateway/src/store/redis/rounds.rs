//! Rounds of interim answers on Redis (see `OperationStore::put_round`): one string per
//! round, `<ns>:round:{<action tag>}:<operation id>:<key>` (the operation's slot), expiring on
//! its own; taken once by a script that reads and deletes it in one step.

use redis::Value;

use super::RedisStore;
use super::codec::bytes_of;
use super::script::{self, Lua};
use crate::protocol::OperationId;
use crate::store::StoreError;

const PUT_LUA: &str = include_str!("../lua/round_put.lua");
const TAKE_LUA: &str = include_str!("../lua/round_take.lua");

pub(super) struct Scripts {
    put: Lua,
    take: Lua,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            put: Lua::new(PUT_LUA),
            take: Lua::new(TAKE_LUA),
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

    /// `round_put.lua`. No replica wait (as for messages): a round lost in a failover only
    /// leaves its operation unknown, never performs it twice.
    pub(super) async fn put_round_now(
        &self,
        id: &OperationId,
        key: &str,
        round: &[u8],
        ttl_ms: i64,
    ) -> Result<(), StoreError> {
        let call = self
            .rounds
            .put
            .call()
            .key(self.round_key(id, key))
            .arg(round)
            .arg(ttl_ms.max(1));
        script::run(&self.links, &call, None).await.map(drop)
    }

    /// `round_take.lua`.
    pub(super) async fn take_round_now(
        &self,
        id: &OperationId,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let call = self.rounds.take.call().key(self.round_key(id, key));
        let ran = script::run(&self.links, &call, None).await?;
        match ran.value {
            Value::Nil => Ok(None),
            value => bytes_of(value).map(Some),
        }
    }
}
