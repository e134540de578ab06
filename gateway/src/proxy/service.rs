//! The pingora service: route each request, then either let it through pingora's proxy path
//! untouched, or hand it to an adapter (HTTP API or MCP) that answers it itself. Each hook
//! says what it does for the gateway; a request's path through them is in ARCHITECTURE.md.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::Error;
use pingora::http::RequestHeader;
use pingora::prelude::HttpPeer;
use pingora::proxy::{ProxyHttp, Session};

use super::edge::{Edge, EdgeCtx};
use super::http_api;
use super::mcp_api::McpEndpoint;
use super::reply::Reply;
use super::routes::{RouteRuntime, Routes};
use super::step::Step;
use super::well_known;
use crate::ingress::admit::{self, Sender};
use crate::ingress::{self, Refusal, RouteMatch};
use crate::listener::{UpstreamSlot, UpstreamSlots};
use crate::metrics::{Metrics, Unheld};
use crate::protocol::ErrorBody;
use crate::telemetry;
use crate::upstream::forwarded::ProxyContext;

/// What one request carries between pingora's phases.
#[derive(Debug, Default)]
pub(crate) struct RequestCtx {
    /// Sent on pingora's proxy path (not answered by the gateway itself).
    passthrough: bool,
    /// Request ID, proxy headers and access-log notes (see edge.rs).
    edge: EdgeCtx,
    /// The route matched when the head was read: the only one this request ever uses.
    route: Picked,
    /// Held while the request may use an upstream connection (see limits.rs).
    upstream_slot: Option<UpstreamSlot>,
    /// The request's server span (none with tracing off), and passthrough's upstream call.
    trace: telemetry::Span,
    passthrough_trace: telemetry::Span,
}

/// What matching the request against the routes gave.
#[derive(Default)]
enum Picked {
    /// No route matches: `404 no_route`, nothing forwarded.
    #[default]
    None,
    Route(Arc<RouteRuntime>),
    /// `[[route]]`s are configured and the target is not one plain path.
    Refused(Refusal),
}

impl std::fmt::Debug for Picked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Picked::None => f.write_str("None"),
            Picked::Route(route) => write!(f, "Route({})", route.name),
            Picked::Refused(refusal) => write!(f, "Refused({refusal:?})"),
        }
    }
}

impl Picked {
    fn name(&self) -> &str {
        match self {
            Picked::Route(route) => &route.name,
            Picked::None | Picked::Refused(_) => "none",
        }
    }
}

/// The gateway's HTTP service.
pub(crate) struct GatewayProxy {
    /// The routes: each an upstream with its own policies, executor and MCP endpoint.
    pub(crate) routes: Routes,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) well_known: Option<serde_json::Value>,
    /// `[protocol] operations_versions`: what poppy.json lists.
    pub(crate) operations_versions: Vec<String>,
    /// Request IDs, proxy headers, access log, passthrough failures.
    pub(crate) edge: Arc<Edge>,
    /// `server.max_upstream_connections`.
    pub(crate) upstream_slots: Arc<UpstreamSlots>,
}

#[async_trait]
impl ProxyHttp for GatewayProxy {
    type CTX = RequestCtx;

    /// A request is either answered in `request_filter` or proxied as is; the context only
    /// remembers which, for metrics.
    fn new_ctx(&self) -> Self::CTX {
        RequestCtx::default()
    }

