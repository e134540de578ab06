//! `[webhook]`: events for the Company's systems (`crate::events`), off unless the table is
//! there. Signed as Standard Webhooks are: the secret (`whsec_…`) comes from an environment
//! variable or a file, never from gateway.toml itself, and is never printed.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use toml::Spanned;

use super::duration::duration;
use super::error::ConfigError;
use super::named_file::read_ca_file;
use super::secret::{SecretSource, read_secret};
use crate::identity::http::check_document_url;

/// `queue` when not set: events waiting or being retried at most.
pub(super) const DEFAULT_QUEUE: usize = 10_000;
/// The largest `queue` accepted (an event is a few hundred bytes).
const MAX_QUEUE: usize = 1_000_000;
/// `timeout` when not set: the Standard Webhooks spec recommends 15 to 30 s.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
/// `max_attempts` when not set: the first try and nine retries.
pub(super) const DEFAULT_MAX_ATTEMPTS: u32 = 10;
/// `max_age` when not set: an event not delivered within this is given up.
pub(super) const DEFAULT_MAX_AGE: Duration = Duration::from_secs(3600);
/// `retry_backoff` when not set: the first retry's delay (each next one doubles).
pub(super) const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(1);
/// The signing key's size bounds, in bytes (the Standard Webhooks spec: 24 to 64).
const SECRET_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// What an event says happened to an operation (`events = [...]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Held for approval: answered with a new operation to approve.
    Held,
    /// The User approved it on the Company's approval page, signed in.
    ApprovedOnPage,
    /// The User declined it on the page.
    Declined,
    /// Approved, forwarded once, its answer recorded.
    Performed,
    /// Forwarded, but the gateway can't tell whether the upstream acted.
    Unknown,
}

impl EventType {
    pub const ALL: [EventType; 5] = [
        EventType::Held,
        EventType::ApprovedOnPage,
        EventType::Declined,
        EventType::Performed,
        EventType::Unknown,
    ];

    /// The word `events = [...]` and the metrics' `type` label use.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Held => "held",
            EventType::ApprovedOnPage => "approved_on_page",
            EventType::Declined => "declined",
            EventType::Performed => "performed",
            EventType::Unknown => "unknown",
        }
    }

    fn parse(word: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == word)
    }
}

/// `[webhook]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebhookFile {
    /// Where events are POSTed.
    pub url: Spanned<String>,
    /// The name of the environment variable that holds the signing secret.
    pub secret_env: Option<Spanned<String>>,
    /// A file (relative to gateway.toml's folder) that holds the signing secret.
    pub secret_file: Option<Spanned<String>>,
    /// Which events are sent (default: all).
    pub events: Option<Spanned<Vec<Spanned<String>>>>,
    pub queue: Option<Spanned<usize>>,
    pub timeout: Option<Spanned<String>>,
    pub max_attempts: Option<Spanned<u32>>,
    pub max_age: Option<Spanned<String>>,
    pub retry_backoff: Option<Spanned<String>>,
    /// Extra CA certificates (PEM) for an https receiver behind a private CA.
    pub ca_file: Option<Spanned<String>>,
    /// `operation.held` of a request held for the approval page carries the page's link.
    pub page_links: Option<Spanned<bool>>,
}

/// `[webhook]`, validated: plain data.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub url: String,
    pub secret: WebhookSecret,
    /// Where the secret comes from, for `check` (never the secret).
    pub secret_source: String,
    /// The events sent, in `EventType::ALL` order.
    pub events: Vec<EventType>,
    pub queue: usize,
    pub timeout: Duration,
    pub max_attempts: u32,
    pub max_age: Duration,
    pub retry_backoff: Duration,
    /// The PEM bundle `ca_file` named, read at load.
    pub ca_pem: Option<Vec<u8>>,
    /// `page_links`: `operation.held` carries the approval page's link, for the Company to
    /// send it to the User (off by default: the link holds the summary and the terms).
    pub page_links: bool,
}

impl Webhook {
    /// Whether events of `kind` are sent.
    pub fn sends(&self, kind: EventType) -> bool {
        self.events.contains(&kind)
    }
}

