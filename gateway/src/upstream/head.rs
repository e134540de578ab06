//! The one upstream writer: how every request the gateway sends itself goes out (approved
//! forwards, their resumes and follow-ups, lookups, poppy.json, and MCP messages that need no
//! approval), whether its answer is then read whole (`upstream.rs`) or streamed to the client
//! (`mcp_forward.rs`).
//!
//! The head is the request's own method, target and headers (as `ingress::forward` left them),
//! the operation ID header and, with `[upstream.approval_header]`, the signed approval header
//! only on an approved forward (never a client's copy of either), the body's
//! `Content-Length` (the body is always sent whole), the request's proxy headers
//! (`forwarded::ProxyContext`, passed explicitly), the current span's `traceparent` (tracing
//! on; `telemetry`) and a `Host` when it has none.

use std::sync::Arc;

use bytes::Bytes;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;

use super::forwarded::ProxyContext;
use crate::config::Upstream;
use crate::ingress::ForwardRequest;
use crate::protocol::approved::{ApprovalSigner, ApprovedForward, DEFAULT_NAME};

/// What every request head to one upstream is built with.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamHead {
    /// `Host` for requests that carry none (HTTP/1.1 needs one).
    default_host: http::HeaderValue,
    /// The header an approved forward carries its operation ID in.
    operation_id_header: http::HeaderName,
    /// `[upstream.approval_header]`: the signer of what was approved; `None` when off.
    approval: Option<Arc<ApprovalSigner>>,
    /// The approval header's name, stripped from every client request (the default name when
    /// off, so that turning it on never meets a client's copy).
    approval_name: http::HeaderName,
}

impl UpstreamHead {
    pub(crate) fn new(upstream: &Upstream) -> UpstreamHead {
        let default_host = upstream
            .passthrough
            .host_header
            .as_deref()
            .unwrap_or(&upstream.host);
        UpstreamHead {
            default_host: http::HeaderValue::from_str(default_host)
                .unwrap_or_else(|_| http::HeaderValue::from_static("localhost")),
            operation_id_header: upstream.passthrough.operation_id_header.clone(),
            approval_name: upstream.approval_header.as_ref().map_or_else(
                || http::HeaderName::from_static(DEFAULT_NAME),
                |signer| signer.name.clone(),
            ),
            approval: upstream.approval_header.clone(),
        }
    }

    /// Whether `name` is one only the gateway sends: the operation ID and approval headers.
    fn is_own(&self, name: &http::HeaderName) -> bool {
        *name == self.operation_id_header || *name == self.approval_name
    }

    /// Remove a client's copies of the gateway's own headers from a passthrough request.
    pub(crate) fn strip_own(&self, header: &mut RequestHeader) {
        header.remove_header(&self.operation_id_header);
        header.remove_header(&self.approval_name);
    }

    /// The request line and headers of `request`. `approved`: set on an approved forward
    /// only. An error means nothing can be sent.
    pub(crate) fn build(
        &self,
        request: &ForwardRequest,
        approved: Option<&ApprovedForward<'_>>,
        proxy: &ProxyContext,
    ) -> pingora::Result<RequestHeader> {
        let mut header = RequestHeader::build(
            request.method.clone(),
            request.path_and_query.as_bytes(),
            Some(request.headers.len() + 4),
        )?;
        for (name, value) in &request.headers {
            // Only an approved forward says which operation it performs, and what was approved.
            if !self.is_own(name) {
                header.append_header(name.clone(), value.clone())?;
            }
        }
        if let Some(approved) = approved {
            if let Ok(value) = http::HeaderValue::from_str(approved.operation_id) {
                header.insert_header(self.operation_id_header.clone(), value)?;
            }
            if let Some(signer) = &self.approval {
                let jws = signer
                    .sign(approved, request.method.as_str(), &request.path_and_query)
                    .map_err(|e| {
                        pingora::Error::explain(pingora::ErrorType::InternalError, e.to_string())
                    })?;
                let value = http::HeaderValue::from_str(&jws).map_err(|e| {
                    pingora::Error::explain(pingora::ErrorType::InternalError, e.to_string())
                })?;
                header.insert_header(signer.name.clone(), value)?;
            }
        }
        header.insert_header(http::header::CONTENT_LENGTH, request.body.len().to_string())?;
        proxy.apply(&mut header)?;
        // The span the request is sent in is the upstream's parent (tracing on).
        crate::telemetry::inject_current(&mut header)?;
        if !header.headers.contains_key(http::header::HOST) {
            header.insert_header(http::header::HOST, self.default_host.clone())?;
        }
        Ok(header)
    }
}