    /// The head is read: the connection's header deadline ([`crate::listener::LimitedApp`])
    /// no longer applies to this request.
    /// Its request ID and the headers it goes upstream with are settled here (see edge.rs).
    async fn early_request_filter(
        &self,
        session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> pingora::Result<()> {
        crate::listener::head_read();
        ctx.route = match self.routes.pick(session) {
            Ok(Some(route)) => Picked::Route(route),
            Ok(None) => Picked::None,
            Err(refusal) => Picked::Refused(refusal),
        };
        let passthrough = match &ctx.route {
            Picked::Route(route) => route.passthrough.clone(),
            Picked::None | Picked::Refused(_) => crate::config::Passthrough::default(),
        };
        ctx.edge = self.edge.begin(session, &passthrough);
        let header = session.req_header();
        ctx.trace = telemetry::Span::server(&header.headers, || method_name(&header.method));
        ctx.trace
            .set_with("http.request.method", || header.method.to_string());
        ctx.trace
            .set_with("url.path", || header.uri.path().to_owned());
        ctx.trace
            .set_with("poppy.route", || ctx.route.name().to_owned());
        ctx.trace
            .set_with("poppy.request_id", || ctx.edge.request_id().to_owned());
        Ok(())
    }

    /// Classify the request; operations are answered here and never reach the proxy path.
    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> pingora::Result<bool> {
        // pingora lets CONNECT through to this hook only (server.rs sets
        // `allow_connect_method_proxying`) so that HTTP/2's refusal carries the JSON error
        // HTTP/1.1's does: the gateway never tunnels.
        if session.req_header().method == http::Method::CONNECT {
            Reply::error(
                405,
                &ErrorBody::new("method_not_allowed", crate::listener::CONNECT_REFUSED),
            )
            .write(session)
            .await?;
            return Ok(true);
        }
        if let Picked::Route(route) = &ctx.route {
            match self
                .upstream_slots
                .take(route.upstream.connect_timeout())
                .await
            {
                Ok(slot) => ctx.upstream_slot = Some(slot),
                Err(refusal) => {
                    Reply::refusal(&refusal).write(session).await?;
                    return Ok(true);
                }
            }
        }
        // Requests the gateway sends itself for this one (approved forwards, lookups,
        // poppy.json, MCP messages) carry its proxy headers and request ID (forwarded.rs).
        let proxy = ctx.edge.proxy_context();
        // The request's span is current while it is classified and carried out: the store's
        // calls and the requests sent upstream for it find it there (telemetry/).
        let classified = ctx.trace.within(self.classify(session, &ctx.route, &proxy));
        let step = match ctx.trace.sampled_trace_id() {
            // Every log line written for a recorded request carries its trace ID.
            Some(trace_id) => {
                use tracing::Instrument as _;
                classified
                    .instrument(tracing::info_span!("request", trace_id = %trace_id))
                    .await
            }
            None => classified.await,
        };
        match step {
            Step::Continue => {
                ctx.passthrough = true;
                Ok(false)
            }
            Step::Unheld(policy, why) => {
                // Counted here with the operations' outcomes, before it goes upstream.
                self.metrics.unheld(&policy.name, why);
                ctx.passthrough = true;
                Ok(false)
            }
            Step::Respond(reply) => {
                reply.write(session).await?;
                Ok(true)
            }
            Step::Operation(reply, outcome) => {
                // The one place an operation request's outcome is counted and logged. Before
                // the answer is written, not in `logging` (which runs after the write): a
                // client that reads /metrics once it has its answer must see it counted.
                outcome.record(&self.metrics);
                outcome.trace(&ctx.trace);
                ctx.edge
                    .note_operation(outcome.operation_id(), outcome.outcome());
                reply.write(session).await?;
                Ok(true)
            }
            Step::Answered(result) => result.map(|()| true),
            Step::OperationStreamed(result, outcome) => {
                outcome.record(&self.metrics);
                outcome.trace(&ctx.trace);
                ctx.edge
                    .note_operation(outcome.operation_id(), outcome.outcome());
                result.map(|()| true)
            }
        }
    }

    /// Passthrough goes to the upstream of the route matched when the head was read.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> pingora::Result<Box<HttpPeer>> {
        match &ctx.route {
            Picked::Route(route) => Ok(Box::new(route.upstream.peer().clone())),
            // `classify` answers these itself; never forwarded.
            Picked::None | Picked::Refused(_) => Err(Error::explain(
                pingora::ErrorType::InternalError,
                "no route for the request",
            )),
        }
    }

