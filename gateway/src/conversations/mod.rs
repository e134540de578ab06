//! The operations service for Company Agents (spec sections 4, 6 and 7, "Conversations").
//!
//! In a conversation the operation travels in the Company Agent's own message and the
//! approval in the Personal Agent's, so a proxy can't hold the request: the Company Agent
//! asks this service instead, on its own listener (`[conversations]`), with the service
//! token. It runs the proxy's policies, ingress, operation core, executor and store:
//!
//! - `POST /v1/propose`: the request the Company Agent would make (described, and read as
//!   the proxy reads a request), the conversation and the Personal Agent's credentials →
//!   the operation to put in its message, bound to that conversation and Session;
//! - `POST /v1/perform`: the same, with the Personal Agent's message → checks 1-3 (the
//!   revision must be this conversation's), the claim, one execution, the recorded answer.
//!   The message retried with the same ID gets the original answer; a new message with the
//!   same approval performs nothing ("already_performed").
//! - `GET /openapi.json`: the service's OpenAPI description (`openapi.json`, no token).
//!
//! [`seam`] is the only file that calls the executor.

mod describe;
mod messages;
mod seam;
#[cfg(test)]
mod tests;
mod wire;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::clock::now_millis;
use crate::config::{Config, Conversations, ServiceToken};
use crate::identity::{RequestTarget, SessionClaims, VerifyMode};
use crate::listener::{HeldBodies, Reservation, UpstreamSlots};
use crate::metrics::Limit;
use crate::metrics::Metrics;
use crate::policy::LivePolicies;
use crate::protocol::ErrorBody;
use crate::run::{Executor, Runner};

use describe::{Limits, describe};
use messages::Messages;
use seam::{Call, Delivered, Delivering, Seam, To};
// The proxy's test that every interface renders a decision as the wire table says.
#[cfg(test)]
pub(crate) use seam::{Call as DecisionCall, render as render_decision};
use wire::{Answer, Context, ConversationRequest, parse};

/// The service's OpenAPI description, served at `GET /openapi.json`.
pub(crate) const OPENAPI: &str = include_str!("openapi.json");

/// A description's JSON-escaped body, the Personal Agent's message and the rest of the
/// envelope fit in this many bytes per byte of `server.max_body_bytes`, plus [`ENVELOPE`].
const ESCAPING: usize = 4;
const ENVELOPE: usize = 64 * 1024;

/// The service, as pingora runs it on `[conversations] listen`.
pub(crate) struct ConversationsApp {
    token: ServiceToken,
    policies: LivePolicies,
    /// `[session] verify = "off"`: a call needs no `session_request`.
    verify_off: bool,
    seam: Seam,
    messages: Messages,
    max_body_bytes: usize,
    body_read_timeout: Duration,
    /// The proxy's budget of bodies held at once (`max_held_body_bytes`), shared with it.
    held: Arc<HeldBodies>,
    metrics: Arc<Metrics>,
    remember_grace: Duration,
    upstream_host: String,
}

/// What the service shares with the proxy's default route (server.rs makes each once).
pub(crate) struct Shared {
    pub(crate) executor: Arc<Executor>,
    pub(crate) policies: LivePolicies,
    pub(crate) metrics: Arc<Metrics>,
    /// `max_held_body_bytes`: one budget for both listeners.
    pub(crate) held: Arc<HeldBodies>,
    /// `max_upstream_connections`: one count for both listeners.
    pub(crate) upstream_slots: Arc<UpstreamSlots>,
    /// `[session]`'s verifier.
    pub(crate) claims: SessionClaims,
}

impl ConversationsApp {
    pub(crate) fn new(
        settings: &Conversations,
        config: &Config,
        shared: Shared,
    ) -> ConversationsApp {
        let Shared {
            executor,
            policies,
            metrics,
            held,
            upstream_slots,
            claims,
        } = shared;
        let verify_off = matches!(claims.verify, VerifyMode::Off);
        let seam = Seam {
            runner: Runner {
                executor,
                session_claims: claims,
                metrics: Arc::clone(&metrics),
            },
            max_body_bytes: config.server.max_body_bytes,
            upstream_slots,
            slot_wait: config
                .default_route()
                .map(|r| r.upstream.connect_timeout)
                .unwrap_or_default(),
        };
        // The service runs the default route (`load` refuses [conversations] without one).
        let timeouts = config.longest_execution();
        let messages = Messages {
            store: seam.store(),
            // A lookup and the forward, each bounded by the upstream's timeouts, and the
            // store calls around them.
            lease: timeouts * 2 + Duration::from_secs(10),
            instance: format!("{}-c", seam.instance()),
            taken: AtomicU64::new(0),
        };
        ConversationsApp {
            token: settings.token.clone(),
            policies,
            verify_off,
            seam,
            messages,
            max_body_bytes: config.server.max_body_bytes,
            body_read_timeout: config.server.body_read_timeout,
            held,
            metrics,
            remember_grace: config.store.remember_grace,
            upstream_host: config
                .default_route()
                .map(|r| r.upstream.address.clone())
                .unwrap_or_default(),
        }
    }

