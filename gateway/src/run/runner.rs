//! The one runner: a request for an operation, on any interface (the HTTP API, the MCP
//! endpoint, the conversations service), goes front door → executor here, in one order.
//!
//! The front door's steps are pure (`ingress::admit`); this makes them in the spec's order
//! with the two that wait between them: who may approve (the Session and token, which may
//! fetch keys or ask the authorization server) and the body (read off the wire only once
//! the Personal Agent is known, and refused as too large whatever else is wrong). Then the
//! executor carries the request through (its record before a lookup, the lookup, checks 1-3,
//! the claim, one forward). The interface renders what comes back in its own wire form.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;

use super::Runner;
use super::executor::{Executed, Executor, Operated};
use super::outcome::RequestOutcome;
use super::page_offer::PageLink;
use super::reading::Reading;
use crate::identity::{Approver, ApproverError, ByToken, RequestTarget, SessionClaims};
use crate::ingress::Refusal;
use crate::ingress::admit::{self, Action, Agents, ApprovalSource, Refused, Unsigned, Via};
use crate::ingress::credentials::{self, Token};
use crate::metrics::{Metrics, Outcome};
use crate::operation::Decision;
use crate::policy::Policy;

/// A request for an operation as its interface read it off the wire, before any check.
pub(crate) struct Arrival<'a> {
    /// The request's headers (a conversation's: the description's, with the Personal
    /// Agent's credentials and declaration).
    pub(crate) headers: HeaderMap,
    /// The request a verified Session must be signed for.
    pub(crate) signed_for: RequestTarget<'a>,
    pub(crate) action: Action,
    pub(crate) approval: ApprovalSource<'a>,
}

/// What a request for an operation came to. `A`: what the interface answered itself between
/// the front door and the executor ([`Between`]).
pub(crate) enum Ran<A = Infallible> {
    /// The executor decided, or the policy's lookup refused.
    Operated(Operated),
    /// A request without the extension (`Via::Page`) held for the User's approval on the
    /// Company's page: each interface shows the link in its own wire form.
    Page(PageLink, RequestOutcome),
    /// The front door refused: nothing decided, nothing forwarded.
    Refused(Refused, Outcome),
    /// A request without a `Poppy-Session` that `[approval_page.agents]` does not make an
    /// agent's (a bearer token of a client it does not list): the interface passes it on as
    /// it would without the rule, its body unread.
    NotAnAgent,
    /// The interface answered it once admitted, before the executor: nothing decided.
    Answered(A),
}

/// What an interface does with a request the front door let in, before the executor: the
/// conversations service binds the conversation into what the revision covers, answers a
/// retried message from its record and waits for an upstream slot. The HTTP API and MCP do
/// nothing there ([`Straight`]).
pub(crate) trait Between: Send {
    /// The interface's own answer.
    type Answer: Send;
    /// `Err`: answered with this; the executor never sees the request.
    fn admitted(
        &mut self,
        admitted: &mut admit::Admitted,
    ) -> impl Future<Output = Result<(), Self::Answer>> + Send;
}

/// Nothing between the front door and the executor.
pub(crate) struct Straight;

impl Between for Straight {
    type Answer = Infallible;

    async fn admitted(&mut self, _: &mut admit::Admitted) -> Result<(), Infallible> {
        Ok(())
    }
}

impl Runner {
    /// The one entry, for every interface: `arrival` through the front door, `between`, and
    /// the executor. `body`: how the interface reads the body, awaited only once the approver
    /// is known; `reading`: how the answer is read (an MCP call's may be interim or no
    /// answer) and the request's proxy headers, for what is sent upstream for it.
    pub(crate) async fn run<B: Between>(
        &self,
        arrival: Arrival<'_>,
        body: impl Future<Output = Result<Bytes, Refusal>>,
        reading: &Reading<'_>,
        between: &mut B,
    ) -> Ran<B::Answer> {
        let executor = &*self.executor;
        let door = Door::of(executor, &self.metrics);
        match admit_request(&self.session_claims, &door, arrival, body).await {
            Ok(Admission::NotAnAgent) => Ran::NotAnAgent,
            Ok(Admission::Admitted(mut admitted)) => {
                if let Err(answer) = between.admitted(&mut admitted).await {
                    return Ran::Answered(answer);
                }
                let via = admitted.via;
                let policy = Arc::clone(&admitted.policy);
                let account = admitted.approver.who.account.clone();
                let operated = executor.operate(admitted, reading).await;
                offer_page(executor, via, &policy, account.as_deref(), operated)
            }
            Err(refused) => {
                let outcome = refused_outcome(&refused);
                Ran::Refused(refused, outcome)
            }
        }
    }
}

