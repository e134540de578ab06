//! A TCP relay in front of an upstream that counts the connections made to it: accepted,
//! closed, and the most open at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Counts {
    accepted: AtomicUsize,
    closed: AtomicUsize,
    open: AtomicUsize,
    peak: AtomicUsize,
}

pub struct CountingFront {
    addr: SocketAddr,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingFront {
    /// Relay every connection to `to`.
    pub async fn start(to: SocketAddr) -> CountingFront {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Counts::default());
        let shared = Arc::clone(&counts);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                let open = shared.open.fetch_add(1, Ordering::SeqCst) + 1;
                shared.peak.fetch_max(open, Ordering::SeqCst);
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(to).await {
                        let (mut from_client, mut to_client) = client.into_split();
                        let (mut from_server, mut to_server) = server.into_split();
                        let back = tokio::spawn(async move {
                            let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                        });
                        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
                        // The client closed (or broke) its side: no longer its connection,
                        // whenever the upstream finishes its own side.
                        shared.open.fetch_sub(1, Ordering::SeqCst);
                        shared.closed.fetch_add(1, Ordering::SeqCst);
                        drop(to_server);
                        let _ = back.await;
                    } else {
                        shared.open.fetch_sub(1, Ordering::SeqCst);
                        shared.closed.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        CountingFront { addr, counts, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, for an `[upstream] url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn accepted(&self) -> usize {
        self.counts.accepted.load(Ordering::SeqCst)
    }

    /// Connections the client (the gateway) has closed.
    pub fn closed(&self) -> usize {
        self.counts.closed.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.counts.open.load(Ordering::SeqCst)
    }

    /// The most connections that were open at once.
    pub fn peak(&self) -> usize {
        self.counts.peak.load(Ordering::SeqCst)
    }
}

impl Drop for CountingFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}
