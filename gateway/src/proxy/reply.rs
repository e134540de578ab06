//! One small response builder: every answer the gateway makes itself is a [`Reply`].

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::ingress::Refusal;
use crate::ingress::admit::Refused;
use crate::operation::{Decision, WireError};
use crate::protocol::{ALREADY_PERFORMED, ErrorBody, OperationId};
use crate::store::RecordedResponse;

/// A complete response the gateway writes itself.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) body: Bytes,
}

impl Reply {
    /// A JSON error body: `{"error", "detail", ...}`.
    pub(crate) fn error(status: u16, body: &ErrorBody) -> Reply {
        Reply::error_bytes(status, body.to_bytes())
    }

    /// An error body already serialized.
    fn error_bytes(status: u16, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                ("cache-control".into(), b"no-store".to_vec()),
            ],
            body: Bytes::from(body),
        }
    }

    /// The front door refused the request (`ingress::admit`); nothing was forwarded.
    pub(crate) fn refused(refused: &Refused) -> Reply {
        let reply = Reply::error(refused.status(), &refused.error_body());
        match refused.retry_after() {
            Some(seconds) => reply.with_header("retry-after", seconds.to_string()),
            None => reply,
        }
    }

    /// The ingress refused the request; nothing was forwarded.
    pub(crate) fn refusal(refusal: &Refusal) -> Reply {
        Reply::refused(&Refused::Request(refusal.clone()))
    }

    pub(crate) fn json(status: u16, value: &serde_json::Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body: Bytes::from(value.to_string()),
        }
    }

    pub(crate) fn with_header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Reply {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// [`Reply::decision`] for an operation held under `proof = "company_page"`: the
    /// operation also carries `approval_url`, the page where the User approves this revision
    /// (and a `Link` header points there).
    pub(crate) fn decision_with_page(decision: Decision, url: &str) -> Reply {
        let Decision::ApprovalRequired { operation, .. } = &decision else {
            return Reply::decision(decision);
        };
        let detail = "this action needs the user's approval of these terms on the company's approval page as well: open operation.approval_url (the user signs in and approves this revision), then retry the same request with a Poppy-Approval header; nothing was performed";
        let body = ErrorBody::new("approval_required", detail)
            .with("operation", operation.to_json(Some(url)));
        Reply::error(403, &body).with_header("link", format!("<{url}>; rel=\"approval\""))
    }

    /// The HTTP answer to a decision (the MCP adapter renders its own, but for a sign-in
    /// challenge): the upstream's answer, or the wire table's error
    /// (`operation::Decision::wire`: status, code, `Retry-After`) in this API's words.
    pub(crate) fn decision(decision: Decision) -> Reply {
        let wire = decision.wire_error();
        let (detail, id) = match decision {
            Decision::Performed(response)
            | Decision::Interim(response)
            | Decision::Released(response)
            | Decision::Replayed(response) => return Reply::from(response),
            Decision::ApprovalRequired {
                operation,
                rejected,
            } => {
                let detail = if rejected {
                    "the approval does not match this request's current terms (or has expired, or is not this Session's to give); ask the user to approve these"
                } else {
                    "this action needs the user's approval of these terms; retry the same request with a Poppy-Approval header"
                };
                // Written straight from the operation: the answer to every mint.
                let body = ErrorBody::approval_required_bytes(&operation, detail);
                return Reply::error_bytes(wire.map_or(500, |w| w.status), body);
            }
            Decision::SignInRequired => {
                let detail =
                    "this operation belongs to an account: sign in to that account to approve it";
                return Reply::wire_error(wire, detail, None)
                    .with_header("www-authenticate", "Bearer");
            }
            Decision::AlreadyPerformed(id) => (ALREADY_PERFORMED, Some(id)),
            // Only an MCP call has follow-ups; rendered as the API would refuse one.
            Decision::NotTheApprover(id) => (Decision::NOT_THE_APPROVER, Some(id)),
            Decision::InProgress(id) => (
                "this operation is being performed; send the same approval again to get its answer",
                Some(id),
            ),
            Decision::Unknown(id) => (
                "the gateway does not know yet whether this operation took effect; it will not be performed again. Retry later, or ask the company",
                Some(id),
            ),
            Decision::UpstreamUnavailable => (
                "the API could not be reached; nothing was performed, send the same approval again",
                None,
            ),
            Decision::ShuttingDown => (
                "this gateway is shutting down and started nothing; send the same approval again",
                None,
            ),
            Decision::StoreUnavailable => (
                "the gateway cannot reach its operation store; nothing was performed, try again",
                None,
            ),
        };
        Reply::wire_error(wire, detail, id.as_ref())
    }

    /// An error of the wire table: its status and code, `detail`, the operation it is about,
    /// and `Retry-After` when it has one. (`None`: the table has no error for the decision,
    /// which no renderer asks of it.)
    fn wire_error(wire: Option<WireError>, detail: &str, id: Option<&OperationId>) -> Reply {
        let Some(wire) = wire else {
            return Reply::error(500, &ErrorBody::new("internal_error", detail));
        };
        let mut body = ErrorBody::new(wire.error, detail);
        if let Some(id) = id {
            body = body.with("operation_id", id.as_str());
        }
        let reply = Reply::error(wire.status, &body);
        match wire.retry_after {
            Some(seconds) => reply.with_header("retry-after", seconds.to_string()),
            None => reply,
        }
    }

    /// Write the whole response to the downstream session.
    pub(crate) async fn write(self, session: &mut Session) -> pingora::Result<()> {
        let mut header = ResponseHeader::build(self.status, Some(self.headers.len() + 1))?;
        for (name, value) in self.headers {
            header.append_header(name, value)?;
        }
        header.insert_header(http::header::CONTENT_LENGTH, self.body.len().to_string())?;
        let head_only = session.req_header().method == http::Method::HEAD;
        session
            .write_response_header(Box::new(header), head_only || self.body.is_empty())
            .await?;
        if !head_only && !self.body.is_empty() {
            session.write_response_body(Some(self.body), true).await?;
        }
        Ok(())
    }
}

