//! The operators' index of in-flight operations (`<ns>:inflight`, see the module
//! documentation): written by the scripts on one node, around them on a cluster, and read by
//! the listings, which drop entries left behind by a crash.

use redis::Value;

use super::RedisStore;
use super::script;
use crate::protocol::OperationId;
use crate::store::{InFlightOperation, OperationStore, RecordState, StoreError};

/// An index entry whose record is finished (or gone) is dropped by a listing only once its
/// lease ended this long ago: on a cluster the entry is written just before its claim, and a
/// listing must not drop it in between.
const STALE_INDEX_AFTER_MS: i64 = 60_000;

impl RedisStore {
    pub(super) fn index_key(&self) -> String {
        format!("{}:inflight", self.namespace)
    }

    /// Whether the scripts maintain the index themselves: on one node only (see the module
    /// documentation).
    pub(super) fn scripts_index(&self) -> bool {
        !self.links.is_cluster()
    }

    /// The index key and the flag that tells a script whether to write it: on a cluster the
    /// key is left out of the script's keys (another slot) and written by [`Self::unindex`].
    pub(super) fn with_index<'a>(&self, call: script::Call<'a>) -> script::Call<'a> {
        if self.scripts_index() {
            call.key(self.index_key()).arg("1")
        } else {
            call.arg("0")
        }
    }

    /// On a cluster, drop a finished operation's index entry (best effort: a listing drops
    /// what is left behind).
    pub(super) async fn unindex(&self, id: &OperationId) {
        if self.scripts_index() {
            return;
        }
        let (key, member) = (self.index_key(), id.as_str().to_owned());
        let (key, member) = (&key, &member);
        let removed: Result<Value, StoreError> = self
            .links
            .run(|mut con| async move {
                redis::cmd("ZREM")
                    .arg(key)
                    .arg(member)
                    .query_async(&mut con)
                    .await
            })
            .await;
        if let Err(e) = removed {
            tracing::debug!(operation_id = %id, error = %e, "index entry not removed; a listing will");
        }
    }

    /// In-flight operations from the index with a lease before `max_lease_ms`, each checked
    /// against its record; entries whose record is finished are dropped once stale.
    pub(super) async fn listed(
        &self,
        max_lease_ms: Option<i64>,
        limit: usize,
    ) -> Result<Vec<InFlightOperation>, StoreError> {
        let key = self.index_key();
        let max = max_lease_ms.map_or_else(|| "+inf".to_owned(), |ms| format!("({ms}"));
        let (key, max) = (&key, &max);
        let members: Vec<(String, f64)> = self
            .links
            .run(|mut con| async move {
                redis::cmd("ZRANGEBYSCORE")
                    .arg(key)
                    .arg("-inf")
                    .arg(max)
                    .arg("WITHSCORES")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit)
                    .query_async(&mut con)
                    .await
            })
            .await?;
        let now = crate::clock::now_millis();
        let mut listed = Vec::with_capacity(members.len());
        for (member, score) in members {
            let record = match OperationId::parse(&member) {
                Some(id) => self.lookup(&id).await?.map(|record| (id, record)),
                None => None,
            };
            match record {
                Some((id, record)) if matches!(record.state, RecordState::InFlight { .. }) => {
                    listed.push(InFlightOperation { id, record });
                }
                _ if (score as i64).saturating_add(STALE_INDEX_AFTER_MS) < now => {
                    let (key, member) = (&self.index_key(), &member);
                    self.links
                        .run(|mut con| async move {
                            redis::cmd("ZREM")
                                .arg(key)
                                .arg(member)
                                .query_async::<Value>(&mut con)
                                .await
                        })
                        .await?;
                }
                _ => {}
            }
        }
        Ok(listed)
    }
}
