//! Issue 23: `[session] verify = "required"` with an agent named by its metadata document
//! (`[[session.agent]] client_id`, a [`TestAgent`] on a free port): Sessions signed with
//! delegated keys verify; every check that fails answers `403` with `error`
//! `invalid_session` and a `detail` naming the check (never the token), and nothing is
//! forwarded. A signed-in request's access token must be the same agent's (`401
//! invalid_token` otherwise).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use poppy_e2e::identity::{jwks_of, now, sign};
use poppy_e2e::{Fault, PUBLIC_ORIGIN, Request, Serving, Session, Stack, Store, TestAgent};
use poppy_e2e::{store_tests, test_agent::DOCUMENT_LIMIT};
use serde_json::json;

const PATH: &str = "/orders/o1/exchanges";

fn exchange(session: &Session) -> Request {
    Request::exchange(session, "o1", "i1", "s1")
}

/// Send the exchange (a policy route) with `session`'s JWT signed now, and assert it is
/// refused: `403 invalid_session`, a `detail`, no part of the token in the answer, nothing
/// forwarded.
async fn assert_refused(stack: &Stack, session: &Session, what: &str) {
    let jwt = session.signed_header("POST", PATH);
    let request = exchange(session).header("Poppy-Session", &jwt);
    // A slow metadata document takes the gateway's whole fetch timeout.
    let client = stack.gateway.patient_client(Duration::from_secs(30));
    let answer = client.send(&request).await;
    let body = answer.assert_error(403, "invalid_session", what);
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(!detail.trim().is_empty(), "{what}: a detail");
    let text = answer.text();
    assert!(!text.contains(&jwt), "{what}: the answer repeats the token");
    for part in jwt.split('.').filter(|part| part.len() >= 16) {
        assert!(
            !text.contains(part),
            "{what}: the answer repeats part of the token ({part}):\n{}",
            answer.describe()
        );
    }
    assert!(
        answer.header("www-authenticate").is_none(),
        "{what}: invalid_session is not an authorization error:\n{}",
        answer.describe()
    );
    stack.assert_executions(0, what);
}

/// A gateway verifying `agent`'s Sessions.
fn stack_for(store: Store, agent: &TestAgent) -> Stack {
    Stack::start_with(store, |b| agent.configure(b))
}

/// `session` (built from `agent`) refused by a gateway verifying `agent`.
async fn refused(store: Store, agent: TestAgent, session: Session, what: &str) {
    let stack = stack_for(store, &agent);
    assert_refused(&stack, &session, what).await;
}

/// A refused `fault` of an agent that serves its document.
async fn refused_fault(store: Store, fault: Fault, what: &str) {
    let agent = TestAgent::start();
    let session = agent.signed_out("ses_fault").with_fault(fault);
    refused(store, agent, session, what).await;
}

/// The control of every failure below: Sessions of an agent with an ES256 or an RS256
/// long-term key (both agents configured) verify, are held, approved once and replayed.
async fn delegated_sessions_verify(store: Store) {
    let es256 = TestAgent::start();
    let rs256 = TestAgent::start_with("rs256-a", Serving::Document);
    let lines = format!(
        "{}\n[[session.agent]]\nclient_id = \"{}\"\n",
        es256.session_lines(),
        rs256.client_id()
    );
    let stack = Stack::start_with(store, |b| b.session(&lines));
    for (n, agent) in [&es256, &rs256].into_iter().enumerate() {
        let what = agent.long_term_key().to_owned();
        let request = exchange(&agent.signed_out(&format!("ses_{what}")));
        let operation = stack.gateway.send(&request).await.operation_in(&what);
        let approved = request.approve(&operation);
        let first = stack.gateway.send(&approved).await;
        first.assert_upstream_answer(n + 1, "POST", PATH);
        stack
            .gateway
            .send(&approved)
            .await
            .assert_replay_of(&first, &what);
    }
    stack.assert_executions(2, "one per agent");
}

/// The document and JWKS are fetched once for many Sessions and requests; an unknown `kid`
/// reads the keys again at most every 2 s.
async fn the_metadata_is_cached(store: Store) {
    let agent = TestAgent::start();
    let stack = stack_for(store, &agent);
    for sid in ["ses_cache_1", "ses_cache_2", "ses_cache_3"] {
        for _ in 0..2 {
            stack
                .gateway
                .send(&exchange(&agent.signed_out(sid)))
                .await
                .operation_in(sid);
        }
    }
    assert_eq!(
        (agent.document_fetches(), agent.jwks_fetches()),
        (1, 1),
        "one fetch of each for six requests of three Sessions"
    );
    let started = Instant::now();
    for _ in 0..5 {
        let session = agent
            .signed_out("ses_cache_kid")
            .with_fault(Fault::DelegationKid("es256-b".into()));
        assert_refused(&stack, &session, "an unknown kid").await;
    }
    let windows = started.elapsed().as_secs() as usize / 2 + 1;
    let fetches = agent.document_fetches() + agent.jwks_fetches();
    assert!(
        fetches <= 2 + 2 * windows,
        "five unknown kids within {:?}: at most one reading of the keys per 2 s, got {} \
         document and {} JWKS fetches in all",
        started.elapsed(),
        agent.document_fetches(),
        agent.jwks_fetches()
    );
}

