//! Pure MCP wire code for operations (spec sections 4 and 6, "MCP"): which JSON-RPC
//! messages are calls of a tool that needs approval, the approval in `_meta`, the tool
//! results the gateway answers with, and the `id` rewrite that lets a recorded answer be
//! replayed to a retry. No pingora, no store: the adapter is `proxy::mcp_api`.

mod answer;
mod body;
mod call_answer;
mod fingerprint;
mod headers;
mod message;
mod output_schema;
mod page;
mod rewrite;
mod sse;
mod version;

#[cfg(test)]
pub(crate) use answer::RETRY_META_KEY;
pub(crate) use answer::{
    already_performed_result, approval_required_result, error_response, extension_required_result,
    page_approval_result, result_response, retry_result, tool_error_result,
};
pub(crate) use call_answer::{CallAnswer, cancelled_requests, follow_up_of, read_call_answer};
pub(crate) use fingerprint::{MCP_CONNECTION_HEADERS, call_fingerprint};
pub(crate) use headers::check_standard_headers;
#[cfg(test)]
pub(crate) use message::classify;
pub(crate) use message::{HeldCall, Incoming, Role, RpcError, read_post};
pub(crate) use output_schema::{is_tools_list, widen_tools_list_body};
pub(crate) use page::{
    PageOffer, event_stream, page_input_required_result, url_elicitation_request,
};
pub(crate) use rewrite::{Readdress, readdress_response};
pub(crate) use sse::events as sse_events;
pub(crate) use version::{McpVersion, UrlElicitation};

/// JSON-RPC error codes the gateway answers with.
pub(crate) mod codes {
    /// Invalid JSON.
    pub(crate) const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object (or a batch the gateway refuses).
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    /// The params (here: `arguments` or the approval in `_meta`) are malformed.
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    /// MCP 2026-07-28: a standard header (`Mcp-Method`, `Mcp-Name`) disagrees with the body.
    /// Older versions use [`INVALID_REQUEST`].
    pub(crate) const HEADER_MISMATCH: i64 = -32020;
}