/// Write `header` and the whole `body` on `session`, then read the answer's head.
pub(crate) async fn write_request(
    session: &mut HttpSession,
    header: RequestHeader,
    body: &Bytes,
) -> pingora::Result<()> {
    session.write_request_header(Box::new(header)).await?;
    if !body.is_empty() {
        session.write_request_body(body.clone(), true).await?;
    }
    session.finish_request_body().await?;
    session.read_response_header().await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn upstream() -> Upstream {
        Upstream {
            url: "http://api.internal".into(),
            tls: false,
            address: "127.0.0.1:9".into(),
            host: "api.internal".into(),
            connect_timeout: std::time::Duration::from_secs(1),
            timeout: std::time::Duration::from_secs(1),
            release_statuses: vec![],
            release_503_with_retry_after: false,
            passthrough: crate::config::Passthrough::default(),
            approval_header: None,
        }
    }

    fn request(headers: &[(&str, &str)]) -> ForwardRequest {
        ForwardRequest {
            method: http::Method::POST,
            path_and_query: "/orders?x=1".into(),
            headers: headers
                .iter()
                .map(|(n, v)| {
                    (
                        http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                        http::HeaderValue::from_str(v).unwrap(),
                    )
                })
                .collect(),
            body: Bytes::from_static(b"{}"),
        }
    }

    #[test]
    fn only_an_approved_forward_carries_an_operation_id() {
        let head = UpstreamHead::new(&upstream());
        let name = head.operation_id_header.clone();
        let forged = request(&[(name.as_str(), "exc_forged")]);
        let built = head.build(&forged, None, &ProxyContext::default()).unwrap();
        assert!(built.headers.get(&name).is_none(), "a client's copy");
        let terms = serde_json::json!({});
        let approved = ApprovedForward {
            operation_id: "exc_real",
            revision: "1-a",
            policy: "exchange",
            terms: &terms,
            now_ms: 0,
        };
        let built = head
            .build(&forged, Some(&approved), &ProxyContext::default())
            .unwrap();
        let ids: Vec<_> = built.headers.get_all(&name).iter().collect();
        assert_eq!(ids, ["exc_real"]);
    }

    /// With `[upstream.approval_header]` an approved forward carries the signed header, once,
    /// never a client's copy; any other request carries none.
    #[test]
    fn only_an_approved_forward_carries_the_approval_header() {
        let pkcs8 =
            ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
                .unwrap();
        let name = http::HeaderName::from_static("poppy-approved");
        let mut settings = upstream();
        settings.approval_header = Some(Arc::new(ApprovalSigner::new(
            name.clone(),
            pkcs8.as_ref(),
            "kid".into(),
            std::time::Duration::from_secs(60),
        )));
        let head = UpstreamHead::new(&settings);
        let forged = request(&[("poppy-approved", "forged")]);
        let built = head.build(&forged, None, &ProxyContext::default()).unwrap();
        assert!(built.headers.get(&name).is_none(), "a client's copy");
        let terms = serde_json::json!({"price": "10.00"});
        let approved = ApprovedForward {
            operation_id: "exc_real",
            revision: "1-a",
            policy: "exchange",
            terms: &terms,
            now_ms: 0,
        };
        let built = head
            .build(&forged, Some(&approved), &ProxyContext::default())
            .unwrap();
        let values: Vec<_> = built.headers.get_all(&name).iter().collect();
        assert_eq!(values.len(), 1);
        assert_eq!(
            values[0].to_str().unwrap().split('.').count(),
            3,
            "a compact JWS"
        );
        let mut passthrough = RequestHeader::build("GET", b"/", None).unwrap();
        passthrough
            .insert_header("poppy-approved", "forged")
            .unwrap();
        passthrough
            .insert_header("poppy-operation-id", "forged")
            .unwrap();
        head.strip_own(&mut passthrough);
        assert!(passthrough.headers.is_empty());
    }

    #[test]
    fn the_body_length_and_a_host_are_set() {
        let head = UpstreamHead::new(&upstream());
        let built = head
            .build(
                &request(&[("content-length", "99")]),
                None,
                &ProxyContext::default(),
            )
            .unwrap();
        assert_eq!(built.headers.get("content-length").unwrap(), "2");
        assert_eq!(built.headers.get_all("content-length").iter().count(), 1);
        assert_eq!(built.headers.get("host").unwrap(), "api.internal");
        assert_eq!(built.uri.to_string(), "/orders?x=1");
        let built = head
            .build(
                &request(&[("host", "shop.example")]),
                None,
                &ProxyContext::default(),
            )
            .unwrap();
        assert_eq!(built.headers.get("host").unwrap(), "shop.example");
    }
}
