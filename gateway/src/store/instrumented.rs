//! A decorator that times every call of any [`OperationStore`] and counts its failures, so
//! the memory and Redis stores stay free of metrics code.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::{
    ActionState, Claim, ClaimOutcome, Durability, FollowUp, InFlightOperation, KeptAnswer,
    KeptDecision, KeptRound, Lease, MessageAnswer, MessageLease, MessageSlot, OperationRecord,
    OperationStore, PageDecided, PageDecision, ResolveOutcome, Ruling, StoreError,
};
use crate::metrics::{Metrics, StoreCall};
use crate::protocol::OperationId;

pub(crate) struct InstrumentedStore {
    inner: Arc<dyn OperationStore>,
    metrics: Arc<Metrics>,
}

impl InstrumentedStore {
    pub(crate) fn wrap(
        inner: Arc<dyn OperationStore>,
        metrics: Arc<Metrics>,
    ) -> Arc<dyn OperationStore> {
        Arc::new(InstrumentedStore { inner, metrics })
    }

    async fn timed<T>(
        &self,
        call: StoreCall,
        future: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let span = crate::telemetry::Span::client(span_name(call));
        let started = Instant::now();
        let result = future.await;
        let took = started.elapsed();
        if result.is_err() {
            span.fail("the store call failed");
        }
        let ids = span.sampled_ids();
        drop(span);
        self.metrics.store_call(call, took, result.is_err(), ids);
        if let Err(StoreError::Full(_)) = &result {
            self.metrics.store_full();
        }
        result
    }
}

/// A store call's span: its metric label, spelled as a span name.
fn span_name(call: StoreCall) -> &'static str {
    match call {
        StoreCall::Generation => "poppy.store.generation",
        StoreCall::Lookup => "poppy.store.lookup",
        StoreCall::Claim => "poppy.store.claim",
        StoreCall::Complete => "poppy.store.complete",
        StoreCall::Release => "poppy.store.release",
        StoreCall::Resolve => "poppy.store.resolve",
        StoreCall::Ping => "poppy.store.ping",
    }
}

#[async_trait]
impl OperationStore for InstrumentedStore {
    async fn generation(&self, action_tag: &str) -> Result<u64, StoreError> {
        self.timed(StoreCall::Generation, self.inner.generation(action_tag))
            .await
    }

    async fn action_state(&self, action_tag: &str) -> Result<ActionState, StoreError> {
        // A mint's read: the generation and what is in flight.
        self.timed(StoreCall::Generation, self.inner.action_state(action_tag))
            .await
    }

    async fn in_flight(&self, limit: usize) -> Result<Vec<InFlightOperation>, StoreError> {
        // Operators' calls, not the request path: not timed.
        self.inner.in_flight(limit).await
    }

    async fn unknown_count(&self, now_ms: i64) -> Result<u64, StoreError> {
        self.inner.unknown_count(now_ms).await
    }

    async fn durability(&self) -> Result<Option<Durability>, StoreError> {
        self.inner.durability().await
    }

    async fn lookup(&self, id: &OperationId) -> Result<Option<OperationRecord>, StoreError> {
        self.timed(StoreCall::Lookup, self.inner.lookup(id)).await
    }

    async fn lookup_with_generation(
        &self,
        id: &OperationId,
    ) -> Result<(Option<OperationRecord>, u64), StoreError> {
        self.timed(StoreCall::Lookup, self.inner.lookup_with_generation(id))
            .await
    }

    async fn claim(&self, id: &OperationId, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        self.timed(StoreCall::Claim, self.inner.claim(id, claim))
            .await
    }

    async fn complete(&self, answer: &KeptAnswer<'_>, owner: &str) -> Result<bool, StoreError> {
        self.timed(StoreCall::Complete, self.inner.complete(answer, owner))
            .await
    }

    async fn complete_claim(
        &self,
        answer: &KeptAnswer<'_>,
        claim: &Claim,
    ) -> Result<bool, StoreError> {
        let call = self.inner.complete_claim(answer, claim);
        self.timed(StoreCall::Complete, call).await
    }

