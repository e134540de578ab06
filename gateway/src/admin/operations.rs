//! The operator's API for operations, on the admin listener:
//! - `GET /operations?state=unknown` (or `in_flight`, or `all`: both): the operations claimed
//!   and not finished, from the whole store, oldest lease first;
//! - `GET /operations/{id}`: what the gateway knows (state, owner, timestamps, recorded status);
//! - `POST /operations/{id}/resolve`: settle an operation whose outcome is unknown, as
//!   performed (with the answer to replay) or not performed (the same approval may be sent
//!   again).
//!
//! Both need `Authorization: Bearer <POPPY_GATEWAY_ADMIN_TOKEN>`; without a configured token
//! they are off.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::clock::now_millis;
use crate::protocol::{OperationId, constant_time_eq};
use crate::receipts::{Receipt, ReceiptSink, answer_digest, rfc3339_ms};
use crate::store::{
    OperationRecord, OperationStore, RecordState, RecordedResponse, Resolution, ResolveOutcome,
    Ruling,
};

/// An admin answer: status and JSON body.
pub(crate) type Answer = (u16, Value);

/// Whether the request carries the admin token (compared in constant time).
pub(crate) fn authorized(token: Option<&str>, authorization: Option<&[u8]>) -> Result<(), Answer> {
    let Some(token) = token else {
        return Err((
            403,
            json!({"error": "admin_api_disabled", "detail": "set POPPY_GATEWAY_ADMIN_TOKEN to use the operations API"}),
        ));
    };
    let expected = format!("Bearer {token}");
    let given = authorization.unwrap_or_default();
    if constant_time_eq(given, expected.as_bytes()) {
        Ok(())
    } else {
        Err((
            401,
            json!({"error": "unauthorized", "detail": "send Authorization: Bearer <POPPY_GATEWAY_ADMIN_TOKEN>"}),
        ))
    }
}

fn parse_id(text: &str) -> Result<OperationId, Answer> {
    OperationId::parse(text).ok_or_else(|| (404, json!({"error": "not_found", "detail": format!("`{text}` is not an operation_id of this gateway")})))
}

/// `GET /operations/{id}`.
pub(crate) async fn show(store: &dyn OperationStore, id: &str) -> Answer {
    let id = match parse_id(id) {
        Ok(id) => id,
        Err(answer) => return answer,
    };
    match store.lookup(&id).await {
        Err(e) => (
            503,
            json!({"error": "store_unavailable", "detail": e.to_string()}),
        ),
        Ok(None) => (
            404,
            json!({"error": "not_found", "detail": "no record: never approved, released, or forgotten"}),
        ),
        Ok(Some(record)) => {
            let mut body = json!({
                "operation_id": id.as_str(),
                "policy": record.policy,
                "revision": record.revision,
                "created_at_ms": record.created_at_ms,
            });
            match record.state {
                RecordState::InFlight {
                    owner,
                    lease_until_ms,
                } => {
                    let state = if lease_until_ms < now_millis() {
                        "unknown"
                    } else {
                        "in_flight"
                    };
                    body["state"] = state.into();
                    body["owner"] = owner.into();
                    body["lease_until_ms"] = lease_until_ms.into();
                }
                RecordState::Done(response) => {
                    body["state"] = "performed".into();
                    body["status"] = response.status.into();
                }
            }
            (200, body)
        }
    }
}

/// The most operations one listing returns (`?limit=` may ask for fewer).
const MAX_LISTED: usize = 1000;

