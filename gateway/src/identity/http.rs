//! The gateway's own HTTP requests: agents' client metadata documents and JWKS, and token
//! introspection. One client per configuration (its extra trusted CA certificates). Bodies are
//! bounded; redirects are followed at most [`MAX_REDIRECTS`] times and never to another
//! scheme (an https document that redirects to http could be rewritten on the way). The
//! agents' own documents go through [`HttpClient::for_agents`], which reaches global
//! addresses only (`address.rs`) on every URL, redirect and resolved name.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect::{Attempt, Policy};

use super::address::PrivateHosts;

/// Redirects followed at most, per fetch.
pub(crate) const MAX_REDIRECTS: usize = 3;

/// The gateway's HTTP client.
pub(crate) struct HttpClient {
    client: reqwest::Client,
    /// For agents' documents: the hosts allowed on non-global addresses (every other host
    /// must be global). `None`: the operator's own URLs, trusted as configured.
    agents: Option<Arc<PrivateHosts>>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpClient")
    }
}

impl HttpClient {
    /// A client trusting the built-in roots and, when given, the CA certificates of a PEM
    /// bundle (a private CA in front of an agent's documents, or a test's).
    pub(crate) fn new(extra_roots_pem: Option<&[u8]>) -> Result<HttpClient, String> {
        HttpClient::with_redirects(Policy::custom(redirect), extra_roots_pem)
    }

    /// A client that follows no redirect, for the webhook's POSTs: a `3xx` is a wrong URL to
    /// fix, and following it would turn the POST into a GET that delivers nothing.
    pub(crate) fn without_redirects(extra_roots_pem: Option<&[u8]>) -> Result<HttpClient, String> {
        HttpClient::with_redirects(Policy::none(), extra_roots_pem)
    }

    /// The client of agents' metadata documents and their `jwks_uri`: URLs the agent chose.
    /// Each URL and redirect naming an IP address, and each address a name resolves to, must
    /// be global unless `allowed` names the host; the connection goes to the addresses so
    /// checked (no second lookup to rebind), never through a proxy (which would resolve
    /// the name itself).
    pub(crate) fn for_agents(
        extra_roots_pem: Option<&[u8]>,
        allowed: PrivateHosts,
    ) -> Result<HttpClient, String> {
        let allowed = Arc::new(allowed);
        let hops = Arc::clone(&allowed);
        let redirects = Policy::custom(move |attempt| {
            let refused = refuse_redirect(attempt.url(), attempt.previous())
                .or_else(|| hops.check_url(attempt.url()).err());
            match refused {
                None => attempt.follow(),
                Some(reason) => attempt.error(reason),
            }
        });
        let builder = reqwest::Client::builder()
            .redirect(redirects)
            .no_proxy()
            .dns_resolver(Arc::new(GlobalOnly(Arc::clone(&allowed))));
        let mut client = HttpClient::build(builder, extra_roots_pem)?;
        client.agents = Some(allowed);
        Ok(client)
    }

    fn with_redirects(
        redirects: Policy,
        extra_roots_pem: Option<&[u8]>,
    ) -> Result<HttpClient, String> {
        HttpClient::build(
            reqwest::Client::builder().redirect(redirects),
            extra_roots_pem,
        )
    }

    fn build(
        mut builder: reqwest::ClientBuilder,
        extra_roots_pem: Option<&[u8]>,
    ) -> Result<HttpClient, String> {
        if let Some(pem) = extra_roots_pem {
            for root in roots(pem)? {
                builder = builder.add_root_certificate(root);
            }
        }
        let client = builder
            .build()
            .map_err(|e| format!("HTTP client: {}", chain(&e)))?;
        Ok(HttpClient {
            client,
            agents: None,
        })
    }

