//! A test server (the counting upstream, the MCP server, the test agent, the authorization
//! server) served on a thread and a tokio runtime of its own until dropped, so that a test's
//! own runtime, blocked or busy, never starves what the gateway calls.

use std::future::{Future, IntoFuture};
use std::thread::JoinHandle;
use std::time::Duration;

use axum::Router;
use tokio::sync::oneshot;

/// A server running on its own thread; dropping it stops the server and joins the thread.
pub struct Served {
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Served {
    /// Serve `app` on `listener` (already bound, non-blocking) on a thread named `name`, with a
    /// current-thread runtime.
    pub fn app(name: String, listener: std::net::TcpListener, app: Router) -> Served {
        Served::start(name, 1, listener, move |listener| {
            axum::serve(listener, app).into_future()
        })
    }

    /// Run `serve` (given the tokio listener for `listener`) on a thread named `name`, with
    /// `workers` runtime threads (1: a current-thread runtime), until it ends or this is dropped.
    pub fn start<F, Fut>(
        name: String,
        workers: usize,
        listener: std::net::TcpListener,
        serve: F,
    ) -> Served
    where
        F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
        Fut: Future<Output = std::io::Result<()>>,
    {
        let (shutdown, stopped) = oneshot::channel::<()>();
        let thread_name = name.clone();
        let thread = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || {
                let runtime = if workers <= 1 {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                } else {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(workers)
                        .enable_all()
                        .build()
                }
                .unwrap_or_else(|e| panic!("{name}: tokio runtime: {e}"));
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .unwrap_or_else(|e| panic!("{name}: tokio listener: {e}"));
                    tokio::select! {
                        result = serve(listener) => {
                            if let Err(error) = result {
                                eprintln!("{name} stopped: {error}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
                runtime.shutdown_timeout(Duration::from_millis(500));
            })
            .expect("spawn a test server's thread");
        Served {
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
