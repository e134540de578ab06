//! The bounded queue between the requests that raise events and the one worker that sends
//! them ([`super::sender`]). Emitting never blocks and never waits: an event that finds the
//! queue full is dropped and counted (`poppy_webhook_events_total{result="dropped"}`).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lru::LruCache;
use prometheus::{IntCounterVec, IntGauge};
use tokio::sync::mpsc;

use super::event::Event;
use crate::config::{EventType, Webhook};

/// Event IDs remembered, so that an operation asked about again (every retry of a held
/// request, every retry of an unknown one) raises its event once per process.
const REMEMBERED: usize = 10_000;

/// What became of an event, as `poppy_webhook_events_total{result}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// A `2xx` from the receiver.
    Sent,
    /// Never tried to the end: the queue was full, or the gateway stopped first.
    Dropped,
    /// Given up: refused (`3xx`, `4xx`), or still failing after `max_attempts` or `max_age`.
    Failed,
}

impl Fate {
    pub(crate) const ALL: [Fate; 3] = [Fate::Sent, Fate::Dropped, Fate::Failed];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Fate::Sent => "sent",
            Fate::Dropped => "dropped",
            Fate::Failed => "failed",
        }
    }
}

/// The webhook's metrics, registered by `crate::metrics`.
#[derive(Clone)]
pub(crate) struct Counters {
    /// `poppy_webhook_events_total{type, result}`.
    pub(crate) events: IntCounterVec,
    /// `poppy_webhook_queued`: events waiting or being retried.
    pub(crate) queued: IntGauge,
}

/// Events waiting or being retried, bounded by `[webhook] queue`; shared by both ends.
pub(crate) struct Pending {
    count: AtomicUsize,
    capacity: usize,
    counters: Counters,
}

impl Pending {
    /// Take a place for one event: `false` when the queue is full.
    fn reserve(&self) -> bool {
        let taken = self
            .count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .is_ok();
        if taken {
            self.counters.queued.inc();
        }
        taken
    }

    /// An event's fate is known: count it, and free its place.
    pub(crate) fn settle(&self, kind: EventType, fate: Fate) {
        self.count(kind, fate);
        self.count.fetch_sub(1, Ordering::AcqRel);
        self.counters.queued.dec();
    }

    fn count(&self, kind: EventType, fate: Fate) {
        self.counters
            .events
            .with_label_values(&[kind.as_str(), fate.as_str()])
            .inc();
    }
}

/// The emitting end: cheap to call from any request, on any runtime.
pub(crate) struct EventQueue {
    sends: Vec<EventType>,
    /// `[webhook] page_links`: else an event's page link is dropped before it is queued.
    page_links: bool,
    sender: mpsc::UnboundedSender<Event>,
    pending: Arc<Pending>,
    seen: Mutex<LruCache<String, ()>>,
    /// Whether the last event found the queue full (one warning per overflow, not per event).
    full: AtomicBool,
}

/// The worker's end.
pub(crate) struct Outbox {
    pub(crate) receiver: mpsc::UnboundedReceiver<Event>,
    pub(crate) pending: Arc<Pending>,
}

/// A queue for `settings`, counted in `counters`: its emitting and its sending ends.
pub(crate) fn queue(settings: &Webhook, counters: Counters) -> (EventQueue, Outbox) {
    for kind in &settings.events {
        for fate in Fate::ALL {
            counters
                .events
                .with_label_values(&[kind.as_str(), fate.as_str()]);
        }
    }
    let (sender, receiver) = mpsc::unbounded_channel();
    let pending = Arc::new(Pending {
        count: AtomicUsize::new(0),
        capacity: settings.queue,
        counters,
    });
    let remembered = NonZeroUsize::new(REMEMBERED).unwrap_or(NonZeroUsize::MIN);
    (
        EventQueue {
            sends: settings.events.clone(),
            page_links: settings.page_links,
            sender,
            pending: Arc::clone(&pending),
            seen: Mutex::new(LruCache::new(remembered)),
            full: AtomicBool::new(false),
        },
        Outbox { receiver, pending },
    )
}

