//! Operations between rounds: an approved call whose answer was interim (an MCP 2026-07-28
//! `input_required` result) stays claimed by this process, and only the follow-up that
//! carries back what the server asked for goes on under the same claim.
//!
//! A follow-up is bound to its round: the same operation, the same approved revision, the
//! same request (its fingerprint: tool, arguments, bound headers) and the token the interim
//! answer gave (the server's `requestState`). Each round is taken once, so two follow-ups
//! with the same token are never both forwarded. Rounds live in this process only (the
//! claim does too): a follow-up that reaches another replica is told the call is in
//! progress, and a round abandoned by its client leaves the claim in flight, to turn
//! unknown when its lease runs out, as any forward cut short does.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::operation::{Receipt, Remember};
use crate::protocol::OperationId;
use crate::store::Claim;

/// How long a round waits for its follow-up (a user answering a question included).
pub(crate) const ROUND_TTL: Duration = Duration::from_secs(15 * 60);
/// How many rounds may wait at once; past it, the oldest expired ones are dropped first,
/// then new interim answers end their operation as unknown (never forwarded again).
const MAX_ROUNDS: usize = 10_000;

/// What the follow-up of an interim answer must match, and what completing the claim needs.
pub(crate) struct Round {
    pub(crate) claim: Claim,
    pub(crate) remember: Remember,
    pub(crate) receipt: Option<Receipt>,
    pub(crate) revision: String,
    pub(crate) fingerprint: Vec<u8>,
    /// What the follow-up carries back (`None`: nothing; then it must carry nothing).
    pub(crate) token: Option<String>,
    pub(crate) until: Instant,
}

/// The rounds waiting for their follow-up, by operation.
#[derive(Default)]
pub(crate) struct Rounds {
    open: Mutex<HashMap<String, Round>>,
}

impl Rounds {
    /// Keep `round` for its follow-up; false when there is no room (see [`MAX_ROUNDS`]).
    pub(crate) fn put(&self, id: &OperationId, round: Round) -> bool {
        let Ok(mut open) = self.open.lock() else {
            return false;
        };
        if open.len() >= MAX_ROUNDS {
            let now = Instant::now();
            open.retain(|_, round| round.until > now);
            if open.len() >= MAX_ROUNDS {
                return false;
            }
        }
        open.insert(id.to_string(), round);
        true
    }

    /// The round of `id`, taken, if this follow-up is its own: same revision, same request,
    /// same token, before it expired.
    pub(crate) fn take(
        &self,
        id: &OperationId,
        revision: &str,
        fingerprint: &[u8],
        token: Option<&str>,
    ) -> Option<Round> {
        let mut open = self.open.lock().ok()?;
        let round = open.get(id.as_str())?;
        if round.until <= Instant::now() {
            open.remove(id.as_str());
            return None;
        }
        let own = round.revision == revision
            && round.fingerprint == fingerprint
            && round.token.as_deref() == token;
        if own { open.remove(id.as_str()) } else { None }
    }

    /// Put a round back untouched (its follow-up was never sent).
    pub(crate) fn restore(&self, id: &OperationId, round: Round) {
        let _ = self.put(id, round);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(token: Option<&str>, ttl: Duration) -> Round {
        Round {
            claim: Claim {
                scope: "s".into(),
                policy: "p".into(),
                revision: "1-a".into(),
                credentials: None,
                owner: "o".into(),
                now_ms: 0,
                lease_until_ms: 1,
            },
            remember: Remember {
                expires_at: 0,
                expires_in: Duration::from_secs(60),
                grace: Duration::ZERO,
            },
            receipt: None,
            revision: "1-a".into(),
            fingerprint: b"f".to_vec(),
            token: token.map(str::to_owned),
            until: Instant::now() + ttl,
        }
    }

    #[test]
    fn only_its_own_follow_up_takes_a_round_and_only_once() {
        let rounds = Rounds::default();
        let id = OperationId::parse("exc_sAAAAAAAAAAAAAAAABBBBBBBB").unwrap();
        assert!(rounds.put(&id, round(Some("state-1"), ROUND_TTL)));
        assert!(rounds.take(&id, "1-a", b"f", Some("state-0")).is_none());
        assert!(rounds.take(&id, "1-a", b"f", None).is_none());
        assert!(rounds.take(&id, "1-b", b"f", Some("state-1")).is_none());
        assert!(rounds.take(&id, "1-a", b"g", Some("state-1")).is_none());
        let taken = rounds.take(&id, "1-a", b"f", Some("state-1"));
        assert!(taken.is_some());
        assert!(
            rounds.take(&id, "1-a", b"f", Some("state-1")).is_none(),
            "once"
        );
        rounds.restore(&id, taken.unwrap());
        assert!(rounds.take(&id, "1-a", b"f", Some("state-1")).is_some());
        assert!(rounds.put(&id, round(Some("s"), Duration::ZERO)));
        assert!(
            rounds.take(&id, "1-a", b"f", Some("s")).is_none(),
            "expired"
        );
    }
}
