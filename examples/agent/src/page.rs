//! `--no-extension`: the agent as most agents are today, without the operations extension. A
//! Company that handles approval itself answers such a request `403 approval_required` with
//! an `approval_url` (spec 2; poppy-gateway's approval page, docs/approval-page.md): the User
//! opens it, signs in as the account the request acts for and approves there. This agent
//! shows the link and, with `--wait`, sends the same request again (a new Session JWT each
//! time) until it is performed, declined, the link expires, or the wait runs out. Sending it
//! again is safe: the gateway performs it at most once and replays the answer to every retry.

use std::time::{Duration, Instant};

use crate::display;
use crate::flow::{self, Outcome};
use crate::http::{Answer, Client, Outgoing, SendError};

/// How often the request is sent again while the User has not decided.
const POLL: Duration = Duration::from_secs(2);
/// The longest wait between two tries after a `5xx` (`Retry-After` is honoured up to this).
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// What `--no-extension` was told.
pub struct Settings {
    /// `--wait`: how long to keep sending the request again; `None`: show the link and stop.
    pub wait: Option<Duration>,
}

/// A `403 approval_required` with the Company's page.
#[derive(Debug, Clone, PartialEq)]
struct PageLink {
    url: String,
    summary: String,
    expires_at: Option<time::OffsetDateTime>,
    expires_text: String,
}

impl PageLink {
    /// `None` unless `answer` is `403 approval_required` with an `approval_url`.
    fn from_answer(answer: &Answer) -> Option<Result<PageLink, String>> {
        if answer.status != 403 || answer.error_code().as_deref() != Some("approval_required") {
            return None;
        }
        let body = answer.json()?;
        let url = body.get("approval_url")?.as_str()?;
        // The User is asked to open it: only a plain http(s) URL, nothing a terminal could
        // take for something else.
        let plain = (url.starts_with("https://") || url.starts_with("http://"))
            && url.len() <= 8192
            && url.chars().all(|c| c.is_ascii_graphic());
        if !plain {
            return Some(Err(format!(
                "approval_url is not a plain http(s) URL: {}",
                display::value(url)
            )));
        }
        let expires_text = body
            .get("expires_at")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        let expires_at = time::OffsetDateTime::parse(
            &expires_text,
            &time::format_description::well_known::Rfc3339,
        )
        .ok();
        Some(Ok(PageLink {
            url: url.to_owned(),
            summary: body
                .get("summary")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned(),
            expires_at,
            expires_text,
        }))
    }

    /// Whether the link can no longer be approved.
    fn expired(&self) -> bool {
        self.expires_at
            .is_some_and(|at| at <= time::OffsetDateTime::now_utc())
    }
}

/// Tell the User where to approve (stderr: stdout is for the API's answer).
fn show(company: &str, link: &PageLink, waiting: Option<Duration>) {
    let mut out = String::new();
    out.push_str("\n----------------------------------------------------------------\n");
    out.push_str(&format!(
        "{} asks for your approval on its own page. The action has NOT been performed.\n\n",
        display::value(company)
    ));
    for line in display::summary(&link.summary).lines() {
        out.push_str(&format!("    {line}\n"));
    }
    out.push_str(&format!(
        "\nOpen this link, sign in as the account this request acts for, and approve or decline (until {}):\n\n{}\n\n",
        display::value(&link.expires_text),
        link.url
    ));
    match waiting {
        Some(wait) => out.push_str(&format!(
            "Waiting for your decision: sending the same request again every {}s, for up to {}s.\n",
            POLL.as_secs(),
            wait.as_secs()
        )),
        None => out.push_str(
            "Once you approved, run this again (or use --wait): the same request is then performed once.\n",
        ),
    }
    out.push_str("----------------------------------------------------------------\n");
    eprint!("{out}");
}

