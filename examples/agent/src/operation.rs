//! The operation in a `403 approval_required` answer (spec 3 and 4, "APIs"), or in a
//! Company's conversation message ("Conversations").

use serde_json::Value;

use crate::http::Answer;

#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    pub operation_id: String,
    pub revision: String,
    pub summary: String,
    pub terms: Option<Value>,
    pub expires_at: String,
}

/// IDs of spec 8.2: `A-Z a-z 0-9 _ -`. Checked before they go into a header.
fn is_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 256
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Operation {
    /// `None` unless the answer is `403 approval_required`; an error when its operation is
    /// malformed.
    pub fn from_answer(answer: &Answer) -> Option<Result<Operation, String>> {
        if answer.status != 403 || answer.error_code().as_deref() != Some("approval_required") {
            return None;
        }
        let body = answer.json()?;
        let Some(op) = body.get("operation") else {
            return Some(Err("approval_required without an operation".into()));
        };
        Some(Operation::from_value(op))
    }

    /// An operation as JSON (spec 3): in a `403` body, or in a Company's conversation
    /// message (`extensions.operations.operation`).
    pub fn from_value(op: &Value) -> Result<Operation, String> {
        let field = |name: &str| op.get(name).and_then(Value::as_str).map(str::to_owned);
        let (Some(operation_id), Some(revision), Some(summary), Some(expires_at)) = (
            field("operation_id"),
            field("revision"),
            field("summary"),
            field("expires_at"),
        ) else {
            return Err("the operation lacks operation_id, revision, summary or expires_at".into());
        };
        if !is_id(&operation_id) || !is_id(&revision) {
            return Err(
                "the operation's operation_id or revision has characters outside A-Z a-z 0-9 _ -"
                    .into(),
            );
        }
        Ok(Operation {
            operation_id,
            revision,
            summary,
            terms: op.get("terms").cloned().filter(Value::is_object),
            expires_at,
        })
    }

    /// The `Poppy-Approval` header of this revision (RFC 9651 Dictionary of Strings).
    pub fn approval_header(&self) -> String {
        format!(
            "operation_id=\"{}\", revision=\"{}\"",
            self.operation_id, self.revision
        )
    }
}
