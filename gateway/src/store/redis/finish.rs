//! Finishing an in-flight record: its answer recorded (`complete.lua`) or the record deleted
//! (`release.lua`), by its owner, a restored claim or an operator, and its index entry dropped.

use super::RedisStore;
use super::codec::{Finished, encode_headers, finished};
use super::script::{self, Ran};
use crate::protocol::OperationId;
use crate::store::owner::Finisher;
use crate::store::{KeptAnswer, ReplicaWait, StoreError};

impl RedisStore {
    /// `complete.lua`: record the answer and move the generation on.
    pub(super) async fn record_answer(
        &self,
        answer: &KeptAnswer<'_>,
        mode: Finisher<'_>,
    ) -> Result<(Finished, Ran), StoreError> {
        let KeptAnswer {
            id,
            response,
            remember_until_ms,
        } = *answer;
        let restore = match &mode {
            Finisher::Restore(claim) => Some(*claim),
            _ => None,
        };
        let (mode, owner) = mode.script_args();
        let call = self
            .complete
            .call()
            .key(self.record_key(id))
            .key(self.generation_key(id.action_tag()))
            .key(self.busy_key(id.action_tag()))
            .arg(mode)
            .arg(owner)
            .arg(response.status)
            .arg(encode_headers(&response.headers)?)
            .arg(response.body.as_ref())
            .arg(remember_until_ms)
            .arg(id.as_str());
        let mut call = self.with_index(call);
        if let Some(claim) = restore {
            call = call
                .arg(&claim.scope)
                .arg(&claim.policy)
                .arg(&claim.revision)
                .arg(claim.now_ms)
                .arg(claim.credentials.as_deref().unwrap_or(""))
                .arg(claim.request.as_deref().unwrap_or(""));
        }
        self.finish(id, &call, self.wait).await
    }

    /// `release.lua`: delete an in-flight record, waiting for replicas when `wait` is set.
    pub(super) async fn forget(
        &self,
        id: &OperationId,
        mode: Finisher<'_>,
        wait: Option<ReplicaWait>,
    ) -> Result<(Finished, Ran), StoreError> {
        let (mode, owner) = mode.script_args();
        let call = self
            .release
            .call()
            .key(self.record_key(id))
            .key(self.busy_key(id.action_tag()))
            .arg(mode)
            .arg(owner)
            .arg(id.as_str());
        let call = self.with_index(call);
        self.finish(id, &call, wait).await
    }

    /// Run a finishing script; a record it finished (or found gone) leaves the index.
    async fn finish(
        &self,
        id: &OperationId,
        call: &script::Call<'_>,
        wait: Option<ReplicaWait>,
    ) -> Result<(Finished, Ran), StoreError> {
        let ran = script::run(&self.links, call, wait).await?;
        let finished = finished(&ran.value)?;
        if matches!(finished, Finished::Yes | Finished::NoRecord) {
            self.unindex(id).await;
        }
        Ok((finished, ran))
    }

    /// `complete` and `complete_claim`: whether `finisher`'s answer was recorded.
    pub(super) async fn completed(
        &self,
        answer: &KeptAnswer<'_>,
        finisher: Finisher<'_>,
    ) -> Result<bool, StoreError> {
        let (finished, ran) = self.record_answer(answer, finisher).await?;
        if finished == Finished::Yes
            && let Some(shortfall) = self.short_of_replicas(&ran)
        {
            // The answer is being delivered and is on the primary; a failover before it
            // reaches a replica would turn the operation unknown again (never re-forwarded).
            let id = answer.id;
            tracing::warn!(operation_id = %id, "answer recorded on the primary only: {shortfall}");
        }
        Ok(finished == Finished::Yes)
    }
}
