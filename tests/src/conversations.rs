//! A Company Agent's side of the gateway's operations service (`[conversations]`): what it
//! sends (`propose`, `perform` with a Personal Agent's message) and a record of every answer,
//! checked at the end against the service's own OpenAPI description with openapi-core.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::agent::{OPERATIONS_V2, Request, Session};
use crate::answer::{Answer, Operation};
use crate::gateway::{CONVERSATIONS_TOKEN, Client, Gateway};
use crate::thirdparty;

/// One conversation turn's context and the request the Company Agent would make.
#[derive(Debug, Clone)]
pub struct Turn {
    pub conversation: String,
    pub session: Session,
    /// The request description (`request` of the call).
    pub request: Value,
    /// `Poppy-Extensions` the Personal Agent sent.
    pub extensions: String,
}

impl Turn {
    /// `POST /orders/{order}/exchanges` `{"item_id", "replacement_sku"}` in `conversation`.
    pub fn exchange(
        conversation: &str,
        session: &Session,
        order: &str,
        item: &str,
        sku: &str,
    ) -> Turn {
        Turn {
            conversation: conversation.to_owned(),
            session: session.clone(),
            request: json!({
                "method": "POST",
                "path": format!("/orders/{order}/exchanges"),
                "body": json!({"item_id": item, "replacement_sku": sku}).to_string(),
            }),
            extensions: OPERATIONS_V2.to_owned(),
        }
    }

    /// The same request in another conversation.
    pub fn in_conversation(&self, conversation: &str) -> Turn {
        Turn {
            conversation: conversation.to_owned(),
            ..self.clone()
        }
    }

    /// The same request from another Session.
    pub fn from_session(&self, session: &Session) -> Turn {
        Turn {
            session: session.clone(),
            ..self.clone()
        }
    }

    /// The request's method and path.
    pub fn method_and_path(&self) -> (String, String) {
        let text = |name: &str| self.request[name].as_str().unwrap_or_default().to_owned();
        (text("method"), text("path"))
    }

    /// The Personal Agent's request to the Company Agent that carries its Session: a message
    /// to the conversation (what its Session is signed for, `session_request`).
    pub fn session_request(&self) -> (String, String) {
        (
            "POST".to_owned(),
            format!("/conversations/{}/messages", self.conversation),
        )
    }

    /// A new `poppy_session` for every call, signed for the Personal Agent's request to the
    /// Company Agent, which the call names in `session_request`.
    fn context(&self) -> Value {
        let (method, path) = self.session_request();
        let mut context = json!({
            "conversation_id": self.conversation,
            "poppy_session": self.session.signed_header(&method, &path),
            "poppy_extensions": self.extensions,
            "session_request": {"method": method, "path": path},
            "request": self.request,
        });
        if let Some(authorization) = self.session.authorization() {
            context["authorization"] = authorization.into();
        }
        context
    }

    pub fn propose_body(&self) -> Value {
        self.context()
    }

    pub fn perform_body(&self, message: &Value) -> Value {
        let mut body = self.context();
        body["message"] = message.clone();
        body
    }
}

/// `200 {"outcome": OUTCOME, "operation_id", "response"}`: the body.
pub fn assert_outcome(answer: &Answer, outcome: &str, context: &str) -> Value {
    answer.assert_status(200, context);
    let body = answer.json();
    assert_eq!(
        body["outcome"],
        outcome,
        "{context}:\n{}",
        answer.describe()
    );
    body
}

/// A Personal Agent message approving `operation` (spec 6, "Conversations").
pub fn approval_message(id: &str, operation: &Operation) -> Value {
    json!({
        "id": id,
        "author": {"type": "agent"},
        "text": "The user approved the exchange.",
        "extensions": {"operations": {"approval": {
            "operation_id": operation.operation_id,
            "revision": operation.revision,
        }}},
    })
}

/// A Personal Agent message with text only.
pub fn text_message(id: &str, text: &str) -> Value {
    json!({"id": id, "author": {"type": "agent"}, "text": text})
}

/// One call and its answer, for the OpenAPI check.
#[derive(Debug, Clone)]
struct Exchange {
    method: String,
    path: String,
    request: String,
    request_headers: Vec<(String, String)>,
    /// Whether the call itself is meant to be valid (its schema is checked too).
    check_request: bool,
    answer: Answer,
}

/// The service of one gateway, as a Company Agent calls it. Cloneable (concurrent calls);
/// every clone records into the same log.
#[derive(Clone)]
pub struct Service {
    client: Client,
    seen: Arc<Mutex<Vec<Exchange>>>,
}

impl Service {
    pub fn of(gateway: &Gateway) -> Service {
        Service {
            client: Client::new(&gateway.conversations_url()),
            seen: Arc::default(),
        }
    }

