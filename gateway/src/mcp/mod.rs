//! Pure MCP wire code for operations (spec sections 4 and 6, "MCP"): which JSON-RPC
//! messages are calls of a tool that needs approval, the approval in `_meta`, the tool
//! results the gateway answers with, and the `id` rewrite that lets a recorded answer be
//! replayed to a retry. No pingora, no store: the adapter is `proxy::mcp_api`.

mod answer;
mod fingerprint;
mod headers;
mod message;
mod no_duplicates;
mod output_schema;
mod rewrite;
mod sse;
mod version;

pub use answer::{
    RETRY_META_KEY, approval_required_result, error_response, extension_required_result,
    result_response, retry_result, tool_error_result,
};
pub use fingerprint::call_fingerprint;
pub use headers::check_standard_headers;
pub use message::{APPROVAL_META_KEY, HeldCall, Incoming, RpcError, classify};
pub use no_duplicates::duplicate_member;
pub use output_schema::{is_tools_list, widen_tools_list_body};
pub use rewrite::{Readdress, readdress_response};
pub use version::{McpVersion, PROTOCOL_VERSION_META_KEY};

/// JSON-RPC error codes the gateway answers with.
pub mod codes {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object (or a batch the gateway refuses).
    pub const INVALID_REQUEST: i64 = -32600;
    /// The params (here: `arguments` or the approval in `_meta`) are malformed.
    pub const INVALID_PARAMS: i64 = -32602;
    /// MCP 2026-07-28: a standard header (`Mcp-Method`, `Mcp-Name`) disagrees with the body.
    /// Older versions use [`INVALID_REQUEST`].
    pub const HEADER_MISMATCH: i64 = -32020;
}