async fn wrong_long_term_key(store: Store) {
    // The delegation's kid names es256-a (published), its signature is es256-b's.
    refused_fault(
        store,
        Fault::DelegationSignedBy("es256-b".into()),
        "a delegation signed by another key",
    )
    .await;
}

async fn unknown_kid(store: Store) {
    refused_fault(
        store,
        Fault::DelegationKid("es256-b".into()),
        "a delegation signed by a key the agent does not publish",
    )
    .await;
}

async fn delegation_alg_mismatch(store: Store) {
    // kid es256-a (an EC key), alg RS256 (a real RS256 signature of rs256-a).
    refused_fault(
        store,
        Fault::DelegationAlg("RS256".into()),
        "a delegation whose alg does not fit its key",
    )
    .await;
}

async fn session_alg_mismatch(store: Store) {
    // The delegated key is P-256; the Session's header says RS256.
    refused_fault(
        store,
        Fault::SessionAlg("RS256".into()),
        "a Session whose alg does not fit the delegated key",
    )
    .await;
}

async fn expired_delegation(store: Store) {
    refused_fault(store, Fault::DelegationExpired, "an expired delegation").await;
}

async fn not_yet_valid_delegation(store: Store) {
    refused_fault(
        store,
        Fault::DelegationNotYetValid,
        "a delegation valid only from 10 minutes from now",
    )
    .await;
}

async fn delegation_beyond_a_day(store: Store) {
    refused_fault(
        store,
        Fault::DelegationTooLong,
        "a delegation reaching 25 hours ahead",
    )
    .await;
}

async fn expired_session(store: Store) {
    refused_fault(store, Fault::SessionExpired, "an expired Session JWT").await;
}

async fn not_yet_valid_session(store: Store) {
    refused_fault(
        store,
        Fault::SessionNotYetValid,
        "a Session JWT issued 5 minutes from now",
    )
    .await;
}

async fn session_lifetime_over_300s(store: Store) {
    refused_fault(
        store,
        Fault::SessionTooLong,
        "a Session JWT valid for 600 s",
    )
    .await;
}

async fn origin_mismatch(store: Store) {
    refused_fault(
        store,
        Fault::Origin("https://evil.example".into()),
        "a Session JWT for another origin",
    )
    .await;
}

async fn path_mismatch(store: Store) {
    refused_fault(
        store,
        Fault::Path("/orders/o2/exchanges".into()),
        "a Session JWT for another path",
    )
    .await;
}

async fn method_mismatch(store: Store) {
    refused_fault(
        store,
        Fault::Method("GET".into()),
        "a Session JWT for another method",
    )
    .await;
}

async fn delegation_of_another_agent(store: Store) {
    refused_fault(
        store,
        Fault::DelegationOfAgent("http://127.0.0.1:1/other-agent.json".into()),
        "a delegation of another agent",
    )
    .await;
}

async fn unsigned_session(store: Store) {
    refused_fault(store, Fault::Unsigned, "an unsigned Session (alg none)").await;
}

async fn metadata_unreachable(store: Store) {
    let agent = TestAgent::unreachable();
    let session = agent.signed_out("ses_unreachable");
    refused(store, agent, session, "a metadata document nobody serves").await;
}

async fn metadata_too_large(store: Store) {
    let agent = TestAgent::start_with("es256-a", Serving::TooLarge);
    let session = agent.signed_out("ses_large");
    refused(
        store,
        agent,
        session,
        &format!("a metadata document over {DOCUMENT_LIMIT} bytes"),
    )
    .await;
}

async fn metadata_slow(store: Store) {
    // Answered when the test ends (the agent is dropped): after the gateway's 5 s timeout.
    let agent = TestAgent::start_with("es256-a", Serving::Slow);
    let session = agent.signed_out("ses_slow");
    refused(store, agent, session, "a metadata document slower than 5 s").await;
}

async fn metadata_redirecting_to_http(store: Store) {
    let agent = TestAgent::redirecting_to_http();
    let session = agent.signed_out("ses_redirect");
    refused(
        store,
        agent,
        session,
        "a metadata document redirecting to http",
    )
    .await;
}