    /// POST `body` (JSON) with `headers`: the answer's status and `Retry-After` (in seconds),
    /// its body read up to `max_bytes` and dropped. `Err`: no answer (refused, reset, timed
    /// out).
    pub(crate) async fn post_json(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Posted, String> {
        let mut request = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .timeout(timeout);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = request.send().await.map_err(|e| chain(&e.without_url()))?;
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let status = response.status().as_u16();
        // Read (a little of) the answer, so that the connection can be used again.
        let mut read = 0;
        while let Ok(Some(chunk)) = response.chunk().await {
            read += chunk.len();
            if read > max_bytes {
                break;
            }
        }
        Ok(Posted {
            status,
            retry_after,
        })
    }

    /// Whether `pem` is a bundle of certificates [`HttpClient::new`] can add (`ca_file`, at load).
    pub(crate) fn check_roots(pem: &[u8]) -> Result<(), String> {
        roots(pem).map(drop)
    }

    pub(crate) async fn get(
        &self,
        url: &str,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Vec<u8>, GetError> {
        if let Some(allowed) = &self.agents {
            let parsed = Url::parse(url)
                .map_err(|e| GetError::Refused(format!("{url:?} is not a URL: {e}")))?;
            allowed.check_url(&parsed).map_err(GetError::Refused)?;
        }
        read(self.client.get(url).timeout(timeout), max_bytes).await
    }

    pub(crate) async fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
        basic_auth: Option<(&str, &str)>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Vec<u8>, String> {
        let mut request = self
            .client
            .post(url)
            .form(form)
            .header("accept", "application/json")
            .timeout(timeout);
        if let Some((user, password)) = basic_auth {
            request = request.basic_auth(user, Some(password));
        }
        read(request, max_bytes).await.map_err(|e| e.to_string())
    }
}

/// Why a GET gave no document. `check` tells an operator which of these is worth failing on:
/// a server that answers with the wrong thing is a wrong URL, one that does not answer may be
/// out of reach from where `check` runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GetError {
    /// Not sent: the URL or an address is not allowed.
    #[error("{0}")]
    Refused(String),
    /// No answer: refused, reset or timed out connection, TLS failure, refused redirect.
    #[error("{0}")]
    NoAnswer(String),
    /// An answer other than 2xx.
    #[error("answered {0}")]
    Status(reqwest::StatusCode),
    #[error("answer larger than {0} bytes")]
    TooLarge(usize),
}

impl GetError {
    /// The server could not be reached or failed (5xx): it may answer later, or from elsewhere.
    pub(crate) fn unreachable(&self) -> bool {
        match self {
            GetError::NoAnswer(_) => true,
            GetError::Status(status) => status.is_server_error(),
            GetError::Refused(_) | GetError::TooLarge(_) => false,
        }
    }
}

/// The answer to [`HttpClient::post_json`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Posted {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<Duration>,
}

/// An agent's document URL (its metadata, its `jwks_uri`): https, or http on a loopback
/// address only (local development and tests, where no one else is on the path).
pub(crate) fn check_document_url(url: &str) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        // Not echoed: the URL holds a password.
        return Err("a URL with credentials (user:password@) is refused".into());
    }
    match parsed.scheme() {
        "https" if parsed.host().is_some() => Ok(parsed),
        "http" if is_loopback(&parsed) => Ok(parsed),
        "http" => Err(format!(
            "{url:?}: http only on a loopback address (127.0.0.0/8, [::1], localhost); use https"
        )),
        _ => Err(format!("{url:?} is not an https URL")),
    }
}

fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    // `Url` writes an IP address in its canonical form, an IPv6 one in brackets.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Why a redirect is not followed: `None` follows it. Pure, for tests.
fn refuse_redirect(next: &Url, previous: &[Url]) -> Option<String> {
    if previous.len() > MAX_REDIRECTS {
        return Some(format!("more than {MAX_REDIRECTS} redirects"));
    }
    let from = previous.last()?;
    if next.scheme() != from.scheme() {
        return Some(format!(
            "a redirect from {} to {} is refused",
            from.scheme(),
            next.scheme()
        ));
    }
    // Loopback http stays on loopback: it is allowed only because no one else is on the path.
    if next.scheme() == "http" && is_loopback(from) && !is_loopback(next) {
        return Some(
            "a redirect from a loopback address to another host over http is refused".into(),
        );
    }
    None
}

