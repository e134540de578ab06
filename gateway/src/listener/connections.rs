//! Client connections under the limits: how many are open, how long one may wait for a
//! request head, and which one is closed when a new one needs its place.
//!
//! A connection counts from the moment it is accepted, its TLS handshake included (pingora
//! would handshake before any app sees the connection, outside every limit, for up to 60 s),
//! so the gateway does the handshake itself ([`crate::tls::Handshake`]).
//!
//! A connection is *waiting* while it owes the gateway a request head: in its TLS handshake,
//! before its first request, idle between two (HTTP/1.1). A wait longer than
//! `header_read_timeout` closes it. At the cap a new connection takes the place of the one
//! that has been waiting longest, as nginx reuses idle connections when it runs out: a flood
//! of connections that never send anything can no longer lock real clients out, however long
//! the deadline. Only when every connection is serving a request does the next get `503`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::{HttpServerApp, HttpServerOptions, ReusedHttpStream, ServerApp};
use pingora::protocols::Stream;
use pingora::protocols::http::ServerSession;
use pingora::protocols::http::v2::server::H2Options;
use pingora::server::ShutdownWatch;
use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::h2::{Opening, PREFACE};
use super::watched::{HeadWatch, Watched};
use crate::metrics::{Limit, Metrics};
use crate::tls::Handshake;

/// Connections over the cap being answered `503` at once; beyond, they are closed unanswered
/// (each answer holds a file descriptor for up to `header_read_timeout`).
pub(crate) const REFUSING_AT_ONCE: usize = 64;

/// The open connections of the listeners one cap covers (the proxy's and the conversations
/// service's).
pub(crate) struct Connections {
    cap: usize,
    header_timeout: Duration,
    open: AtomicUsize,
    refusing: AtomicUsize,
    /// The waiting connections, oldest wait first (keys never repeat).
    waiting: Mutex<BTreeMap<u64, Arc<Shared>>>,
    next_wait: AtomicU64,
    metrics: Arc<Metrics>,
}

/// One connection, as its own task and the registry see it.
struct Shared {
    /// `Some((key, since))` while it waits for a request head, `None` while it serves one.
    /// Changed only with the registry locked, so the two agree.
    wait: watch::Sender<Option<(u64, Instant)>>,
    /// The key of the wait the registry chose to end, and the nudge that says so.
    reclaimed: AtomicU64,
    reclaim: Notify,
}

/// What a new connection gets.
pub(crate) enum Admission {
    Open(Connection),
    /// Over the cap: answer `503` (while the guard lives).
    Refuse(Refusing),
    /// Over the cap with [`REFUSING_AT_ONCE`] being answered already: close it.
    Close,
}

