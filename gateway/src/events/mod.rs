//! Events for the Company's systems (`[webhook]`, docs/webhook.md): an operation held,
//! approved or declined on the approval page, performed, or of unknown outcome, POSTed to the
//! Company's URL, signed as Standard Webhooks are, retried with backoff, through a bounded
//! queue that never slows a request.
//!
//! `event`, `signature` and `retry` are pure; `queue` is the emitting end, installed once at
//! startup for the process ([`install`], like the log filter's and the introspections'
//! counters: `metrics` can't hold it, since `events` reads `config`, which reads `store`,
//! which counts in `metrics`), where `proxy::outcome`'s one place that records outcomes
//! raises events ([`sink`]); `sender` is the one worker that sends.

use std::sync::OnceLock;

pub(crate) mod event;
mod queue;
mod retry;
mod sender;
mod signature;

pub(crate) use event::{Event, Happened};
pub(crate) use queue::{Counters, EventQueue, queue};
pub(crate) use sender::Sender;

/// The process's queue: none without `[webhook]`.
static SINK: OnceLock<EventQueue> = OnceLock::new();

/// Events go to `queue` from now on (once, at startup; a second call changes nothing).
pub(crate) fn install(queue: EventQueue) {
    let _ = SINK.set(queue);
}

/// Where events go: `None` without `[webhook]`.
pub(crate) fn sink() -> Option<&'static EventQueue> {
    SINK.get()
}

/// The User decided on the Company's approval page, signed in as `subject`: raise
/// `operation.approved_on_page` (`approved`) or `operation.declined`, when `[webhook]` sends
/// it. For the page to call once its decision is recorded, with the operation's policy and
/// route (`None`: the default route).
pub(crate) fn page_decided(
    approved: bool,
    operation_id: &str,
    policy: &str,
    route: Option<&str>,
    subject: &str,
) {
    if let Some(sink) = sink() {
        let at_ms = crate::clock::now_millis();
        let route = route.unwrap_or(crate::config::DEFAULT_ROUTE);
        sink.emit(Event::page_decided(
            approved,
            operation_id,
            policy,
            route,
            subject,
            at_ms,
        ));
    }
}
