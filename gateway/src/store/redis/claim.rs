//! Claiming an operation (`claim.lua`): its index entry first on a cluster, then the record
//! in flight; a claim too few replicas acknowledged is released, never used.

use redis::Value;

use super::RedisStore;
use super::codec::{corrupt, decode_record, into_fields};
use super::script;
use crate::protocol::OperationId;
use crate::store::owner::Finisher;
use crate::store::{Claim, ClaimOutcome, StoreError};

impl RedisStore {
    /// `claim`: the record in flight, or the one that exists.
    pub(super) async fn claim_now(
        &self,
        id: &OperationId,
        claim: &Claim,
    ) -> Result<ClaimOutcome, StoreError> {
        if !self.scripts_index() {
            // Before the claim, so that no in-flight record is ever missing from the index
            // (NX: an existing entry is somebody's claim, left as it is).
            let (key, member, lease) = (
                &self.index_key(),
                id.as_str().to_owned(),
                claim.lease_until_ms,
            );
            let member = &member;
            self.links
                .run(|mut con| async move {
                    redis::cmd("ZADD")
                        .arg(key)
                        .arg("NX")
                        .arg(lease)
                        .arg(member)
                        .query_async::<Value>(&mut con)
                        .await
                })
                .await?;
        }
        let call = self
            .claim
            .call()
            .key(self.record_key(id))
            .key(self.busy_key(id.action_tag()))
            .arg(&claim.scope)
            .arg(&claim.policy)
            .arg(&claim.revision)
            .arg(claim.now_ms)
            .arg(&claim.owner)
            .arg(claim.lease_until_ms)
            .arg(id.as_str());
        let call = self.with_index(call);
        let call = call
            .arg(claim.credentials.as_deref().unwrap_or(""))
            .arg(claim.trace.as_deref().unwrap_or(""))
            .arg(claim.request.as_deref().unwrap_or(""));
        let ran = script::run(&self.links, &call, self.wait).await?;
        if ran.value == Value::Int(1) {
            if let Some(shortfall) = self.short_of_replicas(&ran) {
                return Err(self
                    .refuse_unreplicated_claim(id, &claim.owner, shortfall)
                    .await);
            }
            return Ok(ClaimOutcome::Claimed);
        }
        let fields = into_fields(ran.value)?;
        if fields.is_empty() {
            return Err(corrupt("claim returned neither a record nor success"));
        }
        decode_record(fields).map(ClaimOutcome::Exists)
    }

    /// A claim too few replicas acknowledged could be lost in a failover, and the operation
    /// performed again after it: never use it. Release it and fail closed.
    async fn refuse_unreplicated_claim(
        &self,
        id: &OperationId,
        owner: &str,
        shortfall: String,
    ) -> StoreError {
        if let Err(e) = self.forget(id, Finisher::Owner(owner), None).await {
            // It stays in flight and turns unknown: never forwarded, 503 until resolved.
            tracing::error!(operation_id = %id, error = %e, "unreplicated claim not released");
        }
        StoreError::Unavailable(format!("claim not used: {shortfall}"))
    }
}
