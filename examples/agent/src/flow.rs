//! The operations flow, as a Personal Agent walks it (spec 5-7): send the request; on
//! `approval_required` show the terms and ask; send the same request with the approval;
//! on 503 or no answer, send the same approval again (never a new one) until the time budget
//! runs out, and then say the outcome is unknown.

use std::time::{Duration, Instant};

use crate::ask;
use crate::check::{self, Asked};
use crate::display;
use crate::http::{Answer, Client, Outgoing, SendError};
use crate::operation::Operation;

/// How many revisions of one request the User may be asked about (the terms can change
/// between asking and approving, e.g. a price from the Company's records).
const MAX_ROUNDS: usize = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// Error codes the gateway answers itself before forwarding anything: such an answer to an
/// approval proves this attempt performed nothing.
const REFUSED_BEFORE_FORWARDING: [&str; 14] = [
    "approval_required",
    "approval_declined",
    "sign_in_required",
    "extension_required",
    "invalid_header",
    "invalid_session",
    "invalid_body",
    "invalid_path",
    "invalid_term",
    "missing_term",
    "body_too_large",
    "lookup_failed",
    "store_unavailable",
    "upstream_unavailable",
];

pub struct Settings {
    /// Approve without asking (scripts).
    pub yes: bool,
    /// The longest the agent keeps resending an approval.
    pub max_wait: Duration,
}

/// How the run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The API performed the request; this is its answer.
    Performed(Answer),
    /// Nothing was performed (declined, refused, or the API said no).
    NotPerformed { why: String, answer: Option<Answer> },
    /// The approval was sent, and whether it was performed is unknown.
    Unknown(String),
    /// The agent could not do its job (no gateway, a malformed answer).
    Failed(String),
}

/// An attempt with an approval that ended without a clear answer.
enum Sent {
    Answer(Answer),
    GaveUp(String),
}

pub async fn run(
    client: &Client,
    request: &Outgoing,
    asked: &Asked,
    settings: &Settings,
) -> Outcome {
    let mut answer = match client.send(request, None).await {
        Ok(answer) => answer,
        Err(SendError::Connect(e)) => {
            return Outcome::Failed(format!("cannot reach {}: {e}", client.base()));
        }
        Err(e @ SendError::Sign(_)) => return Outcome::Failed(e.to_string()),
        Err(SendError::NoAnswer(e)) => {
            return Outcome::Unknown(format!(
                "the request got no answer ({e}); if the route needs no approval it may have reached the API"
            ));
        }
    };
    let mut rounds = 0;
    // An approval was sent and some attempt got no clear answer: the first approval may
    // have been performed, so no new one may be asked for (spec 7).
    let mut ambiguous = false;
    let mut deadline: Option<Instant> = None;
    let mut company: Option<String> = None;
    loop {
        let operation = match Operation::from_answer(&answer) {
            None => return final_answer(answer, rounds > 0, ambiguous),
            Some(Err(problem)) => {
                return Outcome::Failed(format!("the company's answer is malformed: {problem}"));
            }
            Some(Ok(operation)) => operation,
        };
        if ambiguous {
            return Outcome::Unknown(
                "an earlier attempt with the approval got no clear answer, and the company now returns a new operation, which does not say whether the first was performed".into(),
            );
        }
        if rounds == MAX_ROUNDS {
            return Outcome::NotPerformed {
                why: format!(
                    "the company returned new terms {rounds} times; stopping without approving"
                ),
                answer: None,
            };
        }
        if rounds > 0 {
            eprintln!(
                "\nThe company answered the approval with new terms (a new revision): they need your approval again."
            );
        }
        if company.is_none() {
            company = Some(company_name(client).await);
        }
        let findings = check::check(operation.terms.as_ref(), &operation.summary, asked);
        ask::show(
            company.as_deref().unwrap_or_default(),
            &operation,
            &findings,
        );
        let approved = if settings.yes {
            if findings.has_problems() {
                return Outcome::NotPerformed {
                    why: "not approving automatically (--yes): the terms don't agree with the summary or with what was asked for; run without --yes to decide".into(),
                    answer: None,
                };
            }
            eprintln!("Approved without asking (--yes).");
            true
        } else {
            ask::ask()
        };
        if !approved {
            return Outcome::NotPerformed {
                why: "you did not approve it".into(),
                answer: None,
            };
        }
        rounds += 1;
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + settings.max_wait);
        answer = match send_approval(client, request, &operation, deadline, &mut ambiguous).await {
            Sent::Answer(answer) => answer,
            Sent::GaveUp(why) => return Outcome::Unknown(why),
        };
    }
}

