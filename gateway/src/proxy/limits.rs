//! What one client can make the gateway hold: the bytes of request bodies held at once, how
//! long a request's head and body may take to arrive, how many connections are open.
//!
//! Bodies are the big cost: a request to an action is read whole before anything is decided,
//! and held until the upstream has it. Each held body is accounted from the moment its first
//! byte is read until the last copy of it is dropped (the [`Bytes`] carries its reservation),
//! so the budget measures memory actually held, not requests in some phase.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use tokio::io::AsyncWriteExt;

use super::first_bytes::FirstBytes;
use super::h2::{Opening, PREFACE};
use crate::ingress::Refusal;
use crate::metrics::{Limit, Metrics};

/// The bytes of request bodies held at once, across all requests.
#[derive(Debug)]
pub(crate) struct HeldBodies {
    limit: usize,
    used: AtomicUsize,
}

impl HeldBodies {
    pub(crate) fn new(limit: usize) -> Arc<HeldBodies> {
        Arc::new(HeldBodies {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Reserve `bytes` of the budget, or `None` when it is spent.
    pub(crate) fn reserve(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        let mut reservation = Reservation {
            pool: Arc::clone(self),
            bytes: 0,
        };
        reservation.grow(bytes).then_some(reservation)
    }
}

/// Bytes reserved in [`HeldBodies`], released on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    pool: Arc<HeldBodies>,
    bytes: usize,
}

impl Reservation {
    /// Reserve `more` bytes, or `false` (and nothing more reserved) when the budget is spent.
    pub(crate) fn grow(&mut self, more: usize) -> bool {
        let pool = &self.pool;
        let grown = pool
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(more).filter(|total| *total <= pool.limit)
            })
            .is_ok();
        if grown {
            self.bytes += more;
        }
        grown
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.pool.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A body and its reservation: the reservation ends when the last `Bytes` of it is dropped.
struct HeldBody {
    bytes: BytesMut,
    _reservation: Reservation,
}

impl AsRef<[u8]> for HeldBody {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// How a request to an action is read.
#[derive(Debug, Clone)]
pub(crate) struct BodyLimits {
    /// `server.max_body_bytes`: larger bodies are refused (`413`).
    pub(crate) max_body_bytes: usize,
    /// `server.body_read_timeout`: the whole body must arrive within it (`408`).
    pub(crate) read_timeout: Duration,
    pub(crate) held: Arc<HeldBodies>,
}

/// Read the whole body of `session`, within the limits. `413` when larger (or declared
/// larger) than `max_body_bytes`; `503` + `Retry-After` when the gateway already holds
/// `max_held_body_bytes` of bodies (nothing is read, claimed or forwarded); `408` when it
/// does not arrive within `read_timeout`.
pub(crate) async fn read_body(
    session: &mut pingora::proxy::Session,
    limits: &BodyLimits,
    metrics: &Metrics,
) -> Result<Bytes, Refusal> {
    let limit = limits.max_body_bytes;
    let too_large = || {
        Refusal::new(
            413,
            "body_too_large",
            format!("the request body is larger than this gateway's limit of {limit} bytes"),
        )
    };
    let busy = || {
        metrics.limit_hit(Limit::HeldBodies);
        Refusal::new(
            503,
            "gateway_busy",
            "the gateway holds as many request bodies as it may right now; nothing was performed, send the same request again",
        )
    };
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large());
    }
    let expected = declared.map_or(0, |len| len as usize);
    let mut reservation = limits.held.reserve(expected).ok_or_else(busy)?;
    let mut body = BytesMut::with_capacity(expected);
    let read = async {
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > limit {
                        return Err(too_large());
                    }
                    let beyond = (body.len() + chunk.len()).saturating_sub(reservation.bytes);
                    if beyond > 0 && !reservation.grow(beyond) {
                        return Err(busy());
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(()),
                Err(e) => {
                    return Err(Refusal::body(format!(
                        "the request body could not be read: {e}"
                    )));
                }
            }
        }
    };
    match tokio::time::timeout(limits.read_timeout, read).await {
        Ok(Ok(())) => {}
        Ok(Err(refusal)) => return Err(refusal),
        Err(_) => {
            metrics.limit_hit(Limit::BodyTimeout);
            return Err(Refusal::new(
                408,
                "request_timeout",
                format!(
                    "the request body did not arrive within {:?}; nothing was performed",
                    limits.read_timeout
                ),
            ));
        }
    }
    Ok(Bytes::from_owner(HeldBody {
        bytes: body,
        _reservation: reservation,
    }))
}

