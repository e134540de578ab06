//! Conversation mode (spec sections 4, 6 and 7, "Conversations"): talk to a Company Agent,
//! and when its message carries an operation (`extensions.operations.operation`), show the
//! User the Company's name and the summary, ask them, and send their approval in a message of
//! our own (`extensions.operations.approval`). The Company Agent's text is shown as plain
//! text and is never taken for the User's answer; only the User's y/N is.
//!
//! The Company's messages are read from its conversation endpoint (`examples/company`):
//! `POST /conversations`, `POST /conversations/{id}/messages`, `GET …/events`. How it went
//! is read from the message's `data.outcome`, the example Company's own key.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::ask;
use crate::check::{self, Asked};
use crate::display;
use crate::flow::{Outcome, Settings};
use crate::http::{Answer, Client, Outgoing, SendError};
use crate::operation::Operation;

/// How many revisions the User may be asked about in one conversation.
const MAX_ROUNDS: usize = 3;
/// How long one events request waits for a message.
const POLL: Duration = Duration::from_secs(10);
const RESEND_PAUSE: Duration = Duration::from_millis(500);

/// The Company's conversation endpoint, with this agent's headers.
pub struct Chat {
    pub client: Client,
    pub headers: Vec<(String, String)>,
}

impl Chat {
    fn request(&self, method: reqwest::Method, path: String, body: Option<&Value>) -> Outgoing {
        let mut headers = self.headers.clone();
        if body.is_some() {
            headers.push(("Content-Type".into(), "application/json".into()));
        }
        Outgoing {
            method,
            path_and_query: path,
            headers,
            body: body.map(|b| b.to_string().into_bytes()),
        }
    }

