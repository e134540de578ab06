//! The pingora service: classify each request, then either let it through pingora's proxy path
//! untouched, or run the operation flow and answer it ourselves.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::Error;
use pingora::http::RequestHeader;
use pingora::prelude::HttpPeer;
use pingora::proxy::{ProxyHttp, Session};

use super::approver::{Approver, ApproverError};
use super::edge::{Edge, EdgeCtx};
use super::flow::OperationFlow;
use super::http_api::{self, ApiRequest};
use super::limits::{BodyLimits, read_body};
use super::mcp_api::McpEndpoint;
use super::reply::Reply;
use super::upstream::{ForwardRequest, UpstreamClient, forwarded_headers};
use super::well_known;
use crate::config::SessionClaims;
use crate::ingress::{self, RouteMatch, Target, reading::HttpRequest};
use crate::metrics::{Metrics, Outcome};
use crate::policy::{Captures, LivePolicies, Policy};
use crate::protocol::{ApprovalHeader, ErrorBody, declares_operations_v2};

/// What a request step decided.
pub(super) enum Step {
    /// Let pingora proxy the request as it is.
    Continue,
    /// Answer with this, without proxying.
    Respond(Reply),
    /// Already answered (streamed from the upstream); `Err` if that failed part way.
    Answered(pingora::Result<()>),
}

/// What one request carries between pingora's phases.
#[derive(Debug, Default)]
pub struct RequestCtx {
    /// Sent on pingora's proxy path (not answered by the gateway itself).
    passthrough: bool,
    /// Request ID, proxy headers and access-log notes (see edge.rs).
    edge: EdgeCtx,
}

/// The gateway's HTTP service.
pub struct GatewayProxy {
    /// Swapped whole by a policy reload.
    pub policies: LivePolicies,
    pub flow: Arc<OperationFlow>,
    pub upstream: Arc<UpstreamClient>,
    pub session_claims: SessionClaims,
    /// How bodies of requests to actions are read and held.
    pub body_limits: BodyLimits,
    pub well_known: Option<serde_json::Value>,
    pub metrics: Arc<Metrics>,
    /// `[mcp]`: the MCP endpoint, whose tool calls `[[tool]]` policies hold.
    pub mcp: Option<McpEndpoint>,
    /// Request IDs, proxy headers, access log, passthrough failures.
    pub edge: Arc<Edge>,
}

#[async_trait]
impl ProxyHttp for GatewayProxy {
    type CTX = RequestCtx;

    /// A request is either answered in `request_filter` or proxied as is; the context only
    /// remembers which, for metrics.
    fn new_ctx(&self) -> Self::CTX {
        RequestCtx::default()
    }

    /// The head is read: the connection's header deadline ([`super::limits::LimitedApp`])
    /// no longer applies to this request.
    async fn early_request_filter(
        &self,
        session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> pingora::Result<()> {
        super::limits::head_read();
        ctx.edge = self.edge.begin(session);
        Ok(())
    }

    /// Classify the request; operations are answered here and never reach the proxy path.
    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> pingora::Result<bool> {
        let current = ctx.edge.current();
        match super::forwarded::CURRENT
            .scope(current, self.classify(session))
            .await
        {
            Step::Continue => {
                ctx.passthrough = true;
                Ok(false)
            }
            Step::Respond(reply) => {
                reply.write(session).await?;
                Ok(true)
            }
            Step::Answered(result) => result.map(|()| true),
        }
    }

    /// Passthrough goes to the one configured upstream.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut Self::CTX,
    ) -> pingora::Result<Box<HttpPeer>> {
        Ok(Box::new(self.upstream.peer().clone()))
    }

    /// An approval is the gateway's business only: it never reaches the upstream.
    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> pingora::Result<()> {
        upstream_request.remove_header("poppy-approval");
        self.edge.upstream_request(&ctx.edge, upstream_request)
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut pingora::http::ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> pingora::Result<()> {
        ctx.edge.upstream_status(upstream_response.status.as_u16());
        Ok(())
    }

    /// Passthrough failed: a JSON answer without internal detail (see edge.rs).
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Self::CTX,
    ) -> pingora::proxy::FailToProxy {
        self.edge.fail_to_proxy(session, e, &ctx.edge).await
    }