    /// An approval is the gateway's business only: it never reaches the upstream. The proxy
    /// headers and request ID do, and (tracing on) the `traceparent` of the gateway's span
    /// for the upstream call.
    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> pingora::Result<()> {
        upstream_request.remove_header("poppy-approval");
        // Only an approved forward says which operation it performs (the upstream may trust
        // it in its logs or for idempotency) and what was approved: never a client's copy.
        if let Picked::Route(route) = &ctx.route {
            route.upstream.head().strip_own(upstream_request);
        }
        ctx.passthrough_trace = ctx.trace.client_child("poppy.forward");
        ctx.passthrough_trace.set("poppy.passthrough", true);
        if ctx.passthrough_trace.is_on() {
            ctx.passthrough_trace.inject(upstream_request)?;
        } else {
            // Not sampled: the request's own span is the upstream's parent.
            ctx.trace.inject(upstream_request)?;
        }
        self.edge.upstream_request(&ctx.edge, upstream_request)
    }

    /// The upstream's status, for the access log.
    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut pingora::http::ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> pingora::Result<()> {
        let status = upstream_response.status.as_u16();
        ctx.edge.upstream_status(status);
        ctx.passthrough_trace
            .set("http.response.status_code", i64::from(status));
        Ok(())
    }

    /// Passthrough failed: a JSON answer without internal detail (see edge.rs).
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Self::CTX,
    ) -> pingora::proxy::FailToProxy {
        ctx.passthrough_trace.fail("the upstream call failed");
        self.edge.fail_to_proxy(session, e, &ctx.edge).await
    }

    /// A client that goes away before its answer is complete (an MCP client closing its GET
    /// stream, an agent that gave up) is routine: logged at debug, not as pingora's ERROR.
    /// A client that sends what cannot be read (a broken chunked body, an HTTP/2 protocol
    /// error) gets its answer and an INFO line: nothing an operator can fix.
    fn suppress_error_log(&self, _session: &Session, _ctx: &Self::CTX, error: &Error) -> bool {
        if client_went_away(error) {
            tracing::debug!(error = %error, "the client closed its connection before the answer was complete");
            true
        } else if client_sent_garbage(error) {
            tracing::info!(error = %error, "the client's request could not be read");
            true
        } else {
            false
        }
    }

    /// Count proxied requests by the status class that reached the client; write the
    /// request's access-log line.
    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut Self::CTX) {
        let status = session.response_written().map(|r| r.status.as_u16());
        if ctx.passthrough {
            self.metrics.passthrough(status);
        }
        self.metrics.request(
            ctx.route.name(),
            &session.req_header().method,
            status,
            ctx.edge.elapsed(),
            ctx.trace.sampled_ids(),
        );
        let trace_id = ctx.trace.trace_id();
        self.edge.log(
            session,
            &ctx.edge,
            ctx.route.name(),
            ctx.passthrough,
            trace_id.as_deref(),
        );
        // Ended now: the upstream call, then the request.
        ctx.passthrough_trace = telemetry::Span::default();
        if let Some(status) = status {
            ctx.trace
                .set("http.response.status_code", i64::from(status));
            if status >= 500 {
                ctx.trace.fail("the answer was a server error");
            }
        }
        ctx.trace = telemetry::Span::default();
    }
}

/// A server span's name: the method, without an allocation for the usual ones.
fn method_name(method: &http::Method) -> std::borrow::Cow<'static, str> {
    use http::Method;
    let name = match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => return method.to_string().into(),
    };
    name.into()
}

/// Whether a proxy error is only the downstream client closing or resetting its connection.
fn client_went_away(error: &Error) -> bool {
    use pingora::{ErrorSource, ErrorType};
    *error.esource() == ErrorSource::Downstream
        && matches!(
            error.etype(),
            ErrorType::ConnectionClosed | ErrorType::WriteError | ErrorType::ReadError
        )
}

/// Whether a proxy error is the downstream client's request being unreadable.
fn client_sent_garbage(error: &Error) -> bool {
    use pingora::{ErrorSource, ErrorType};
    *error.esource() == ErrorSource::Downstream
        && matches!(
            error.etype(),
            ErrorType::InvalidHTTPHeader
                | ErrorType::H1Error
                | ErrorType::H2Error
                | ErrorType::InvalidH2
                | ErrorType::ReadTimedout
                | ErrorType::Custom(_)
        )
}

