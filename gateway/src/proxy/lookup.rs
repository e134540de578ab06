//! A policy's `[operation.lookup]`: the upstream record its `lookup` terms are read from,
//! fetched for the request and for the retry with its approval alike, so the revision
//! matches only while the upstream's record says what the User approved.

use bytes::Bytes;

use super::forwarded::ProxyContext;
use super::upstream::{ForwardError, UpstreamClient};
use crate::ingress::{ForwardRequest, Refusal};
use crate::metrics::Outcome;
use crate::policy::{AnswerError, Policy, TermSource, Terms, extract_from_answer};

/// Headers of the Personal Agent's request a lookup carries: the upstream checks the same
/// credentials for the record as for the action.
const LOOKUP_HEADERS: [&str; 4] = ["host", "authorization", "cookie", "poppy-session"];

/// Why a lookup gave no terms. Each is a readable detail: never a term left empty. The
/// detail says the kind of failure only (agents are not shown the upstream's paths or
/// addresses, nor library error text); the gateway's log keeps the path and the error.
#[derive(Debug, thiserror::Error)]
enum LookupError {
    #[error("the record the terms are read from could not be read: the API gave no answer")]
    Failed { path: String, error: ForwardError },
    #[error(
        "the record the terms are read from could not be read: the API answered {status}; the terms can't be shown without it"
    )]
    Status { path: String, status: u16 },
    #[error("the record the terms are read from does not say what the terms need: {error}")]
    Answer { path: String, error: AnswerError },
}

impl LookupError {
    /// For the log: the lookup's path, and the error behind the detail.
    fn log(&self, policy: &str) {
        match self {
            LookupError::Failed { path, error } => {
                tracing::warn!(policy, lookup = %path, error = %error, "lookup: no answer from the upstream; nothing forwarded")
            }
            LookupError::Status { path, status } => {
                tracing::warn!(policy, lookup = %path, status, "lookup: the upstream refused; nothing forwarded")
            }
            LookupError::Answer { path, error } => {
                tracing::warn!(policy, lookup = %path, error = %error, "lookup: unreadable answer; nothing forwarded")
            }
        }
    }
}

/// Run the policy's lookup, if it has one, and add its terms. A failed lookup is answered
/// with its refusal (400 for a term the URL can't take, 502 for the upstream), and nothing is
/// forwarded.
pub(crate) async fn lookup_terms(
    upstream: &UpstreamClient,
    proxy: &ProxyContext,
    policy: &Policy,
    headers: &http::HeaderMap,
    terms: &mut Terms,
) -> Result<(), (Refusal, Outcome)> {
    let Some(template) = &policy.lookup else {
        return Ok(());
    };
    let path_and_query = template.fill(terms).map_err(|e| {
        let refusal = Refusal::new(400, "invalid_term", e.to_string()).naming("term", e.term());
        (refusal, Outcome::BadRequest)
    })?;
    fetch(
        upstream,
        proxy,
        headers,
        path_and_query,
        &policy.terms,
        terms,
    )
    .await
    .map_err(|e| {
        e.log(&policy.name);
        (
            Refusal::new(502, "lookup_failed", e.to_string()),
            Outcome::LookupFailed,
        )
    })
}

/// GET the lookup URL from the upstream (bounded by its timeouts) and read the `lookup` terms
/// out of the answer.
async fn fetch(
    upstream: &UpstreamClient,
    proxy: &ProxyContext,
    headers: &http::HeaderMap,
    path: String,
    policy_terms: &[(String, TermSource)],
    terms: &mut Terms,
) -> Result<(), LookupError> {
    let mut forwarded: Vec<(http::HeaderName, http::HeaderValue)> = headers
        .iter()
        .filter(|(name, _)| LOOKUP_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    forwarded.push((
        http::header::ACCEPT,
        http::HeaderValue::from_static("application/json"),
    ));
    let request = ForwardRequest {
        method: http::Method::GET,
        path_and_query: path.clone(),
        headers: forwarded,
        body: Bytes::new(),
    };
    let answer = match upstream.send(request, proxy).await {
        Ok(answer) => answer,
        Err(error) => return Err(LookupError::Failed { path, error }),
    };
    if !(200..300).contains(&answer.status) {
        let status = answer.status;
        return Err(LookupError::Status { path, status });
    }
    extract_from_answer(policy_terms, &answer.body, terms)
        .map_err(|error| LookupError::Answer { path, error })
}
