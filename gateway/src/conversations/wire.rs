//! The service's wire format: what a Company Agent sends (`openapi.json` describes it) and
//! the answers it gets. Our own envelopes refuse unknown members; the Personal Agent's
//! message is taken as received, and only its ID and `extensions.operations.approval` are
//! read (other members, such as `text`, approve nothing, whatever they say).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::protocol::json::{self as strict, ReadError};
use crate::protocol::{ErrorBody, Operation, is_id};
use crate::store::RecordedResponse;

/// `POST /v1/propose` and `POST /v1/perform`: the conversation, the Personal Agent's
/// credentials and the description; a perform also carries the Personal Agent's message
/// (one struct: the two envelopes are the same but for it, and serde's `flatten` does not go
/// with `deny_unknown_fields`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConversationRequest {
    pub(crate) conversation_id: String,
    pub(crate) poppy_session: String,
    #[serde(default)]
    pub(crate) authorization: Option<String>,
    pub(crate) poppy_extensions: String,
    #[serde(default)]
    pub(crate) session_request: Option<SessionRequest>,
    /// The Personal Agent's message, as received: a perform's ([`Self::message`]); a
    /// propose has none ([`Self::no_message`]).
    #[serde(default)]
    message: Option<Message>,
    pub(crate) request: Description,
}

/// The method and path of the Personal Agent's request to the Company Agent that carried
/// `poppy_session`: what a verified Session must have been signed for (with the Company
/// Agent's public origin, one of `[session] origins`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionRequest {
    pub(crate) method: String,
    pub(crate) path: String,
}

/// The conversation and the Personal Agent's credentials, as its conversation request
/// carried them (the headers' values, verbatim).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    pub(crate) conversation_id: &'a str,
    /// `Poppy-Session`.
    pub(crate) poppy_session: &'a str,
    /// `Authorization`, when the Session is signed in.
    pub(crate) authorization: Option<&'a str>,
    /// `Poppy-Extensions`: operations are returned only when it declares `"operations";v="2"`.
    pub(crate) poppy_extensions: &'a str,
    /// The request that carried them, when the Company Agent says.
    pub(crate) session_request: Option<&'a SessionRequest>,
}

impl ConversationRequest {
    pub(crate) fn context(&self) -> Context<'_> {
        Context {
            conversation_id: &self.conversation_id,
            poppy_session: &self.poppy_session,
            authorization: self.authorization.as_deref(),
            poppy_extensions: &self.poppy_extensions,
            session_request: self.session_request.as_ref(),
        }
    }

    /// A perform's message; refused, in serde's words, when there is none.
    pub(crate) fn message(&self) -> Result<&Message, Answer> {
        self.message
            .as_ref()
            .ok_or_else(|| not_this_endpoints("missing field `message`"))
    }

    /// A propose carries no message; refused, in serde's words, when it does.
    pub(crate) fn no_message(&self) -> Result<(), Answer> {
        match self.message {
            Some(_) => Err(not_this_endpoints("unknown field `message`")),
            None => Ok(()),
        }
    }
}

/// The request the Company Agent would make to the company's API.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Description {
    pub(crate) method: String,
    /// The path as it goes on the request line (percent-encoded, starting with `/`).
    pub(crate) path: String,
    /// The raw query, without `?`.
    #[serde(default)]
    pub(crate) query: Option<String>,
    /// Extra request headers, `[name, value]` pairs, in order.
    #[serde(default)]
    pub(crate) headers: Vec<(String, String)>,
    /// The body, exactly as it is sent (JSON text): what the revision covers, byte for byte.
    #[serde(default)]
    pub(crate) body: Option<String>,
}

/// A Personal Agent's message. Everything but `id` and `extensions.operations.approval`
/// is ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct Message {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) extensions: Option<MessageExtensions>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct MessageExtensions {
    #[serde(default)]
    pub(crate) operations: Option<OperationsContent>,
}

/// `extensions.operations` of a message: `approval` in a Personal Agent's message, read by
/// the front door with the reader the header and MCP use (`ingress::admit`).
#[derive(Debug, Deserialize)]
pub(crate) struct OperationsContent {
    #[serde(default)]
    pub(crate) approval: Option<serde_json::Value>,
}

impl Context<'_> {
    /// The conversation ID has the characters of spec 8.2's IDs.
    pub(crate) fn check(&self) -> Result<(), Answer> {
        if !is_id(self.conversation_id) {
            return Err(Answer::invalid(
                "conversation_id must be 1 to 128 characters of A-Z a-z 0-9 _ -",
            ));
        }
        Ok(())
    }
}

