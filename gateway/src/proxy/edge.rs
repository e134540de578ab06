//! The service's hooks for what a proxy in front of real traffic does besides operations:
//! request IDs, proxy headers, the access log, and the gateway's own answers when
//! passthrough fails (JSON, with no internal address or library error text in them).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use pingora::http::RequestHeader;
use pingora::proxy::{FailToProxy, Session};
use pingora::{Error, ErrorSource, ErrorType};

use super::access_log::{AccessLogger, Entry};
use super::reply::Reply;
use crate::config::{Passthrough, ProxyHeaders};
use crate::metrics::Outcome;
use crate::protocol::ErrorBody;
use crate::upstream::forwarded::{self, ClientFacts, Notes, ProxyContext, UpstreamHeaders};

/// Shared by all requests.
pub(crate) struct Edge {
    pub(crate) proxy_headers: ProxyHeaders,
    pub(crate) access_log: Option<AccessLogger>,
}

/// One request's part of the context.
#[derive(Debug)]
pub(crate) struct EdgeCtx {
    request_id: String,
    started: Instant,
    facts: Option<ClientFacts>,
    headers: Arc<UpstreamHeaders>,
    notes: Arc<Mutex<Notes>>,
}

impl Default for EdgeCtx {
    fn default() -> EdgeCtx {
        EdgeCtx {
            request_id: String::new(),
            started: Instant::now(),
            facts: None,
            headers: Arc::default(),
            notes: Arc::default(),
        }
    }
}

impl EdgeCtx {
    /// Since the request arrived.
    pub(super) fn elapsed(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// The request's ID (`X-Request-Id`, kept or made).
    pub(super) fn request_id(&self) -> &str {
        &self.request_id
    }

    /// What the requests the gateway sends itself for this one carry (see `forwarded.rs`).
    pub(super) fn proxy_context(&self) -> ProxyContext {
        ProxyContext::new(Arc::clone(&self.headers), Arc::clone(&self.notes))
    }

    /// The operation a request was about (empty: none named), and what became of it.
    pub(super) fn note_operation(&self, operation_id: &str, outcome: Outcome) {
        if let Ok(mut notes) = self.notes.lock() {
            if !operation_id.is_empty() {
                notes.operation_id = Some(operation_id.to_owned());
            }
            notes.outcome = Some(outcome.as_str());
        }
    }

    pub(super) fn upstream_status(&self, status: u16) {
        if let Ok(mut notes) = self.notes.lock() {
            notes.upstream_status = Some(status);
        }
    }
}

impl Edge {
    /// The request's head is read: its ID, its client, and the headers it goes upstream with.
    /// `passthrough`: the settings of the request's route (none when it matches no route).
    pub(super) fn begin(&self, session: &Session, passthrough: &Passthrough) -> EdgeCtx {
        let facts = ClientFacts::of(session);
        let incoming = &session.req_header().headers;
        let request_id = forwarded::request_id(incoming);
        let headers = UpstreamHeaders::new(
            &facts,
            incoming,
            &request_id,
            &self.proxy_headers,
            passthrough,
        );
        EdgeCtx {
            request_id,
            started: Instant::now(),
            facts: Some(facts),
            headers: Arc::new(headers),
            notes: Arc::default(),
        }
    }

    pub(super) fn upstream_request(
        &self,
        ctx: &EdgeCtx,
        request: &mut RequestHeader,
    ) -> pingora::Result<()> {
        ctx.headers.apply(request)
    }

    pub(super) fn log(
        &self,
        session: &Session,
        ctx: &EdgeCtx,
        route: &str,
        passthrough: bool,
        trace_id: Option<&str>,
    ) {
        let Some(logger) = &self.access_log else {
            return;
        };
        let notes = ctx.notes.lock().map(|n| Notes {
            operation_id: n.operation_id.clone(),
            outcome: n.outcome,
            upstream_status: n.upstream_status,
        });
        let mut notes = notes.unwrap_or_default();
        if notes.outcome.is_some() && notes.operation_id.is_none() {
            // Refused before the executor: the approval, if any, names the operation.
            notes.operation_id = crate::protocol::ApprovalHeader::parse(
                session
                    .req_header()
                    .headers
                    .get_all("poppy-approval")
                    .iter()
                    .map(|v| v.as_bytes()),
            )
            .ok()
            .map(|a| a.operation_id);
        }
        logger.log(
            session,
            &Entry {
                request_id: &ctx.request_id,
                started: ctx.started,
                facts: ctx.facts.as_ref(),
                route,
                notes: &notes,
                passthrough,
                trace_id,
            },
        );
    }

    /// Passthrough failed: the client gets a JSON answer saying what kind of failure, the log
    /// gets pingora's whole error (with the upstream's address).
    pub(super) async fn fail_to_proxy(
        &self,
        session: &mut Session,
        error: &Error,
        ctx: &EdgeCtx,
    ) -> FailToProxy {
        let (status, body) = public_error(error);
        if status >= 500 {
            tracing::warn!(request_id = %ctx.request_id, error = %error, status, "passthrough failed");
        }
        let written = session.response_written().is_some();
        if status > 0 && !written {
            let reply = Reply::error(status, &body);
            if let Err(e) = reply.write(session).await {
                tracing::debug!(error = %e, "the error answer could not be written");
            }
        }
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }
}

/// What a client is told about a failed passthrough: a status and a fixed text per kind of
/// failure. Never the error's own text: it names addresses and libraries.
fn public_error(error: &Error) -> (u16, ErrorBody) {
    use ErrorType::*;
    let timeout = |what: &str| {
        (
            504,
            ErrorBody::new(
                "upstream_timeout",
                format!("the API did not {what} in time"),
            ),
        )
    };
    match error.etype() {
        HTTPStatus(code) if (400..600).contains(code) => (
            *code,
            ErrorBody::new("bad_request", "the request could not be handled"),
        ),
        ConnectTimedout | TLSHandshakeTimedout => timeout("accept a connection"),
        ReadTimedout => timeout("answer"),
        WriteTimedout => timeout("take the request"),
        _ => match error.esource() {
            ErrorSource::Upstream => (
                502,
                ErrorBody::new(
                    "upstream_unavailable",
                    "the API could not be reached or gave no valid answer",
                ),
            ),
            ErrorSource::Downstream => match error.etype() {
                WriteError | ReadError | ConnectionClosed => (0, ErrorBody::new("client_gone", "")),
                _ => (
                    400,
                    ErrorBody::new("bad_request", "the request could not be read"),
                ),
            },
            ErrorSource::Internal | ErrorSource::Unset => (
                500,
                ErrorBody::new("internal_error", "the gateway could not handle the request"),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(body: &ErrorBody) -> String {
        String::from_utf8_lossy(&body.to_bytes()).into_owned()
    }

    #[test]
    fn public_errors_say_the_kind_and_nothing_else() {
        let connect = Error::explain(ErrorType::ConnectTimedout, "10.0.0.5:8080 timed out");
        let (status, body) = public_error(&connect.into_up());
        assert_eq!(status, 504);
        assert!(!text(&body).contains("10.0.0.5"), "{}", text(&body));
        let refused = Error::explain(ErrorType::ConnectRefused, "10.0.0.5:8080 refused");
        let (status, body) = public_error(&refused.into_up());
        assert_eq!(status, 502);
        assert!(!text(&body).contains("10.0.0.5"), "{}", text(&body));
        let read = Error::new(ErrorType::ReadTimedout).into_up();
        assert_eq!(public_error(&read).0, 504);
    }
}
