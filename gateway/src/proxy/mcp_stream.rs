//! An approved MCP call's event stream, passed to the client as it arrives (issue 27): a
//! server that asks the client something during the call (`elicitation/create`, sampling,
//! over SSE in a 2025-era session) waits for the answer, which the client can only give once
//! it has the question. The gateway still reads the whole stream and records it.
//!
//! Events go to the client up to the call's response, which is held back: it is delivered
//! once the executor has recorded it (with whatever came after it, and what a resumed stream
//! added), as every answer of an operation is. When the forward comes to something else
//! (an unknown outcome), the stream ends with the gateway's own result for the call. The
//! client going away changes nothing: the forward runs to its end and is recorded.

use std::future::Future;

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use tokio::sync::mpsc::UnboundedReceiver;

use super::reply::Reply;
use crate::mcp::{CallAnswer, read_call_answer};
use crate::operation::Decision;
use crate::upstream::Tapped;

/// The client's side of a streamed answer, once its header is written.
pub(crate) struct Downstream {
    /// Every byte of the upstream's stream passed on, in order.
    sent: BytesMut,
    /// Received and not passed on: an unfinished event, or the response and what follows.
    pending: BytesMut,
    /// The response came: nothing more goes out until it is recorded.
    holding: bool,
    /// The client's connection, until a write fails.
    alive: pingora::Result<()>,
}

/// Run `run` (a held call through the runner), passing what `taps` receives of its forward
/// to the client as it comes. `session_id`: the call's own `Mcp-Session-Id`. The stream's
/// [`Downstream`], when its header was written.
pub(crate) async fn stream_while<T>(
    session: &mut Session,
    run: impl Future<Output = T>,
    mut taps: UnboundedReceiver<Tapped>,
    session_id: Option<&[u8]>,
) -> (T, Option<Downstream>) {
    let mut run = std::pin::pin!(run);
    let mut downstream = None;
    let result = loop {
        tokio::select! {
            biased;
            result = &mut run => break result,
            Some(tapped) = taps.recv() => {
                pass_on(session, &mut downstream, tapped, session_id).await;
            }
        }
    };
    while let Ok(tapped) = taps.try_recv() {
        pass_on(session, &mut downstream, tapped, session_id).await;
    }
    (result, downstream)
}

async fn pass_on(
    session: &mut Session,
    downstream: &mut Option<Downstream>,
    tapped: Tapped,
    session_id: Option<&[u8]>,
) {
    match (tapped, downstream.as_mut()) {
        (Tapped::Head { status, headers }, None) => {
            let alive = match header(status, &headers, session_id) {
                Ok(header) => session.write_response_header(Box::new(header), false).await,
                Err(e) => Err(e),
            };
            *downstream = Some(Downstream {
                sent: BytesMut::new(),
                pending: BytesMut::new(),
                holding: false,
                alive,
            });
        }
        // A later forward (a resumption is not tapped; a follow-up is another request).
        (Tapped::Head { .. }, Some(_)) | (Tapped::Chunk(_), None) => {}
        (Tapped::Chunk(chunk), Some(downstream)) => {
            downstream.pending.extend_from_slice(&chunk);
            while !downstream.holding && downstream.alive.is_ok() {
                let Some(end) = event_end(&downstream.pending) else {
                    break;
                };
                let event = &downstream.pending[..end];
                if !matches!(
                    read_call_answer(200, Some(b"text/event-stream"), event),
                    CallAnswer::Unfinished { .. }
                ) {
                    downstream.holding = true;
                    break;
                }
                let event = downstream.pending.split_to(end).freeze();
                downstream.sent.extend_from_slice(&event);
                downstream.alive = session.write_response_body(Some(event), false).await;
            }
        }
    }
}

/// Where the first complete event of `bytes` ends (after its blank line), if one is there.
fn event_end(bytes: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' if bytes.get(i + 1) == Some(&b'\n') => return Some(i + 2),
            b'\r' if bytes.get(i + 1) == Some(&b'\r') => return Some(i + 2),
            b'\r' if bytes.get(i + 1..i + 4) == Some(b"\n\r\n") => return Some(i + 4),
            _ => i += 1,
        }
    }
    None
}

/// The client's header for the upstream's: its status and headers, the call's own
/// `Mcp-Session-Id`, sent chunked.
fn header(
    status: u16,
    headers: &[(String, Vec<u8>)],
    session_id: Option<&[u8]>,
) -> pingora::Result<ResponseHeader> {
    let mut header = ResponseHeader::build(status, Some(headers.len() + 2))?;
    for (name, value) in headers {
        if name != "mcp-session-id" {
            header.append_header(name.clone(), value.as_slice())?;
        }
    }
    if let Some(session_id) = session_id {
        header.insert_header("mcp-session-id", session_id)?;
    }
    header.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
    Ok(header)
}

impl Downstream {
    /// End the stream with what the forward came to: the rest of the recorded stream (the
    /// response and what followed), or the gateway's own result for the call (`render`).
    pub(crate) async fn finish(
        mut self,
        session: &mut Session,
        decision: Decision,
        render: impl FnOnce(Decision) -> Reply,
    ) -> pingora::Result<()> {
        let rest = match &decision {
            Decision::Performed(response) | Decision::Interim(response)
                if response.body.starts_with(&self.sent) =>
            {
                response.body.slice(self.sent.len()..)
            }
            _ => {
                let reply = render(decision);
                let mut event = BytesMut::from(&b"event: message\ndata: "[..]);
                event.extend_from_slice(&reply.body);
                event.extend_from_slice(b"\n\n");
                if !self.sent.is_empty() && !self.sent.ends_with(b"\n\n") {
                    let mut separated = BytesMut::from(&b"\n\n"[..]);
                    separated.extend_from_slice(&event);
                    event = separated;
                }
                event.freeze()
            }
        };
        self.alive?;
        if !rest.is_empty() {
            session.write_response_body(Some(rest), false).await?;
        }
        self.pending.clear();
        session.write_response_body(None::<Bytes>, true).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_end_at_their_blank_line() {
        assert_eq!(event_end(b"data: a\n\ndata: b"), Some(9));
        assert_eq!(event_end(b"data: a\r\n\r\nx"), Some(11));
        assert_eq!(event_end(b"data: a\r\rx"), Some(9));
        assert_eq!(event_end(b"data: a\n"), None);
        assert_eq!(event_end(b""), None);
    }
}