/// `GET /operations?state=unknown|in_flight|all[&limit=N]`.
pub(crate) async fn list(store: &dyn OperationStore, query: &str) -> Answer {
    let bad = |detail: String| (400, json!({"error": "bad_request", "detail": detail}));
    let mut wanted = None;
    let mut limit = MAX_LISTED;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("state", state @ ("unknown" | "in_flight" | "all"))) => wanted = Some(state),
            Some(("limit", n)) => match n.parse::<usize>() {
                Ok(n) if (1..=MAX_LISTED).contains(&n) => limit = n,
                _ => return bad(format!("limit must be 1 to {MAX_LISTED}")),
            },
            _ => {
                return bad(format!(
                    "unknown query `{pair}`: use state=unknown, state=in_flight or state=all, and optionally limit=N"
                ));
            }
        }
    }
    let Some(wanted) = wanted else {
        return bad("say which: ?state=unknown, ?state=in_flight or ?state=all".into());
    };
    // Unknown operations have the oldest leases, so they come first: a limit cuts in-flight
    // ones before unknown ones.
    let listed = match store.in_flight(limit).await {
        Ok(listed) => listed,
        Err(e) => {
            return (
                503,
                json!({"error": "store_unavailable", "detail": e.to_string()}),
            );
        }
    };
    let now = now_millis();
    let operations: Vec<Value> = listed
        .into_iter()
        .filter_map(|operation| {
            let RecordState::InFlight {
                owner,
                lease_until_ms,
            } = operation.record.state
            else {
                return None;
            };
            let state = if lease_until_ms < now {
                "unknown"
            } else {
                "in_flight"
            };
            (wanted == "all" || wanted == state).then(|| {
                json!({
                    "operation_id": operation.id.as_str(),
                    "state": state,
                    "policy": operation.record.policy,
                    "revision": operation.record.revision,
                    "created_at_ms": operation.record.created_at_ms,
                    "owner": owner,
                    "lease_until_ms": lease_until_ms,
                })
            })
        })
        .collect();
    (
        200,
        json!({"state": wanted, "count": operations.len(), "operations": operations}),
    )
}

/// The body of `POST /operations/{id}/resolve`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    performed: bool,
    /// The answer retries will get, when performed.
    response: Option<ResponseBody>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResponseBody {
    status: u16,
    #[serde(default)]
    headers: Vec<(String, String)>,
    /// The body as text...
    body: Option<String>,
    /// ...or as base64, for binary answers.
    body_base64: Option<String>,
}

/// Headers the gateway sets itself on every answer it replays, or that describe one hop.
const NOT_RECORDABLE: [&str; 9] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "proxy-authenticate",
];

/// A resolution's headers, checked as strictly as an upstream's answer: each a valid header
/// name and value (no CR, LF or NUL: a value that can't be written would make every replay a
/// `500`), none of those the gateway writes itself.
fn checked_headers(headers: Vec<(String, String)>) -> Result<Vec<(String, Vec<u8>)>, String> {
    headers
        .into_iter()
        .map(|(name, value)| {
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("header name {name:?} is not an HTTP header name"))?;
            if NOT_RECORDABLE.contains(&name.as_str()) {
                return Err(format!(
                    "header {name} is the gateway's to write (or one hop's), not a recorded answer's"
                ));
            }
            http::HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
                format!("the value of header {name} has a character a header can't carry (CR, LF, NUL or another control)")
            })?;
            Ok((name.as_str().to_owned(), value.into_bytes()))
        })
        .collect()
}