    /// `POST /v1/propose`.
    async fn propose(&self, body: &[u8]) -> Result<Answer, Answer> {
        let request: ConversationRequest = parse(body)?;
        request.no_message()?;
        let context = request.context();
        let signed_for = self.signed_for(&context)?;
        let described = self.describe(&request.request, &context)?;
        let to = To {
            conversation_id: context.conversation_id,
            signed_for,
            approval: None,
            call: Call::Propose,
        };
        let answer = self.seam.run(described, to, None).await?;
        log("propose", &context, None, &answer);
        Ok(answer)
    }

    /// `POST /v1/perform`.
    async fn perform(&self, body: &[u8]) -> Result<Answer, Answer> {
        let request: ConversationRequest = parse(body)?;
        let message = request.message()?;
        let context = request.context();
        let signed_for = self.signed_for(&context)?;
        message.check()?;
        let described = self.describe(&request.request, &context)?;
        let message_id = message.id.as_str();
        let to = To {
            conversation_id: context.conversation_id,
            signed_for,
            approval: message.approval(),
            call: Call::Perform,
        };
        let mut delivering = Delivering {
            messages: &self.messages,
            message_id,
            delivered: None,
            expires_in: Duration::ZERO,
        };
        let answer = self.seam.run(described, to, Some(&mut delivering)).await?;
        let remember = delivering.expires_in + self.remember_grace;
        match delivering.delivered {
            Some(Delivered::Handled(handling)) => {
                let until = now_millis()
                    .saturating_add(i64::try_from(remember.as_millis()).unwrap_or(i64::MAX));
                self.messages.finish(handling, &answer, until).await;
                log("perform", &context, Some(message_id), &answer);
            }
            Some(Delivered::Retried) => log(
                "perform (a retried message)",
                &context,
                Some(message_id),
                &answer,
            ),
            Some(Delivered::Unproven) | None => log(
                "perform (a retried message, unproven sender)",
                &context,
                Some(message_id),
                &answer,
            ),
        }
        Ok(answer)
    }

