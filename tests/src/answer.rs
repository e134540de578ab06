//! What came back, with the assertions every test makes on it.

use serde_json::Value;

use crate::rfc3339;

/// An HTTP response, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    /// What was sent, for messages (`POST /orders/o1/exchanges [Poppy-Approval: …]`).
    pub request: String,
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The characters of operation IDs and revisions: `A-Z a-z 0-9 _ -`.
pub fn is_id(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `REQUEST → STATUS, headers, body` (body cut at 2000 characters).
    pub fn describe(&self) -> String {
        let mut body = self.text();
        if body.len() > 2000 {
            let mut cut = 2000;
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            body.truncate(cut);
            body.push('…');
        }
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}"))
            .collect();
        format!(
            "{} → {}\n  headers: {}\n  body: {body}",
            self.request,
            self.status,
            headers.join("; ")
        )
    }

    /// The body as JSON; panics (showing the answer) when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("expected a JSON body ({e}):\n{}", self.describe()))
    }

    /// `error` of a JSON body, if any.
    pub fn error_code(&self) -> Option<String> {
        serde_json::from_slice::<Value>(&self.body)
            .ok()?
            .get("error")?
            .as_str()
            .map(str::to_owned)
    }

    pub fn assert_status(&self, status: u16, context: &str) -> &Answer {
        assert_eq!(
            self.status,
            status,
            "{context}: expected status {status}, got:\n{}",
            self.describe()
        );
        self
    }

    /// Assert an error answer: `status`, a JSON content type, `error == code` and a non-empty
    /// `detail` string. Returns the body.
    pub fn assert_error(&self, status: u16, code: &str, context: &str) -> Value {
        self.assert_status(status, context);
        let content_type = self.header("content-type").unwrap_or_default();
        assert!(
            content_type.starts_with("application/json"),
            "{context}: an error body must be application/json, got content-type \
             {content_type:?}:\n{}",
            self.describe()
        );
        let body = self.json();
        assert_eq!(
            body.get("error").and_then(Value::as_str),
            Some(code),
            "{context}: expected error {code:?}:\n{}",
            self.describe()
        );
        if code != "approval_required" {
            let detail = body.get("detail").and_then(Value::as_str).unwrap_or("");
            assert!(
                !detail.trim().is_empty(),
                "{context}: error {code:?} needs a readable `detail` string:\n{}",
                self.describe()
            );
        }
        body
    }

    /// Whether this is `403 approval_required`.
    pub fn is_approval_required(&self) -> bool {
        self.status == 403 && self.error_code().as_deref() == Some("approval_required")
    }

    /// Assert `403 {"error":"approval_required","operation":{…}}` with a well-formed operation,
    /// and return the operation.
    pub fn operation(&self) -> Operation {
        self.operation_in("the request")
    }

    /// [`Answer::operation`] with a context for the message.
    pub fn operation_in(&self, context: &str) -> Operation {
        let body = self.assert_error(403, "approval_required", context);
        assert!(
            self.header("www-authenticate").is_none(),
            "{context}: approval_required is not an authorization error; it must not send \
             WWW-Authenticate:\n{}",
            self.describe()
        );
        let Some(operation) = body.get("operation") else {
            panic!(
                "{context}: approval_required without `operation`:\n{}",
                self.describe()
            );
        };
        let field = |name: &str| -> String {
            operation
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_else(|| {
                    panic!(
                        "{context}: operation.{name} must be a string:\n{}",
                        self.describe()
                    )
                })
                .to_owned()
        };
        let operation_id = field("operation_id");
        let revision = field("revision");
        let summary = field("summary");
        let expires_at = field("expires_at");
        assert!(
            is_id(&operation_id),
            "{context}: operation_id {operation_id:?} has characters outside A-Z a-z 0-9 _ -"
        );
        assert!(
            is_id(&revision),
            "{context}: revision {revision:?} has characters outside A-Z a-z 0-9 _ -"
        );
        assert!(
            !summary.trim().is_empty(),
            "{context}: the summary is empty"
        );
        let expires_at_unix = rfc3339::parse(&expires_at)
            .unwrap_or_else(|e| panic!("{context}: operation.expires_at: {e}"));
        let terms = operation.get("terms").cloned().unwrap_or(Value::Null);
        assert!(
            terms.is_object(),
            "{context}: operation.terms must be the JSON object of the terms:\n{}",
            self.describe()
        );
        Operation {
            operation_id,
            revision,
            summary,
            terms,
            expires_at,
            expires_at_unix,
        }
    }

    /// Assert this is the counting upstream's own answer to execution `execution` of
    /// `method path`: its status, body, content type and `x-upstream` header.
    pub fn assert_upstream_answer(&self, execution: usize, method: &str, path: &str) -> Value {
        let status = if method == "POST" { 201 } else { 200 };
        self.assert_status(status, "the upstream's answer");
        let body = self.json();
        assert_eq!(
            body,
            serde_json::json!({"execution": execution, "method": method, "path": path}),
            "expected the upstream's answer to execution {execution}:\n{}",
            self.describe()
        );
        assert_eq!(
            self.header("x-upstream"),
            Some("counting"),
            "the upstream's `x-upstream` header is missing:\n{}",
            self.describe()
        );
        assert!(
            self.header("content-type")
                .is_some_and(|ct| ct.starts_with("application/json")),
            "the upstream's content type is missing:\n{}",
            self.describe()
        );
        body
    }

    /// Assert this answer replays `first`: same status, byte-identical body, same content type
    /// and `x-upstream` header.
    pub fn assert_replay_of(&self, first: &Answer, context: &str) {
        assert_eq!(
            (self.status, &self.body),
            (first.status, &first.body),
            "{context}: expected a replay of the first answer\n  first: {}\n  now: {}",
            first.describe(),
            self.describe()
        );
        for name in ["content-type", "x-upstream"] {
            assert_eq!(
                self.header(name),
                first.header(name),
                "{context}: the replay's {name} differs\n  first: {}\n  now: {}",
                first.describe(),
                self.describe()
            );
        }
    }

    /// Assert `503` with `Retry-After` and `error == code`.
    pub fn assert_unavailable(&self, code: &str, context: &str) {
        self.assert_error(503, code, context);
        assert!(
            self.header("retry-after")
                .is_some_and(|v| !v.trim().is_empty()),
            "{context}: a 503 must carry Retry-After:\n{}",
            self.describe()
        );
    }
}

/// An operation from an `approval_required` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    pub operation_id: String,
    pub revision: String,
    pub summary: String,
    pub terms: Value,
    pub expires_at: String,
    pub expires_at_unix: f64,
}

impl Operation {
    /// `Poppy-Approval` for this revision.
    pub fn approval_header(&self) -> String {
        crate::agent::approval_header(&self.operation_id, &self.revision)
    }

    /// The same operation named with another revision (for tampering tests).
    pub fn with_revision(&self, revision: &str) -> Operation {
        Operation {
            revision: revision.to_owned(),
            ..self.clone()
        }
    }

    pub fn assert_prefix(&self, prefix: &str) {
        assert!(
            self.operation_id.starts_with(&format!("{prefix}_")),
            "operation_id {:?} should start with {prefix}_",
            self.operation_id
        );
    }
}

/// `revision` with one character changed (still ID characters).
pub fn tamper(revision: &str) -> String {
    let mut chars: Vec<char> = revision.chars().collect();
    let last = chars.len() - 1;
    chars[last] = if chars[last] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}