/// The HMAC key (the base64 of a `whsec_…` secret, decoded): never printed.
#[derive(Clone)]
pub struct WebhookSecret(Arc<[u8]>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl WebhookSecret {
    /// The key of a Standard Webhooks secret: `whsec_` and base64 (the prefix may be left
    /// out), 24 to 64 bytes once decoded.
    pub fn parse(text: &[u8]) -> Result<WebhookSecret, String> {
        let text = text.strip_prefix(b"whsec_").unwrap_or(text);
        let key = STANDARD
            .decode(text)
            .map_err(|_| "is not `whsec_` followed by base64".to_owned())?;
        if !SECRET_BYTES.contains(&key.len()) {
            return Err(format!(
                "decodes to {} bytes; it must be {} to {}",
                key.len(),
                SECRET_BYTES.start(),
                SECRET_BYTES.end()
            ));
        }
        Ok(WebhookSecret(key.into()))
    }

    /// The key, for signing only.
    pub(crate) fn key(&self) -> &[u8] {
        &self.0
    }
}

/// Validate `[webhook]`; `None` after pushing its errors.
pub(super) fn compile(
    table: &Spanned<WebhookFile>,
    folder: &Path,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<Webhook> {
    let before = errors.len();
    let file = table.get_ref();
    let url = file.url.get_ref().trim();
    if let Err(problem) = check_document_url(url) {
        errors.push(at(file.url.span(), format!("webhook.url: {problem}")));
    }
    let events = match &file.events {
        None => EventType::ALL.to_vec(),
        Some(list) => {
            let mut chosen = Vec::new();
            for word in list.get_ref() {
                match EventType::parse(word.get_ref()) {
                    Some(kind) => chosen.push(kind),
                    None => errors.push(at(
                        word.span(),
                        format!(
                            "webhook.events: `{}` is not one of {}",
                            word.get_ref(),
                            EventType::ALL.map(EventType::as_str).join(", ")
                        ),
                    )),
                }
            }
            if list.get_ref().is_empty() {
                errors.push(at(
                    list.span(),
                    "webhook.events: name at least one event (or remove [webhook] to send none)"
                        .into(),
                ));
            }
            EventType::ALL
                .into_iter()
                .filter(|kind| chosen.contains(kind))
                .collect()
        }
    };
    let queue = file.queue.as_ref().map_or(DEFAULT_QUEUE, |queue| {
        let value = *queue.get_ref();
        if !(1..=MAX_QUEUE).contains(&value) {
            errors.push(at(
                queue.span(),
                format!("webhook.queue: {value} is not between 1 and {MAX_QUEUE}"),
            ));
        }
        value
    });
    let max_attempts = file
        .max_attempts
        .as_ref()
        .map_or(DEFAULT_MAX_ATTEMPTS, |n| {
            let value = *n.get_ref();
            if !(1..=100).contains(&value) {
                errors.push(at(
                    n.span(),
                    format!("webhook.max_attempts: {value} is not between 1 and 100"),
                ));
            }
            value
        });
    let timeout = positive(
        &file.timeout,
        DEFAULT_TIMEOUT,
        "webhook.timeout",
        at,
        errors,
    );
    let max_age = positive(
        &file.max_age,
        DEFAULT_MAX_AGE,
        "webhook.max_age",
        at,
        errors,
    );
    let retry_backoff = positive(
        &file.retry_backoff,
        DEFAULT_RETRY_BACKOFF,
        "webhook.retry_backoff",
        at,
        errors,
    );
    let ca_pem = file
        .ca_file
        .as_ref()
        .and_then(|ca| read_ca_file(ca, "webhook.ca_file", folder, at, errors));
    let (secret, secret_source) = read_secret(
        &SecretSource {
            section: "webhook",
            key: "secret",
            what: "the signing secret (`whsec_` and base64, as Standard Webhooks write it)",
            env: file.secret_env.as_ref(),
            file: file.secret_file.as_ref(),
            table: table.span(),
        },
        folder,
        at,
        errors,
    )?;
    let secret = match WebhookSecret::parse(&secret) {
        Ok(secret) => Some(secret),
        Err(problem) => {
            let span = file
                .secret_env
                .as_ref()
                .or(file.secret_file.as_ref())
                .map_or_else(|| table.span(), Spanned::span);
            errors.push(at(
                span,
                format!("webhook: the signing secret ({secret_source}) {problem}; make one with `echo whsec_$(openssl rand -base64 32)`"),
            ));
            None
        }
    };
    let secret = secret?;
    (errors.len() == before).then(|| Webhook {
        url: url.to_owned(),
        secret,
        secret_source,
        events,
        queue,
        timeout,
        max_attempts,
        max_age,
        retry_backoff,
        ca_pem,
        page_links: file.page_links.as_ref().is_some_and(|v| *v.get_ref()),
    })
}

/// A duration key that must be above zero.
fn positive(
    value: &Option<Spanned<String>>,
    default: Duration,
    key: &str,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Duration {
    let parsed = duration(value, default, key, at, errors);
    if parsed.is_zero()
        && let Some(value) = value
    {
        errors.push(at(value.span(), format!("{key}: must be more than 0")));
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_standard_webhooks_secrets_and_never_print() {
        let secret = WebhookSecret::parse(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(secret.key().len(), 24);
        assert_eq!(format!("{secret:?}"), "WebhookSecret(..)");
        // The prefix may be left out, as the Standard Webhooks libraries allow.
        assert!(WebhookSecret::parse(b"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
        let short = WebhookSecret::parse(b"whsec_c2hvcnQ=").unwrap_err();
        assert!(short.contains("decodes to 5 bytes"), "{short}");
        assert!(WebhookSecret::parse(b"whsec_not base64!").is_err());
    }

    #[test]
    fn event_words_round_trip() {
        for kind in EventType::ALL {
            assert_eq!(EventType::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(EventType::parse("approved"), None);
    }
}