    /// Count proxied requests by the status class that reached the client.
    /// A client that goes away before its answer is complete (an MCP client closing its GET
    /// stream, an agent that gave up) is routine: logged at debug, not as pingora's ERROR.
    fn suppress_error_log(&self, _session: &Session, _ctx: &Self::CTX, error: &Error) -> bool {
        let routine = client_went_away(error);
        if routine {
            tracing::debug!(error = %error, "the client closed its connection before the answer was complete");
        }
        routine
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut Self::CTX) {
        if ctx.passthrough {
            let status = session.response_written().map(|r| r.status.as_u16());
            self.metrics.passthrough(status);
        }
        self.edge.log(session, &ctx.edge, ctx.passthrough);
    }
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

impl GatewayProxy {
    async fn classify(&self, session: &mut Session) -> Step {
        let header = session.req_header();
        if header.uri.path() == well_known::PATH
            && (header.method == http::Method::GET || header.method == http::Method::HEAD)
        {
            let doc =
                well_known::document(&self.upstream, &header.headers, self.well_known.as_ref())
                    .await;
            return Step::Respond(Reply::json(200, &doc));
        }
        if let Err(refusal) = ingress::headers::check_all(&header.headers) {
            return Step::Respond(Reply::refusal(&refusal));
        }
        // Only Personal Agent requests (they carry Poppy-Session) can be operations.
        if !header.headers.contains_key("poppy-session") {
            return Step::Continue;
        }
        let routed = ingress::check_target(header.raw_path()).and_then(|target| {
            ingress::headers::check_personal_agent(&header.headers)?;
            let route = ingress::match_route(
                &self.policies.snapshot(),
                self.mcp.as_ref().map(McpEndpoint::template),
                header.method.as_str(),
                &target.path,
                ingress::headers::is_form_content_type(&header.headers),
            )?;
            Ok((target, route))
        });
        let (target, route) = match routed {
            Ok(routed) => routed,
            Err(refusal) => return Step::Respond(Reply::refusal(&refusal)),
        };
        let (policy, captures) = match route {
            RouteMatch::None => return Step::Continue,
            RouteMatch::Mcp => match &self.mcp {
                Some(mcp) => return self.mcp_step(session, mcp, target).await,
                None => return Step::Continue,
            },
            RouteMatch::Policy(policy, captures) => (policy, captures),
        };
        let prepared = match self
            .operation_request(session, &policy, captures, target)
            .await
        {
            Ok(request) => {
                // Check 2 comes before the lookup: a performed operation is replayed even
                // while the upstream's records can't be read.
                if let (Some(_), Some(approval)) = (&policy.lookup, &request.approval)
                    && let Some(decision) = self
                        .flow
                        .answer_from_record(&policy, &request.approver, approval)
                        .await
                {
                    return Step::Respond(http_api::render(decision));
                }
                http_api::prepare(request, &self.upstream).await
            }
            Err(refused) => Err(refused),
        };
        match prepared {
            Ok(request) => Step::Respond(http_api::render(self.flow.decide(request).await)),
            Err((reply, outcome)) => {
                self.metrics.operation(&policy.name, outcome);
                tracing::info!(policy = %policy.name, outcome = outcome.as_str(), status = reply.status, "operation request refused before the flow");
                Step::Respond(reply)
            }
        }
    }

    /// The checks that come before the flow, in the spec's order: negotiation, Session, body
    /// size, approval syntax, then the ingress's one strict reading of the request.
    async fn operation_request(
        &self,
        session: &mut Session,
        policy: &Arc<Policy>,
        captures: Captures,
        target: Target,
    ) -> Result<ApiRequest, (Reply, Outcome)> {
        let bad = |status: u16, body: ErrorBody| (Reply::error(status, &body), Outcome::BadRequest);
        let header = session.req_header();
        let headers = &header.headers;

        let declared = declares_operations_v2(
            headers
                .get_all("poppy-extensions")
                .iter()
                .map(|v| v.as_bytes()),
        )
        .map_err(|e| {
            bad(
                400,
                ErrorBody::new("invalid_header", e.to_string()).with("header", "Poppy-Extensions"),
            )
        })?;
        if !declared {
            return Err((
                Reply::error(400, &ErrorBody::new("extension_required", "this action needs the user's approval: declare Poppy-Extensions: \"operations\";v=\"2\"").with("extension", "operations")),
                Outcome::ExtensionRequired,
            ));
        }

        let approver = Approver::for_request(
            headers
                .get("poppy-session")
                .map(|v| v.as_bytes())
                .unwrap_or_default(),
            headers
                .get(http::header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
            &self.session_claims,
        )
        .await
        .map_err(|e: ApproverError| bad(401, ErrorBody::new(e.code(), e.to_string())))?;

        let method = header.method.clone();
        let headers = headers.clone();
        let body = read_body(session, &self.body_limits, &self.metrics)
            .await
            .map_err(|refusal| (Reply::refusal(&refusal), Outcome::BadRequest))?;

        // After the body: a request too large is refused as that, whatever else is wrong.
        let approval = if headers.contains_key("poppy-approval") {
            Some(
                ApprovalHeader::parse(
                    headers
                        .get_all("poppy-approval")
                        .iter()
                        .map(|v| v.as_bytes()),
                )
                .map_err(|e| {
                    bad(
                        400,
                        ErrorBody::new("invalid_header", e.to_string())
                            .with("header", "Poppy-Approval"),
                    )
                })?,
            )
        } else {
            None
        };

        let reading = ingress::read_policy_request(
            policy,
            &captures,
            &HttpRequest {
                method: method.as_str(),
                target: &target,
                headers: &headers,
                body: &body,
            },
        )
        .map_err(|refusal| (Reply::refusal(&refusal), Outcome::BadRequest))?;

        let forward = ForwardRequest {
            method,
            path_and_query: target.path_and_query(),
            headers: forwarded_headers(&headers),
            body,
        };
        Ok(ApiRequest {
            policy: Arc::clone(policy),
            approver,
            approval,
            reading,
            headers,
            forward,
        })
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
    }
}
