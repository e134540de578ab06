//! Conversation messages on Redis (see `store/messages.rs`): one hash per message,
//! `<ns>:msg:{<key>}` (its own hash tag: one slot), written by two small scripts.

use bytes::Bytes;
use redis::Value;

use super::RedisStore;
use super::codec::{bytes_of, corrupt};
use super::script::{self, Lua};
use crate::store::{MessageAnswer, MessageLease, MessageSlot, StoreError};

const TAKE_LUA: &str = include_str!("../lua/message_take.lua");
const FINISH_LUA: &str = include_str!("../lua/message_finish.lua");

pub(super) struct Scripts {
    take: Lua,
    finish: Lua,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            take: Lua::new(TAKE_LUA),
            finish: Lua::new(FINISH_LUA),
        }
    }
}

impl RedisStore {
    fn message_key(&self, key: &str) -> String {
        format!("{}:msg:{{{key}}}", self.namespace)
    }

    /// `message_take.lua`. No replica wait: the operation's claim, not this, keeps it once.
    pub(super) async fn take_message_now(
        &self,
        lease: &MessageLease<'_>,
    ) -> Result<MessageSlot, StoreError> {
        let call = self
            .messages
            .take
            .call()
            .key(self.message_key(lease.key))
            .arg(lease.owner)
            .arg(lease.now_ms)
            .arg(lease.lease_until_ms);
        let ran = script::run(&self.links, &call, None).await?;
        let Value::Array(parts) = ran.value else {
            return Err(corrupt("message script answered no list"));
        };
        let mut parts = parts.into_iter();
        let state = parts.next().map(bytes_of).transpose()?;
        match state.as_deref() {
            Some(b"taken") => Ok(MessageSlot::Taken),
            Some(b"busy") => Ok(MessageSlot::Busy),
            Some(b"done") => {
                let answer = parts
                    .next()
                    .map(bytes_of)
                    .transpose()?
                    .ok_or_else(|| corrupt("an answered message without its answer"))?;
                Ok(MessageSlot::Answered(Bytes::from(answer)))
            }
            _ => Err(corrupt("message script answered an unknown state")),
        }
    }

    /// `message_finish.lua`.
    pub(super) async fn finish_message_now(
        &self,
        finished: &MessageAnswer<'_>,
    ) -> Result<(), StoreError> {
        let (mode, answer) = match finished.answer {
            Some(answer) => ("answer", answer),
            None => ("forget", &b""[..]),
        };
        let call = self
            .messages
            .finish
            .call()
            .key(self.message_key(finished.key))
            .arg(finished.owner)
            .arg(mode)
            .arg(answer)
            .arg(finished.remember_until_ms);
        script::run(&self.links, &call, None).await.map(drop)
    }
}
