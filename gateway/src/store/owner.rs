//! Whose in-flight record a step may finish: one rule for both stores. `memory.rs` applies it
//! here ([`Finisher::finishable`]); Redis applies it in `complete.lua` and `release.lua`, which
//! take the same three modes ([`Finisher::script_args`]).

use super::{Claim, RecordState};

/// Who is finishing an in-flight record.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Finisher<'a> {
    /// The claim's own: the gateway completing or releasing.
    Owner(&'a str),
    /// The claim's own, and written anyway when the record vanished (`complete_claim`).
    Restore(&'a Claim),
    /// Anybody's, once its lease ran out: an operator's resolution. While the lease is live
    /// the forward may still be at the upstream, and a resolution as "not performed" would let
    /// the next retry be forwarded a second time.
    Operator { now_ms: i64 },
}

/// What a [`Finisher`] may do with an operation's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finishable {
    /// In flight, and this finisher's to finish.
    Yes,
    NoRecord,
    /// A recorded answer: never changed.
    Done,
    /// In flight under another owner.
    NotYours,
    /// In flight, its lease still live: not an operator's to finish yet.
    LeaseLive,
}

impl Finisher<'_> {
    /// The rule, given the record's state (`None`: no live record).
    pub(crate) fn finishable(&self, state: Option<&RecordState>) -> Finishable {
        match state {
            None => Finishable::NoRecord,
            Some(RecordState::Done(_)) => Finishable::Done,
            Some(RecordState::InFlight {
                owner,
                lease_until_ms,
            }) => match self {
                Finisher::Operator { now_ms } if *lease_until_ms >= *now_ms => {
                    Finishable::LeaseLive
                }
                _ => match self.owner() {
                    Some(mine) if mine != owner => Finishable::NotYours,
                    _ => Finishable::Yes,
                },
            },
        }
    }

    /// The owner it must be, if any.
    fn owner(&self) -> Option<&str> {
        match self {
            Finisher::Owner(owner) => Some(owner),
            Finisher::Restore(claim) => Some(&claim.owner),
            Finisher::Operator { .. } => None,
        }
    }

    /// The Lua scripts' `mode` and `owner` arguments (for an operator, the operator's clock,
    /// which the lease is compared with: leases are written in gateways' time).
    pub(crate) fn script_args(&self) -> (&'static str, String) {
        match self {
            Finisher::Owner(owner) => ("owner", (*owner).to_owned()),
            Finisher::Restore(claim) => ("restore", claim.owner.clone()),
            Finisher::Operator { now_ms } => ("any", now_ms.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RecordedResponse;

    #[test]
    fn only_the_owner_or_an_operator_finishes_a_claim() {
        let flying = RecordState::InFlight {
            owner: "gw-1".into(),
            lease_until_ms: 0,
        };
        let operator = Finisher::Operator { now_ms: 1 };
        let done = RecordState::Done(RecordedResponse {
            status: 200,
            headers: Vec::new(),
            body: bytes::Bytes::new(),
        });
        let claim = Claim {
            scope: String::new(),
            policy: String::new(),
            revision: String::new(),
            credentials: None,
            trace: None,
            request: None,
            owner: "gw-2".into(),
            now_ms: 0,
            lease_until_ms: 0,
        };
        let mine = Finisher::Owner("gw-1");
        assert_eq!(mine.finishable(Some(&flying)), Finishable::Yes);
        assert_eq!(
            Finisher::Owner("gw-2").finishable(Some(&flying)),
            Finishable::NotYours
        );
        assert_eq!(
            Finisher::Restore(&claim).finishable(Some(&flying)),
            Finishable::NotYours
        );
        assert_eq!(operator.finishable(Some(&flying)), Finishable::Yes);
        // A live lease: the forward may be at the upstream now.
        assert_eq!(
            Finisher::Operator { now_ms: 0 }.finishable(Some(&flying)),
            Finishable::LeaseLive
        );
        for finisher in [mine, Finisher::Restore(&claim), operator] {
            assert_eq!(finisher.finishable(Some(&done)), Finishable::Done);
            assert_eq!(finisher.finishable(None), Finishable::NoRecord);
        }
        assert_eq!(
            Finisher::Restore(&claim).script_args(),
            ("restore", "gw-2".to_owned())
        );
        assert_eq!(operator.script_args(), ("any", "1".to_owned()));
    }
}
