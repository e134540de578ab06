//! The one upstream writer: how every request the gateway sends itself goes out (approved
//! forwards, their resumes and follow-ups, lookups, poppy.json, and MCP messages that need no
//! approval), whether its answer is then read whole (`upstream.rs`) or streamed to the client
//! (`mcp_forward.rs`).
//!
//! The head is the request's own method, target and headers (as `ingress::forward` left them),
//! the operation ID header only on an approved forward (never a client's copy), the body's
//! `Content-Length` (the body is always sent whole), the request's proxy headers
//! (`forwarded::ProxyContext`, passed explicitly), the current span's `traceparent` (tracing
//! on; `telemetry`) and a `Host` when it has none.

use bytes::Bytes;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;

use super::forwarded::ProxyContext;
use crate::config::Upstream;
use crate::ingress::ForwardRequest;

/// What every request head to one upstream is built with.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamHead {
    /// `Host` for requests that carry none (HTTP/1.1 needs one).
    default_host: http::HeaderValue,
    /// The header an approved forward carries its operation ID in.
    operation_id_header: http::HeaderName,
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
        }
    }

    /// The request line and headers of `request`. `operation_id`: set on an approved forward
    /// only. An error means nothing can be sent.
    pub(crate) fn build(
        &self,
        request: &ForwardRequest,
        operation_id: Option<&str>,
        proxy: &ProxyContext,
    ) -> pingora::Result<RequestHeader> {
        let mut header = RequestHeader::build(
            request.method.clone(),
            request.path_and_query.as_bytes(),
            Some(request.headers.len() + 3),
        )?;
        for (name, value) in &request.headers {
            // Only an approved forward says which operation it performs.
            if *name != self.operation_id_header {
                header.append_header(name.clone(), value.clone())?;
            }
        }
        if let Some(value) = operation_id.and_then(|id| http::HeaderValue::from_str(id).ok()) {
            header.insert_header(self.operation_id_header.clone(), value)?;
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
        let built = head
            .build(&forged, Some("exc_real"), &ProxyContext::default())
            .unwrap();
        let ids: Vec<_> = built.headers.get_all(&name).iter().collect();
        assert_eq!(ids, ["exc_real"]);
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