    /// `POST path` with `body` and `Authorization: Bearer token` (none when `None`).
    pub async fn call_with(&self, path: &str, body: &Value, token: Option<&str>) -> Answer {
        let mut request = Request::plain("POST", path).json(body);
        if let Some(token) = token {
            request = request.header("Authorization", &format!("Bearer {token}"));
        }
        let answer = self.client.send(&request).await;
        self.note(
            "POST",
            path,
            &request,
            answer.status == 200 || answer.status >= 403,
            &answer,
        );
        answer
    }

    /// `POST path` with the service token and `text` as the body, byte for byte (JSON that a
    /// `Value` cannot hold: a member twice). Its answer is checked against the description.
    pub async fn call_text(&self, path: &str, text: &str) -> Answer {
        let request = Request::plain("POST", path)
            .body(text.as_bytes().to_vec(), "application/json")
            .header("Authorization", &format!("Bearer {CONVERSATIONS_TOKEN}"));
        let answer = self.client.send(&request).await;
        self.note("POST", path, &request, false, &answer);
        answer
    }

    pub async fn propose(&self, turn: &Turn) -> Answer {
        self.call_with(
            "/v1/propose",
            &turn.propose_body(),
            Some(CONVERSATIONS_TOKEN),
        )
        .await
    }

    /// Propose and return the operation, asserting the answer is one.
    pub async fn proposed(&self, turn: &Turn) -> Operation {
        let answer = self.propose(turn).await;
        answer.assert_status(200, "propose");
        operation_of(&answer.json()["operation"], &answer)
    }

    pub async fn perform(&self, turn: &Turn, message: &Value) -> Answer {
        self.call_with(
            "/v1/perform",
            &turn.perform_body(message),
            Some(CONVERSATIONS_TOKEN),
        )
        .await
    }

    /// `GET path` (no token), recorded.
    pub async fn get(&self, path: &str) -> Answer {
        let request = Request::plain("GET", path);
        let answer = self.client.send(&request).await;
        self.note("GET", path, &request, true, &answer);
        answer
    }

    fn note(
        &self,
        method: &str,
        path: &str,
        request: &Request,
        check_request: bool,
        answer: &Answer,
    ) {
        self.seen
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .push(Exchange {
                method: method.to_owned(),
                path: path.to_owned(),
                request: String::from_utf8_lossy(&request.body).into_owned(),
                request_headers: request.headers.clone(),
                check_request,
                answer: answer.clone(),
            });
    }

    /// Every answer so far is described by the service's OpenAPI document (path, method and
    /// status, body schema, required headers), and every call meant to be valid matches its
    /// request schema: checked with openapi-core, which validates the document first.
    pub fn assert_answers_are_described(&self) {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(!seen.is_empty(), "no answers to check");
        let mut lines = String::new();
        for exchange in &seen {
            let headers: serde_json::Map<String, Value> = exchange
                .answer
                .headers
                .iter()
                .map(|(n, v)| (n.clone(), Value::from(v.as_str())))
                .collect();
            let request_headers: serde_json::Map<String, Value> = exchange
                .request_headers
                .iter()
                .map(|(n, v)| (n.clone(), Value::from(v.as_str())))
                .collect();
            lines.push_str(
                &json!({
                    "method": exchange.method,
                    "path": exchange.path,
                    "request": exchange.request,
                    "request_headers": request_headers,
                    "check_request": exchange.check_request,
                    "status": exchange.answer.status,
                    "headers": headers,
                    "body": exchange.answer.text(),
                })
                .to_string(),
            );
            lines.push('\n');
        }
        let mut child = Command::new(thirdparty::python("openapi"))
            .arg(thirdparty::deps_dir().join("openapi/validate.py"))
            .arg(openapi_path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tests/deps/openapi/validate.py");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(lines.as_bytes())
            .expect("write the exchanges");
        let output = child.wait_with_output().expect("validate.py's output");
        assert!(
            output.status.success(),
            "answers the OpenAPI description does not describe ({} checked):\n{}\n{}",
            seen.len(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The service's OpenAPI description, as kept in the repository.
pub fn openapi_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../gateway/src/conversations/openapi.json")
}

/// A well-formed operation from JSON (spec 3), or a panic naming the answer.
pub fn operation_of(value: &Value, answer: &Answer) -> Operation {
    let text = |name: &str| {
        value
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("operation without `{name}`:\n{}", answer.describe()))
            .to_owned()
    };
    let expires_at = text("expires_at");
    let expires_at_unix = crate::rfc3339::parse(&expires_at)
        .unwrap_or_else(|e| panic!("operation.expires_at: {e}:\n{}", answer.describe()));
    Operation {
        operation_id: text("operation_id"),
        revision: text("revision"),
        summary: text("summary"),
        terms: value.get("terms").cloned().unwrap_or(Value::Null),
        expires_at,
        expires_at_unix,
    }
}