impl EventQueue {
    /// Queue `event` for sending, unless its type is not sent, it was queued already, or the
    /// queue is full (then it is dropped and counted). Never blocks.
    pub(crate) fn emit(&self, mut event: Event) {
        if !self.sends.contains(&event.kind) || !self.first(&event.id) {
            return;
        }
        if !self.page_links {
            event.approval_url = None;
        }
        let kind = event.kind;
        if !self.pending.reserve() {
            self.pending.count(kind, Fate::Dropped);
            // Not sent: the next time it happens may find room.
            self.seen_lock().pop(&event.id);
            if !self.full.swap(true, Ordering::Relaxed) {
                tracing::warn!(event_type = kind.as_str(), operation_id = %event.operation_id, "webhook queue full: events are dropped (counted in poppy_webhook_events_total{{result=\"dropped\"}}) until the receiver catches up");
            }
            return;
        }
        self.full.store(false, Ordering::Relaxed);
        if self.sender.send(event).is_err() {
            // The worker has stopped (the gateway is shutting down).
            self.pending.settle(kind, Fate::Dropped);
        }
    }

    /// Whether `id` is new to this process (and remember it).
    fn first(&self, id: &str) -> bool {
        self.seen_lock().put(id.to_owned(), ()).is_none()
    }

    fn seen_lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, ()>> {
        match self.seen.lock() {
            Ok(seen) => seen,
            // A panic elsewhere while holding the lock: the cache is still valid.
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WebhookSecret;
    use crate::events::event::Happened;
    use std::time::Duration;

    fn settings(queue: usize, events: Vec<EventType>) -> Webhook {
        Webhook {
            url: "http://127.0.0.1:1/".into(),
            secret: WebhookSecret::parse(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap(),
            secret_source: "test".into(),
            events,
            queue,
            timeout: Duration::from_secs(1),
            max_attempts: 1,
            max_age: Duration::from_secs(1),
            retry_backoff: Duration::from_secs(1),
            ca_pem: None,
            page_links: false,
        }
    }

    fn counters() -> Counters {
        Counters {
            events: IntCounterVec::new(
                prometheus::Opts::new("events", "test"),
                &["type", "result"],
            )
            .unwrap(),
            queued: IntGauge::new("queued", "test").unwrap(),
        }
    }

    fn event(kind: EventType, operation_id: &str) -> Event {
        Event::new(Happened {
            kind,
            operation_id,
            policy: "exchange",
            route: "default",
            outcome: kind.as_str(),
            at_ms: 0,
        })
    }

    fn counted(counters: &Counters, kind: EventType, fate: Fate) -> u64 {
        counters
            .events
            .with_label_values(&[kind.as_str(), fate.as_str()])
            .get()
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let counters = counters();
        let (queue, mut outbox) = queue(&settings(2, EventType::ALL.to_vec()), counters.clone());
        for id in ["exc_1", "exc_2", "exc_3", "exc_4"] {
            queue.emit(event(EventType::Held, id));
        }
        assert_eq!(counted(&counters, EventType::Held, Fate::Dropped), 2);
        assert_eq!(counters.queued.get(), 2);
        let first = outbox.receiver.try_recv().unwrap();
        assert_eq!(first.operation_id, "exc_1");
        outbox.pending.settle(first.kind, Fate::Sent);
        assert_eq!(counters.queued.get(), 1);
        // A place is free again.
        queue.emit(event(EventType::Held, "exc_5"));
        assert_eq!(counted(&counters, EventType::Held, Fate::Dropped), 2);
        assert_eq!(counted(&counters, EventType::Held, Fate::Sent), 1);
    }

    #[test]
    fn each_happening_is_queued_once_and_only_chosen_types() {
        let counters = counters();
        let (queue, mut outbox) = queue(&settings(10, vec![EventType::Unknown]), counters);
        queue.emit(event(EventType::Held, "exc_1"));
        queue.emit(event(EventType::Unknown, "exc_1"));
        queue.emit(event(EventType::Unknown, "exc_1"));
        assert_eq!(outbox.receiver.try_recv().unwrap().kind, EventType::Unknown);
        assert!(outbox.receiver.try_recv().is_err());
    }
}
