//! The script. The first message of a conversation gets the proposal (the operation from the
//! service, in the Company's message); every later message goes to the service's `perform`,
//! which decides whether it approves anything (its text never does); the outcome is told in
//! a later message. Nothing is performed here: the gateway performs, at most once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::conversation::{Conversations, Stage};
use crate::service::{Reply, Service};

/// The exchange this Company Agent offers.
pub struct Offer {
    pub order: String,
    pub item: String,
    pub sku: String,
}

pub struct Company {
    pub conversations: Conversations,
    pub service: Service,
    pub offer: Offer,
    /// How long to keep asking while an exchange is in progress or its outcome unknown.
    pub max_wait: Duration,
}

/// The longest pause between two questions about an exchange in progress.
const MAX_PAUSE: Duration = Duration::from_secs(10);

impl Company {
    fn request(&self) -> Value {
        Service::exchange(&self.offer.order, &self.offer.item, &self.offer.sku)
    }

    /// Handle one new message of the Personal Agent, in the background of its delivery.
    pub async fn handle(self: Arc<Self>, conversation: String, message: Value) {
        eprintln!(
            "company: {} in {conversation}: {}",
            message["id"].as_str().unwrap_or_default(),
            message["text"].as_str().unwrap_or_default()
        );
        match self.conversations.stage(&conversation) {
            None => {}
            Some(Stage::Done) => self.conversations.say(
                &conversation,
                "That exchange is done. Anything else I can help with?",
                None,
                None,
            ),
            Some(Stage::Open) => self.propose(&conversation).await,
            Some(Stage::Proposed) => self.perform(&conversation, &message).await,
        }
    }

    async fn propose(&self, conversation: &str) {
        let Some(credentials) = self.conversations.credentials(conversation) else {
            return;
        };
        match self
            .service
            .propose(conversation, &credentials, &self.request())
            .await
        {
            Ok(reply) if reply.status == 200 => {
                let operation = &reply.body["operation"];
                let name = operation["terms"]["replacement_name"]
                    .as_str()
                    .unwrap_or("the replacement");
                self.conversations.say(
                    conversation,
                    &format!("I can exchange item {} on order {} for {name}. These are the exact terms; I'll do it once you approve them.", self.offer.item, self.offer.order),
                    None,
                    Some(operation),
                );
                self.conversations.set_stage(conversation, Stage::Proposed);
            }
            Ok(reply) => self.conversations.say(
                conversation,
                &format!(
                    "I can't offer that exchange right now ({}). Nothing was changed.",
                    describe(&reply)
                ),
                Some(json!({"outcome": "error"})),
                None,
            ),
            Err(e) => self.conversations.say(
                conversation,
                &format!("I can't reach our systems right now ({e}). Nothing was changed."),
                Some(json!({"outcome": "error"})),
                None,
            ),
        }
    }

