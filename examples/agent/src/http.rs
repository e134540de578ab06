//! Talking to the gateway: the request, resent unchanged with an approval (each time with a
//! new Session JWT, as every request gets), and the Company's discovery document.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::session::Signer;

/// `Poppy-Extensions` of an agent that supports operations v2.
pub const OPERATIONS_V2: &str = "\"operations\";v=\"2\"";

/// The request this agent makes; the retry with an approval is the very same request, with a
/// `Poppy-Session` signed for it.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub method: reqwest::Method,
    /// Path and query, as given.
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

/// An answer, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// `error` of a JSON error body.
    pub fn error_code(&self) -> Option<String> {
        Some(self.json()?.get("error")?.as_str()?.to_owned())
    }

    /// `detail` of a JSON error body.
    pub fn detail(&self) -> Option<String> {
        Some(self.json()?.get("detail")?.as_str()?.to_owned())
    }

    /// `Retry-After` in seconds (the HTTP-date form is treated as absent).
    pub fn retry_after(&self) -> Option<Duration> {
        let value = self.headers.get(reqwest::header::RETRY_AFTER)?;
        let seconds: u64 = value.to_str().ok()?.trim().parse().ok()?;
        Some(Duration::from_secs(seconds))
    }

    /// `STATUS error: detail`, for messages.
    pub fn describe(&self) -> String {
        match (self.error_code(), self.detail()) {
            (Some(code), Some(detail)) => format!("{} {code}: {detail}", self.status),
            (Some(code), None) => format!("{} {code}", self.status),
            _ => format!("{}", self.status),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection: the request provably never left this machine.
    #[error("cannot connect to the gateway: {0}")]
    Connect(String),
    /// Sent, or maybe sent, with no complete answer.
    #[error("no complete answer: {0}")]
    NoAnswer(String),
    /// No Session could be signed: nothing was sent.
    #[error("cannot sign the Session: {0}")]
    Sign(String),
}

pub struct Client {
    http: reqwest::Client,
    base: String,
    /// Signs the `Poppy-Session` of every request (discovery is sent without one).
    signer: Arc<Signer>,
}

impl Client {
    pub fn new(
        base: &str,
        timeout: Duration,
        signer: Arc<Signer>,
    ) -> Result<Client, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            // An approval is the User's: it goes to the gateway named, never elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
            signer,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Send `request` with a new Session JWT for its URL, and `Poppy-Approval: approval` when
    /// given.
    pub async fn send(
        &self,
        request: &Outgoing,
        approval: Option<&str>,
    ) -> Result<Answer, SendError> {
        let url = format!("{}{}", self.base, request.path_and_query);
        let session = self
            .signer
            .sign(request.method.as_str(), &url)
            .map_err(|e| SendError::Sign(e.to_string()))?;
        let mut builder = self
            .http
            .request(request.method.clone(), url)
            .header("Poppy-Session", session);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        if let Some(approval) = approval {
            builder = builder.header("Poppy-Approval", approval);
        }
        if let Some(body) = &request.body {
            builder = builder.body(body.clone());
        }
        let classify = |e: reqwest::Error| {
            if e.is_connect() {
                SendError::Connect(e.to_string())
            } else {
                SendError::NoAnswer(e.to_string())
            }
        };
        let response = builder.send().await.map_err(classify)?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|e| SendError::NoAnswer(e.to_string()))?
            .to_vec();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// The Company's `poppy.json`, if it answers with one.
    pub async fn discovery(&self) -> Option<Value> {
        let response = self
            .http
            .get(format!("{}/.well-known/poppy.json", self.base))
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        serde_json::from_slice(&response.bytes().await.ok()?).ok()
    }
}