    async fn release(&self, id: &OperationId, owner: &str) -> Result<bool, StoreError> {
        self.timed(StoreCall::Release, self.inner.release(id, owner))
            .await
    }

    async fn resolve(&self, ruling: &Ruling<'_>) -> Result<ResolveOutcome, StoreError> {
        self.timed(StoreCall::Resolve, self.inner.resolve(ruling))
            .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.timed(StoreCall::Ping, self.inner.ping()).await
    }

    // Rounds, page decisions and conversation messages: not timed (their label set is the
    // flow's calls), passed on.
    async fn put_round(&self, kept: &KeptRound<'_>) -> Result<bool, StoreError> {
        self.inner.put_round(kept).await
    }

    async fn take_round(&self, follow_up: &FollowUp<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.take_round(follow_up).await
    }

    async fn set_lease(&self, lease: &Lease<'_>) -> Result<bool, StoreError> {
        self.inner.set_lease(lease).await
    }

    async fn decide_on_page(&self, kept: &KeptDecision<'_>) -> Result<PageDecided, StoreError> {
        self.inner.decide_on_page(kept).await
    }

    async fn page_state(
        &self,
        action_tag: &str,
    ) -> Result<(ActionState, Vec<PageDecision>), StoreError> {
        // A page request's read: a mint's, with the action's page decisions.
        self.timed(StoreCall::Generation, self.inner.page_state(action_tag))
            .await
    }

    async fn take_message(&self, lease: &MessageLease<'_>) -> Result<MessageSlot, StoreError> {
        self.inner.take_message(lease).await
    }

    async fn finish_message(&self, answer: &MessageAnswer<'_>) -> Result<(), StoreError> {
        self.inner.finish_message(answer).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::MemoryStore;

    /// A store that is always down.
    struct Down;

    #[async_trait]
    impl OperationStore for Down {
        async fn generation(&self, _: &str) -> Result<u64, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn lookup(&self, _: &OperationId) -> Result<Option<OperationRecord>, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn claim(&self, _: &OperationId, _: &Claim) -> Result<ClaimOutcome, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn complete(&self, _: &KeptAnswer<'_>, _: &str) -> Result<bool, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn release(&self, _: &OperationId, _: &str) -> Result<bool, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn resolve(&self, _: &Ruling<'_>) -> Result<ResolveOutcome, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn ping(&self) -> Result<(), StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn action_state(&self, _: &str) -> Result<ActionState, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn in_flight(&self, _: usize) -> Result<Vec<InFlightOperation>, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn unknown_count(&self, _: i64) -> Result<u64, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn complete_claim(&self, _: &KeptAnswer<'_>, _: &Claim) -> Result<bool, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
    }

    fn sample(metrics: &Metrics, series: &str) -> String {
        let text = String::from_utf8(metrics.render(crate::metrics::Format::Text)).unwrap();
        text.lines()
            .find(|line| line.starts_with(series))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .to_owned()
    }

    #[tokio::test]
    async fn calls_are_timed_and_failures_counted() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let up = InstrumentedStore::wrap(Arc::new(MemoryStore::new()), Arc::clone(&metrics));
        assert_eq!(up.generation("tag").await.unwrap(), 0);
        up.ping().await.unwrap();
        up.ping().await.unwrap();
        let down = InstrumentedStore::wrap(Arc::new(Down), Arc::clone(&metrics));
        assert!(down.ping().await.is_err());

        assert_eq!(
            sample(
                &metrics,
                r#"poppy_store_duration_seconds_count{call="generation"}"#
            ),
            r#"poppy_store_duration_seconds_count{call="generation"} 1"#
        );
        assert_eq!(
            sample(
                &metrics,
                r#"poppy_store_duration_seconds_count{call="ping"}"#
            ),
            r#"poppy_store_duration_seconds_count{call="ping"} 3"#
        );
        assert_eq!(
            sample(&metrics, r#"poppy_store_errors_total{call="ping"}"#),
            r#"poppy_store_errors_total{call="ping"} 1"#
        );
        assert_eq!(
            sample(&metrics, r#"poppy_store_errors_total{call="generation"}"#),
            r#"poppy_store_errors_total{call="generation"} 0"#
        );
    }
}