    /// Hand the message to the service, and say how it went. A 503 (in progress, outcome
    /// unknown, store or API unreachable) is never a failure: the same message is sent again
    /// until the answer is final or `max_wait` runs out.
    async fn perform(&self, conversation: &str, message: &Value) {
        let deadline = Instant::now() + self.max_wait;
        let mut told = None;
        let mut pause = Duration::from_secs(1);
        loop {
            let Some(credentials) = self.conversations.credentials(conversation) else {
                return;
            };
            let reply = self
                .service
                .perform(conversation, &credentials, &self.request(), message)
                .await;
            let waiting = match reply {
                Ok(reply) if reply.status == 503 => reply,
                Ok(reply) => return self.tell(conversation, &reply),
                // The service may have performed it: only the same message again can say.
                Err(e) => Reply {
                    status: 503,
                    body: json!({"error": "service_unreachable", "detail": e}),
                    retry_after: None,
                },
            };
            let unknown = waiting.error() == "operation_outcome_unknown";
            let outcome = if unknown { "unknown" } else { "in_progress" };
            if told != Some(outcome) {
                let text = if unknown {
                    "I don't know yet whether the exchange went through. I won't do it again; I'll tell you as soon as I know."
                } else {
                    "I'm on it; I'll tell you as soon as it's done."
                };
                self.conversations
                    .say(conversation, text, Some(json!({"outcome": outcome})), None);
                told = Some(outcome);
            }
            let wait = waiting.retry_after.unwrap_or(pause).min(MAX_PAUSE);
            if Instant::now() + wait > deadline {
                self.conversations.say(
                    conversation,
                    "I still don't know whether the exchange went through, and I won't do it again. Please check the order before asking for it again.",
                    Some(json!({"outcome": "unknown"})),
                    None,
                );
                return;
            }
            tokio::time::sleep(wait).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// The final answer of `perform`, in a message.
    fn tell(&self, conversation: &str, reply: &Reply) {
        let outcome = reply.body["outcome"].as_str().unwrap_or_default();
        match (reply.status, outcome) {
            (200, "performed" | "already_performed") => {
                let response = &reply.body["response"];
                let status = response["status"].as_u64().unwrap_or_default();
                let answer: Value = response["body"]
                    .as_str()
                    .and_then(|b| serde_json::from_str(b).ok())
                    .unwrap_or(Value::Null);
                let data = json!({"outcome": outcome, "status": status, "answer": answer});
                let text = if !(200..300).contains(&status) {
                    let data = json!({"outcome": "refused", "status": status, "answer": answer});
                    let detail = answer["detail"].as_str().unwrap_or("no reason given");
                    self.conversations.say(
                        conversation,
                        &format!("The shop refused the exchange ({status}: {detail}). Nothing was changed."),
                        Some(data),
                        None,
                    );
                    self.conversations.set_stage(conversation, Stage::Done);
                    return;
                } else if outcome == "already_performed" {
                    format!(
                        "That exchange was already done ({}); I did nothing more.",
                        answer["exchange_id"].as_str().unwrap_or("see your order")
                    )
                } else {
                    exchanged(&answer)
                };
                self.conversations.say(conversation, &text, Some(data), None);
                self.conversations.set_stage(conversation, Stage::Done);
            }
            (200, _) => self.conversations.say(
                conversation,
                "The shop did not do the exchange, and nothing was changed. If you still want it, approve the same terms again.",
                Some(json!({"outcome": "not_performed"})),
                None,
            ),
            (403, _) if reply.error() == "approval_required" => {
                // No approval in the message (text approves nothing), or one for other terms:
                // the current terms, to approve.
                let text = if reply.body["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("carries no approval"))
                {
                    "I can only do it once your agent sends your approval of the terms. Here they are again."
                } else {
                    "These are the exact terms now; I'll do it once you approve them."
                };
                self.conversations
                    .say(conversation, text, None, Some(&reply.body["operation"]));
            }
            _ => self.conversations.say(
                conversation,
                &format!("Something went wrong on our side ({}). Nothing was changed.", describe(reply)),
                Some(json!({"outcome": "error"})),
                None,
            ),
        }
    }
}

/// `STATUS error: detail`.
fn describe(reply: &Reply) -> String {
    let detail = reply.body["detail"].as_str().unwrap_or_default();
    format!("{} {}: {detail}", reply.status, reply.error())
}

/// What the shop's answer to an exchange says, for the user.
fn exchanged(answer: &Value) -> String {
    let text = |pointer: &str| {
        answer
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("?")
    };
    format!(
        "Done: exchange {} on order {}, {} for {}; the difference of {} {} goes on the card used for the order.",
        text("/exchange_id"),
        text("/order_id"),
        text("/from_sku"),
        text("/to_sku"),
        text("/price_difference/amount"),
        text("/price_difference/currency"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shop_s_answer_reads_as_a_sentence() {
        let answer = json!({"exchange_id": "exg_4", "order_id": "ord_2Cv6", "from_sku": "stormline-m",
            "to_sku": "stormline-insulated-m", "price_difference": {"amount": "70.00", "currency": "USD"}});
        assert_eq!(
            exchanged(&answer),
            "Done: exchange exg_4 on order ord_2Cv6, stormline-m for stormline-insulated-m; the difference of 70.00 USD goes on the card used for the order."
        );
    }
}
