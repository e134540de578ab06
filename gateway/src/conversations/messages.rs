//! A Personal Agent's message retried with the same ID gets the original answer (spec 7,
//! "In a conversation"). The store keeps each message's final answer (`store/messages.rs`);
//! while one delivery of a message is handled, another gets `503 message_in_progress`.
//!
//! A message is known by its conversation, its ID and the Session that sent it: a message ID
//! of another Session is another message, and gets its own answer from the flow. Agents sign
//! a new Session JWT for every request, so the key holds no credential bytes; when the
//! gateway does not verify Sessions, the answer is kept with a digest of what proves who sent
//! it (the delegated key, or the exact credentials, as for operations), and a retry that
//! proves less is answered by the flow again, which performs nothing twice and replays an
//! operation's answer only to its approver.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use super::wire::Answer;
use crate::clock::now_millis;
use crate::identity::Approver;
use crate::protocol::{ErrorBody, SigningKey};
use crate::store::{MessageAnswer, MessageLease, MessageSlot, OperationStore};

/// What a delivery of a message found.
pub(crate) enum Delivery {
    /// This delivery handles the message; [`Messages::finish`] ends it.
    Handle(Handling),
    /// The answer for this delivery: the original one, or "try again".
    Answered(Answer),
    /// Answered before, to a sender whose credentials this delivery's do not prove to be:
    /// the flow answers it (performing nothing twice), and nothing is kept.
    Unproven,
}

/// A message being handled by this delivery.
pub(crate) struct Handling {
    key: String,
    owner: String,
    proof: Option<String>,
}

pub(crate) struct Messages {
    pub(crate) store: Arc<dyn OperationStore>,
    /// How long one delivery may handle a message before another may take it over.
    pub(crate) lease: Duration,
    /// Identifies this process in leases.
    pub(crate) instance: String,
    pub(crate) taken: AtomicU64,
}

impl Messages {
    /// Take the message, or answer it from what the store knows.
    pub(crate) async fn deliver(
        &self,
        approver: &Approver,
        key: &SigningKey,
        conversation_id: &str,
        message_id: &str,
    ) -> Delivery {
        let proof = approver.credentials.as_ref().map(|c| c.digest(key));
        let key = message_key(approver, conversation_id, message_id);
        let owner = format!(
            "{}-{}",
            self.instance,
            self.taken.fetch_add(1, Ordering::Relaxed)
        );
        let now = now_millis();
        let lease_until =
            now.saturating_add(i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX));
        let lease = MessageLease {
            key: &key,
            owner: &owner,
            now_ms: now,
            lease_until_ms: lease_until,
        };
        match self.store.take_message(&lease).await {
            Ok(MessageSlot::Taken) => Delivery::Handle(Handling { key, owner, proof }),
            Ok(MessageSlot::Busy) => Delivery::Answered(Answer::retry_later(
                1,
                &ErrorBody::new(
                    "message_in_progress",
                    "another delivery of this message is being handled now; send it again shortly to get its answer",
                ),
            )),
            Ok(MessageSlot::Answered(stored))
                if proof.is_some() && Answer::stored_proof(&stored) != proof =>
            {
                Delivery::Unproven
            }
            Ok(MessageSlot::Answered(stored)) => match Answer::from_stored(&stored) {
                Some(answer) => Delivery::Answered(answer),
                None => {
                    tracing::error!(
                        "a stored answer to a conversation message does not read; answering 503"
                    );
                    Delivery::Answered(store_unavailable())
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "conversation message not taken: store unavailable; nothing performed");
                Delivery::Answered(store_unavailable())
            }
        }
    }

    /// Keep a final answer for the message's retries until `remember_until_ms`, or let the
    /// message go (a `503`: nothing final was said, the next delivery is handled anew).
    pub(crate) async fn finish(&self, handling: Handling, answer: &Answer, remember_until_ms: i64) {
        let stored = answer
            .is_final()
            .then(|| answer.to_stored(handling.proof.as_deref()));
        let finished = MessageAnswer {
            key: &handling.key,
            owner: &handling.owner,
            answer: stored.as_deref(),
            remember_until_ms,
        };
        if let Err(e) = self.store.finish_message(&finished).await {
            // The answer is still given; a retry of the message is then handled by the flow
            // again, which performs nothing twice (at worst it says "already performed").
            tracing::warn!(error = %e, "the answer to a conversation message was not kept");
        }
    }
}

impl Answer {
    /// Whether the answer is what this message gets for good: anything but a "try again".
    fn is_final(&self) -> bool {
        self.status != 503
    }
}

fn store_unavailable() -> Answer {
    Answer::retry_later(
        1,
        &ErrorBody::new(
            "store_unavailable",
            "the gateway cannot reach its operation store; nothing was performed: try again",
        ),
    )
}

/// The store key of a message: a hash of the Session that sent it, the conversation and its
/// ID.
fn message_key(approver: &Approver, conversation_id: &str, message_id: &str) -> String {
    let mut hash = Sha256::new();
    for part in [
        "poppy-conversation-message-v2",
        approver.session_scope.as_str(),
        conversation_id,
        message_id,
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    URL_SAFE_NO_PAD.encode(hash.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approver(sid: &str) -> Approver {
        let claims = crate::testkit::claims_off();
        let payload = URL_SAFE_NO_PAD.encode(format!(r#"{{"sid":"{sid}","iss":"a"}}"#));
        Approver::from_headers(format!("e30.{payload}.x").as_bytes(), None, &claims).unwrap()
    }

    #[test]
    fn a_message_is_known_by_sender_conversation_and_id() {
        let a = message_key(&approver("s1"), "conv_1", "msg_1");
        assert_eq!(a, message_key(&approver("s1"), "conv_1", "msg_1"));
        for other in [
            message_key(&approver("s2"), "conv_1", "msg_1"),
            message_key(&approver("s1"), "conv_2", "msg_1"),
            message_key(&approver("s1"), "conv_1", "msg_2"),
        ] {
            assert_ne!(a, other);
        }
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
    }
}