    async fn open(&self) -> Result<String, String> {
        let answer = self
            .client
            .send(
                &self.request(reqwest::Method::POST, "/conversations".into(), None),
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
        answer
            .json()
            .and_then(|b| b["conversation_id"].as_str().map(str::to_owned))
            .filter(|_| answer.status == 201)
            .ok_or_else(|| {
                format!(
                    "the company did not open a conversation: {}",
                    answer.describe()
                )
            })
    }

    /// Send a message; the same message (same ID) again while the answer is unclear, until
    /// `deadline`.
    async fn send(
        &self,
        conversation: &str,
        message: &Value,
        deadline: Instant,
    ) -> Result<(), String> {
        let request = self.request(
            reqwest::Method::POST,
            format!("/conversations/{conversation}/messages"),
            Some(message),
        );
        loop {
            let problem = match self.client.send(&request, None).await {
                Ok(answer) if (200..300).contains(&answer.status) => return Ok(()),
                Ok(answer) if answer.status < 500 => {
                    return Err(format!(
                        "the company refused the message: {}",
                        answer.describe()
                    ));
                }
                Ok(answer) => answer.describe(),
                Err(e) => e.to_string(),
            };
            if Instant::now() + RESEND_PAUSE > deadline {
                return Err(format!("the message got no answer: {problem}"));
            }
            eprintln!(
                "The message got no clear answer ({problem}); sending the same message again."
            );
            tokio::time::sleep(RESEND_PAUSE).await;
        }
    }

    async fn events(
        &self,
        conversation: &str,
        after: Option<&str>,
    ) -> Result<Vec<Value>, SendError> {
        let mut path = format!(
            "/conversations/{conversation}/events?wait={}",
            POLL.as_secs()
        );
        if let Some(after) = after {
            path.push_str(&format!("&after={after}"));
        }
        let answer = self
            .client
            .send(&self.request(reqwest::Method::GET, path, None), None)
            .await?;
        Ok(answer
            .json()
            .and_then(|b| b["events"].as_array().cloned())
            .unwrap_or_default())
    }
}

/// Where the conversation is.
struct State {
    conversation: String,
    after: Option<String>,
    rounds: usize,
    /// An approval was sent: from now on, only the Company's word ends the wait.
    approval_sent: bool,
    next_message: u32,
}

/// Say `text` to the Company Agent and see it through.
pub async fn run(chat: &Chat, company: &str, text: &str, settings: &Settings) -> Outcome {
    let deadline = Instant::now() + settings.max_wait;
    let conversation = match chat.open().await {
        Ok(id) => id,
        Err(e) => return Outcome::Failed(e),
    };
    let mut state = State {
        conversation,
        after: None,
        rounds: 0,
        approval_sent: false,
        next_message: 1,
    };
    let first = json!({"id": message_id(&mut state), "author": {"type": "agent"}, "text": text});
    eprintln!("You: {}", display::value(text));
    if let Err(e) = chat.send(&state.conversation, &first, deadline).await {
        return Outcome::Failed(e);
    }
    loop {
        if Instant::now() > deadline {
            return if state.approval_sent {
                Outcome::Unknown(
                    "the approval was sent, and the company has not said how it went".into(),
                )
            } else {
                Outcome::NotPerformed {
                    why: "the company asked for no approval in time".into(),
                    answer: None,
                }
            };
        }
        let events = match chat
            .events(&state.conversation, state.after.as_deref())
            .await
        {
            Ok(events) => events,
            Err(e) => {
                eprintln!("Reading the conversation failed ({e}); trying again.");
                tokio::time::sleep(RESEND_PAUSE).await;
                continue;
            }
        };
        for event in events {
            state.after = event["id"].as_str().map(str::to_owned);
            let message = &event["message"];
            if message["role"] != "company" {
                continue;
            }
            eprintln!(
                "{company}: {}",
                display::summary(message["text"].as_str().unwrap_or_default())
            );
            if let Some(done) = outcome(message) {
                return done;
            }
            let Some(operation) = message.pointer("/extensions/operations/operation") else {
                continue;
            };
            let operation = match Operation::from_value(operation) {
                Ok(operation) => operation,
                Err(problem) => {
                    return Outcome::Failed(format!(
                        "the company's operation is malformed: {problem}"
                    ));
                }
            };
            if let Some(refusal) =
                approve(chat, company, &operation, &mut state, settings, deadline).await
            {
                return refusal;
            }
        }
    }
}

/// Ask the User about `operation` and send their approval. `Some` ends the conversation.
async fn approve(
    chat: &Chat,
    company: &str,
    operation: &Operation,
    state: &mut State,
    settings: &Settings,
    deadline: Instant,
) -> Option<Outcome> {
    if state.rounds == MAX_ROUNDS {
        return Some(Outcome::NotPerformed {
            why: format!(
                "the company sent new terms {MAX_ROUNDS} times; stopping without approving"
            ),
            answer: None,
        });
    }
    // In a conversation every term comes from the Company (the User only wrote words): the
    // terms are checked against the summary.
    let mut findings = check::check(
        operation.terms.as_ref(),
        &operation.summary,
        &Asked::default(),
    );
    findings.added.clear();
    ask::show(company, operation, &findings);
    let approved = if settings.yes {
        if findings.has_problems() {
            return Some(Outcome::NotPerformed {
                why: "not approving automatically (--yes): the terms don't agree with the summary; run without --yes to decide".into(),
                answer: None,
            });
        }
        eprintln!("Approved without asking (--yes).");
        true
    } else {
        ask::ask()
    };
    if !approved {
        return Some(Outcome::NotPerformed {
            why: "you did not approve it".into(),
            answer: None,
        });
    }
    state.rounds += 1;
    let message = json!({
        "id": message_id(state),
        "author": {"type": "agent"},
        "text": "The user approved these terms.",
        "extensions": {"operations": {"approval": {
            "operation_id": operation.operation_id,
            "revision": operation.revision,
        }}},
    });
    if let Err(e) = chat.send(&state.conversation, &message, deadline).await {
        // The message may have arrived: only the Company can say now.
        return Some(Outcome::Unknown(e));
    }
    state.approval_sent = true;
    None
}

/// How it went, from a Company message's `data.outcome`; `None` while it goes on.
fn outcome(message: &Value) -> Option<Outcome> {
    let data = &message["data"];
    let text = display::value(message["text"].as_str().unwrap_or_default());
    match data["outcome"].as_str()? {
        "performed" | "already_performed" => Some(Outcome::Performed(Answer {
            status: u16::try_from(data["status"].as_u64().unwrap_or(200)).unwrap_or(200),
            headers: reqwest::header::HeaderMap::new(),
            body: data["answer"].to_string().into_bytes(),
        })),
        "in_progress" | "unknown" => None,
        _ => Some(Outcome::NotPerformed {
            why: format!("the company says: {text}"),
            answer: None,
        }),
    }
}

/// A new message ID: this run's, numbered.
fn message_id(state: &mut State) -> String {
    let n = state.next_message;
    state.next_message += 1;
    format!(
        "msg_{}_{n}",
        crate::session::new_sid().trim_start_matches("ses_")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_come_from_the_company_s_data() {
        let performed = json!({"text": "Done", "data": {"outcome": "performed", "status": 201, "answer": {"exchange_id": "exg_1"}}});
        assert!(matches!(outcome(&performed), Some(Outcome::Performed(a)) if a.status == 201));
        assert!(outcome(&json!({"text": "on it", "data": {"outcome": "in_progress"}})).is_none());
        assert!(outcome(&json!({"text": "hello"})).is_none());
        assert!(matches!(
            outcome(&json!({"text": "no", "data": {"outcome": "refused"}})),
            Some(Outcome::NotPerformed { .. })
        ));
    }
}
