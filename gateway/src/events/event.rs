//! One event and its JSON: what the Company's systems receive (docs/webhook.md, "Schema").
//! Pure. An event names the operation and says what became of it; it never carries a
//! Session, a token, a request or answer body, nor the terms or the summary (which may hold
//! personal data): a receiver that needs them asks the admin API by operation ID.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::EventType;
use crate::operation::rfc3339_ms;

/// The schema's version, in every body (`"version"`); a change that could break a reader
/// gets a new one.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// One event about one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// `evt_…`, the same for the same happening wherever it is sent from (see [`event_id`]).
    pub(crate) id: String,
    pub(crate) kind: EventType,
    /// When it happened, in Unix milliseconds.
    pub(crate) at_ms: i64,
    pub(crate) operation_id: String,
    pub(crate) policy: String,
    /// The `[[route]]`'s name, or `default`.
    pub(crate) route: String,
    /// What the request that raised it came to, as `poppy_operations_total` counts it.
    pub(crate) outcome: String,
    /// For `performed`: the upstream's status.
    pub(crate) upstream_status: Option<u16>,
    /// For the page's decisions: the signed-in subject (the OpenID `sub`) who decided.
    pub(crate) subject: Option<String>,
    /// For `held`, of a request held for the approval page: the page's link, sent only with
    /// `[webhook] page_links` (the queue drops it otherwise).
    pub(crate) approval_url: Option<String>,
}

/// What happened, for [`Event::new`].
pub(crate) struct Happened<'a> {
    pub(crate) kind: EventType,
    pub(crate) operation_id: &'a str,
    pub(crate) policy: &'a str,
    pub(crate) route: &'a str,
    pub(crate) outcome: &'a str,
    pub(crate) at_ms: i64,
}

impl Event {
    /// An event of what happened, with no status or subject.
    pub(crate) fn new(happened: Happened<'_>) -> Event {
        Event {
            id: event_id(happened.kind, happened.operation_id),
            kind: happened.kind,
            at_ms: happened.at_ms,
            operation_id: happened.operation_id.to_owned(),
            policy: happened.policy.to_owned(),
            route: happened.route.to_owned(),
            outcome: happened.outcome.to_owned(),
            upstream_status: None,
            subject: None,
            approval_url: None,
        }
    }

    /// The User decided on the Company's approval page, signed in as `subject`: approved
    /// (`EventType::ApprovedOnPage`) or declined (`EventType::Declined`). For the page to
    /// emit through `Metrics::events` once it decides.
    pub(crate) fn page_decided(
        approved: bool,
        operation_id: &str,
        policy: &str,
        route: &str,
        subject: &str,
        at_ms: i64,
    ) -> Event {
        let kind = if approved {
            EventType::ApprovedOnPage
        } else {
            EventType::Declined
        };
        Event {
            subject: Some(subject.to_owned()),
            ..Event::new(Happened {
                kind,
                operation_id,
                policy,
                route,
                outcome: kind.as_str(),
                at_ms,
            })
        }
    }

    /// The body sent: compact JSON, its members in a fixed order.
    pub(crate) fn body(&self) -> Vec<u8> {
        let body = Body {
            id: &self.id,
            kind: type_name(self.kind),
            timestamp: rfc3339_ms(self.at_ms),
            version: SCHEMA_VERSION,
            data: Data {
                operation_id: &self.operation_id,
                policy: &self.policy,
                route: &self.route,
                outcome: &self.outcome,
                upstream_status: self.upstream_status,
                subject: self.subject.as_deref(),
                approval_url: self.approval_url.as_deref(),
            },
        };
        // Strings and numbers only: serialising cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// The body's `type`: dotted, as the Standard Webhooks spec recommends.
pub(crate) fn type_name(kind: EventType) -> &'static str {
    match kind {
        EventType::Held => "operation.held",
        EventType::ApprovedOnPage => "operation.approved_on_page",
        EventType::Declined => "operation.declined",
        EventType::Performed => "operation.performed",
        EventType::Unknown => "operation.unknown",
    }
}

/// The event's ID: derived from what happened to which operation, so that every replica, a
/// restarted gateway and every retry send the same ID for it, and a receiver that keeps the
/// IDs it has seen (the Standard Webhooks spec's idempotency key) acts once. 128 bits of
/// SHA-256, base64url: no `.` (the signed content is `id.timestamp.body`).
pub(crate) fn event_id(kind: EventType, operation_id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"poppy-webhook-event\0")
        .chain_update(kind.as_str())
        .chain_update(b"\0")
        .chain_update(operation_id)
        .finalize();
    format!("evt_{}", URL_SAFE_NO_PAD.encode(&digest[..16]))
}

#[derive(Serialize)]
struct Body<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    version: u32,
    data: Data<'a>,
}

#[derive(Serialize)]
struct Data<'a> {
    operation_id: &'a str,
    policy: &'a str,
    route: &'a str,
    outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    upstream_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_url: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> Event {
        Event::new(Happened {
            kind: EventType::Held,
            operation_id: "exc_abc",
            policy: "exchange",
            route: "default",
            outcome: "held",
            at_ms: 1_764_864_000_123,
        })
    }

    #[test]
    fn the_body_is_the_documented_schema() {
        let body = String::from_utf8(held().body()).unwrap();
        let id = event_id(EventType::Held, "exc_abc");
        assert_eq!(
            body,
            format!(
                r#"{{"id":"{id}","type":"operation.held","timestamp":"2025-12-04T16:00:00.123Z","version":1,"data":{{"operation_id":"exc_abc","policy":"exchange","route":"default","outcome":"held"}}}}"#
            )
        );
        let mut performed = held();
        performed.kind = EventType::Performed;
        performed.upstream_status = Some(201);
        let value: serde_json::Value = serde_json::from_slice(&performed.body()).unwrap();
        assert_eq!(value["type"], "operation.performed");
        assert_eq!(value["data"]["upstream_status"], 201);
        assert!(value["data"].get("subject").is_none());
    }

    #[test]
    fn page_decisions_name_the_subject() {
        let approved = Event::page_decided(true, "exc_abc", "exchange", "default", "user-42", 0);
        let value: serde_json::Value = serde_json::from_slice(&approved.body()).unwrap();
        assert_eq!(value["type"], "operation.approved_on_page");
        assert_eq!(value["data"]["subject"], "user-42");
        let declined = Event::page_decided(false, "exc_abc", "exchange", "default", "user-42", 0);
        assert_eq!(declined.kind, EventType::Declined);
        assert_ne!(approved.id, declined.id);
    }

    #[test]
    fn ids_are_stable_per_happening_and_dot_free() {
        let id = event_id(EventType::Performed, "exc_abc");
        assert_eq!(id, event_id(EventType::Performed, "exc_abc"));
        assert_ne!(id, event_id(EventType::Held, "exc_abc"));
        assert_ne!(id, event_id(EventType::Performed, "exc_abd"));
        assert!(
            id.starts_with("evt_") && id.len() == 26 && !id.contains('.'),
            "{id}"
        );
    }
}
