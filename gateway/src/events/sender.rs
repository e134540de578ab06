//! The one worker that sends events to `[webhook] url`: each event signed afresh per attempt
//! (`signature.rs`), retried as `retry.rs` says while new events keep being sent, and, when
//! the gateway stops, what is still queued tried once more within `server.shutdown_grace`.
//! It runs as a pingora background service, on its own runtime: nothing it waits for slows a
//! request.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::time::Instant;

use super::event::Event;
use super::queue::{Fate, Outbox};
use super::retry::{Attempted, RetryPolicy, attempted};
use super::signature::sign;
use crate::config::Webhook;
use crate::identity::HttpClient;

/// How much of a receiver's answer is read (and dropped).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The webhook's sender, for `server.rs` to run as a background service.
pub(crate) struct Sender {
    url: String,
    key: Vec<u8>,
    timeout: Duration,
    retry: RetryPolicy,
    client: HttpClient,
    /// How long, once the gateway stops, what is queued may still be tried.
    flush_within: Duration,
    /// Taken by the one run of [`BackgroundService::start`].
    outbox: Mutex<Option<Outbox>>,
}

/// An event on its way: its body (the same bytes on every attempt) and its attempts so far.
struct Delivery {
    event: Event,
    body: Vec<u8>,
    made: u32,
    since: Instant,
}

/// Deliveries waiting for their next attempt, soonest first.
struct Retries {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    waiting: std::collections::HashMap<u64, Delivery>,
    next_key: u64,
}

impl Retries {
    fn new() -> Retries {
        Retries {
            heap: BinaryHeap::new(),
            waiting: std::collections::HashMap::new(),
            next_key: 0,
        }
    }

    fn push(&mut self, at: Instant, delivery: Delivery) {
        let key = self.next_key;
        self.next_key += 1;
        self.heap.push(Reverse((at, key)));
        self.waiting.insert(key, delivery);
    }

    fn due_at(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    fn pop(&mut self) -> Option<Delivery> {
        let Reverse((_, key)) = self.heap.pop()?;
        self.waiting.remove(&key)
    }
}

impl Sender {
    /// A sender for `settings`, taking events from `outbox`.
    pub(crate) fn new(
        settings: &Webhook,
        outbox: Outbox,
        flush_within: Duration,
    ) -> Result<Sender, String> {
        Ok(Sender {
            url: settings.url.clone(),
            key: settings.secret.key().to_vec(),
            timeout: settings.timeout,
            retry: RetryPolicy {
                first_backoff: settings.retry_backoff,
                max_attempts: settings.max_attempts,
                max_age: settings.max_age,
            },
            client: HttpClient::without_redirects(settings.ca_pem.as_deref())?,
            flush_within,
            outbox: Mutex::new(Some(outbox)),
        })
    }

    /// One attempt at `delivery`: settled, or back in `retries`.
    async fn attempt(
        &self,
        mut delivery: Delivery,
        outbox: &Outbox,
        retries: &mut Retries,
        timeout: Duration,
    ) {
        let signed = sign(
            &self.key,
            &delivery.event.id,
            unix_seconds(),
            &delivery.body,
        );
        let headers = [
            ("webhook-id", signed.id.as_str()),
            ("webhook-timestamp", signed.timestamp.as_str()),
            ("webhook-signature", signed.signature.as_str()),
        ];
        let answer = self
            .client
            .post_json(
                &self.url,
                &headers,
                delivery.body.clone(),
                timeout,
                MAX_ANSWER_BYTES,
            )
            .await;
        delivery.made += 1;
        let event = &delivery.event;
        let (status, retry_after, error) = match &answer {
            Ok(posted) => (Some(posted.status), posted.retry_after, None),
            Err(e) => (None, None, Some(e.as_str())),
        };
        match attempted(status, retry_after) {
            Attempted::Delivered => {
                tracing::debug!(event_id = %event.id, event_type = event.kind.as_str(), operation_id = %event.operation_id, attempts = delivery.made, "webhook event sent");
                outbox.pending.settle(event.kind, Fate::Sent);
            }
            Attempted::Refused => {
                tracing::warn!(event_id = %event.id, event_type = event.kind.as_str(), operation_id = %event.operation_id, status, "webhook receiver refused the event; not retried");
                outbox.pending.settle(event.kind, Fate::Failed);
            }
            Attempted::Again { after } => {
                let next = self.retry.next(
                    delivery.made,
                    delivery.since.elapsed(),
                    after,
                    rand::random::<f64>(),
                );
                match next {
                    Some(pause) => {
                        tracing::debug!(event_id = %event.id, status, error, attempts = delivery.made, retry_in_ms = pause.as_millis() as u64, "webhook delivery failed; will retry");
                        retries.push(Instant::now() + pause, delivery);
                    }
                    None => {
                        tracing::warn!(event_id = %event.id, event_type = event.kind.as_str(), operation_id = %event.operation_id, status, error, attempts = delivery.made, "webhook event given up after its last attempt");
                        outbox.pending.settle(event.kind, Fate::Failed);
                    }
                }
            }
        }
    }

