//! The bench's reference proxy: a minimal pingora `ProxyHttp` that forwards everything to one
//! upstream, built with the gateway's pingora features, allocator and runtime settings. Its
//! row separates what pingora itself costs from what the gateway adds (BENCHMARKS.md).
//! With `--answer`, it answers every request itself instead (the body read, then a fixed
//! `403` of a mint's size): the least any pingora service that answers requests can cost,
//! against which the gateway's minting and replay rows are read.
//!
//!     poppy-bench-pingora --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT --threads N [--answer 403]

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::server::configuration::{Opt, ServerConf};

// The gateway's allocator (gateway/src/main.rs), so the row compares like with like.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One struct, one hook that matters: every request goes to the same peer (or, answering,
/// none does).
struct BareProxy {
    peer: HttpPeer,
    answer: bool,
}

#[async_trait]
impl ProxyHttp for BareProxy {
    type CTX = ();

    fn new_ctx(&self) -> Self::CTX {}

    /// Answering: read the body, then write the fixed 403 the way the gateway writes its own
    /// answers (`proxy/reply.rs`: the header, then the body, in two calls).
    async fn request_filter(
        &self,
        session: &mut Session,
        _ctx: &mut Self::CTX,
    ) -> pingora::Result<bool> {
        if !self.answer {
            return Ok(false);
        }
        while session.read_request_body().await?.is_some() {}
        let body = Bytes::from_static(poppy_bench::scenario::MINT_ANSWER.as_bytes());
        let mut header = ResponseHeader::build(403, Some(3))?;
        header.append_header("content-type", "application/json")?;
        header.append_header("cache-control", "no-store")?;
        header.insert_header("content-length", body.len().to_string())?;
        session
            .write_response_header(Box::new(header), false)
            .await?;
        session.write_response_body(Some(body), true).await?;
        Ok(true)
    }

    /// The one upstream, with the gateway's connect timeouts.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut Self::CTX,
    ) -> pingora::Result<Box<HttpPeer>> {
        Ok(Box::new(self.peer.clone()))
    }
}

struct Args {
    listen: String,
    upstream: String,
    threads: usize,
    answer: bool,
}

fn args() -> Result<Args, String> {
    let mut listen = None;
    let mut upstream = None;
    let mut threads = 1;
    let mut answer = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = Some(value),
            "--upstream" => upstream = Some(value),
            "--threads" => threads = value.parse().map_err(|_| "--threads: not a number")?,
            "--answer" if value == "403" => answer = true,
            "--answer" => return Err("--answer: only 403 is answered".into()),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(Args {
        listen: listen.ok_or("--listen is required")?,
        upstream: upstream.ok_or("--upstream is required")?,
        threads,
        answer,
    })
}

fn main() {
    let args = match args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("poppy-bench-pingora: {error}");
            std::process::exit(2);
        }
    };
    // The gateway's server settings (gateway/src/server.rs): one single-threaded runtime per
    // thread, no work stealing.
    let conf = ServerConf {
        threads: args.threads,
        work_stealing: false,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(Opt::default(), conf);
    server.bootstrap();
    let mut peer = HttpPeer::new(args.upstream.as_str(), false, String::new());
    peer.options.connection_timeout = Some(Duration::from_secs(5));
    peer.options.total_connection_timeout = Some(Duration::from_secs(5));
    let mut proxy = http_proxy_service(
        &server.configuration,
        BareProxy {
            peer,
            answer: args.answer,
        },
    );
    proxy.add_tcp(&args.listen);
    server.add_service(proxy);
    server.run_forever();
}
