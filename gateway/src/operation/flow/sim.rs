//! A simulated world for the flow's tests: the store, the upstream, the interface's reader
//! and the drain as plain data, and a clock the tests move. It answers each need as the real
//! ones do (a claim of a claimed operation finds its record; a completion moves the action's
//! generation on; a round is taken once), so a table of requests runs the flow end to end
//! with no I/O and no waiting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::{Asked, End, Event, Flow, Need, NotForwarded, Read, Setup, Step};
use crate::operation::page::PageDecision;
use crate::operation::record::{
    ActionState, ClaimOutcome, OperationRecord, RecordState, RecordedResponse,
};
use crate::operation::round::Round;
use crate::policy::Terms;
use crate::protocol::OperationId;

/// What the upstream does with the next forward.
#[derive(Debug, Clone)]
pub(super) enum Upstream {
    Answers(u16),
    /// Answers, and the interface reads it as interim with this token.
    Interim(Option<&'static str>),
    /// Answers, and the interface can't tell what was done (a cancelled stream).
    Unreadable,
    NotSent,
    Lost,
}

#[derive(Debug, Default)]
pub(super) struct World {
    pub(super) now: i64,
    pub(super) records: HashMap<OperationId, OperationRecord>,
    pub(super) generations: BTreeMap<String, u64>,
    pub(super) decisions: Vec<PageDecision>,
    pub(super) rounds: BTreeMap<String, Vec<u8>>,
    pub(super) upstream: VecDeque<Upstream>,
    /// What a lookup adds (`None`: it refuses).
    pub(super) lookup: Option<Terms>,
    pub(super) shutting_down: bool,
    /// Needs (by [`label`]) the store fails.
    pub(super) failing: Vec<&'static str>,
    /// Every need, in order, of the last request.
    pub(super) needs: Vec<&'static str>,
    /// Requests that reached the upstream.
    pub(super) forwarded: usize,
    /// What the forward in flight's answer is.
    reading: Option<Upstream>,
    owners: u64,
}

/// A need's name, for the tables.
pub(super) fn label(need: &Need) -> &'static str {
    match need {
        Need::Record(_) => "record",
        Need::RecordAndGeneration(_) => "record+generation",
        Need::PageState(_) => "page state",
        Need::ActionState(_) => "action state",
        Need::Terms(_) => "terms",
        Need::StartForward { .. } => "start",
        Need::Claim(..) => "claim",
        Need::Forward(_) => "forward",
        Need::ReadAnswer(_) => "read",
        Need::Release { .. } => "release",
        Need::Complete { .. } => "complete",
        Need::KeepRound(_) => "keep round",
        Need::TakeRound { .. } => "take round",
        Need::SetLease { .. } => "set lease",
    }
}

pub(super) fn response(status: u16) -> RecordedResponse {
    RecordedResponse {
        status,
        headers: Vec::new(),
        body: bytes::Bytes::from_static(b"{\"ok\":true}"),
    }
}

impl World {
    pub(super) fn new(now: i64) -> World {
        World {
            now,
            lookup: Some(Terms::new()),
            ..World::default()
        }
    }

    /// One request's flow, run to its end.
    pub(super) fn run(&mut self, setup: Setup<'_>, asked: Asked) -> End {
        self.needs.clear();
        let mut flow = Flow::new(setup, asked);
        for _ in 0..64 {
            match flow.next() {
                Step::Done(end) => return end,
                Step::Need(need) => {
                    self.needs.push(label(&need));
                    let event = self.answer(need);
                    flow.on(event, self.now);
                }
            }
        }
        panic!("the flow never ended: {:?}", self.needs)
    }

