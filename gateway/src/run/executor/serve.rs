//! The executor's one branch per need of the flow: each store or upstream call, with its
//! span, log lines and metrics, its answer fed back as the flow's event.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Executor, Run};
use crate::operation::flow::{Event, Forward, Need, NotForwarded, Released};
use crate::protocol::approved::ApprovedForward;
use crate::run::lookup::{computed_terms, lookup_terms};
use crate::run::record::{Completion, Recorder};
use crate::store::{FollowUp, KeptRound, Lease, RecordedResponse, StoreError};
use crate::telemetry::Span;
use crate::upstream::ForwardError;

impl Executor {
    /// One need carried out: one branch per store or upstream call. `phase`: the span it is
    /// made in (the execution's trace goes with its claim).
    pub(super) async fn serve(&self, need: Need, run: &mut Run<'_>, phase: Option<&Span>) -> Event {
        let store = &self.parts.store;
        let name = run.policy.name.as_str();
        let failed = |run: &mut Run<'_>, e: StoreError| {
            run.store_error = Some(e);
            Event::StoreFailed
        };
        match need {
            Need::Record(id) => match store.lookup(&id).await {
                Ok(record) => Event::Record(record),
                Err(e) => failed(run, e),
            },
            Need::RecordAndGeneration(id) => match store.lookup_with_generation(&id).await {
                Ok((record, generation)) => Event::RecordAndGeneration(record, generation),
                Err(e) => failed(run, e),
            },
            Need::PageState(action) => match store.page_state(&action).await {
                Ok((state, decisions)) => Event::PageState(state, decisions),
                Err(e) => failed(run, e),
            },
            Need::ActionState(action) => match store.action_state(action.as_str()).await {
                Ok(state) => Event::ActionState(state),
                Err(e) => failed(run, e),
            },
            Need::Terms(mut terms) => {
                let policy = Arc::clone(&run.policy);
                // Lookups' upstream calls in a box of their own (as the forward's, below).
                let looked_up = if policy.lookups.is_empty() {
                    computed_terms(&policy, &mut terms)
                } else {
                    Box::pin(lookup_terms(
                        &self.parts.upstream,
                        &run.reading.proxy,
                        &policy,
                        &run.headers,
                        &run.forward.body,
                        &mut terms,
                    ))
                    .await
                };
                match looked_up {
                    Ok(()) => Event::Terms(Some(terms)),
                    Err(refused) => {
                        run.refused = Some(refused);
                        Event::Terms(None)
                    }
                }
            }
            Need::StartForward { .. } => match self.parts.drain.start_forward() {
                Some(guard) => {
                    run.guard = Some(guard);
                    let made = self.claims_made.fetch_add(1, Ordering::Relaxed);
                    Event::Started {
                        owner: format!("{}-{made}", self.instance),
                        trace: phase.and_then(Span::traceparent),
                    }
                }
                None => Event::ShuttingDown,
            },
            Need::Claim(id, claim) => {
                let span = Span::phase("poppy.claim");
                let outcome = span.within(store.claim(&id, &claim)).await;
                if let Err(_) | Ok(crate::store::ClaimOutcome::Exists(_)) = &outcome {
                    span.set("poppy.claimed", false);
                }
                match outcome {
                    Ok(outcome) => Event::Claimed(outcome),
                    Err(e) => failed(run, e),
                }
            }
            // Boxed, as is the record: inline, a forward's future would make
            // every request's (a mint's, a replay's) as large, allocated and copied whole
            // (BENCHMARKS.md, "In flight, part by part").
            Need::Forward(forward) => Event::Forwarded(Box::pin(self.forward(&forward, run)).await),
            Need::ReadAnswer(response) => {
                let reading = run.reading;
                let upstream = &self.parts.upstream;
                let read = reading
                    .reader
                    .read(upstream, &run.forward, response, &reading.proxy);
                Event::Read(read.await)
            }
            Need::Release { id, owner, why } => {
                if let Err(e) = store.release(&id, &owner).await {
                    // The record stays in flight and turns unknown: safe, never forwarded twice.
                    tracing::error!(policy = name, operation_id = %id, outcome = "unknown", error = %e, "claim not released; retries will get 503 until it is resolved");
                }
                match why {
                    Released::Status(status) => {
                        tracing::info!(policy = name, operation_id = %id, status, outcome = "released", "upstream performed nothing; claim released")
                    }
                    Released::NotSent(e) => {
                        tracing::warn!(policy = name, operation_id = %id, error = %e, outcome = "released", "upstream unreachable; nothing sent, claim released")
                    }
                }
                Event::Carried
            }
            Need::Complete {
                id,
                response,
                round,
            } => {
                let policies = self.parts.policies.clone();
                let completion = Completion::new(*round, name, policies, run.guard.take());
                let recorder = Recorder {
                    store,
                    receipts: self.parts.receipts.as_ref(),
                    clock: &self.parts.clock,
                };
                let span = Span::phase("poppy.record");
                span.within(Box::pin(recorder.record(&id, response, completion)))
                    .await;
                Event::Carried
            }
            Need::KeepRound(keep) => {
                let id = &keep.id;
                Event::RoundKept(match store.put_round(&KeptRound::from(&keep)).await {
                    Ok(true) => true,
                    Ok(false) => {
                        tracing::warn!(policy = name, operation_id = %id, "the claim is no longer in flight under its owner; the round is not kept");
                        false
                    }
                    Err(e) => {
                        tracing::warn!(policy = name, operation_id = %id, error = %e, "the round could not be kept for its follow-up");
                        false
                    }
                })
            }
            Need::TakeRound { id, key, now_ms } => {
                let follow_up = FollowUp {
                    id: &id,
                    key: &key,
                    now_ms,
                };
                match store.take_round(&follow_up).await {
                    Ok(kept) => Event::RoundTaken(kept),
                    Err(e) => failed(run, e),
                }
            }
            Need::SetLease {
                id,
                owner,
                until_ms,
            } => {
                let lease = Lease {
                    id: &id,
                    owner: &owner,
                    until_ms,
                };
                if let Err(e) = store.set_lease(&lease).await {
                    tracing::warn!(policy = name, operation_id = %id, error = %e, "the round's lease could not be ended; retries read in progress until it runs out");
                }
                Event::Carried
            }
        }
    }

    /// The approved request, forwarded once: with its operation ID in the configured header,
    /// for the upstream's logs, and (with `[upstream.approval_header]`) what was approved,
    /// signed, for an upstream that checks.
    async fn forward(
        &self,
        forward: &Forward,
        run: &Run<'_>,
    ) -> Result<RecordedResponse, NotForwarded> {
        let name = run.policy.name.as_str();
        let id = &forward.id;
        match forward.first {
            Some(expires_at) => {
                let expires_in = run.policy.expires_in;
                self.parts
                    .metrics
                    .approval_delay(name, expires_at, expires_in);
                let via = if forward.via_page { "page" } else { "agent" };
                tracing::info!(policy = name, operation_id = %id, outcome = "claimed", approved_via = via, "approved; forwarding once");
            }
            None => {
                tracing::info!(policy = name, operation_id = %id, outcome = "claimed", "a follow-up of an interim answer; forwarding it under the same claim")
            }
        }
        let approved = ApprovedForward {
            operation_id: id.as_str(),
            revision: &forward.revision,
            policy: name,
            terms: &forward.terms,
            now_ms: self.now(),
        };
        let reading = run.reading;
        let sent = self.parts.upstream.send_approved(
            run.forward.clone(),
            &approved,
            &reading.proxy,
            reading.tap.as_ref(),
        );
        let answered = if forward.first.is_some() {
            // The forward carries this span's `traceparent`: the upstream's parent.
            let span = Span::client("poppy.forward");
            let answered = span
                .within(self.parts.metrics.upstream_call(name, sent))
                .await;
            match &answered {
                Ok(response) => span.set("http.response.status_code", i64::from(response.status)),
                Err(_) => span.fail("no answer from the upstream"),
            }
            answered
        } else {
            self.parts.metrics.upstream_call(name, sent).await
        };
        answered.map_err(|e| match e {
            ForwardError::NotSent(e) => {
                if forward.first.is_none() {
                    tracing::warn!(policy = name, operation_id = %id, error = %e, "upstream unreachable; the follow-up was not sent");
                }
                NotForwarded::NotSent(e)
            }
            ForwardError::Unknown(e) => NotForwarded::Unknown(e),
        })
    }
}
