//! Page decisions on Redis (see `OperationStore::decide_on_page`): one hash per action,
//! `<ns>:page:{<action tag>}` (the action's slot), field `<operation_id> <revision>`, value
//! `<until_ms> <decision>`; written by `page_decide.lua`, read with the action's state by
//! `page_state.lua`. No replica wait: a decision lost in a failover is asked for again (the
//! agent's retry is held and the page shows the link's revision undecided); at most once
//! rests on the operation's claim, not on this.

use redis::Value;

use super::RedisStore;
use super::codec::{bytes_of, corrupt, into_fields};
use super::script::{self, Lua};
use crate::store::{ActionState, KeptDecision, PageDecided, PageDecision, StoreError};

const DECIDE_LUA: &str = include_str!("../lua/page_decide.lua");
const STATE_LUA: &str = include_str!("../lua/page_state.lua");

pub(super) struct Scripts {
    decide: Lua,
    state: Lua,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            decide: Lua::new(DECIDE_LUA),
            state: Lua::new(STATE_LUA),
        }
    }
}

impl RedisStore {
    fn page_key(&self, action_tag: &str) -> String {
        format!("{}:page:{{{action_tag}}}", self.namespace)
    }

    /// `page_decide.lua`.
    pub(super) async fn decide_on_page_now(
        &self,
        kept: &KeptDecision<'_>,
    ) -> Result<PageDecided, StoreError> {
        let KeptDecision {
            decision,
            until_ms,
            now_ms,
        } = *kept;
        let field = decision.field();
        let call = self
            .pages
            .decide
            .call()
            .key(self.page_key(decision.operation_id.action_tag()))
            .arg(field.as_str())
            .arg(decision.encode())
            .arg(until_ms)
            .arg(now_ms);
        let ran = script::run(&self.links, &call, None).await?;
        let Value::Array(parts) = ran.value else {
            return Err(corrupt("page script answered no list"));
        };
        let mut parts = parts.into_iter();
        match parts.next() {
            Some(Value::Int(1)) => Ok(PageDecided::Stored),
            Some(Value::Int(0)) => {
                let kept = parts
                    .next()
                    .map(bytes_of)
                    .transpose()?
                    .ok_or_else(|| corrupt("a page decision without its value"))?;
                let (decision, _) = decode(&field, &kept)?;
                Ok(PageDecided::Exists(decision))
            }
            _ => Err(corrupt("page script answered an unknown state")),
        }
    }

    /// `page_state.lua`.
    pub(super) async fn page_state_now(
        &self,
        action_tag: &str,
        now_ms: i64,
    ) -> Result<(ActionState, Vec<PageDecision>), StoreError> {
        let call = self
            .pages
            .state
            .call()
            .key(self.generation_key(action_tag))
            .key(self.busy_key(action_tag))
            .key(self.page_key(action_tag));
        let ran = script::run(&self.links, &call, None).await?;
        let Value::Array(parts) = ran.value else {
            return Err(corrupt("page state script answered no list"));
        };
        let [generation, busy, pages]: [Value; 3] = parts
            .try_into()
            .map_err(|_| corrupt("page state script answered no triple"))?;
        let state = super::decode_action(generation, busy)?;
        let mut decisions = Vec::new();
        for (field, value) in into_fields(pages)? {
            let (decision, until_ms) = decode(&field, &value)?;
            if until_ms > now_ms {
                decisions.push(decision);
            }
        }
        Ok((state, decisions))
    }
}

/// A kept decision and until when it is kept.
fn decode(field: &str, value: &[u8]) -> Result<(PageDecision, i64), StoreError> {
    let text = std::str::from_utf8(value).map_err(|_| corrupt("a page decision"))?;
    let (until, decision) = text
        .split_once(' ')
        .ok_or_else(|| corrupt("a page decision"))?;
    let until_ms = until.parse().map_err(|_| corrupt("a page decision"))?;
    let decision =
        PageDecision::decode(field, decision).ok_or_else(|| corrupt("a page decision"))?;
    Ok((decision, until_ms))
}
