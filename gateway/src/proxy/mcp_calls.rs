//! Approved MCP calls as real servers answer them (issue 27): what the executor records of
//! an answer ([`McpAnswers`]), and cancellations of held calls kept from the server
//! ([`HeldCalls`]).
//!
//! - A cancelled call's error is never the operation's answer: the outcome is unknown.
//! - An `input_required` result is interim: the operation stays claimed for the follow-up
//!   that carries the server's `requestState` back (`proxy::rounds`).
//! - A stream that ends before the response (SEP-1699) is resumed by the gateway itself: a
//!   GET with `Last-Event-ID` and the call's own `Mcp-Session-Id`, until the response comes,
//!   at most [`MAX_RESUMES`] times without one; then the outcome is unknown.
//! - `notifications/cancelled` naming a held call this gateway is answering is not
//!   forwarded (MCP lets a receiver ignore a cancellation it cannot honour): an approved
//!   action is performed to the end, and its answer recorded for the retry.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use crate::ingress::ForwardRequest;
use crate::mcp::{CallAnswer, read_call_answer};
use crate::run::{AnswerReader, Read};
use crate::store::RecordedResponse;
use crate::upstream::forwarded::ProxyContext;
use crate::upstream::{MAX_RECORDED_BODY, UpstreamClient};

/// How many times a stream is resumed without its response before the outcome is unknown.
pub(crate) const MAX_RESUMES: usize = 5;

/// Headers of the POST that a resuming GET does not carry: they describe the POST's body.
const BODY_HEADERS: [&str; 4] = ["content-type", "mcp-method", "mcp-name", "accept"];

/// The MCP endpoint's reader of approved calls' answers.
pub(crate) struct McpAnswers;

#[async_trait::async_trait]
impl AnswerReader for McpAnswers {
    async fn read(
        &self,
        upstream: &UpstreamClient,
        forward: &ForwardRequest,
        mut response: RecordedResponse,
        proxy: &ProxyContext,
    ) -> Read {
        let mut resumes = 0;
        loop {
            let answer = read_call_answer(
                response.status,
                header(&response, "content-type"),
                &response.body,
            );
            match answer {
                CallAnswer::Final => return Read::Final(response),
                CallAnswer::Cancelled => {
                    return Read::Unknown(
                        "the MCP server answered that it cancelled the call mid-way".into(),
                    );
                }
                CallAnswer::InputRequired { request_state } => {
                    return Read::Interim {
                        response,
                        token: request_state,
                    };
                }
                CallAnswer::Unfinished { last_event_id } => {
                    let Some(last_event_id) = last_event_id else {
                        return Read::Unknown(
                            "the MCP server's stream ended without a response, and without an event id to resume from".into(),
                        );
                    };
                    if resumes == MAX_RESUMES {
                        return Read::Unknown(format!(
                            "the MCP server's stream ended without a response, {MAX_RESUMES} times resumed"
                        ));
                    }
                    resumes += 1;
                    match resume(upstream, forward, &last_event_id, proxy).await {
                        Ok(rest) => {
                            if response.body.len() + rest.len() > MAX_RECORDED_BODY {
                                return Read::Unknown(
                                    "the MCP server's resumed stream is too large to record".into(),
                                );
                            }
                            let mut body = BytesMut::from(&response.body[..]);
                            if !body.is_empty() && !body.ends_with(b"\n\n") {
                                body.extend_from_slice(b"\n\n");
                            }
                            body.extend_from_slice(&rest);
                            response.body = body.freeze();
                        }
                        Err(why) => return Read::Unknown(why),
                    }
                }
            }
        }
    }
}