/// `POST /operations/{id}/resolve`.
pub(crate) async fn resolve(
    store: &dyn OperationStore,
    id: &str,
    body: &[u8],
    remember_for: Duration,
    receipts: Option<&ReceiptSink>,
) -> Answer {
    let id = match parse_id(id) {
        Ok(id) => id,
        Err(answer) => return answer,
    };
    let bad = |detail: String| (400, json!({"error": "bad_request", "detail": detail}));
    let request: ResolveBody = match crate::protocol::json::from_slice(body) {
        Ok(request) => request,
        Err(e) => {
            return bad(format!(
                "expected {{\"performed\": true, \"response\": {{\"status\": 201, \"headers\": [[\"content-type\", \"application/json\"]], \"body\": \"…\"}}}} or {{\"performed\": false}}: {e}"
            ));
        }
    };
    let resolution = match (request.performed, request.response) {
        (false, None) => Resolution::NotPerformed,
        (false, Some(_)) => return bad("a response only goes with \"performed\": true".into()),
        (true, None) => {
            return bad("\"performed\": true needs the \"response\" retries will get".into());
        }
        (true, Some(response)) => {
            if !(100..=599).contains(&response.status) {
                return bad(format!("status {} is not an HTTP status", response.status));
            }
            let body = match (response.body, response.body_base64) {
                (Some(text), None) => Bytes::from(text),
                (None, Some(encoded)) => match STANDARD.decode(encoded) {
                    Ok(bytes) => Bytes::from(bytes),
                    Err(e) => return bad(format!("body_base64: {e}")),
                },
                (None, None) => Bytes::new(),
                (Some(_), Some(_)) => return bad("give body or body_base64, not both".into()),
            };
            let headers = match checked_headers(response.headers) {
                Ok(headers) => headers,
                Err(detail) => return bad(detail),
            };
            Resolution::Performed(RecordedResponse {
                status: response.status,
                headers,
                body,
            })
        }
    };
    let now = now_millis();
    let remember_until_ms = now.saturating_add(remember_for.as_millis() as i64);
    // What the receipt says about the operation: read before the resolution may delete it.
    let before = match receipts {
        Some(_) => store.lookup(&id).await.ok().flatten(),
        None => None,
    };
    let ruling = Ruling {
        id: &id,
        resolution: &resolution,
        remember_until_ms,
        now_ms: now,
    };
    match store.resolve(&ruling).await {
        Err(e) => (
            503,
            json!({"error": "store_unavailable", "detail": e.to_string()}),
        ),
        Ok(ResolveOutcome::NoRecord) => (
            404,
            json!({"error": "not_found", "detail": "no record to resolve"}),
        ),
        Ok(ResolveOutcome::AlreadyDone) => (
            409,
            json!({"error": "already_performed", "detail": "this operation has a recorded answer; it cannot be changed"}),
        ),
        Ok(ResolveOutcome::LeaseLive) => {
            let lease_until_ms = match store.lookup(&id).await {
                Ok(Some(OperationRecord {
                    state: RecordState::InFlight { lease_until_ms, .. },
                    ..
                })) => Some(lease_until_ms),
                _ => None,
            };
            (
                409,
                json!({
                    "error": "in_flight",
                    "detail": "this operation is being forwarded now (its lease is live): resolving it could let a retry be forwarded a second time. Resolve it once its lease ran out (GET /operations/{id} says unknown)",
                    "lease_until_ms": lease_until_ms,
                }),
            )
        }
        Ok(ResolveOutcome::Resolved) => {
            let performed = matches!(resolution, Resolution::Performed(_));
            tracing::warn!(operation_id = %id, performed, outcome = "resolved", "operation resolved by an operator");
            if let Some(sink) = receipts {
                let (status, digest) = match &resolution {
                    Resolution::Performed(r) => (
                        Some(r.status),
                        Some(answer_digest(r.status, &r.headers, &r.body)),
                    ),
                    Resolution::NotPerformed => (None, None),
                };
                sink.write(&Receipt {
                    kind: if performed {
                        "resolved_performed"
                    } else {
                        "resolved_not_performed"
                    },
                    operation_id: id.to_string(),
                    revision: before
                        .as_ref()
                        .map(|r| r.revision.clone())
                        .unwrap_or_default(),
                    policy: before
                        .as_ref()
                        .map(|r| r.policy.clone())
                        .unwrap_or_default(),
                    summary: None,
                    terms: None,
                    scope: before.as_ref().map(|r| r.scope.clone()).unwrap_or_default(),
                    agent: None,
                    user: None,
                    session: None,
                    account: None,
                    approved_via: None,
                    page_subject: None,
                    identity: None,
                    approved_at: before.as_ref().map(|r| rfc3339_ms(r.created_at_ms)),
                    performed_at: rfc3339_ms(now_millis()),
                    upstream_status: status,
                    answer_sha256: digest,
                });
            }
            (
                200,
                json!({"operation_id": id.as_str(), "resolved": if performed { "performed" } else { "not_performed" }}),
            )
        }
    }
}

/// `GET /operations/{id}/receipt`: every receipt of the operation in the receipts file.
pub(crate) fn receipt(receipts: Option<&ReceiptSink>, id: &str) -> Answer {
    let id = match parse_id(id) {
        Ok(id) => id,
        Err(answer) => return answer,
    };
    let Some(sink) = receipts else {
        return (
            404,
            json!({"error": "not_found", "detail": "receipts are off: set [receipts] path in gateway.toml"}),
        );
    };
    match sink.find(id.as_str()) {
        None => (
            404,
            json!({"error": "not_found", "detail": "receipts go to stdout ([receipts] path = \"-\"): read them where stdout is collected"}),
        ),
        Some(Err(e)) => (
            503,
            json!({"error": "receipts_unavailable", "detail": format!("cannot read the receipts file: {e}")}),
        ),
        Some(Ok(found)) if found.is_empty() => (
            404,
            json!({"error": "not_found", "detail": "no receipt for this operation"}),
        ),
        Some(Ok(found)) => {
            let latest = found.last().cloned().unwrap_or(Value::Null);
            (
                200,
                json!({"operation_id": id.as_str(), "receipt": latest, "receipts": found}),
            )
        }
    }
}