    /// The conversation ID, then the Personal Agent's request its Session is signed for
    /// (the front door checks the Session against it, as the proxy does).
    fn signed_for<'a>(&self, context: &Context<'a>) -> Result<RequestTarget<'a>, Answer> {
        context.check()?;
        match context.session_request {
            Some(request) => Ok(RequestTarget {
                method: &request.method,
                path: &request.path,
            }),
            // Nothing to check a Session's request against when the gateway reads claims only.
            None if self.verify_off => Ok(RequestTarget {
                method: "",
                path: "",
            }),
            None => Err(Answer::invalid(
                "session_request: the gateway verifies Sessions, and a Session is signed for one request: give the method and path of the Personal Agent's request that carried poppy_session (docs/sessions.md)",
            )),
        }
    }

    /// Route the description against the policies in force now (a reload swaps them whole).
    fn describe(
        &self,
        description: &wire::Description,
        context: &Context<'_>,
    ) -> Result<describe::Described, Answer> {
        let policies = self.policies.snapshot();
        let limits = Limits {
            policies: &policies,
            upstream_host: &self.upstream_host,
        };
        describe(description, context, &limits)
    }

    /// `Authorization: Bearer <token>`, compared in constant time; never logged.
    fn authorized(&self, session: &ServerSession) -> bool {
        let mut values = session
            .req_header()
            .headers
            .get_all(http::header::AUTHORIZATION)
            .iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return false;
        };
        let value = value.as_bytes();
        let token = match value.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &value[7..],
            _ => return false,
        };
        self.token.matches(token.trim_ascii())
    }

    /// The whole body, within the size limit, the body timeout and the held-bodies budget it
    /// shares with the proxy (the reservation lasts as long as the body is kept).
    async fn read_body(
        &self,
        session: &mut ServerSession,
    ) -> Result<(Vec<u8>, Reservation), Answer> {
        let limit = self.max_body_bytes.saturating_mul(ESCAPING) + ENVELOPE;
        let busy = || {
            self.metrics.limit_hit(Limit::HeldBodies);
            Answer::retry_later(
                1,
                &ErrorBody::new(
                    "gateway_busy",
                    "the gateway holds as many request bodies as it may right now; nothing was performed, send the same call again",
                ),
            )
        };
        let mut reservation = self.held.reserve(0).ok_or_else(busy)?;
        let too_large = || {
            Answer::error(
                413,
                &ErrorBody::new(
                    "body_too_large",
                    format!("a service request has at most {limit} bytes"),
                ),
            )
        };
        let read =
            async {
                let mut body = Vec::new();
                while let Some(chunk) = session.read_request_body().await.map_err(|e| {
                    Answer::invalid(format!("the request body could not be read: {e}"))
                })? {
                    if body.len() + chunk.len() > limit {
                        return Err(too_large());
                    }
                    if !reservation.grow(chunk.len()) {
                        return Err(busy());
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(body)
            };
        match tokio::time::timeout(self.body_read_timeout, read).await {
            Ok(read) => read.map(|body| (body, reservation)),
            Err(_) => Err(Answer::error(
                408,
                &ErrorBody::new("request_timeout", "the request body did not arrive in time"),
            )),
        }
    }
}

#[async_trait]
impl ServeHttp for ConversationsApp {
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        // The head arrived: the header deadline no longer applies (listener/connections.rs).
        crate::listener::head_read();
        let method = session.req_header().method.clone();
        let path = session.req_header().uri.path().to_owned();
        let call = match (method.as_str(), path.as_str()) {
            ("GET", "/openapi.json") => {
                return respond(200, OPENAPI.as_bytes().to_vec(), None);
            }
            ("POST", "/v1/propose") => Call::Propose,
            ("POST", "/v1/perform") => Call::Perform,
            (_, "/v1/propose" | "/v1/perform" | "/openapi.json") => {
                return answer(&Answer::error(
                    405,
                    &ErrorBody::new(
                        "method_not_allowed",
                        "POST /v1/propose and /v1/perform; GET /openapi.json",
                    ),
                ));
            }
            _ => {
                return answer(&Answer::error(
                    404,
                    &ErrorBody::new(
                        "not_found",
                        "POST /v1/propose or /v1/perform (GET /openapi.json describes them)",
                    ),
                ));
            }
        };
        if !self.authorized(session) {
            // The body is left unread: the connection is not reused.
            session.set_keepalive(None);
            let mut response = answer(&Answer::error(
                401,
                &ErrorBody::new(
                    "unauthorized",
                    "send Authorization: Bearer <the service token>",
                ),
            ));
            response.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
        let (body, _held) = match self.read_body(session).await {
            Ok(read) => read,
            Err(refused) => {
                session.set_keepalive(None);
                return answer(&refused);
            }
        };
        // The Company Agent's `traceparent` is the parent of the call's span, which the
        // requests sent upstream for it carry on (telemetry/).
        let span = crate::telemetry::Span::server(&session.req_header().headers, || {
            format!("POST {path}").into()
        });
        span.set("http.request.method", "POST");
        span.set_with("url.path", || path.clone());
        span.set("poppy.route", crate::config::DEFAULT_ROUTE);
        let result = span
            .within(async {
                match call {
                    Call::Propose => self.propose(&body).await,
                    Call::Perform => self.perform(&body).await,
                }
            })
            .await;
        let (Ok(answered) | Err(answered)) = &result;
        span.set("http.response.status_code", i64::from(answered.status));
        if let Some(outcome) = answered.body.get("outcome").and_then(|o| o.as_str()) {
            span.set_with("poppy.outcome", || outcome.to_owned());
        }
        drop(span);
        answer(&result.unwrap_or_else(|refused| {
            tracing::info!(
                call = ?call,
                status = refused.status,
                error = refused.body["error"].as_str().unwrap_or_default(),
                "conversations call refused; nothing performed"
            );
            refused
        }))
    }
}

/// One line per call: the conversation and message IDs and the outcome, never credentials.
fn log(call: &str, context: &Context<'_>, message_id: Option<&str>, answer: &Answer) {
    let outcome = answer
        .body
        .get("outcome")
        .or_else(|| answer.body.get("error"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or(if answer.body.get("operation").is_some() {
            "proposed"
        } else {
            ""
        });
    tracing::info!(
        call,
        conversation_id = context.conversation_id,
        message_id = message_id.unwrap_or(""),
        status = answer.status,
        outcome,
        "conversations"
    );
}

fn answer(answer: &Answer) -> http::Response<Vec<u8>> {
    let mut body = answer.body.to_string().into_bytes();
    body.push(b'\n');
    respond(answer.status, body, answer.retry_after)
}

fn respond(status: u16, body: Vec<u8>, retry_after: Option<u32>) -> http::Response<Vec<u8>> {
    let mut response = http::Response::new(body);
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    if let Some(seconds) = retry_after {
        headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
    }
    let length = response.body().len();
    response.headers_mut().insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(length),
    );
    response
}