impl Message {
    /// The message ID has the characters of spec 8.2's IDs.
    pub(crate) fn check(&self) -> Result<(), Answer> {
        if !is_id(&self.id) {
            return Err(Answer::invalid(
                "message.id must be 1 to 128 characters of A-Z a-z 0-9 _ -",
            ));
        }
        Ok(())
    }

    /// The message's approval as sent, if it carries one (`null` is none).
    pub(crate) fn approval(&self) -> Option<&serde_json::Value> {
        self.extensions
            .as_ref()
            .and_then(|e| e.operations.as_ref())
            .and_then(|o| o.approval.as_ref())
            .filter(|approval| !approval.is_null())
    }
}

/// Parse a JSON request body into `T`, or a `400 invalid_request` saying why. The whole body
/// must be UTF-8 (RFC 8259), also inside members that are not read, such as a message's
/// `text`: a reader that skips them unchecked would take a call another reader refuses. A
/// member twice in any object (the envelope, the message, its approval) is refused naming it,
/// as on the HTTP path: serde would keep the last, other readers the first.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Answer> {
    if let Err(e) = std::str::from_utf8(body) {
        return Err(Answer::invalid(format!(
            "the request body is not UTF-8 JSON: an invalid byte at offset {}",
            e.valid_up_to()
        )));
    }
    strict::from_slice(body).map_err(|e| match e {
        ReadError::Duplicate(ref path) => Answer::error(
            400,
            &ErrorBody::new("invalid_request", e.to_string()).with("field", path.as_str()),
        ),
        ReadError::Invalid(e) => not_this_endpoints(&e.to_string()),
    })
}

/// A body that is JSON, but not this endpoint's.
fn not_this_endpoints(why: &str) -> Answer {
    Answer::invalid(format!(
        "the request body does not read as this endpoint's JSON: {why}"
    ))
}

/// One answer of the service.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Value,
    /// `Retry-After`, in seconds: the same call may be sent again then.
    pub(crate) retry_after: Option<u32>,
}

impl Answer {
    pub(crate) fn ok(body: Value) -> Answer {
        Answer {
            status: 200,
            body,
            retry_after: None,
        }
    }

    pub(crate) fn error(status: u16, body: &ErrorBody) -> Answer {
        Answer {
            status,
            body: serde_json::from_slice(&body.to_bytes()).unwrap_or(Value::Null),
            retry_after: None,
        }
    }

    pub(crate) fn invalid(detail: impl Into<String>) -> Answer {
        Answer::error(400, &ErrorBody::new("invalid_request", detail))
    }

    /// `503` with `Retry-After`: nothing was performed by this call; send it again later.
    pub(crate) fn retry_later(seconds: u32, body: &ErrorBody) -> Answer {
        Answer {
            retry_after: Some(seconds),
            ..Answer::error(503, body)
        }
    }

    /// The operation to put in the Company Agent's message (`propose`).
    pub(crate) fn proposed(operation: &Operation) -> Answer {
        Answer::ok(json!({ "operation": operation }))
    }

    /// The upstream's answer to a performed operation: performed now, before, or (its answer
    /// proves it) not at all.
    pub(crate) fn outcome(
        outcome: &str,
        operation_id: &str,
        response: &RecordedResponse,
    ) -> Answer {
        Answer::ok(json!({
            "outcome": outcome,
            "operation_id": operation_id,
            "response": recorded(response),
        }))
    }

    /// A request the policy's `needs_approval_when` does not hold: no operation. `response`:
    /// the upstream's answer, for `perform`; none for `propose`, which performs nothing.
    pub(crate) fn not_held(response: Option<&RecordedResponse>) -> Answer {
        match response {
            Some(response) => Answer::ok(json!({
                "outcome": "not_held",
                "response": recorded(response),
            })),
            None => Answer::ok(json!({
                "outcome": "not_held",
                "detail": "this request needs no approval (the policy's needs_approval_when is false for its terms): there is no operation; perform it with a message without an approval",
            })),
        }
    }

    /// How it is kept for a retried message: status and body (never a `Retry-After`, only
    /// final answers are kept).
    /// The answer as the message store keeps it, with `proof`: the digest of what proves who
    /// sent the message (`None` when the gateway verified it).
    pub(crate) fn to_stored(&self, proof: Option<&str>) -> Vec<u8> {
        json!({ "status": self.status, "body": self.body, "proof": proof })
            .to_string()
            .into_bytes()
    }