    fn answer(&mut self, need: Need) -> Event {
        if self.failing.contains(&label(&need)) {
            return match need {
                Need::KeepRound(_) => Event::RoundKept(false),
                Need::Release { .. } | Need::Complete { .. } | Need::SetLease { .. } => {
                    Event::Carried
                }
                _ => Event::StoreFailed,
            };
        }
        match need {
            Need::Record(id) => Event::Record(self.records.get(&id).cloned()),
            Need::RecordAndGeneration(id) => {
                let generation = self.generation(id.action_tag());
                Event::RecordAndGeneration(self.records.get(&id).cloned(), generation)
            }
            Need::PageState(tag) => {
                Event::PageState(self.action_state(&tag), self.decisions.clone())
            }
            Need::ActionState(tag) => Event::ActionState(self.action_state(tag.as_str())),
            Need::Terms(mut terms) => Event::Terms(self.lookup.clone().map(|extra| {
                terms.extend(extra);
                terms
            })),
            Need::StartForward { .. } if self.shutting_down => Event::ShuttingDown,
            Need::StartForward { .. } => {
                self.owners += 1;
                Event::Started {
                    owner: format!("sim-{}", self.owners),
                    trace: Some("trace-of-execute".into()),
                }
            }
            Need::Claim(id, claim) => match self.records.get(&id) {
                Some(record) => Event::Claimed(ClaimOutcome::Exists(record.clone())),
                None => {
                    self.records.insert(id, claim.in_flight_record());
                    Event::Claimed(ClaimOutcome::Claimed)
                }
            },
            Need::Forward(_) => {
                let next = self.upstream.pop_front().unwrap_or(Upstream::Answers(201));
                if !matches!(next, Upstream::NotSent) {
                    self.forwarded += 1;
                }
                self.reading = Some(next.clone());
                Event::Forwarded(match next {
                    Upstream::NotSent => Err(NotForwarded::NotSent("refused".into())),
                    Upstream::Lost => Err(NotForwarded::Unknown("cut off".into())),
                    Upstream::Answers(status) => Ok(response(status)),
                    Upstream::Interim(_) | Upstream::Unreadable => Ok(response(200)),
                })
            }
            Need::ReadAnswer(answer) => Event::Read(match self.reading.take() {
                Some(Upstream::Interim(token)) => Read::Interim {
                    response: answer,
                    token: token.map(str::to_owned),
                },
                Some(Upstream::Unreadable) => Read::Unknown("the stream was cancelled".into()),
                _ => Read::Final(answer),
            }),
            Need::Release { id, owner, .. } => {
                if self.owns(&id, &owner) {
                    self.records.remove(&id);
                }
                Event::Carried
            }
            Need::Complete {
                id,
                response,
                round,
            } => {
                self.complete(&id, response, &round);
                Event::Carried
            }
            Need::KeepRound(keep) => {
                let owned = self.owns(&keep.id, &keep.owner);
                if owned {
                    self.set_lease(&keep.id, keep.lease_until_ms);
                    self.rounds.insert(keep.key, keep.round);
                }
                Event::RoundKept(owned)
            }
            Need::TakeRound { key, .. } => Event::RoundTaken(self.rounds.remove(&key)),
            Need::SetLease {
                id,
                owner,
                until_ms,
            } => {
                if self.owns(&id, &owner) {
                    self.set_lease(&id, until_ms);
                }
                Event::Carried
            }
        }
    }

    fn generation(&self, tag: &str) -> u64 {
        self.generations.get(tag).copied().unwrap_or(0)
    }

    fn action_state(&self, tag: &str) -> ActionState {
        let in_flight = self
            .records
            .iter()
            .filter(|(id, _)| id.action_tag() == tag)
            .filter_map(|(id, record)| match &record.state {
                RecordState::InFlight { lease_until_ms, .. } => Some((id.clone(), *lease_until_ms)),
                RecordState::Done(_) => None,
            })
            .collect();
        ActionState {
            generation: self.generation(tag),
            in_flight,
        }
    }

    fn owns(&self, id: &OperationId, owner: &str) -> bool {
        matches!(
            self.records.get(id).map(|r| &r.state),
            Some(RecordState::InFlight { owner: o, .. }) if o == owner
        )
    }

    fn set_lease(&mut self, id: &OperationId, until: i64) {
        if let Some(RecordState::InFlight { lease_until_ms, .. }) =
            self.records.get_mut(id).map(|r| &mut r.state)
        {
            *lease_until_ms = until;
        }
    }

    fn complete(&mut self, id: &OperationId, response: RecordedResponse, round: &Round) {
        if !self.owns(id, &round.claim.owner) && self.records.contains_key(id) {
            return;
        }
        let mut record = self
            .records
            .remove(id)
            .unwrap_or_else(|| round.claim.in_flight_record());
        record.state = RecordState::Done(response);
        self.records.insert(id.clone(), record);
        *self
            .generations
            .entry(id.action_tag().to_owned())
            .or_default() += 1;
    }
}
