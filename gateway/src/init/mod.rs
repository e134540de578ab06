//! `poppy-gateway init`: draft policy files from an OpenAPI description (`--openapi`) or a
//! running MCP server's tools (`--mcp`), for the operator to review and finish.
//!
//! `draft`, `openapi` and `mcp` are pure (a parsed description in, policy text out); only
//! `cli` (files) and `fetch` (the MCP server) do I/O.

pub mod cli;
mod description;
mod draft;
mod fetch;
mod mcp;
mod openapi;
mod text;