impl GatewayProxy {
    /// Route a request: the gateway's own document, a refusal, the proxy path, or an adapter,
    /// all of the one route matched when its head was read.
    async fn classify(&self, session: &mut Session, picked: &Picked, proxy: &ProxyContext) -> Step {
        let route = match picked {
            Picked::Route(route) => route,
            Picked::Refused(refusal) => return Step::Respond(Reply::refusal(refusal)),
            Picked::None => {
                return Step::Respond(Reply::error(
                    404,
                    &ErrorBody::new(
                        "no_route",
                        "no route of this gateway serves this host and path; nothing was forwarded",
                    ),
                ));
            }
        };
        let header = session.req_header();
        if header.uri.path() == well_known::PATH
            && (header.method == http::Method::GET || header.method == http::Method::HEAD)
        {
            let doc = Box::pin(well_known::document(
                &route.upstream,
                &header.headers,
                self.well_known.as_ref(),
                &self.operations_versions,
                proxy,
            ))
            .await;
            return Step::Respond(Reply::json(200, &doc));
        }
        let operations = &route.operations;
        // Only Personal Agent requests (they carry Poppy-Session) can be operations, and the
        // requests `[approval_page.agents]` makes agents'; the others get the header rules
        // every request gets, and go their way.
        let sender = if header.headers.contains_key("poppy-session") {
            Sender::PersonalAgent
        } else {
            let why = match operations.runner.executor.agents() {
                Some(agents) if agents.may_be_agents(&header.headers, header.uri.query()) => None,
                Some(_) => Some(Unheld::CompanyClient),
                None => Some(Unheld::NoSession),
            };
            match why {
                None => Sender::WithoutSession,
                Some(why) => {
                    return match ingress::headers::check_all(&header.headers) {
                        Ok(()) => Step::unheld(
                            ingress::route::unheld_policy(
                                &operations.policies.snapshot(),
                                header.method.as_str(),
                                header.raw_path(),
                            ),
                            why,
                        ),
                        Err(refusal) => Step::Respond(Reply::refusal(&refusal)),
                    };
                }
            }
        };
        let routed = admit::route(
            &operations.policies.snapshot(),
            route.mcp.as_ref().map(McpEndpoint::template),
            header.method.as_str(),
            header.raw_path(),
            &header.headers,
            sender,
        );
        let (target, matched) = match routed {
            Ok(routed) => routed,
            Err(refusal) => return Step::Respond(Reply::refusal(&refusal)),
        };
        // Each kind of request boxes its own future: inline, `request_filter`'s (itself
        // boxed by `async_trait`) was as large as the largest of them, allocated and copied
        // whole for every request and held by every one in flight (BENCHMARKS.md, "In
        // flight, part by part").
        match matched {
            RouteMatch::None => Step::Continue,
            RouteMatch::Mcp => match &route.mcp {
                Some(mcp) => Box::pin(mcp.handle(operations, session, target, proxy)).await,
                None => Step::Continue,
            },
            RouteMatch::Policy(policy, captures) => {
                Box::pin(http_api::handle(
                    operations, session, policy, captures, target, proxy,
                ))
                .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pingora::{ErrorSource, ErrorType};

    #[test]
    fn only_a_client_going_away_is_routine() {
        let closed = Error::new(ErrorType::ConnectionClosed).into_down();
        assert!(client_went_away(&closed));
        let upstream_closed = Error::new(ErrorType::ConnectionClosed).into_up();
        assert!(!client_went_away(&upstream_closed));
        let mut internal = Error::new(ErrorType::InternalError);
        internal.esource = ErrorSource::Downstream;
        assert!(!client_went_away(&internal));
        assert!(!client_sent_garbage(&internal));
        let chunk = Error::new(ErrorType::Custom("InvalidChunk")).into_down();
        assert!(client_sent_garbage(&chunk));
        assert!(!client_sent_garbage(
            &Error::new(ErrorType::Custom("InvalidChunk")).into_up()
        ));
    }
}
