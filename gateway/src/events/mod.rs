//! Events for the Company's systems (`[webhook]`, docs/webhook.md): an operation held,
//! approved or declined on the approval page, performed, or of unknown outcome, POSTed to the
//! Company's URL, signed as Standard Webhooks are, retried with backoff, through a bounded
//! queue that never slows a request.
//!
//! `event`, `signature` and `retry` are pure; `queue` is the emitting end (what
//! `proxy::outcome`'s one place that records outcomes calls, through `Metrics::events`) and
//! `sender` the one worker that sends.

pub(crate) mod event;
mod queue;
mod retry;
mod sender;
mod signature;

pub(crate) use event::{Event, Happened};
pub(crate) use queue::{Counters, EventQueue, queue};
pub(crate) use sender::Sender;
