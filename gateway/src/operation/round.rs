//! Operations between rounds: an approved call whose answer was interim (an MCP 2026-07-28
//! `input_required` result) stays claimed (`flow`), and only the follow-up that carries back what the
//! server asked for goes on under the same claim.
//!
//! A follow-up is bound to its round: the same operation, the same approved revision, the
//! same request (its fingerprint: tool, arguments, bound headers) and the token the interim
//! answer gave (the server's `requestState`). The round lives in the operation store
//! (`OperationStore::put_round`) under a key digested from all of these, so any gateway that
//! shares the store, or this one after a restart, continues the call; it is taken once (read
//! and removed in one step), so two follow-ups with the same token are never both forwarded.
//! A round waits at most [`ROUND_TTL`]; one abandoned by its client leaves the claim in
//! flight, to turn unknown when its lease runs out, as any forward cut short does.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::record::Claim;
use super::{Receipt, Remember};

/// How long a round waits for its follow-up (a user answering a question included).
pub(crate) const ROUND_TTL: Duration = Duration::from_secs(15 * 60);

/// What the follow-up of an interim answer must match, and what completing the claim needs.
#[derive(Debug, Clone)]
pub(crate) struct Round {
    pub(crate) claim: Claim,
    pub(crate) remember: Remember,
    pub(crate) receipt: Option<Receipt>,
    pub(crate) revision: String,
    pub(crate) fingerprint: Vec<u8>,
    /// What the follow-up carries back (`None`: nothing; then it must carry nothing).
    pub(crate) token: Option<String>,
}

/// The key a round is kept under: only the follow-up with the same revision, request and
/// token finds it (each part length-prefixed, so no two lists of parts share a digest).
pub(crate) fn key(revision: &str, fingerprint: &[u8], token: Option<&str>) -> String {
    let mut hash = Sha256::new();
    for part in [
        revision.as_bytes(),
        fingerprint,
        token.map_or(&b"\xff"[..], str::as_bytes),
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    if token.is_none() {
        hash.update(b"no token");
    }
    hex(&hash.finalize())
}

impl Round {
    /// The key its follow-up must present.
    pub(crate) fn key(&self) -> String {
        key(&self.revision, &self.fingerprint, self.token.as_deref())
    }

    /// As kept in the store.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let stored = Stored {
            scope: self.claim.scope.clone(),
            policy: self.claim.policy.clone(),
            claim_revision: self.claim.revision.clone(),
            credentials: self.claim.credentials.clone(),
            request: self.claim.request.clone(),
            owner: self.claim.owner.clone(),
            claimed_ms: self.claim.now_ms,
            lease_until_ms: self.claim.lease_until_ms,
            expires_at: self.remember.expires_at,
            expires_in_ms: duration_ms(self.remember.expires_in),
            grace_ms: duration_ms(self.remember.grace),
            receipt: self
                .receipt
                .as_ref()
                .and_then(|r| serde_json::to_value(r).ok()),
            revision: self.revision.clone(),
            fingerprint: hex(&self.fingerprint),
            token: self.token.clone(),
        };
        serde_json::to_vec(&stored).unwrap_or_default()
    }

    /// A round read back from the store; `None` if it is not one.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Round> {
        let stored: Stored = serde_json::from_slice(bytes).ok()?;
        let receipt = match stored.receipt {
            Some(value) => Some(receipt_of(value)?),
            None => None,
        };
        Some(Round {
            claim: Claim {
                scope: stored.scope,
                policy: stored.policy,
                revision: stored.claim_revision,
                credentials: stored.credentials,
                // Only the first forward's span is linked to by replays.
                trace: None,
                request: stored.request,
                owner: stored.owner,
                now_ms: stored.claimed_ms,
                lease_until_ms: stored.lease_until_ms,
            },
            remember: Remember {
                expires_at: stored.expires_at,
                expires_in: Duration::from_millis(stored.expires_in_ms),
                grace: Duration::from_millis(stored.grace_ms),
            },
            receipt,
            revision: stored.revision,
            fingerprint: unhex(&stored.fingerprint)?,
            token: stored.token,
        })
    }
}

