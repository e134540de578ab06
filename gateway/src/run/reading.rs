//! How an interface reads the answer to an approved forward before the driver records it:
//! the HTTP API's and the conversations service's every answer is final; an MCP call's may
//! be an interim answer with a follow-up to come (`proxy::mcp_calls`).

use crate::ingress::ForwardRequest;
use crate::store::RecordedResponse;
use crate::upstream::forwarded::ProxyContext;
use crate::upstream::{Tap, UpstreamClient};

pub(crate) use crate::operation::flow::Read;

/// How an interface reads an approved forward's answer before it is recorded: the HTTP
/// API's every answer is final; an MCP call's may not be (`proxy::mcp_calls`).
#[async_trait::async_trait]
pub(crate) trait AnswerReader: Send + Sync {
    /// What `response`, the upstream's answer to `forward`, is. `upstream`: for a reader
    /// that must ask for the rest of it (a stream to resume).
    async fn read(
        &self,
        upstream: &UpstreamClient,
        forward: &ForwardRequest,
        response: RecordedResponse,
        proxy: &ProxyContext,
    ) -> Read;
}

/// Every answer is final.
pub(crate) struct FinalAnswers;

#[async_trait::async_trait]
impl AnswerReader for FinalAnswers {
    async fn read(
        &self,
        _: &UpstreamClient,
        _: &ForwardRequest,
        response: RecordedResponse,
        _: &ProxyContext,
    ) -> Read {
        Read::Final(response)
    }
}

/// How one request's answer is read: its interface's reader, and the token it carries back
/// when it is the follow-up of an interim answer; and what the requests sent upstream for it
/// carry (its proxy headers).
pub(crate) struct Reading<'a> {
    pub(crate) reader: &'a dyn AnswerReader,
    /// `Some`: the request is a follow-up, carrying this (`None` inside: nothing).
    pub(crate) follow_up: Option<Option<String>>,
    /// Where an approved forward's event stream also goes as it arrives.
    pub(crate) tap: Option<Tap>,
    /// The request's proxy headers, for its forward and lookup (`forwarded.rs`).
    pub(crate) proxy: ProxyContext,
}

impl Reading<'_> {
    /// Every answer final, no follow-up: the HTTP API and the conversations service.
    pub(crate) fn plain(proxy: ProxyContext) -> Reading<'static> {
        Reading {
            reader: &FinalAnswers,
            follow_up: None,
            tap: None,
            proxy,
        }
    }
}
