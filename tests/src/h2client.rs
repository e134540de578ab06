//! An HTTP/2 client that does what a test needs frame by frame: many streams on one
//! connection, a body in as many DATA frames as asked. Cleartext, prior knowledge (the gateway
//! with `h2c = true`); over TLS the tests use curl.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::net::TcpStream;

use crate::agent::Request;
use crate::answer::Answer;

/// Every exchange of this client ends within it.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// One HTTP/2 connection.
#[derive(Clone)]
pub struct H2Connection {
    send: SendRequest<Bytes>,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS, as the connection saw it.
    max_streams: usize,
}

/// How one stream ended.
#[derive(Debug)]
pub enum H2Outcome {
    /// A complete answer.
    Answered(Answer),
    /// No answer: the stream was reset or the connection closed (GOAWAY), with h2's reason.
    Failed(String),
}

impl H2Outcome {
    /// The answer, or a panic naming how the stream ended instead.
    pub fn answer(self, context: &str) -> Answer {
        match self {
            H2Outcome::Answered(answer) => answer,
            H2Outcome::Failed(reason) => panic!("{context}: no HTTP answer, {reason}"),
        }
    }
}

impl H2Connection {
    /// Open a connection with prior knowledge to `addr` and finish the SETTINGS exchange.
    pub async fn open(addr: SocketAddr) -> H2Connection {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (send, mut connection) = h2::client::Builder::new()
            // Room for every stream a test opens; the server's own limit is what counts.
            .initial_max_send_streams(1000)
            .handshake::<_, Bytes>(tcp)
            .await
            .unwrap();
        let mut ping = connection.ping_pong().expect("a ping handle");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        // The server sends its SETTINGS before it answers a PING: once the PONG is back, the
        // client has applied them (the concurrent-stream limit among them).
        tokio::time::timeout(Duration::from_secs(10), ping.ping(h2::Ping::opaque()))
            .await
            .expect("a PONG within 10 s")
            .unwrap();
        let send = send.ready().await.unwrap();
        let max_streams = send.current_max_send_streams();
        H2Connection { send, max_streams }
    }

    /// SETTINGS_MAX_CONCURRENT_STREAMS the server announced.
    pub fn max_streams(&self) -> usize {
        self.max_streams
    }

    /// Send `request` with its body in `frames` DATA frames (at least one byte each; an empty
    /// body is sent with the HEADERS frame), and read the answer.
    pub async fn send(&self, request: &Request, frames: usize) -> H2Outcome {
        match tokio::time::timeout(EXCHANGE_TIMEOUT, self.exchange(request, frames)).await {
            Ok(Ok(answer)) => H2Outcome::Answered(answer),
            Ok(Err(e)) => H2Outcome::Failed(e.to_string()),
            Err(_) => H2Outcome::Failed(format!("no answer within {EXCHANGE_TIMEOUT:?}")),
        }
    }

    async fn exchange(&self, request: &Request, frames: usize) -> Result<Answer, h2::Error> {
        let mut builder = http::Request::builder()
            .method(request.method.as_str())
            .uri(if request.path.starts_with('/') {
                format!("http://localhost{}", request.path)
            } else {
                // CONNECT's authority form: h2 sends `:authority` and no `:path`.
                request.path.clone()
            });
        for (name, value) in request.wire_headers() {
            builder = builder.header(name, value);
        }
        let head = builder.body(()).unwrap();
        // Waits while the server's concurrent-stream limit is reached, as clients do.
        let mut send = self.send.clone().ready().await?;
        let (response, mut body) = send.send_request(head, request.body.is_empty())?;
        if !request.body.is_empty() {
            let chunks = split(&request.body, frames);
            let last = chunks.len() - 1;
            for (i, chunk) in chunks.into_iter().enumerate() {
                body.reserve_capacity(chunk.len());
                // Flow control: wait for the window the chunk needs.
                while body.capacity() < chunk.len() {
                    match std::future::poll_fn(|cx| body.poll_capacity(cx)).await {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Err(e),
                        None => break,
                    }
                }
                body.send_data(chunk, i == last)?;
            }
        }
        let response = response.await?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let mut received = response.into_body();
        let mut body = Vec::new();
        while let Some(chunk) = received.data().await {
            let chunk = chunk?;
            let _ = received.flow_control().release_capacity(chunk.len());
            body.extend_from_slice(&chunk);
        }
        Ok(Answer {
            request: format!("h2 {}", request.describe()),
            status,
            headers,
            body,
        })
    }
}

/// `body` in `frames` pieces of nearly equal length (fewer when the body is shorter).
fn split(body: &[u8], frames: usize) -> Vec<Bytes> {
    let frames = frames.clamp(1, body.len().max(1));
    let size = body.len().div_ceil(frames);
    body.chunks(size.max(1))
        .map(Bytes::copy_from_slice)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn a_body_splits_into_the_frames_asked_for() {
        let body = vec![b'x'; 1000];
        assert_eq!(split(&body, 200).len(), 200);
        assert_eq!(split(&body, 3).iter().map(|c| c.len()).sum::<usize>(), 1000);
        assert_eq!(split(b"ab", 10).len(), 2);
    }
}