impl Connections {
    pub(crate) fn new(cap: usize, header_timeout: Duration, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Connections {
            cap,
            header_timeout,
            open: AtomicUsize::new(0),
            refusing: AtomicUsize::new(0),
            waiting: Mutex::new(BTreeMap::new()),
            next_wait: AtomicU64::new(1),
            metrics,
        })
    }

    fn waiting(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Shared>>> {
        // The map only names connections; whatever a panic left in it is still usable.
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Count a new connection in (waiting for its first head), making room at the cap by
    /// closing the connection that has waited longest, or refuse it.
    pub(crate) fn admit(self: &Arc<Self>) -> Admission {
        let open = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        if open > self.cap && !self.reclaim_oldest() {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.metrics.limit_hit(Limit::Connections);
            let refusing = self.refusing.fetch_add(1, Ordering::AcqRel);
            if refusing >= REFUSING_AT_ONCE {
                self.refusing.fetch_sub(1, Ordering::AcqRel);
                return Admission::Close;
            }
            return Admission::Refuse(Refusing(Arc::clone(self)));
        }
        self.metrics.connections_open(open);
        let (wait, _) = watch::channel(None);
        let connection = Connection {
            connections: Arc::clone(self),
            shared: Arc::new(Shared {
                wait,
                reclaimed: AtomicU64::new(0),
                reclaim: Notify::new(),
            }),
        };
        connection.wait_for_head();
        Admission::Open(connection)
    }

    /// Tell the connection that has waited longest to close; `false` when none waits.
    fn reclaim_oldest(&self) -> bool {
        let Some((key, shared)) = self.waiting().pop_first() else {
            return false;
        };
        shared.reclaimed.store(key, Ordering::Release);
        shared.reclaim.notify_one();
        self.metrics.limit_hit(Limit::ConnectionsReclaimed);
        true
    }
}

/// Held while a connection over the cap is answered.
pub(crate) struct Refusing(Arc<Connections>);

impl Drop for Refusing {
    fn drop(&mut self) {
        self.0.refusing.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A handle on one open connection: its wait for request heads. Every clone is the same
/// connection; it is counted open until [`Connection::close`]'s guard or the last handle is
/// gone (see [`Open`]).
#[derive(Clone)]
pub(crate) struct Connection {
    connections: Arc<Connections>,
    shared: Arc<Shared>,
}

impl Connection {
    /// The connection now waits for a request head (from now: a new wait); nothing changes if
    /// it already does.
    pub(crate) fn wait_for_head(&self) {
        let mut waiting = self.connections.waiting();
        if self.shared.wait.borrow().is_some() {
            return;
        }
        let key = self.connections.next_wait.fetch_add(1, Ordering::Relaxed);
        waiting.insert(key, Arc::clone(&self.shared));
        self.shared.wait.send_replace(Some((key, Instant::now())));
    }

    /// A request head (or an HTTP/2 preface) has arrived: the connection serves, and is not
    /// closed for the limits until it waits again.
    pub(crate) fn serving(&self) {
        let mut waiting = self.connections.waiting();
        if let Some((key, _)) = self.shared.wait.send_replace(None) {
            waiting.remove(&key);
        }
    }

    /// Whether it waits for a request head now.
    pub(crate) fn is_waiting(&self) -> bool {
        self.shared.wait.borrow().is_some()
    }

    /// Resolves when the limits close the connection: a wait longer than the header deadline,
    /// or its place given to a new connection. Never while it serves a request.
    async fn closed_by_limits(&self) {
        let mut wait = self.shared.wait.subscribe();
        loop {
            let current = *wait.borrow_and_update();
            let Some((key, since)) = current else {
                // The sender lives as long as `self`.
                let _ = wait.changed().await;
                continue;
            };
            tokio::select! {
                () = tokio::time::sleep_until(since + self.connections.header_timeout) => {
                    if *wait.borrow() == current {
                        // Counted before the connection is dropped, so whoever sees it closed
                        // sees it counted.
                        self.connections.metrics.limit_hit(Limit::HeaderTimeout);
                        return;
                    }
                }
                () = self.shared.reclaim.notified() => {
                    // A head that arrived as its place was taken keeps the connection.
                    if self.shared.reclaimed.load(Ordering::Acquire) == key
                        && *wait.borrow() == current
                    {
                        return;
                    }
                }
                _ = wait.changed() => {}
            }
        }
    }
}

impl HeadWatch for Connection {
    fn serving(&self) {
        Connection::serving(self)
    }

    fn is_waiting(&self) -> bool {
        Connection::is_waiting(self)
    }
}

/// Counts the connection open until dropped.
struct Open(Connection);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.serving();
        let connections = &self.0.connections;
        let open = connections.open.fetch_sub(1, Ordering::AcqRel) - 1;
        connections.metrics.connections_open(open);
    }
}

tokio::task_local! {
    /// The connection the current task serves (HTTP/1.1; each HTTP/2 stream has a task of its own).
    static CONNECTION: Connection;
}

/// The current request's head has been read (called from the first request hook).
pub(crate) fn head_read() {
    let _ = CONNECTION.try_with(Connection::serving);
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

/// The connection limits around an app (pingora's HTTP proxy, the conversations service):
/// the cap, the header deadline (from accept: a TLS handshake must finish within it too) and
/// the TLS handshake itself.
pub(crate) struct LimitedApp<A> {
    pub(crate) inner: Arc<A>,
    pub(crate) connections: Arc<Connections>,
    /// `[server.tls]`: the handshake to do first.
    pub(crate) tls: Option<Handshake>,
    /// Cleartext HTTP/2 is on (see h2.rs).
    pub(crate) h2c: bool,
}

impl<A> LimitedApp<A> {
    /// The TLS handshake when there is one to do; `None` when it failed. Boxed: its state is
    /// large, and would otherwise be part of every connection's future, TLS or not, for as
    /// long as the connection lives.
    async fn handshake(&self, stream: Stream) -> Option<Stream> {
        match &self.tls {
            Some(tls) => Box::pin(tls.accept(stream)).await,
            None => Some(stream),
        }
    }

    /// Answer a connection over the cap `503` (in HTTP/2 for an HTTP/2 client: HTTP/1.1 bytes
    /// would be a protocol error to it), within the header deadline, and close it.
    async fn refuse(&self, stream: Stream) {
        let within = self.connections.header_timeout;
        let refused = async {
            let Some(mut stream) = self.handshake(stream).await else {
                return;
            };
            if super::h2::opening(&mut stream, self.h2c).await == Opening::Http1 {
                let _ = stream.write_all(&busy_response()).await;
                let _ = stream.shutdown().await;
            } else {
                super::h2::refuse(stream, BUSY_BODY, within).await;
            }
        };
        let _ = tokio::time::timeout(within, refused).await;
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for LimitedApp<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let connection = match self.connections.admit() {
            Admission::Open(connection) => connection,
            Admission::Refuse(_refusing) => {
                // Boxed for the same reason as the handshake.
                Box::pin(self.refuse(stream)).await;
                return None;
            }
            Admission::Close => return None,
        };
        let open = Open(connection.clone());
        let served = async {
            let mut stream = self.handshake(stream).await?;
            let stream = match super::h2::opening(&mut stream, self.h2c).await {
                Opening::Http1 => Watched::http1(stream, Box::new(connection.clone())),
                // The preface is what HTTP/2 sends first; from then on pingora's handshake and
                // `h2_idle_timeout` bound the connection.
                Opening::Http2Preface => {
                    connection.serving();
                    stream
                }
                Opening::Http2Negotiated => {
                    Watched::http2(stream, PREFACE.len(), Box::new(connection.clone()))
                }
            };
            CONNECTION
                .scope(connection.clone(), self.inner.process_new(stream, shutdown))
                .await
        };
        let reused = tokio::select! {
            reused = served => reused,
            () = open.0.closed_by_limits() => None,
        };
        drop(open);
        reused
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await
    }
}

/// An HTTP app whose HTTP/1.1 connections wait for a head again between two requests, so
/// that an idle kept-alive connection is under the header deadline and can give its place.
pub(crate) struct Requests<A> {
    pub(crate) inner: Arc<A>,
}

#[async_trait]
impl<A: HttpServerApp + Send + Sync + 'static> HttpServerApp for Requests<A> {
    async fn process_new_http(
        self: &Arc<Self>,
        session: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        // A connection's first request starts in the wait that began at accept.
        let _ = CONNECTION.try_with(Connection::wait_for_head);
        self.inner.process_new_http(session, shutdown).await
    }

    fn h2_options(&self) -> Option<H2Options> {
        self.inner.h2_options()
    }

    fn server_options(&self) -> Option<&HttpServerOptions> {
        self.inner.server_options()
    }

    async fn http_cleanup(&self) {
        self.inner.http_cleanup().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connections(cap: usize) -> Arc<Connections> {
        Connections::new(
            cap,
            Duration::from_secs(60),
            Arc::new(Metrics::new().unwrap()),
        )
    }

    fn open(connections: &Arc<Connections>) -> Connection {
        match connections.admit() {
            Admission::Open(connection) => connection,
            _ => panic!("not admitted"),
        }
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

    #[tokio::test]
    async fn at_the_cap_the_longest_wait_gives_its_place() {
        let connections = connections(2);
        let first = open(&connections);
        let second = open(&connections);
        // The first serves a request: the second has waited longest.
        first.serving();
        let third = open(&connections);
        tokio::time::timeout(Duration::from_secs(1), second.closed_by_limits())
            .await
            .expect("the waiting connection is told to close");
        assert!(!first.is_waiting() && third.is_waiting());
        // Nothing waits now but the third; the next takes its place.
        let _fourth = open(&connections);
        tokio::time::timeout(Duration::from_secs(1), third.closed_by_limits())
            .await
            .expect("the third gives its place");
    }

    #[tokio::test]
    async fn when_every_connection_serves_the_next_is_refused() {
        let connections = connections(1);
        let only = open(&connections);
        only.serving();
        assert!(matches!(connections.admit(), Admission::Refuse(_)));
        let mut refusing = Vec::new();
        for _ in 0..REFUSING_AT_ONCE {
            match connections.admit() {
                Admission::Refuse(guard) => refusing.push(guard),
                _ => panic!("refused with an answer"),
            }
        }
        assert!(matches!(connections.admit(), Admission::Close));
        drop(refusing);
        assert!(matches!(connections.admit(), Admission::Refuse(_)));
    }

    #[tokio::test]
    async fn a_head_that_arrives_as_its_place_is_taken_keeps_the_connection() {
        let connections = connections(1);
        let first = open(&connections);
        let _second = open(&connections);
        // The reclaim was sent; the head arrives before the connection acted on it.
        first.serving();
        let closed =
            tokio::time::timeout(Duration::from_millis(100), first.closed_by_limits()).await;
        assert!(closed.is_err(), "a serving connection is not closed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_longer_than_the_deadline_closes_the_connection() {
        let connections = connections(10);
        let connection = open(&connections);
        connection.serving();
        let deadline = connection.closed_by_limits();
        tokio::pin!(deadline);
        // Serving: no deadline, however long.
        assert!(
            tokio::time::timeout(Duration::from_secs(600), &mut deadline)
                .await
                .is_err()
        );
        // Waiting again (kept alive): the deadline runs from now.
        connection.wait_for_head();
        let started = Instant::now();
        deadline.await;
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }
}