/// How a front door refusal is counted.
pub(crate) fn refused_outcome(refused: &Refused) -> Outcome {
    match refused {
        Refused::ExtensionRequired => Outcome::ExtensionRequired,
        _ => Outcome::BadRequest,
    }
}

/// An operation a page request (`Via::Page`) is held for goes to the User as the page's
/// link, never to the agent as an operation (spec 2); anything else is as decided.
fn offer_page<A>(
    executor: &Executor,
    via: Via,
    policy: &Policy,
    account: Option<&str>,
    operated: Operated,
) -> Ran<A> {
    match (via, operated) {
        (
            Via::Page,
            Operated::Decided(Executed {
                decision: Decision::ApprovalRequired { operation, .. },
                outcome,
                ..
            }),
        ) => match PageLink::for_operation(
            executor.page_url(),
            executor.signing_key(),
            policy,
            &operation,
            account,
            executor.route(),
        ) {
            Some(link) => {
                let outcome = outcome.with_approval_url(&link.url);
                Ran::Page(link, outcome)
            }
            None => Ran::Refused(Refused::ExtensionRequired, Outcome::ExtensionRequired),
        },
        (_, operated) => Ran::Operated(operated),
    }
}

/// What the front door needs of the gateway: whether it has an approval page, which
/// requests without a `Poppy-Session` are agents' (`[approval_page.agents]`), and where the
/// declared operations versions are counted (`None`: nowhere, in unit tests).
pub(crate) struct Door<'a> {
    pub(crate) page_offered: bool,
    pub(crate) agents: Option<&'a Agents>,
    pub(crate) metrics: Option<&'a Metrics>,
}

impl Door<'_> {
    pub(crate) fn of<'a>(executor: &'a Executor, metrics: &'a Metrics) -> Door<'a> {
        Door {
            page_offered: executor.page_url().is_some(),
            agents: executor.agents(),
            metrics: Some(metrics),
        }
    }
}

/// What the front door let in. Moved once, never kept: boxing the admitted request would
/// allocate for every request instead.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Admission {
    Admitted(admit::Admitted),
    /// Not an agent's request ([`Ran::NotAnAgent`]).
    NotAnAgent,
}

/// The front door's steps, in order (module comment).
/// Its span, `poppy.admit`, says which policy admitted the request, or the refusal's outcome.
pub(crate) async fn admit_request(
    claims: &SessionClaims,
    door: &Door<'_>,
    arrival: Arrival<'_>,
    body: impl Future<Output = Result<Bytes, Refusal>>,
) -> Result<Admission, Refused> {
    let span = crate::telemetry::Span::phase("poppy.admit");
    let admitted = span.within(admit_steps(claims, door, arrival, body)).await;
    match &admitted {
        Ok(Admission::Admitted(admitted)) => {
            span.set_with("poppy.policy", || admitted.policy.name.clone());
        }
        Ok(Admission::NotAnAgent) => span.set("poppy.passthrough", true),
        Err(refused) => span.set("poppy.outcome", refused_outcome(refused).as_str()),
    }
    admitted
}

async fn admit_steps(
    claims: &SessionClaims,
    door: &Door<'_>,
    arrival: Arrival<'_>,
    body: impl Future<Output = Result<Bytes, Refusal>>,
) -> Result<Admission, Refused> {
    let policy = arrival.action.policy();
    let (via, approver, body) = match door.agents {
        // An agent's request without a Session: as a Personal Agent's without the extension,
        // its approver from its token alone.
        Some(agents) if !arrival.headers.contains_key("poppy-session") => {
            match without_session(claims, door, agents, &arrival, body).await? {
                Some(admitted) => admitted,
                None => return Ok(Admission::NotAnAgent),
            }
        }
        _ => {
            // Counted here, where every interface's request for an operation reads it once.
            let declared = admit::declared(&arrival.headers)?;
            if let Some(metrics) = door.metrics {
                metrics.declared(declared);
            }
            let via = admit::via(declared, policy, door.page_offered)?;
            let approver = approver(claims, &arrival.headers, &arrival.signed_for)
                .await
                .map_err(Refused::Approver)?;
            (via, approver, body.await?)
        }
    };
    admit::admit(
        arrival.action,
        arrival.headers,
        body,
        arrival.approval,
        approver,
        via,
    )
    .map(Admission::Admitted)
}