/// A round as the store keeps it (JSON: readable by an operator looking at Redis).
#[derive(Serialize, Deserialize)]
struct Stored {
    scope: String,
    policy: String,
    claim_revision: String,
    credentials: Option<String>,
    /// Kept by gateways since page replays read it; absent in rounds kept before.
    #[serde(default)]
    request: Option<String>,
    owner: String,
    claimed_ms: i64,
    lease_until_ms: i64,
    expires_at: i64,
    expires_in_ms: u64,
    grace_ms: u64,
    receipt: Option<Value>,
    revision: String,
    fingerprint: String,
    token: Option<String>,
}

/// A draft receipt (`operation::draft_receipt`) read back.
#[derive(Deserialize)]
struct Draft {
    operation_id: String,
    revision: String,
    policy: String,
    summary: Option<String>,
    terms: Option<Value>,
    scope: String,
    agent: Option<String>,
    user: Option<String>,
    session: Option<String>,
    account: Option<String>,
    identity: Option<String>,
    #[serde(default)]
    approved_via: Option<String>,
    #[serde(default)]
    page_subject: Option<String>,
    approved_at: Option<String>,
}

fn receipt_of(value: Value) -> Option<Receipt> {
    let draft: Draft = serde_json::from_value(value).ok()?;
    let identity = match draft.identity.as_deref() {
        Some("verified") => Some("verified"),
        Some("unverified") => Some("unverified"),
        None => None,
        Some(_) => return None,
    };
    Some(Receipt {
        kind: "performed",
        operation_id: draft.operation_id,
        revision: draft.revision,
        policy: draft.policy,
        summary: draft.summary,
        terms: draft.terms,
        scope: draft.scope,
        agent: draft.agent,
        user: draft.user,
        session: draft.session,
        account: draft.account,
        identity,
        approved_via: match draft.approved_via.as_deref() {
            Some("page") => Some("page"),
            Some("agent") => Some("agent"),
            _ => None,
        },
        page_subject: draft.page_subject,
        approved_at: draft.approved_at,
        performed_at: String::new(),
        upstream_status: None,
        answer_sha256: None,
    })
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn round(token: Option<&str>) -> Round {
        Round {
            claim: Claim {
                scope: "s".into(),
                policy: "p".into(),
                revision: "1-a".into(),
                credentials: Some("c".into()),
                trace: None,
                request: Some("q".into()),
                owner: "o".into(),
                now_ms: 5,
                lease_until_ms: 9,
            },
            remember: Remember {
                expires_at: 7,
                expires_in: Duration::from_secs(60),
                grace: Duration::from_millis(1500),
            },
            receipt: None,
            revision: "1-a".into(),
            fingerprint: vec![0, 1, 0xfe, 0xff],
            token: token.map(str::to_owned),
        }
    }

    #[test]
    fn a_round_is_read_back_as_it_was_kept() {
        let kept = round(Some("state-1"));
        let back = Round::decode(&kept.encode()).unwrap();
        assert_eq!(back.claim, kept.claim);
        assert_eq!(back.remember, kept.remember);
        assert_eq!(back.fingerprint, kept.fingerprint);
        assert_eq!(back.token, kept.token);
        assert_eq!(back.revision, kept.revision);
        assert!(Round::decode(b"{}").is_none());
    }

    #[test]
    fn only_its_own_follow_up_has_a_rounds_key() {
        let own = round(Some("state-1")).key();
        assert_eq!(own, key("1-a", &[0, 1, 0xfe, 0xff], Some("state-1")));
        assert_ne!(own, key("1-a", &[0, 1, 0xfe, 0xff], Some("state-0")));
        assert_ne!(own, key("1-b", &[0, 1, 0xfe, 0xff], Some("state-1")));
        assert_ne!(own, key("1-a", &[0, 1, 0xfe], Some("state-1")));
        assert_ne!(
            round(None).key(),
            key("1-a", &[0, 1, 0xfe, 0xff], Some("\u{ff}")),
            "no token is not a token"
        );
        assert_ne!(round(None).key(), key("1-a", &[0, 1, 0xfe, 0xff], Some("")));
    }
}