impl From<RecordedResponse> for Reply {
    fn from(recorded: RecordedResponse) -> Reply {
        Reply {
            status: recorded.status,
            headers: recorded.headers,
            body: recorded.body,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::conversations::{DecisionCall, render_decision};
    use crate::mcp::{McpVersion, RETRY_META_KEY};
    use crate::operation::{IN_PROGRESS, Wire, every_decision};
    use crate::proxy::mcp_reply::{ReplyTo, render};

    fn header(reply: &Reply, name: &str) -> Option<String> {
        reply
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    /// The three renderers of a decision (the HTTP API, MCP, the conversations service) agree
    /// with the wire table, and so with each other, on every decision: the HTTP API and the
    /// service answer its status, code and `Retry-After`; MCP's tool results carry its code
    /// and retry time (in HTTP 200, which keeps the client's session).
    #[test]
    fn every_interface_renders_a_decision_as_the_table_says() {
        let to = ReplyTo {
            id: Value::from(7),
            session_id: None,
            version: McpVersion::of_request(Some(b"2025-11-25"), None),
        };
        let named = "exc_sAAAAAAAAAAAAAAAABBBBBBBB";
        for decision in every_decision() {
            let http = Reply::decision(decision.clone());
            let service = render_decision(decision.clone(), named, DecisionCall::Perform);
            let mcp = render(decision.clone(), &to);
            let http_body: Value = serde_json::from_slice(&http.body).unwrap_or(Value::Null);
            let mcp_body: Value = serde_json::from_slice(&mcp.body).unwrap_or(Value::Null);
            let wire = match decision.wire() {
                Wire::Error(wire) => wire,
                Wire::Answer => {
                    // The upstream's answer, as it came (the service wraps it in its outcome).
                    let upstream = match &decision {
                        Decision::Performed(r)
                        | Decision::Interim(r)
                        | Decision::Released(r)
                        | Decision::Replayed(r) => r.status,
                        _ => unreachable!(),
                    };
                    assert_eq!(http.status, upstream, "{decision:?}");
                    assert_eq!(mcp.status, upstream, "{decision:?}");
                    if matches!(decision, Decision::Interim(_)) {
                        // The service has no interim answers: in progress.
                        assert_eq!(service.status, IN_PROGRESS.status);
                        assert_eq!(service.body["error"], IN_PROGRESS.error);
                        assert_eq!(service.retry_after, IN_PROGRESS.retry_after);
                    } else {
                        assert_eq!(service.status, 200, "{decision:?}");
                        assert_eq!(service.body["response"]["status"], upstream);
                    }
                    continue;
                }
            };
            let retry_header = wire.retry_after.map(|s| s.to_string());
            assert_eq!(http.status, wire.status, "{decision:?}");
            assert_eq!(http_body["error"], wire.error, "{decision:?}");
            assert_eq!(header(&http, "retry-after"), retry_header, "{decision:?}");
            assert_eq!(service.status, wire.status, "{decision:?}");
            assert_eq!(service.body["error"], wire.error, "{decision:?}");
            assert_eq!(service.retry_after, wire.retry_after, "{decision:?}");
            match &decision {
                // MCP's authorization challenge is HTTP's.
                Decision::SignInRequired => {
                    assert_eq!(mcp.status, wire.status);
                    assert_eq!(
                        header(&mcp, "www-authenticate"),
                        header(&http, "www-authenticate")
                    );
                }
                // Not the model's to act on: a JSON-RPC error, in the MCP answer.
                Decision::NotTheApprover(_) => {
                    assert_eq!(
                        mcp_body["error"]["code"],
                        crate::mcp::codes::INVALID_REQUEST
                    );
                    let message = mcp_body["error"]["message"].as_str().unwrap_or_default();
                    assert!(message.contains(Decision::NOT_THE_APPROVER), "{message}");
                }
                // The operation, as the spec's tool error.
                Decision::ApprovalRequired { .. } => {
                    assert_eq!(mcp.status, 200);
                    assert_eq!(mcp_body["result"]["isError"], true);
                    assert!(mcp_body["result"]["structuredContent"]["operation"].is_object());
                    assert_eq!(http_body["operation"]["operation_id"], named);
                }
                _ => {
                    assert_eq!(mcp.status, 200, "{decision:?}");
                    let advice = &mcp_body["result"]["_meta"][RETRY_META_KEY];
                    assert_eq!(advice["error"], wire.error, "{decision:?}");
                    match wire.retry_after {
                        Some(seconds) => assert_eq!(advice["retry_after"], seconds),
                        None => assert!(advice.get("retry_after").is_none()),
                    }
                }
            }
        }
    }
}