fn header<'a>(response: &'a RecordedResponse, name: &str) -> Option<&'a [u8]> {
    response
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// The rest of a call's stream, from after `last_event_id`: MCP's GET to the endpoint with
/// `Last-Event-ID`, with the call's headers (its `Mcp-Session-Id`, credentials, version).
async fn resume(
    upstream: &UpstreamClient,
    forward: &ForwardRequest,
    last_event_id: &str,
    proxy: &ProxyContext,
) -> Result<Bytes, String> {
    let last = http::HeaderValue::from_str(last_event_id)
        .map_err(|_| "the MCP server's last event id is not a header value".to_owned())?;
    let mut headers: Vec<(http::HeaderName, http::HeaderValue)> = forward
        .headers
        .iter()
        .filter(|(name, _)| !BODY_HEADERS.contains(&name.as_str()) && name != "last-event-id")
        .cloned()
        .collect();
    headers.push((
        http::header::ACCEPT,
        http::HeaderValue::from_static("text/event-stream"),
    ));
    headers.push((http::HeaderName::from_static("last-event-id"), last));
    let request = ForwardRequest {
        method: http::Method::GET,
        path_and_query: forward.path_and_query.clone(),
        headers,
        body: Bytes::new(),
    };
    // The resumed stream may stay open after the response: read until it has one.
    let answered = |body: &[u8]| {
        !matches!(
            read_call_answer(200, Some(b"text/event-stream"), body),
            CallAnswer::Unfinished { .. }
        )
    };
    let answer = upstream
        .send_until(request, proxy, &answered)
        .await
        .map_err(|e| format!("resuming the MCP server's stream failed: {e}"))?;
    let is_stream = header(&answer, "content-type").is_some_and(|ct| {
        ct.get(..17)
            .is_some_and(|t| t.eq_ignore_ascii_case(b"text/event-stream"))
    });
    if answer.status != 200 || !is_stream {
        return Err(format!(
            "the MCP server did not resume its stream (status {})",
            answer.status
        ));
    }
    Ok(answer.body)
}

/// A held call's MCP session (its `Mcp-Session-Id`, if any) and JSON-RPC `id` (as JSON).
type CallKey = (Option<Vec<u8>>, String);

/// The held calls this gateway is answering now, with how many of each.
#[derive(Default)]
pub(crate) struct HeldCalls {
    calls: Mutex<HashMap<CallKey, usize>>,
}

/// A held call being answered; dropping it ends that.
pub(crate) struct HeldCall<'a> {
    calls: &'a HeldCalls,
    key: CallKey,
}

impl HeldCalls {
    /// Note a held call of `session` with this `id` until the guard drops.
    pub(crate) fn hold(&self, session: Option<&[u8]>, id: &Value) -> HeldCall<'_> {
        let key = (session.map(<[u8]>::to_vec), id.to_string());
        if let Ok(mut calls) = self.calls.lock() {
            *calls.entry(key.clone()).or_default() += 1;
        }
        HeldCall { calls: self, key }
    }

    /// Whether every request these cancellations name is a held call of `session` being
    /// answered now (then none is forwarded).
    pub(crate) fn all_held(&self, session: Option<&[u8]>, ids: &[Value]) -> bool {
        let Ok(calls) = self.calls.lock() else {
            return false;
        };
        !ids.is_empty()
            && ids
                .iter()
                .all(|id| calls.contains_key(&(session.map(<[u8]>::to_vec), id.to_string())))
    }
}

impl Drop for HeldCall<'_> {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.calls.calls.lock()
            && let Some(count) = calls.get_mut(&self.key)
        {
            *count -= 1;
            if *count == 0 {
                calls.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cancellation_is_kept_only_while_its_call_is_held() {
        let calls = HeldCalls::default();
        let held = calls.hold(Some(b"s1"), &json!(7));
        assert!(calls.all_held(Some(b"s1"), &[json!(7)]));
        assert!(
            !calls.all_held(Some(b"s2"), &[json!(7)]),
            "another session's"
        );
        assert!(
            !calls.all_held(Some(b"s1"), &[json!("7")]),
            "ids keep their type"
        );
        assert!(!calls.all_held(Some(b"s1"), &[json!(7), json!(8)]));
        assert!(!calls.all_held(Some(b"s1"), &[]));
        let again = calls.hold(Some(b"s1"), &json!(7));
        drop(held);
        assert!(calls.all_held(Some(b"s1"), &[json!(7)]), "still one held");
        drop(again);
        assert!(!calls.all_held(Some(b"s1"), &[json!(7)]));
    }
}