/// Send `request` without the extension; on the page's link, show it and (with `--wait`)
/// send the same request again until it ends.
pub async fn run(client: &Client, request: &Outgoing, settings: &Settings) -> Outcome {
    let deadline = settings.wait.map(|wait| Instant::now() + wait);
    let mut shown: Option<PageLink> = None;
    // Some try got no clear answer after the link was shown: it may have been performed.
    let mut ambiguous = false;
    let mut backoff = POLL;
    loop {
        let (problem, pause) = match client.send(request, None).await {
            Err(SendError::Connect(e)) if shown.is_none() => {
                return Outcome::Failed(format!("cannot reach {}: {e}", client.base()));
            }
            Err(e @ SendError::Sign(_)) => return Outcome::Failed(e.to_string()),
            Err(SendError::NoAnswer(e)) if shown.is_none() => {
                return Outcome::Unknown(format!(
                    "the request got no answer ({e}); if the route needs no approval it may have reached the API"
                ));
            }
            Err(e @ SendError::Connect(_)) => (e.to_string(), backoff),
            Err(e @ SendError::NoAnswer(_)) => {
                ambiguous = true;
                (e.to_string(), backoff)
            }
            // Being performed, or the gateway can't tell yet: the same request again.
            Ok(answer) if answer.status >= 500 && shown.is_some() && settings.wait.is_some() => {
                ambiguous = true;
                (
                    display::value(&answer.describe()),
                    answer.retry_after().unwrap_or(backoff).min(MAX_BACKOFF),
                )
            }
            Ok(answer) => match PageLink::from_answer(&answer) {
                None => return flow::final_answer(answer, shown.is_some(), ambiguous),
                Some(Err(problem)) => {
                    return Outcome::Failed(format!(
                        "the company's answer is malformed: {problem}"
                    ));
                }
                Some(Ok(link)) => {
                    if ambiguous {
                        return Outcome::Unknown(
                            "an earlier try got no clear answer, and the company now asks for approval again, which does not say whether that try was performed".into(),
                        );
                    }
                    // Every try gets a link of its own (a new revision of the same operation,
                    // with its own expiry); an approval of the one shown counts for them all,
                    // as long as the terms are the same. The User has the first one.
                    if shown.is_none() {
                        show(&flow::company_name(client).await, &link, settings.wait);
                        shown = Some(link);
                    }
                    if settings.wait.is_none() {
                        return Outcome::NotPerformed {
                            why: "waiting for your approval on the company's page (the link above)"
                                .into(),
                            answer: None,
                        };
                    }
                    if shown.as_ref().is_some_and(PageLink::expired) {
                        return Outcome::NotPerformed {
                            why: "the approval link expired before it was approved; run this again for a new one".into(),
                            answer: None,
                        };
                    }
                    backoff = POLL;
                    (String::new(), POLL)
                }
            },
        };
        let Some(deadline) = deadline else {
            return Outcome::Unknown(format!("the request got no clear answer: {problem}"));
        };
        if Instant::now() + pause > deadline {
            return if ambiguous {
                Outcome::Unknown(format!(
                    "stopped waiting (--wait); the last try got no clear answer: {problem}"
                ))
            } else {
                Outcome::NotPerformed {
                    why: "not approved within --wait; the link stays valid until it expires: run this again once approved".into(),
                    answer: None,
                }
            };
        }
        if !problem.is_empty() {
            eprintln!(
                "No clear answer ({problem}); sending the same request again in {:.1}s.",
                pause.as_secs_f64()
            );
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        tokio::time::sleep(pause).await;
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
    fn a_page_link_is_read_from_a_403() {
        let link = PageLink::from_answer(&answer(
            403,
            r#"{"error":"approval_required","approval_url":"http://127.0.0.1:8085/approve/exc_a?r=1-2","summary":"Exchange **x**.","expires_at":"2000-01-01T00:00:00Z"}"#,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(link.url, "http://127.0.0.1:8085/approve/exc_a?r=1-2");
        assert!(link.expired());
        // A Poppy operation, another error, a URL a terminal could misread: not a page link.
        assert!(
            PageLink::from_answer(&answer(
                403,
                r#"{"error":"approval_required","operation":{}}"#
            ))
            .is_none()
        );
        assert!(PageLink::from_answer(&answer(400, r#"{"error":"extension_required"}"#)).is_none());
        for url in ["javascript:alert(1)", "http://a b", "http://a\u{1b}]8;;x"] {
            let body = serde_json::json!({"error": "approval_required", "approval_url": url});
            assert!(
                matches!(
                    PageLink::from_answer(&answer(403, &body.to_string())),
                    Some(Err(_))
                ),
                "{url:?}"
            );
        }
    }
}
