//! The JSON bodies the gateway answers with.

use serde::Serialize;
use serde_json::{Map, Value};

/// An operation as the Personal Agent receives it (spec section 3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Operation {
    pub operation_id: String,
    pub revision: String,
    pub summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terms: Option<Value>,
    /// RFC 3339.
    pub expires_at: String,
}

impl Operation {
    /// The operation as JSON; under `proof = "company_page"` (`page_url`) with `approval_url`,
    /// the page where the User approves the same revision, as every interface carries it.
    pub(crate) fn to_json(&self, page_url: Option<&str>) -> Value {
        let mut operation = serde_json::to_value(self).unwrap_or(Value::Null);
        if let (Some(url), Some(members)) = (page_url, operation.as_object_mut()) {
            members.insert("approval_url".into(), Value::from(url));
        }
        operation
    }
}

/// Why an approver's retry gets [`ErrorBody::already_performed`], for every interface.
pub(crate) const ALREADY_PERFORMED: &str = "this operation was already performed, once; its answer is given only to a retry signed by the same delegated key (or with the same credentials) that approved it. Do not ask the user to approve it again: find out how it went from the company, such as from the order";

/// An error body: `{"error": "...", "detail": "...", ...extra members}`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ErrorBody {
    members: Map<String, Value>,
}

impl ErrorBody {
    pub(crate) fn new(error: &str, detail: impl Into<String>) -> ErrorBody {
        let mut members = Map::new();
        members.insert("error".into(), Value::from(error));
        members.insert("detail".into(), Value::from(detail.into()));
        ErrorBody { members }
    }

    /// `403 approval_required` (spec section 4, APIs).
    pub(crate) fn approval_required(operation: &Operation, detail: impl Into<String>) -> ErrorBody {
        let operation = serde_json::to_value(operation).unwrap_or(Value::Null);
        ErrorBody::new("approval_required", detail).with("operation", operation)
    }

    /// The bytes of [`ErrorBody::approval_required`], written straight from the operation
    /// (members in the same, sorted order) without building a map of JSON values first: it is
    /// the answer to every mint.
    pub(crate) fn approval_required_bytes(operation: &Operation, detail: &str) -> Vec<u8> {
        /// [`Operation`]'s members, sorted as a `serde_json::Map` sorts them.
        #[derive(Serialize)]
        struct SortedOperation<'a> {
            expires_at: &'a str,
            operation_id: &'a str,
            revision: &'a str,
            summary: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            terms: Option<&'a Value>,
        }
        #[derive(Serialize)]
        struct Body<'a> {
            detail: &'a str,
            error: &'static str,
            operation: SortedOperation<'a>,
        }
        let body = Body {
            detail,
            error: "approval_required",
            operation: SortedOperation {
                expires_at: &operation.expires_at,
                operation_id: &operation.operation_id,
                revision: &operation.revision,
                summary: &operation.summary,
                terms: operation.terms.as_ref(),
            },
        };
        // Serializing strings and JSON values cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// Add a member, such as `term` or `extension`.
    pub(crate) fn with(mut self, name: &str, value: impl Into<Value>) -> ErrorBody {
        self.members.insert(name.to_owned(), value.into());
        self
    }

    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        // Serializing a Map of JSON values cannot fail.
        serde_json::to_vec(&self.members).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_required_has_the_spec_shape() {
        let op = Operation {
            operation_id: "exc_1".into(),
            revision: "1-a".into(),
            summary: "Do it.".into(),
            terms: None,
            expires_at: "2026-10-08T19:20:00Z".into(),
        };
        let body: Value =
            serde_json::from_slice(&ErrorBody::approval_required(&op, "x").to_bytes()).unwrap();
        assert_eq!(body["error"], "approval_required");
        assert_eq!(body["operation"]["operation_id"], "exc_1");
        assert!(body["operation"].get("terms").is_none());
    }

    #[test]
    fn approval_required_bytes_are_those_of_the_error_body() {
        for terms in [None, Some(serde_json::json!({"b": 1, "a": "x\"y"}))] {
            let op = Operation {
                operation_id: "exc_1".into(),
                revision: "1-a".into(),
                summary: "Do **it**.".into(),
                terms,
                expires_at: "2026-10-08T19:20:00Z".into(),
            };
            assert_eq!(
                ErrorBody::approval_required_bytes(&op, "why"),
                ErrorBody::approval_required(&op, "why").to_bytes()
            );
        }
    }
}