/// Send the approval, and the same approval again after a 5xx or no answer, until `deadline`.
async fn send_approval(
    client: &Client,
    request: &Outgoing,
    operation: &Operation,
    deadline: Instant,
    ambiguous: &mut bool,
) -> Sent {
    let approval = operation.approval_header();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let (problem, wait) = match client.send(request, Some(&approval)).await {
            Ok(answer) if answer.status >= 500 => {
                let code = answer.error_code();
                // The gateway forwarded nothing this time, and nothing before was unclear.
                if code.as_deref() == Some("lookup_failed") && !*ambiguous {
                    return Sent::Answer(answer);
                }
                *ambiguous = true;
                // The Company's words: shown as plain text like any other.
                (
                    display::value(&answer.describe()),
                    answer.retry_after().unwrap_or(backoff),
                )
            }
            Ok(answer) => return Sent::Answer(answer),
            // Nothing left this machine: no doubt added.
            Err(e @ (SendError::Connect(_) | SendError::Sign(_))) => (e.to_string(), backoff),
            Err(e @ SendError::NoAnswer(_)) => {
                *ambiguous = true;
                (e.to_string(), backoff)
            }
        };
        let now = Instant::now();
        if now + wait > deadline {
            return Sent::GaveUp(format!(
                "the approval was sent, and the last answer was: {problem}"
            ));
        }
        eprintln!(
            "The approval got no final answer ({problem}); sending the same approval again in {:.1}s.",
            wait.as_secs_f64()
        );
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// An answer that is not `approval_required`.
pub fn final_answer(answer: Answer, approval_sent: bool, ambiguous: bool) -> Outcome {
    let code = answer.error_code();
    let refused = code
        .as_deref()
        .is_some_and(|c| REFUSED_BEFORE_FORWARDING.contains(&c));
    if (200..300).contains(&answer.status) {
        if !approval_sent {
            eprintln!("No approval was needed.");
        }
        return Outcome::Performed(answer);
    }
    if refused {
        if ambiguous {
            return Outcome::Unknown(format!(
                "the gateway now answers {}, after an earlier attempt got no clear answer",
                display::value(&answer.describe())
            ));
        }
        return Outcome::NotPerformed {
            why: format!(
                "the gateway answered {}",
                display::value(&answer.describe())
            ),
            answer: Some(answer),
        };
    }
    if answer.status >= 500 {
        return Outcome::Unknown(format!(
            "the API answered {}",
            display::value(&answer.describe())
        ));
    }
    Outcome::NotPerformed {
        why: format!("the API answered {}", display::value(&answer.describe())),
        answer: Some(answer),
    }
}

/// The Company's name from its `poppy.json` (spec 5: the User sees who asks).
pub async fn company_name(client: &Client) -> String {
    let name = client
        .discovery()
        .await
        .and_then(|doc| doc.get("name")?.as_str().map(str::to_owned))
        .filter(|name| !name.trim().is_empty());
    match name {
        Some(name) => name,
        None => format!(
            "The company at {} (its poppy.json gives no name)",
            client.base()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            headers: reqwest::header::HeaderMap::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn final_answers() {
        assert!(matches!(
            final_answer(answer(201, "{}"), true, false),
            Outcome::Performed(_)
        ));
        // The API's own refusal: it was forwarded and not performed.
        assert!(matches!(
            final_answer(answer(409, r#"{"error":"conflict"}"#), true, true),
            Outcome::NotPerformed { .. }
        ));
        // The gateway's refusal proves this attempt did nothing, but not an earlier one.
        let refused = r#"{"error":"invalid_header","detail":"x"}"#;
        assert!(matches!(
            final_answer(answer(400, refused), true, false),
            Outcome::NotPerformed { .. }
        ));
        assert!(matches!(
            final_answer(answer(400, refused), true, true),
            Outcome::Unknown(_)
        ));
        assert!(matches!(
            final_answer(answer(500, "oops"), true, false),
            Outcome::Unknown(_)
        ));
    }
}
