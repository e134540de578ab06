//! Recording a performed operation's answer before it is delivered, and its receipt; retried
//! in the background when the store fails (retries of the request get 503 meanwhile). The
//! executor's `Need::Complete`, kept apart as `lookup.rs` is: the one call with a life of its
//! own (a background retry that outlives the request).

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::drain::ForwardGuard;
use crate::operation::Remember;
use crate::operation::record::RecordedResponse;
use crate::operation::round::Round;
use crate::policy::LivePolicies;
use crate::protocol::OperationId;
use crate::receipts::{Receipt, ReceiptSink, answer_digest, rfc3339_ms};
use crate::store::{Claim, KeptAnswer, OperationStore};

/// How long the gateway keeps trying to record an answer after the store failed.
const RERECORD_FOR: Duration = Duration::from_secs(60);

/// What completing a claim needs, also from a background retry.
pub(crate) struct Completion {
    claim: Claim,
    remember: Remember,
    policy: String,
    policies: LivePolicies,
    /// Keeps a graceful shutdown waiting until the answer is recorded.
    _guard: Option<ForwardGuard>,
    receipt: Option<Receipt>,
}

impl Completion {
    pub(crate) fn new(
        round: Round,
        policy: &str,
        policies: LivePolicies,
        guard: Option<ForwardGuard>,
    ) -> Completion {
        Completion {
            claim: round.claim,
            remember: round.remember,
            policy: policy.to_owned(),
            policies,
            _guard: guard,
            receipt: round.receipt,
        }
    }

    /// How long to remember the answer, for a completion now: the policies in force now
    /// count too (a reload during the forward may have made `expires_in` longer).
    fn until_ms(&self, now_ms: i64) -> i64 {
        let reloaded = self
            .policies
            .snapshot()
            .iter()
            .filter(|policy| policy.name == self.policy)
            .map(|policy| policy.expires_in)
            .max();
        self.remember.until_ms(now_ms, reloaded)
    }

    /// Write the receipt, now that the answer is recorded (the guard goes with it).
    fn write_receipt(
        self,
        sink: Option<&ReceiptSink>,
        response: &RecordedResponse,
        clock: &dyn Clock,
    ) {
        if let (Some(sink), Some(mut receipt)) = (sink, self.receipt) {
            receipt.performed_at = rfc3339_ms(clock.now_millis());
            receipt.upstream_status = Some(response.status);
            receipt.answer_sha256 = Some(answer_digest(
                response.status,
                &response.headers,
                &response.body,
            ));
            sink.write(&receipt);
        }
    }
}

/// What recording needs of the executor.
pub(crate) struct Recorder<'a> {
    pub(crate) store: &'a Arc<dyn OperationStore>,
    pub(crate) receipts: Option<&'a Arc<ReceiptSink>>,
    pub(crate) clock: &'a Arc<dyn Clock>,
}

impl Recorder<'_> {
    /// Record the answer. If the store fails now, the answer is still delivered, and
    /// recording is retried in the background so that retries can replay it (they get 503
    /// meanwhile). An answer whose record vanished meanwhile is written all the same.
    pub(crate) async fn record(
        &self,
        id: &OperationId,
        response: RecordedResponse,
        completion: Completion,
    ) {
        let clock = Arc::clone(self.clock);
        let policy = completion.policy.clone();
        let answer = KeptAnswer {
            id,
            response: &response,
            remember_until_ms: completion.until_ms(clock.now_millis()),
        };
        match self.store.complete_claim(&answer, &completion.claim).await {
            Ok(true) => {
                tracing::info!(policy, operation_id = %id, status = response.status, outcome = "performed", "performed; answer recorded");
                completion.write_receipt(self.receipts.map(Arc::as_ref), &response, clock.as_ref());
            }
            Ok(false) => {
                tracing::error!(policy, operation_id = %id, outcome = "performed", "the record was finished by somebody else before the answer was recorded (an operator's resolution?); it was left as it is")
            }
            Err(e) => {
                tracing::warn!(policy, operation_id = %id, error = %e, outcome = "performed", "answer delivered but not recorded yet; retrying in the background");
                let store = Arc::clone(self.store);
                let sink = self.receipts.cloned();
                let id = id.clone();
                tokio::spawn(async move {
                    let deadline = tokio::time::Instant::now() + RERECORD_FOR;
                    let mut pause = Duration::from_millis(100);
                    while tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(pause).await;
                        let answer = KeptAnswer {
                            id: &id,
                            response: &response,
                            remember_until_ms: completion.until_ms(clock.now_millis()),
                        };
                        match store.complete_claim(&answer, &completion.claim).await {
                            Ok(recorded) => {
                                tracing::info!(policy, operation_id = %id, recorded, "answer recorded after a store failure");
                                if recorded {
                                    completion.write_receipt(
                                        sink.as_deref(),
                                        &response,
                                        clock.as_ref(),
                                    );
                                }
                                return;
                            }
                            Err(e) => {
                                tracing::debug!(operation_id = %id, error = %e, "still cannot record the answer")
                            }
                        }
                        pause = (pause * 2).min(Duration::from_secs(2));
                    }
                    tracing::error!(policy, operation_id = %id, outcome = "unknown", "answer never recorded; retries get 503 until an operator resolves the operation");
                });
            }
        }
    }
}