/// Steps 2 to 4 for a request without a `Poppy-Session` under `[approval_page.agents]`: its
/// one token, wherever a resource server reads one (`ingress::credentials`), decides whether
/// it is an agent's (`None`: not, it passes through). The body is read first only when only
/// it can tell (a form, no token in the head); then the HTTP API forwards the Company's own
/// request with exactly those bytes (`http_api.rs`).
async fn without_session(
    claims: &SessionClaims,
    door: &Door<'_>,
    agents: &Agents,
    arrival: &Arrival<'_>,
    body: impl Future<Output = Result<Bytes, Refusal>>,
) -> Result<Option<(Via, Approver, Bytes)>, Refused> {
    let policy = arrival.action.policy();
    let found = credentials::in_head(&arrival.headers, arrival.action.query())?;
    let mut body = std::pin::pin!(body);
    let (token, read) = if found.needs_body() {
        let read = body.as_mut().await?;
        (found.clone().with_body(&read)?, Some(read))
    } else {
        (found.token().cloned(), None)
    };
    let authorization = token.as_ref().map(Token::authorization);
    let (via, approver) = match agents.unsigned(token.as_ref()) {
        Unsigned::NotAnAgent => return Ok(None),
        Unsigned::Agent => {
            Agents::check(&arrival.headers)?;
            let via = admit::page_only(policy, door.page_offered)?;
            (via, token_approver(claims, authorization).await?.approver)
        }
        // Which client it is decides whether it is an agent's at all: the token first (the
        // Company's own clients pass through whatever the policy says).
        Unsigned::IfListed => {
            let by_token = token_approver(claims, authorization).await?;
            if !agents.lists(by_token.client.as_deref()) {
                return Ok(None);
            }
            Agents::check(&arrival.headers)?;
            let via = admit::page_only(policy, door.page_offered)?;
            (via, by_token.approver)
        }
    };
    let body = match read {
        Some(read) => read,
        None => {
            let read = body.as_mut().await?;
            // An agent's body, read whole anyway: a token there besides the head's is refused.
            found.with_body(&read)?;
            read
        }
    };
    Ok(Some((via, approver, body)))
}

/// Step 3 for an agent's request without a Session: who may approve, from its token (an
/// `Authorization` value).
async fn token_approver(
    claims: &SessionClaims,
    authorization: Option<&[u8]>,
) -> Result<ByToken, Refused> {
    Approver::for_token(authorization, claims)
        .await
        .map_err(Refused::Approver)
}

/// Who sent a request that is not an operation but is bound to one who may approve (an MCP
/// session's opening, and answers in it: `proxy::mcp_clients`), read as the front door
/// reads an operation's approver: the Session's, or without one (`[approval_page.agents]`)
/// the one token's, wherever resource servers read one. `query`: the target's raw query.
pub(crate) async fn sender(
    claims: &SessionClaims,
    headers: &HeaderMap,
    query: Option<&str>,
    signed_for: &RequestTarget<'_>,
) -> Result<Approver, Refused> {
    if headers.contains_key("poppy-session") {
        return approver(claims, headers, signed_for)
            .await
            .map_err(Refused::Approver);
    }
    let found = credentials::in_head(headers, query)?;
    let authorization = found.token().map(Token::authorization);
    Ok(token_approver(claims, authorization).await?.approver)
}

/// Who may approve, from the request's `Poppy-Session` and `Authorization`. `signed_for`:
/// the request's method and path, which a verified Session must be signed for.
pub(crate) async fn approver(
    claims: &SessionClaims,
    headers: &HeaderMap,
    signed_for: &RequestTarget<'_>,
) -> Result<Approver, ApproverError> {
    Approver::for_request(
        headers
            .get("poppy-session")
            .map(|v| v.as_bytes())
            .unwrap_or_default(),
        headers
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes()),
        claims,
        signed_for,
    )
    .await
}
