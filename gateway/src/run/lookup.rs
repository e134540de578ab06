//! A policy's lookups (`[operation.lookup]`, `[operation.lookups.NAME]`): the upstream records
//! (and quotes) its `lookup` terms are read from, fetched for the request and for the retry
//! with its approval alike, so the revision matches only while the upstream still says what
//! the User approved; then its computed terms, over all the others.

use bytes::Bytes;

use crate::ingress::{ForwardRequest, Refusal};
use crate::metrics::Outcome;
use crate::policy::{
    AnswerError, Lookup, Policy, TermSource, Terms, compute_terms, extract_from_answer,
};
use crate::upstream::forwarded::ProxyContext;
use crate::upstream::{ForwardError, UpstreamClient};

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
    fn log(&self, policy: &str, which: &str) {
        match self {
            LookupError::Failed { path, error } => {
                tracing::warn!(policy, which, lookup = %path, error = %error, "lookup: no answer from the upstream; nothing forwarded")
            }
            LookupError::Status { path, status } => {
                tracing::warn!(policy, which, lookup = %path, status, "lookup: the upstream refused; nothing forwarded")
            }
            LookupError::Answer { path, error } => {
                tracing::warn!(policy, which, lookup = %path, error = %error, "lookup: unreadable answer; nothing forwarded")
            }
        }
    }
}

/// Run the policy's lookups, in order, and add their terms; then compute its computed terms.
/// A failed lookup is answered with its refusal (400 for a term the URL can't take, 502 for
/// the upstream), and so is a computed term without a value (502 when the operand at fault
/// came from a lookup, 400 naming the term when from the request); nothing is forwarded.
/// `body`: the request's own, which a quote is sent.
pub(crate) async fn lookup_terms(
    upstream: &UpstreamClient,
    proxy: &ProxyContext,
    policy: &Policy,
    headers: &http::HeaderMap,
    body: &Bytes,
    terms: &mut Terms,
) -> Result<(), (Refusal, Outcome)> {
    // Every URL is filled from the request's terms before anything is sent.
    let mut filled = Vec::with_capacity(policy.lookups.len());
    for lookup in &policy.lookups {
        let path_and_query = lookup.url.fill(terms).map_err(|e| {
            let refusal = Refusal::new(400, "invalid_term", e.to_string()).naming("term", e.term());
            (refusal, Outcome::BadRequest)
        })?;
        filled.push((lookup, path_and_query));
    }
    for (lookup, path_and_query) in filled {
        // The lookup's request carries this span's `traceparent` (upstream/head.rs).
        let span = crate::telemetry::Span::client("poppy.lookup");
        span.set_with("poppy.policy", || policy.name.clone());
        span.set_with("poppy.lookup", || lookup.label());
        span.within(fetch(
            (upstream, proxy),
            headers,
            body,
            lookup,
            path_and_query,
            &policy.terms,
            terms,
        ))
        .await
        .map_err(|e| {
            span.fail("the lookup failed");
            e.log(&policy.name, &lookup.label());
            (
                Refusal::new(502, "lookup_failed", e.to_string()),
                Outcome::LookupFailed,
            )
        })?;
    }
    computed_terms(policy, terms)
}

/// The policy's computed terms (what [`lookup_terms`] ends with; all of it for a policy
/// without lookups, which needs no future).
pub(crate) fn computed_terms(policy: &Policy, terms: &mut Terms) -> Result<(), (Refusal, Outcome)> {
    compute_terms(&policy.terms, terms).map_err(|failure| {
        if failure.from_lookup {
            tracing::warn!(policy = %policy.name, error = %failure, "computed term: the upstream's answer is no operand; nothing forwarded");
            (
                Refusal::new(
                    502,
                    "lookup_failed",
                    format!("the terms read from the API can't be computed with: {failure}"),
                ),
                Outcome::LookupFailed,
            )
        } else {
            (
                Refusal::new(400, "invalid_term", failure.to_string())
                    .naming("term", failure.named_term()),
                Outcome::BadRequest,
            )
        }
    })
}

/// Ask the upstream (bounded by its timeouts): GET the lookup URL, or for a quote POST it
/// the request's own body and `Content-Type`; and read the lookup's terms out of the answer.
/// `(upstream, proxy)`: where it goes, with the request's proxy headers.
async fn fetch(
    (upstream, proxy): (&UpstreamClient, &ProxyContext),
    headers: &http::HeaderMap,
    body: &Bytes,
    lookup: &Lookup,
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
    let (method, body) = if lookup.quote {
        if let Some(content_type) = headers.get(http::header::CONTENT_TYPE) {
            forwarded.push((http::header::CONTENT_TYPE, content_type.clone()));
        }
        (http::Method::POST, body.clone())
    } else {
        (http::Method::GET, Bytes::new())
    };
    let request = ForwardRequest {
        method,
        path_and_query: path.clone(),
        headers: forwarded,
        body,
    };
    let answer = match upstream.send(request, proxy).await {
        Ok(answer) => answer,
        Err(error) => return Err(LookupError::Failed { path, error }),
    };
    if !(200..300).contains(&answer.status) {
        let status = answer.status;
        return Err(LookupError::Status { path, status });
    }
    extract_from_answer(&lookup.name, policy_terms, &answer.body, terms)
        .map_err(|error| LookupError::Answer { path, error })
}
