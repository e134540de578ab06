//! Conversations in memory: who each one is with (the Session it is bound to, and the Personal
//! Agent's latest credentials, as the service needs them), the Company's messages as events,
//! and the answers given to the Personal Agent's messages by ID (a message sent again gets the
//! same answer).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::session::Binding;

/// The Personal Agent's headers, passed on to the operations service, and the request that
/// carried them: its Session JWT was signed for that request's method and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub poppy_session: String,
    pub authorization: Option<String>,
    pub poppy_extensions: String,
    pub session_request: SessionRequest,
}

/// The method and path of the Personal Agent's request to this Company Agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    pub method: String,
    pub path: String,
}

/// Where the script is.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    /// Nothing proposed yet.
    Open,
    /// An operation was proposed (the latest, as sent).
    Proposed,
    /// The exchange was performed (or found performed): nothing more to do.
    Done,
}

pub struct Conversation {
    /// Whose it is: set when it opens.
    pub binding: Binding,
    /// The latest the Personal Agent sent (a Session JWT lives minutes, and the service
    /// verifies the one it is given).
    pub credentials: Credentials,
    pub stage: Stage,
    events: Vec<Value>,
    /// The answer to each message ID received.
    answered: HashMap<String, Value>,
    changed: watch::Sender<usize>,
}

#[derive(Default)]
pub struct Conversations {
    inner: Mutex<HashMap<String, Conversation>>,
    next: AtomicU64,
}

/// How the Personal Agent's message was received.
pub enum Received {
    /// New: handle it.
    New(Value),
    /// Received before: the same answer, nothing handled again.
    Again(Value),
}

impl Conversations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Conversation>> {
        // Single-step updates: consistent after a panic elsewhere.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn open(&self, binding: Binding, credentials: Credentials) -> String {
        let id = format!("conv_{}", self.next());
        let conversation = Conversation {
            binding,
            credentials,
            stage: Stage::Open,
            events: Vec::new(),
            answered: HashMap::new(),
            changed: watch::Sender::new(0),
        };
        self.lock().insert(id.clone(), conversation);
        id
    }

    /// Whose the conversation is, if it exists.
    pub fn binding_of(&self, id: &str) -> Option<Binding> {
        self.lock().get(id).map(|c| c.binding.clone())
    }

    /// Keep the Personal Agent's latest credentials (of a request bound to the conversation).
    pub fn refresh(&self, id: &str, credentials: Credentials) {
        if let Some(conversation) = self.lock().get_mut(id) {
            conversation.credentials = credentials;
        }
    }

    /// Record a Personal Agent message (its credentials may have been refreshed).
    pub fn receive(
        &self,
        id: &str,
        message_id: &str,
        credentials: Credentials,
    ) -> Option<Received> {
        let mut all = self.lock();
        let conversation = all.get_mut(id)?;
        if let Some(answer) = conversation.answered.get(message_id) {
            return Some(Received::Again(answer.clone()));
        }
        let answer = json!({ "accepted": message_id });
        conversation
            .answered
            .insert(message_id.to_owned(), answer.clone());
        conversation.credentials = credentials;
        Some(Received::New(answer))
    }

    pub fn credentials(&self, id: &str) -> Option<Credentials> {
        self.lock().get(id).map(|c| c.credentials.clone())
    }

    pub fn stage(&self, id: &str) -> Option<Stage> {
        self.lock().get(id).map(|c| c.stage.clone())
    }

    pub fn set_stage(&self, id: &str, stage: Stage) {
        if let Some(conversation) = self.lock().get_mut(id) {
            conversation.stage = stage;
        }
    }

    /// Post a Company message: `text`, and `data` and an operation when given.
    pub fn say(&self, id: &str, text: &str, data: Option<Value>, operation: Option<&Value>) {
        let n = self.next();
        let mut message = json!({
            "id": format!("msg_c{n}"),
            "role": "company",
            "author": {"type": "agent"},
            "text": text,
        });
        if let Some(data) = data {
            message["data"] = data;
        }
        if let Some(operation) = operation {
            message["extensions"] = json!({"operations": {"operation": operation}});
        }
        let event = json!({
            "id": format!("evt_{n}"),
            "type": "message",
            "created_at": now_rfc3339(),
            "message": message,
        });
        eprintln!("company: says in {id}: {text}");
        let mut all = self.lock();
        if let Some(conversation) = all.get_mut(id) {
            conversation.events.push(event);
            let count = conversation.events.len();
            conversation.changed.send_replace(count);
        }
    }

    /// The events after `after` (all without it), waiting up to `wait` for one.
    pub async fn events_after(
        &self,
        id: &str,
        after: Option<&str>,
        wait: Duration,
    ) -> Option<Vec<Value>> {
        let (from, mut changed) = {
            let all = self.lock();
            let conversation = all.get(id)?;
            let from = match after {
                Some(after) => conversation
                    .events
                    .iter()
                    .position(|e| e["id"] == after)
                    .map_or(0, |i| i + 1),
                None => 0,
            };
            (from, conversation.changed.subscribe())
        };
        // Bounded: the watch says when a message is posted, or the wait ends.
        let _ = tokio::time::timeout(wait, changed.wait_for(|count| *count > from)).await;
        let all = self.lock();
        Some(
            all.get(id)?
                .events
                .get(from..)
                .map(<[Value]>::to_vec)
                .unwrap_or_default(),
        )
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> Credentials {
        Credentials {
            poppy_session: "s".into(),
            authorization: None,
            poppy_extensions: "x".into(),
            session_request: SessionRequest {
                method: "POST".into(),
                path: "/conversations".into(),
            },
        }
    }

    #[tokio::test]
    async fn messages_are_received_once_and_events_wait() {
        let conversations = Conversations::default();
        let binding = Binding {
            agent: "a".into(),
            sid: "s".into(),
        };
        let id = conversations.open(binding.clone(), credentials());
        assert_eq!(conversations.binding_of(&id), Some(binding));
        assert!(matches!(
            conversations.receive(&id, "m1", credentials()),
            Some(Received::New(_))
        ));
        assert!(matches!(
            conversations.receive(&id, "m1", credentials()),
            Some(Received::Again(_))
        ));
        let none = conversations
            .events_after(&id, None, Duration::from_millis(10))
            .await
            .unwrap();
        assert!(none.is_empty());
        conversations.say(&id, "hello", None, None);
        let events = conversations
            .events_after(&id, None, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(events.len(), 1);
        let after = events[0]["id"].as_str().unwrap().to_owned();
        conversations.say(&id, "again", None, None);
        let later = conversations
            .events_after(&id, Some(&after), Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(later.len(), 1);
        assert_eq!(later[0]["message"]["text"], "again");
    }
}
