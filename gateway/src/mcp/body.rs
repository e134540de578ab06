//! A JSON-RPC body as MCP servers send it: one JSON message (`application/json`) or an SSE
//! stream of them (`text/event-stream`). What the gateway changes in recorded and relayed
//! bodies, it changes message by message here, whichever the form.

use serde_json::Value;

use super::sse::{self, EventChange};

/// What becomes of one message of a body.
pub(crate) enum MessageChange {
    Keep,
    /// The message was changed in place.
    Changed,
    /// Left out (an SSE stream's event; a lone JSON message is kept).
    Drop,
}

/// The media type of a `Content-Type` value, lowercase, without parameters.
pub(crate) fn media_type(content_type: Option<&[u8]>) -> Option<String> {
    content_type
        .and_then(|ct| std::str::from_utf8(ct).ok())
        .and_then(|ct| ct.split(';').next())
        .map(|mt| mt.trim().to_ascii_lowercase())
}

/// A JSON-RPC response: `result` or `error`, and no `method`.
pub(crate) fn is_response(message: &Value) -> bool {
    message.as_object().is_some_and(|object| {
        !object.contains_key("method")
            && (object.contains_key("result") || object.contains_key("error"))
    })
}

/// The body with each message passed through `change`, or `None` when nothing changed or
/// the body could not be read (then it is sent as it came). SSE events whose data is not
/// JSON are kept as they are.
pub(crate) fn rewrite_messages(
    body: &[u8],
    content_type: Option<&[u8]>,
    mut change: impl FnMut(&mut Value) -> MessageChange,
) -> Option<Vec<u8>> {
    match media_type(content_type)?.as_str() {
        "application/json" => {
            let mut message: Value = serde_json::from_slice(body).ok()?;
            match change(&mut message) {
                MessageChange::Changed => serde_json::to_vec(&message).ok(),
                MessageChange::Keep | MessageChange::Drop => None,
            }
        }
        "text/event-stream" => {
            let text = std::str::from_utf8(body).ok()?;
            sse::rewrite_events(text, |data| {
                let Ok(mut message) = serde_json::from_str::<Value>(data) else {
                    return EventChange::Keep;
                };
                match change(&mut message) {
                    MessageChange::Keep => EventChange::Keep,
                    MessageChange::Drop => EventChange::Drop,
                    MessageChange::Changed => serde_json::to_string(&message)
                        .map_or(EventChange::Keep, EventChange::Replace),
                }
            })
            .map(String::into_bytes)
        }
        _ => None,
    }
}