/// An agent's documents choose where the gateway sends GETs, so they reach global addresses
/// only, unless `[session] allow_private_hosts` names the host (here `127.0.0.1`, where the
/// test agents serve): a `jwks_uri` naming `localhost` (a name that resolves to loopback),
/// and a redirect of the document to it, are refused before anything is fetched there (each
/// server counts 0 requests); the Session fails verification, the log says why.
async fn agent_documents_reach_only_allowed_private_hosts(store: Store) {
    let on_localhost = |url: String| url.replace("127.0.0.1", "localhost");

    let agent = TestAgent::start();
    agent.set_jwks_uri(&on_localhost(
        agent.document_url().replace("agent.json", "jwks.json"),
    ));
    let stack = stack_for(store, &agent);
    let what = "a jwks_uri on a loopback host that is not allowed";
    assert_refused(&stack, &agent.signed_out("ses_jwks_uri"), what).await;
    assert!(
        agent.document_fetches() >= 1,
        "the document itself is allowed"
    );
    assert_eq!(agent.jwks_fetches(), 0, "{what}: nothing fetched there");
    assert_logged(&stack, "localhost resolves to").await;
    drop(stack);

    let target = TestAgent::start();
    let agent = TestAgent::start_with(
        "es256-a",
        Serving::Redirect(on_localhost(target.document_url())),
    );
    let stack = stack_for(store, &agent);
    let what = "a metadata document redirecting to a loopback host that is not allowed";
    assert_refused(&stack, &agent.signed_out("ses_redirect_local"), what).await;
    assert!(agent.document_fetches() >= 1);
    assert_eq!(
        target.document_fetches(),
        0,
        "{what}: nothing fetched there"
    );
    assert_logged(&stack, "localhost resolves to").await;
}

/// The gateway's log says `needle` (why an agent's keys could not be read), within 10 s.
async fn assert_logged(stack: &Stack, needle: &str) {
    let logged = poppy_e2e::wait::until(Duration::from_secs(10), || {
        let log = stack.gateway.log();
        log.contains(needle) && log.contains("allow_private_hosts")
    })
    .await;
    assert!(
        logged,
        "{needle:?} not in the log:\n{}",
        stack.gateway.log()
    );
}

/// The control of the redirect: the same https document, served without a redirect (the
/// gateway trusts the test CA through `[session] ca_file`), verifies.
async fn metadata_over_https_verifies(store: Store) {
    let agent = TestAgent::start_https("es256-a", Serving::Document);
    let stack = stack_for(store, &agent);
    let request = exchange(&agent.signed_out("ses_https"));
    let operation = stack.gateway.send(&request).await.operation_in("https");
    stack
        .gateway
        .send(&request.approve(&operation))
        .await
        .assert_upstream_answer(1, "POST", PATH);
    assert!(agent.document_fetches() >= 1);
}

const TOKEN_ISSUER: &str = "https://auth.shop.example";

/// An access token of the shop's identity provider (test key `rs256-b`) for `account`,
/// naming the agent in `agent_claim` (`client_id` or `azp`).
fn access_token(account: &str, agent_claim: &str, agent: &str) -> String {
    let now = now();
    let mut claims = json!({
        "iss": TOKEN_ISSUER,
        "aud": PUBLIC_ORIGIN,
        "sub": account,
        "iat": now,
        "exp": now + 600,
    });
    claims[agent_claim] = json!(agent);
    sign("rs256-b", "at+jwt", &claims)
}

/// Signed in, the access token must be the Session's agent's (`client_id`, or `azp`): a token
/// of another agent is `401 invalid_token`, nothing forwarded.
async fn a_token_of_another_agent_is_refused(store: Store) {
    let agent = TestAgent::start();
    let jwks = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(jwks.path(), jwks_of(&["rs256-b"])).unwrap();
    let lines = format!(
        "{}\n[session.token]\nissuer = \"{TOKEN_ISSUER}\"\njwks_file = \"{}\"\naudience = [\"{PUBLIC_ORIGIN}\"]\n",
        agent.session_lines(),
        jwks.path().display()
    );
    let stack = Stack::start_with(store, |b| b.session(&lines));
    let session = agent.signed_in("ses_token", "acct_1");
    let with_token =
        |token: &str| exchange(&session).header("Authorization", &format!("Bearer {token}"));

    let foreign = access_token("acct_1", "client_id", "http://127.0.0.1:1/other-agent.json");
    let answer = stack.gateway.send(&with_token(&foreign)).await;
    answer.assert_error(401, "invalid_token", "a token of another agent");
    assert!(
        !answer.text().contains(&foreign),
        "the answer repeats the token"
    );
    stack.assert_executions(0, "a token of another agent");

    // The controls: the same token naming this agent, by client_id or by azp.
    for claim in ["client_id", "azp"] {
        let own = access_token("acct_1", claim, &agent.client_id());
        stack
            .gateway
            .send(&with_token(&own))
            .await
            .operation_in(&format!("a token naming the agent in {claim}"));
    }
    stack.assert_executions(0, "held");
}

store_tests!(
    delegated_sessions_verify,
    the_metadata_is_cached,
    wrong_long_term_key,
    unknown_kid,
    delegation_alg_mismatch,
    session_alg_mismatch,
    expired_delegation,
    not_yet_valid_delegation,
    delegation_beyond_a_day,
    expired_session,
    not_yet_valid_session,
    session_lifetime_over_300s,
    origin_mismatch,
    path_mismatch,
    method_mismatch,
    delegation_of_another_agent,
    unsigned_session,
    metadata_unreachable,
    metadata_too_large,
    metadata_slow,
    metadata_redirecting_to_http,
    metadata_over_https_verifies,
    a_token_of_another_agent_is_refused,
    agent_documents_reach_only_allowed_private_hosts,
);