    /// Send until the gateway stops.
    async fn run(&self, outbox: &mut Outbox, retries: &mut Retries, shutdown: &mut ShutdownWatch) {
        loop {
            let due = retries.due_at();
            tokio::select! {
                biased;
                _ = shutdown.changed() => return,
                received = outbox.receiver.recv() => match received {
                    Some(event) => {
                        let delivery = Delivery {
                            body: event.body(),
                            event,
                            made: 0,
                            since: Instant::now(),
                        };
                        self.attempt(delivery, outbox, retries, self.timeout).await;
                    }
                    None => return,
                },
                () = sleep_until(due), if due.is_some() => {
                    if let Some(delivery) = retries.pop() {
                        self.attempt(delivery, outbox, retries, self.timeout).await;
                    }
                }
            }
        }
    }

    /// The gateway is stopping: what is queued or waiting for a retry gets one more attempt
    /// (and retries, time permitting) until `flush_within` is over; the rest is dropped.
    async fn flush(&self, outbox: &mut Outbox, retries: &mut Retries) {
        let deadline = Instant::now() + self.flush_within;
        let mut last_round = Retries::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let delivery = match retries.pop() {
                Some(delivery) => delivery,
                None => match tokio::time::timeout(left, outbox.receiver.recv()).await {
                    Ok(Some(event)) => Delivery {
                        body: event.body(),
                        event,
                        made: 0,
                        since: Instant::now(),
                    },
                    Ok(None) | Err(_) => break,
                },
            };
            // At most once more each: a receiver that is down would otherwise be tried
            // until the deadline.
            self.attempt(delivery, outbox, &mut last_round, self.timeout.min(left))
                .await;
        }
        outbox.receiver.close();
        let mut dropped = 0;
        for delivery in std::iter::from_fn(|| retries.pop().or_else(|| last_round.pop())) {
            outbox.pending.settle(delivery.event.kind, Fate::Dropped);
            dropped += 1;
        }
        while let Ok(event) = outbox.receiver.try_recv() {
            outbox.pending.settle(event.kind, Fate::Dropped);
            dropped += 1;
        }
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "webhook events not delivered before the gateway stopped"
            );
        }
    }
}

#[async_trait]
impl BackgroundService for Sender {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let taken = match self.outbox.lock() {
            Ok(mut outbox) => outbox.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        let Some(mut outbox) = taken else {
            return;
        };
        let mut retries = Retries::new();
        self.run(&mut outbox, &mut retries, &mut shutdown).await;
        self.flush(&mut outbox, &mut retries).await;
    }
}

async fn sleep_until(due: Option<Instant>) {
    if let Some(due) = due {
        tokio::time::sleep_until(due).await;
    }
}

fn unix_seconds() -> i64 {
    crate::clock::now_millis().div_euclid(1000)
}
