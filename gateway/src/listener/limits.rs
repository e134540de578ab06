//! What requests can make the gateway hold: the bytes of request bodies held at once, how
//! long a body may take to arrive, how many upstream connections are in use. (Connections and
//! their request heads: connections.rs.)
//!
//! Bodies are the big cost: a request to an action is read whole before anything is decided,
//! and held until the upstream has it. Each held body is accounted from the moment its first
//! byte is read until the last copy of it is dropped (the [`Bytes`] carries its reservation),
//! so the budget measures memory actually held, not requests in some phase.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};

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

/// `server.max_upstream_connections`: requests that may hold an upstream connection at once.
/// A request holds one of these from the moment it is classified until it is done, whether it
/// is proxied, performed or answered by the gateway: each uses at most one upstream connection
/// at a time, so the upstreams see at most this many connections in use (HTTP/2 clients can
/// otherwise open a connection per stream, `max_streams_per_connection` on each).
pub(crate) struct UpstreamSlots {
    free: Arc<tokio::sync::Semaphore>,
    max: usize,
    metrics: Arc<Metrics>,
}

/// One of [`UpstreamSlots`], given back when dropped.
#[derive(Debug)]
pub(crate) struct UpstreamSlot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    slots: Arc<UpstreamSlots>,
}

impl std::fmt::Debug for UpstreamSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSlots")
            .field("max", &self.max)
            .finish()
    }
}

impl UpstreamSlots {
    pub(crate) fn new(max: usize, metrics: Arc<Metrics>) -> Arc<UpstreamSlots> {
        Arc::new(UpstreamSlots {
            free: Arc::new(tokio::sync::Semaphore::new(max)),
            max,
            metrics,
        })
    }

    fn report(&self) {
        let in_use = self.max.saturating_sub(self.free.available_permits());
        self.metrics.upstream_connections_in_use(in_use);
    }

    /// A slot, waiting up to `wait` for one to come free (the route's `connect_timeout`:
    /// getting a connection includes waiting for one); else `503 gateway_busy`.
    pub(crate) async fn take(self: &Arc<Self>, wait: Duration) -> Result<UpstreamSlot, Refusal> {
        let permit = tokio::time::timeout(wait, Arc::clone(&self.free).acquire_owned()).await;
        match permit {
            Ok(Ok(permit)) => {
                let slot = UpstreamSlot {
                    _permit: permit,
                    slots: Arc::clone(self),
                };
                self.report();
                Ok(slot)
            }
            // Never closed; refused as if none came free.
            Ok(Err(_)) | Err(_) => {
                self.metrics.limit_hit(Limit::UpstreamConnections);
                Err(Refusal::new(
                    503,
                    "gateway_busy",
                    format!(
                        "all {} upstream connections this gateway may use are busy; nothing was performed, send the same request again",
                        self.max
                    ),
                ))
            }
        }
    }
}

impl Drop for UpstreamSlot {
    fn drop(&mut self) {
        // The permit goes back after this body; report what it will be.
        let in_use = self
            .slots
            .max
            .saturating_sub(self.slots.free.available_permits() + 1);
        self.slots.metrics.upstream_connections_in_use(in_use);
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

    #[tokio::test]
    async fn upstream_slots_wait_then_refuse_and_come_back() {
        let slots = UpstreamSlots::new(2, Arc::new(Metrics::new().unwrap()));
        let wait = Duration::from_millis(50);
        let a = slots.take(wait).await.unwrap();
        let _b = slots.take(wait).await.unwrap();
        let refused = slots.take(wait).await.unwrap_err();
        assert_eq!((refused.status, refused.error), (503, "gateway_busy"));
        // A waiting request gets the slot given back meanwhile.
        let waiting = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.take(Duration::from_secs(5)).await.is_ok() }
        });
        drop(a);
        assert!(waiting.await.unwrap());
    }
}