    /// The `proof` a stored answer was kept with.
    pub(crate) fn stored_proof(bytes: &[u8]) -> Option<String> {
        let value: Value = serde_json::from_slice(bytes).ok()?;
        value.get("proof")?.as_str().map(str::to_owned)
    }

    pub(crate) fn from_stored(bytes: &[u8]) -> Option<Answer> {
        let value: Value = serde_json::from_slice(bytes).ok()?;
        let status = u16::try_from(value.get("status")?.as_u64()?).ok()?;
        Some(Answer {
            status,
            body: value.get("body")?.clone(),
            retry_after: None,
        })
    }
}

/// A recorded upstream answer as JSON: status, headers as `[name, value]` pairs, and the
/// body as text (`body`) or, when it is not UTF-8, as `body_base64`.
fn recorded(response: &RecordedResponse) -> Value {
    let headers: Vec<Value> = response
        .headers
        .iter()
        .map(|(name, value)| json!([name, String::from_utf8_lossy(value)]))
        .collect();
    let mut out = json!({ "status": response.status, "headers": headers });
    match std::str::from_utf8(&response.body) {
        Ok(text) => out["body"] = text.into(),
        Err(_) => out["body_base64"] = STANDARD.encode(&response.body).into(),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_message_approves_only_through_its_extension() {
        let message: Message = serde_json::from_value(json!({
            "id": "msg_1", "text": "I approve, go ahead", "author": {"type": "agent"}
        }))
        .unwrap();
        assert_eq!(message.approval(), None);
        let message: Message = serde_json::from_value(json!({
            "id": "msg_2",
            "extensions": {"operations": {"approval": {"operation_id": "exc_1", "revision": "9-x", "future": 1}}}
        }))
        .unwrap();
        // Read by the front door's one approval reader (protocol/approval.rs).
        assert_eq!(
            message.approval(),
            Some(&json!({"operation_id": "exc_1", "revision": "9-x", "future": 1}))
        );
        let bad: Message = serde_json::from_value(json!({"id": "msg 3"})).unwrap();
        assert_eq!(bad.check().unwrap_err().status, 400);
    }

    #[test]
    fn duplicates_and_unknown_envelope_members_are_refused() {
        let duplicate = br#"{"id": "m1", "id": "m2"}"#;
        assert!(parse::<Message>(duplicate).is_err());
        let unknown = br#"{"conversation_id": "c", "poppy_session": "s", "poppy_extensions": "x",
            "request": {"method": "POST", "path": "/", "bogus": 1}}"#;
        assert!(parse::<ConversationRequest>(unknown).is_err());
        // A propose carries no message, a perform one: each refused in serde's words.
        let propose: ConversationRequest = parse(
            br#"{"conversation_id": "c", "poppy_session": "s", "poppy_extensions": "x",
            "request": {"method": "POST", "path": "/"}}"#,
        )
        .unwrap();
        assert!(propose.no_message().is_ok());
        let missing = propose.message().unwrap_err();
        assert!(
            missing.body["detail"]
                .as_str()
                .unwrap()
                .contains("missing field `message`")
        );
        let perform: ConversationRequest = parse(
            br#"{"conversation_id": "c", "poppy_session": "s", "poppy_extensions": "x",
            "message": {"id": "m1"}, "request": {"method": "POST", "path": "/"}}"#,
        )
        .unwrap();
        assert_eq!(perform.message().unwrap().id, "m1");
        let extra = perform.no_message().unwrap_err();
        assert!(
            extra.body["detail"]
                .as_str()
                .unwrap()
                .contains("unknown field `message`")
        );
        let twice = br#"{"id": "m", "extensions": {"operations": {"approval": {"operation_id": "a", "revision": "r"},
            "approval": {"operation_id": "b", "revision": "r"}}}}"#;
        assert!(
            parse::<Message>(twice).is_err(),
            "two approvals are refused"
        );
    }

    #[test]
    fn stored_answers_round_trip_and_bodies_keep_their_bytes() {
        let response = RecordedResponse {
            status: 201,
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body: Bytes::from_static(b"{\"exchange_id\":\"exg_1\"}"),
        };
        let answer = Answer::outcome("performed", "exc_1", &response);
        assert_eq!(
            Answer::from_stored(&answer.to_stored(Some("p"))),
            Some(answer.clone())
        );
        assert_eq!(
            answer.body["response"]["body"],
            "{\"exchange_id\":\"exg_1\"}"
        );
        let binary = RecordedResponse {
            body: Bytes::from_static(&[0xff, 0x00]),
            ..response
        };
        assert_eq!(
            Answer::outcome("performed", "exc_1", &binary).body["response"]["body_base64"],
            "/wA="
        );
    }
}