tokio::task_local! {
    /// Set once a request's head has been read, for [`LimitedApp`]'s header deadline.
    static HEAD_READ: Arc<AtomicBool>;
}

/// Mark the current request's head as read (called from the first request hook).
pub(crate) fn head_read() {
    let _ = HEAD_READ.try_with(|read| read.store(true, Ordering::Release));
}

/// Connection and header limits around the proxy app: at most `max_connections` open at once
/// (beyond: `503` and close), and every request head (including the wait for the next request
/// on a kept-alive connection) must arrive within `header_timeout` (else the connection is
/// closed).
pub(crate) struct LimitedApp<A> {
    pub(crate) inner: Arc<A>,
    pub(crate) max_connections: usize,
    pub(crate) header_timeout: Duration,
    /// Connections open, shared by every listener the cap covers (the proxy's and the
    /// conversations service's): the cap bounds the process's client connections.
    pub(crate) open: Arc<AtomicUsize>,
    pub(crate) metrics: Arc<Metrics>,
    /// Cleartext HTTP/2 is on (see h2.rs).
    pub(crate) h2c: bool,
}

/// The body of the `503` a connection over the cap gets before it is closed.
const BUSY_BODY: &str = r#"{"error":"gateway_busy","detail":"the gateway has as many connections open as it may; nothing was performed, try again"}"#;

/// That answer in HTTP/1.1.
fn busy_response() -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BUSY_BODY}",
        BUSY_BODY.len()
    )
    .into_bytes()
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for LimitedApp<A> {
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // A kept-alive connection waits for its next request inside the next call, so the calls
        // in progress are the connections open.
        let open = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        self.metrics.connections_open(open);
        let _open = OpenGuard {
            open: &self.open,
            metrics: &self.metrics,
        };
        if open > self.max_connections {
            self.metrics.limit_hit(Limit::Connections);
            // An HTTP/2 client gets the answer in HTTP/2: HTTP/1.1 bytes would be a protocol
            // error to it, not a 503.
            let opening = tokio::time::timeout(
                self.header_timeout,
                super::h2::opening(&mut stream, self.h2c),
            )
            .await
            .unwrap_or(Opening::Http1);
            if opening == Opening::Http1 {
                let _ = stream.write_all(&busy_response()).await;
                let _ = stream.shutdown().await;
            } else {
                super::h2::refuse(stream, BUSY_BODY, self.header_timeout).await;
            }
            return None;
        }
        let read = Arc::new(AtomicBool::new(false));
        let deadline = {
            let read = Arc::clone(&read);
            async move {
                tokio::time::sleep(self.header_timeout).await;
                if read.load(Ordering::Acquire) {
                    std::future::pending::<()>().await;
                }
                // Counted before the connection is dropped, so whoever sees it closed sees
                // it counted.
                self.metrics.limit_hit(Limit::HeaderTimeout);
            }
        };
        let head_read = Arc::clone(&read);
        let served = async move {
            let stream = match super::h2::opening(&mut stream, self.h2c).await {
                Opening::Http1 => stream,
                // The preface is what HTTP/2 sends first; from then on pingora's handshake and
                // `h2_idle_timeout` bound the connection.
                Opening::Http2Preface => {
                    head_read.store(true, Ordering::Release);
                    stream
                }
                Opening::Http2Negotiated => {
                    FirstBytes::wrap(stream, PREFACE.len(), Arc::clone(&head_read))
                }
            };
            HEAD_READ
                .scope(head_read, self.inner.process_new(stream, shutdown))
                .await
        };
        tokio::select! {
            reused = served => reused,
            () = deadline => None,
        }
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await
    }
}

struct OpenGuard<'a> {
    open: &'a AtomicUsize,
    metrics: &'a Metrics,
}

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        let open = self.open.fetch_sub(1, Ordering::AcqRel) - 1;
        self.metrics.connections_open(open);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stay_within_the_budget_and_end_with_the_body() {
        let pool = HeldBodies::new(100);
        let mut a = pool.reserve(60).unwrap();
        assert!(pool.reserve(50).is_none());
        assert!(!a.grow(41));
        assert!(a.grow(40));
        assert_eq!(pool.used(), 100);
        let body = Bytes::from_owner(HeldBody {
            bytes: BytesMut::from(&b"x"[..]),
            _reservation: a,
        });
        let copy = body.clone();
        drop(body);
        assert_eq!(pool.used(), 100, "a copy still holds it");
        drop(copy);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn the_busy_answer_is_well_formed() {
        let response = busy_response();
        let text = std::str::from_utf8(&response).unwrap();
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(text.contains(&format!("content-length: {}\r\n", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"], "gateway_busy");
    }
}
