//! One small response builder: every answer the gateway makes itself is a [`Reply`].

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::protocol::ErrorBody;
use crate::store::RecordedResponse;

/// A complete response the gateway writes itself.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
}

impl Reply {
    /// A JSON error body: `{"error", "detail", ...}`.
    pub fn error(status: u16, body: &ErrorBody) -> Reply {
        Reply {
            status,
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                ("cache-control".into(), b"no-store".to_vec()),
            ],
            body: Bytes::from(body.to_bytes()),
        }
    }

    /// The ingress refused the request; nothing was forwarded.
    pub fn refusal(refusal: &crate::ingress::Refusal) -> Reply {
        let reply = Reply::error(refusal.status, &refusal.to_error_body());
        if refusal.status == 503 {
            // Only a limit refuses with 503 before anything is decided: try again shortly.
            reply.with_header("retry-after", "1")
        } else {
            reply
        }
    }

    /// `503` with `Retry-After`: try the same request again later.
    pub fn retry_later(seconds: u32, body: &ErrorBody) -> Reply {
        Reply::error(503, body).with_header("retry-after", seconds.to_string())
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body: Bytes::from(value.to_string()),
        }
    }

    pub fn with_header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Reply {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// Write the whole response to the downstream session.
    pub async fn write(self, session: &mut Session) -> pingora::Result<()> {
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
