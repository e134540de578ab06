//! One small response builder: every answer the gateway makes itself is a [`Reply`].

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::ingress::Refusal;
use crate::ingress::admit::Refused;
use crate::operation::Decision;
use crate::protocol::ErrorBody;
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

    /// `503` with `Retry-After`: try the same request again later.
    pub(crate) fn retry_later(seconds: u32, body: &ErrorBody) -> Reply {
        Reply::error(503, body).with_header("retry-after", seconds.to_string())
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
    /// challenge).
    pub(crate) fn decision(decision: Decision) -> Reply {
        match decision {
            Decision::ApprovalRequired { operation, rejected } => {
                let detail = if rejected {
                    "the approval does not match this request's current terms (or has expired, or is not this Session's to give); ask the user to approve these"
                } else {
                    "this action needs the user's approval of these terms; retry the same request with a Poppy-Approval header"
                };
                Reply::error_bytes(403, ErrorBody::approval_required_bytes(&operation, detail))
            }
            Decision::SignInRequired => Reply::error(401, &ErrorBody::new("sign_in_required", "this operation belongs to an account: sign in to that account to approve it"))
                .with_header("www-authenticate", "Bearer"),
            Decision::Performed(response) | Decision::Interim(response) | Decision::Released(response) | Decision::Replayed(response) => Reply::from(response),
            Decision::AlreadyPerformed(id) => {
                Reply::error(409, &ErrorBody::already_performed(id.as_str()))
            }
            // Only an MCP call has follow-ups; rendered as the API would refuse one.
            Decision::NotTheApprover(id) => Reply::error(403, &ErrorBody::new("not_the_approver", Decision::NOT_THE_APPROVER).with("operation_id", id.as_str())),
            Decision::InProgress(id) => Reply::retry_later(
                1,
                &ErrorBody::new("operation_in_progress", "this operation is being performed; send the same approval again to get its answer").with("operation_id", id.as_str()),
            ),
            Decision::Unknown(id) => Reply::retry_later(
                30,
                &ErrorBody::new(
                    "operation_outcome_unknown",
                    "the gateway does not know yet whether this operation took effect; it will not be performed again. Retry later, or ask the company",
                )
                .with("operation_id", id.as_str()),
            ),
            Decision::UpstreamUnavailable => Reply::retry_later(1, &ErrorBody::new("upstream_unavailable", "the API could not be reached; nothing was performed, send the same approval again")),
            Decision::ShuttingDown => Reply::retry_later(1, &ErrorBody::new("gateway_shutting_down", "this gateway is shutting down and started nothing; send the same approval again")),
            Decision::StoreUnavailable => Reply::retry_later(1, &ErrorBody::new("store_unavailable", "the gateway cannot reach its operation store; nothing was performed, try again")),
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
