//! The gateway's operations service, as this Company Agent calls it (`POST /v1/propose`,
//! `POST /v1/perform`; `GET /openapi.json` on the service describes both).

use std::time::Duration;

use serde_json::{Value, json};

use crate::conversation::Credentials;

/// How long one call may take: the service may look the terms up and perform the request.
const CALL_TIMEOUT: Duration = Duration::from_secs(70);

pub struct Service {
    http: reqwest::Client,
    base: String,
    token: String,
    /// Send `session_request` (the gateways that verify Sessions' `htu` need it; older ones
    /// refuse the unknown member).
    relay_session_request: bool,
}

/// One answer of the service.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    /// `Retry-After`, for a 503.
    pub retry_after: Option<Duration>,
}

impl Reply {
    pub fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or_default()
    }
}

impl Service {
    pub fn new(
        base: &str,
        token: String,
        relay_session_request: bool,
    ) -> Result<Service, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .no_proxy()
            .build()?;
        Ok(Service {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
            relay_session_request,
        })
    }

    /// The request this Company Agent makes for the exchange: what it describes to the
    /// service, always the same bytes.
    pub fn exchange(order: &str, item: &str, sku: &str) -> Value {
        json!({
            "method": "POST",
            "path": format!("/orders/{order}/exchanges"),
            "body": json!({"item_id": item, "replacement_sku": sku}).to_string(),
        })
    }

    /// The Personal Agent's credentials, as its request to this Company Agent had them, and
    /// the request this Company Agent would make.
    fn call_body(
        &self,
        conversation_id: &str,
        credentials: &Credentials,
        request: &Value,
    ) -> Value {
        let mut body = json!({
            "conversation_id": conversation_id,
            "poppy_session": credentials.poppy_session,
            "poppy_extensions": credentials.poppy_extensions,
            "request": request,
        });
        if let Some(authorization) = &credentials.authorization {
            body["authorization"] = authorization.as_str().into();
        }
        if self.relay_session_request {
            // The Session JWT covers the Personal Agent's request to this Company Agent
            // (`htu`, `htm`): the service checks it against its configured origins and this.
            body["session_request"] = json!({
                "method": credentials.session_request.method,
                "path": credentials.session_request.path,
            });
        }
        body
    }

    pub async fn propose(
        &self,
        conversation_id: &str,
        credentials: &Credentials,
        request: &Value,
    ) -> Result<Reply, String> {
        let body = self.call_body(conversation_id, credentials, request);
        self.call("/v1/propose", &body).await
    }

    pub async fn perform(
        &self,
        conversation_id: &str,
        credentials: &Credentials,
        request: &Value,
        message: &Value,
    ) -> Result<Reply, String> {
        let mut body = self.call_body(conversation_id, credentials, request);
        body["message"] = message.clone();
        self.call("/v1/perform", &body).await
    }

    async fn call(&self, path: &str, body: &Value) -> Result<Reply, String> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .map_err(|e| format!("the operations service did not answer: {e}"))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .map(Duration::from_secs);
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("the operations service's answer broke off: {e}"))?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Reply {
            status,
            body,
            retry_after,
        })
    }
}