fn redirect(attempt: Attempt<'_>) -> reqwest::redirect::Action {
    match refuse_redirect(attempt.url(), attempt.previous()) {
        None => attempt.follow(),
        Some(reason) => attempt.error(reason),
    }
}

/// Resolves a name as the system does, then keeps its addresses only if they may be fetched
/// from ([`PrivateHosts::screen`]): the connector connects to exactly these.
struct GlobalOnly(Arc<PrivateHosts>);

impl Resolve for GlobalOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let allowed = Arc::clone(&self.0);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let addresses = allowed.screen(&host, found)?;
            Ok(Box::new(addresses.into_iter()) as Addrs)
        })
    }
}

async fn read(request: reqwest::RequestBuilder, max_bytes: usize) -> Result<Vec<u8>, GetError> {
    let no_answer = |e: reqwest::Error| GetError::NoAnswer(chain(&e.without_url()));
    let mut response = request.send().await.map_err(no_answer)?;
    if !response.status().is_success() {
        return Err(GetError::Status(response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(no_answer)? {
        if body.len() + chunk.len() > max_bytes {
            return Err(GetError::TooLarge(max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error and its causes ("error following redirect: a redirect from https to http …").
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The certificates of a PEM bundle: at least one.
fn roots(pem: &[u8]) -> Result<Vec<reqwest::Certificate>, String> {
    let roots = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|e| format!("extra CA certificates: {}", chain(&e)))?;
    if roots.is_empty() {
        return Err("extra CA certificates: no certificate in the PEM bundle".into());
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_urls_are_https_or_loopback_http() {
        for good in [
            "https://agent.example/client.json",
            "http://127.0.0.1:8080/client.json",
            "http://127.3.4.5/client.json",
            "http://[::1]:9000/client.json",
            "http://localhost/client.json",
            "http://LOCALHOST:1/x",
        ] {
            assert!(check_document_url(good).is_ok(), "{good}");
        }
        for bad in [
            "http://agent.example/client.json",
            "http://10.0.0.1/client.json",
            "http://localhost.evil.example/client.json",
            "http://[::2]/client.json",
            "ftp://agent.example/client.json",
            "file:///etc/passwd",
            "https://user:secret@agent.example/client.json",
            "agent.example/client.json",
            "",
        ] {
            let error = check_document_url(bad).unwrap_err();
            assert!(!error.contains("secret"), "{error}");
        }
    }

    #[test]
    fn redirects_keep_their_scheme_and_are_few() {
        let url = |u: &str| Url::parse(u).unwrap();
        let https = url("https://agent.example/a");
        assert_eq!(
            refuse_redirect(&url("https://cdn.example/a"), std::slice::from_ref(&https)),
            None
        );
        let downgrade =
            refuse_redirect(&url("http://agent.example/a"), std::slice::from_ref(&https));
        assert!(downgrade.unwrap().contains("from https to http"));
        let local = url("http://127.0.0.1:8080/a");
        assert_eq!(
            refuse_redirect(
                &url("http://localhost:8081/b"),
                std::slice::from_ref(&local)
            ),
            None
        );
        assert!(refuse_redirect(&url("http://agent.example/b"), &[local]).is_some());
        let many = vec![https.clone(); MAX_REDIRECTS];
        assert_eq!(refuse_redirect(&https, &many), None);
        let too_many = vec![https.clone(); MAX_REDIRECTS + 1];
        assert!(
            refuse_redirect(&https, &too_many)
                .unwrap()
                .contains("redirects")
        );
    }

    #[test]
    fn extra_roots_must_be_certificates() {
        assert!(HttpClient::new(None).is_ok());
        assert!(HttpClient::new(Some(b"not a certificate")).is_err());
    }
}
