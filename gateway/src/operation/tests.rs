//! The operation core on its own: every verdict and every order-of-checks rule of spec
//! section 6, the expiry rule and the release rule, without pingora, a store or a socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use super::outcome::Rejection;
use super::record::{ActionState, OperationRecord, RecordState, RecordedResponse};
use super::*;
use crate::config::Upstream;
use crate::identity::{SessionClaims, Who};
use crate::policy::Terms;
use crate::protocol::{Keys, Operation, SigningKey};
use crate::testkit::{EXCHANGE_POLICY, claims_off, unsigned_jwt};

/// 2027-01-15T08:00:00Z, on a second boundary.
const NOW_MS: i64 = 1_800_000_000_000;
const NOW_S: i64 = NOW_MS / 1000;
const FIFTEEN_MINUTES: i64 = 15 * 60;

const LOOKED_UP_POLICY: &str = r#"
[[operation]]
name = "exchange_looked_up"
method = "POST"
path = "/orders/{order_id}/looked-up"
id_prefix = "exl"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange on order {order_id} for {name}."
[operation.terms]
order_id = { path = "order_id" }
name = { lookup = "$.name" }
[operation.lookup]
url = "/catalog/{order_id}"
"#;

fn policies(expires_in: &str) -> Vec<Arc<Policy>> {
    let text = format!("{EXCHANGE_POLICY}{LOOKED_UP_POLICY}").replace("EXPIRES", expires_in);
    crate::config::parse_policy_file(Path::new("core.toml"), &text)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect()
}

fn exchange() -> Arc<Policy> {
    policies("15m").remove(0)
}

fn key(name: &str) -> SigningKey {
    SigningKey::new(format!("operation-core-test-{name}").into_bytes())
}

fn keys() -> Keys {
    Keys::new(vec![key("a")]).unwrap()
}

fn claims() -> SessionClaims {
    claims_off()
}

fn jwt(payload: serde_json::Value) -> String {
    unsigned_jwt(&payload)
}

/// A signed-out Session, read unverified (bound to its exact credentials).
fn session(sid: &str) -> Approver {
    let token = jwt(json!({"sid": sid, "iss": "agent", "sub": "user"}));
    Approver::from_headers(token.as_bytes(), None, &claims()).unwrap()
}

/// The same Session signed in to an account.
fn signed_in(sid: &str, account: &str) -> Approver {
    let token = jwt(json!({"sid": sid, "iss": "agent", "sub": "user"}));
    let bearer = format!("Bearer {}", jwt(json!({"sub": account})));
    Approver::from_headers(token.as_bytes(), Some(bearer.as_bytes()), &claims()).unwrap()
}

/// A Session whose credentials the gateway verified: nothing binds its replays further.
fn verified(sid: &str) -> Approver {
    Approver {
        credentials: None,
        who: Who::default(),
        ..session(sid)
    }
}

fn terms(order: &str, item: &str, sku: &str) -> Terms {
    [
        ("order_id".to_owned(), json!(order)),
        ("item_id".to_owned(), json!(item)),
        ("sku".to_owned(), json!(sku)),
    ]
    .into_iter()
    .collect()
}

fn request(policy: &Arc<Policy>, approver: Approver, terms: Terms) -> OperationRequest {
    OperationRequest {
        policy: Arc::clone(policy),
        approver,
        approval: None,
        terms,
        fingerprint: b"POST /orders/o1/exchanges {item_id:i1,sku:s1}".to_vec(),
    }
}

fn first(approver: Approver) -> OperationRequest {
    request(&exchange(), approver, terms("o1", "i1", "s1"))
}

fn approving(mut request: OperationRequest, operation: &Operation) -> Prepared {
    request.approval = Some(ApprovalHeader {
        operation_id: operation.operation_id.clone(),
        revision: operation.revision.clone(),
    });
    Prepared::new(request)
}

/// What the gateway returns for `request` at `now_ms`, with the action at `generation`.
fn minted_at(keys: &Keys, request: &OperationRequest, generation: u64, now_ms: i64) -> Operation {
    let state = ActionState {
        generation,
        in_flight: Vec::new(),
    };
    match mint(keys, &Prepared::new(request.clone()), &state, now_ms) {
        Minted::Hold(operation) => operation,
        other => panic!("expected an operation, got {other:?}"),
    }
}

fn minted(request: &OperationRequest) -> Operation {
    minted_at(&keys(), request, 0, NOW_MS)
}

fn id_of(operation: &Operation) -> OperationId {
    OperationId::parse(&operation.operation_id).unwrap()
}

/// What the store would hold once `approver` claimed the operation.
fn record(keys: &Keys, approver: &Approver, policy: &str, state: RecordState) -> OperationRecord {
    OperationRecord {
        scope: approver.scope.clone(),
        policy: policy.to_owned(),
        revision: "r".into(),
        created_at_ms: NOW_MS,
        state,
        credentials: approver
            .credentials
            .as_ref()
            .map(|c| c.digest(keys.current())),
        trace: None,
        request: None,
    }
}

fn answer() -> RecordedResponse {
    RecordedResponse {
        status: 201,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: Bytes::from_static(b"{\"exchange\":\"ex_1\"}"),
    }
}

fn done() -> RecordState {
    RecordState::Done(answer())
}

fn in_flight(lease_until_ms: i64) -> RecordState {
    RecordState::InFlight {
        owner: "gw-0".into(),
        lease_until_ms,
    }
}

/// The verdict on `prepared`, with the store holding `record` and the action at `generation`.
fn decide(
    prepared: &Prepared,
    record: Option<OperationRecord>,
    generation: u64,
    now_ms: i64,
) -> Verdict {
    decide_with(&keys(), prepared, record, generation, now_ms)
}

fn decide_with(
    keys: &Keys,
    prepared: &Prepared,
    record: Option<OperationRecord>,
    generation: u64,
    now_ms: i64,
) -> Verdict {
    match start(prepared) {
        Start::Decided(verdict) => verdict,
        Start::Lookup(id) => check(keys, prepared, &id, record, generation, now_ms),
    }
}

fn approved(operation: &Operation) -> Verdict {
    Verdict::Claim(Approved {
        id: id_of(operation),
        revision: operation.revision.clone(),
        expires_at: NOW_S + FIFTEEN_MINUTES,
    })
}

fn refused(reason: Rejection) -> Verdict {
    Verdict::Mint(Some(reason))
}

// --- Start: no approval, or one the gateway never returned ---------------------------------

#[test]
fn a_request_without_an_approval_is_minted() {
    assert_eq!(
        start(&Prepared::new(first(session("s1")))),
        Start::Decided(Verdict::Mint(None))
    );
}

#[test]
fn an_approval_of_another_shape_is_refused_without_a_lookup() {
    let mut request = first(session("s1"));
    request.approval = Some(ApprovalHeader {
        operation_id: "not-an-operation".into(),
        revision: "1-x".into(),
    });
    assert_eq!(
        start(&Prepared::new(request)),
        Start::Decided(refused(Rejection::NotOurs))
    );
}

#[test]
fn an_approval_of_this_shape_is_looked_up() {
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s1")), &operation);
    assert_eq!(start(&prepared), Start::Lookup(id_of(&operation)));
}

// --- All checks pass ------------------------------------------------------------------------

#[test]
fn the_approval_of_the_request_that_returned_it_is_claimed() {
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s1")), &operation);
    assert_eq!(decide(&prepared, None, 0, NOW_MS), approved(&operation));
    // Until its last second.
    let last = (NOW_S + FIFTEEN_MINUTES) * 1000 + 999;
    assert_eq!(decide(&prepared, None, 0, last), approved(&operation));
}

#[test]
fn a_claim_binds_the_scope_the_revision_and_the_credentials() {
    let keys = keys();
    let approver = session("s1");
    let operation = minted(&first(approver.clone()));
    let prepared = approving(first(approver.clone()), &operation);
    let Verdict::Claim(approval) = decide(&prepared, None, 0, NOW_MS) else {
        panic!("not claimed")
    };
    let claim = claim(
        &keys,
        &prepared,
        &approval,
        "gw-7".into(),
        NOW_MS,
        NOW_MS + 5,
    );
    assert_eq!(claim.scope, approver.scope);
    assert_eq!(claim.policy, "exchange");
    assert_eq!(claim.revision, operation.revision);
    assert_eq!(claim.owner, "gw-7");
    assert_eq!((claim.now_ms, claim.lease_until_ms), (NOW_MS, NOW_MS + 5));
    let digest = approver
        .credentials
        .as_ref()
        .unwrap()
        .digest(keys.current());
    assert_eq!(claim.credentials, Some(digest));
    let verified = approving(first(verified("s1")), &minted(&first(verified("s1"))));
    let Verdict::Claim(approval) = decide(&verified, None, 0, NOW_MS) else {
        panic!("not claimed")
    };
    let claim = super::claim(&keys, &verified, &approval, "gw-8".into(), NOW_MS, NOW_MS);
    assert_eq!(claim.credentials, None, "verified credentials bind nothing");
}

#[test]
fn a_revision_minted_under_a_retired_key_is_still_approved() {
    let operation = minted_at(
        &Keys::new(vec![key("old")]).unwrap(),
        &first(session("s1")),
        0,
        NOW_MS,
    );
    let rotated = Keys::new(vec![key("new"), key("old")]).unwrap();
    let prepared = approving(first(session("s1")), &operation);
    assert_eq!(
        decide_with(&rotated, &prepared, None, 0, NOW_MS),
        approved(&operation)
    );
    let dropped = Keys::new(vec![key("new")]).unwrap();
    assert_eq!(
        decide_with(&dropped, &prepared, None, 0, NOW_MS),
        refused(Rejection::NotThisApprover)
    );
}

// --- Check 1: the approver can approve it ---------------------------------------------------

#[test]
fn another_sessions_approval_is_handled_as_none() {
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s2")), &operation);
    assert_eq!(
        decide(&prepared, None, 0, NOW_MS),
        refused(Rejection::NotThisApprover)
    );
}

#[test]
fn an_approval_for_another_action_is_handled_as_none() {
    let operation = minted(&first(session("s1")));
    let other_item = request(&exchange(), session("s1"), terms("o1", "i2", "s1"));
    assert_eq!(
        decide(&approving(other_item, &operation), None, 0, NOW_MS),
        refused(Rejection::NotThisApprover)
    );
}

#[test]
fn a_signed_out_session_naming_an_accounts_operation_is_asked_to_sign_in() {
    let operation = minted(&first(signed_in("s1", "acct")));
    let prepared = approving(first(session("s1")), &operation);
    let challenge = Verdict::Answer(Answer::SignInRequired);
    assert_eq!(decide(&prepared, None, 0, NOW_MS), challenge);
    // Also when the account's operation was performed: its answer is not the Session's.
    let keys = keys();
    let theirs = record(&keys, &signed_in("s1", "acct"), "exchange", done());
    assert_eq!(decide(&prepared, Some(theirs), 0, NOW_MS), challenge);
}

#[test]
fn an_operation_returned_while_signed_out_stays_the_sessions() {
    let operation = minted(&first(session("s1")));
    // Signed in since: the Session's own operation is still approvable, in the Session.
    let prepared = approving(first(signed_in("s1", "acct")), &operation);
    assert_eq!(prepared.request.approver.scope, session("s1").scope);
    assert_eq!(decide(&prepared, None, 0, NOW_MS), approved(&operation));
}

#[test]
fn a_record_of_another_approver_or_policy_is_not_theirs() {
    let keys = keys();
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s1")), &operation);
    let other = record(&keys, &session("s2"), "exchange", done());
    assert_eq!(
        decide(&prepared, Some(other), 0, NOW_MS),
        refused(Rejection::NotThisApprover)
    );
    let other_policy = record(&keys, &session("s1"), "cancel", done());
    assert_eq!(
        decide(&prepared, Some(other_policy), 0, NOW_MS),
        refused(Rejection::NotThisApprover)
    );
}

#[test]
fn unverified_replays_go_only_to_the_credentials_that_approved() {
    let keys = keys();
    let approver = session("s1");
    let operation = minted(&first(approver.clone()));
    let prepared = approving(first(approver.clone()), &operation);
    let id = id_of(&operation);
    // Same claims, other credentials (another token with the same `sid`, or the approver
    // re-signed with another key): told it was performed, never its answer, never a new
    // operation (approving one would run the action twice).
    let mut forged = record(&keys, &approver, "exchange", done());
    forged.credentials =
        Some(crate::identity::Credentials::of(b"another token", None).digest(keys.current()));
    assert_eq!(
        decide(&prepared, Some(forged.clone()), 0, NOW_MS),
        Verdict::Answer(Answer::AlreadyPerformed(id.clone()))
    );
    // While in flight, they are told to try again, as the approver is.
    let mut flying = forged.clone();
    flying.state = in_flight(NOW_MS + 1000);
    assert_eq!(
        decide(&prepared, Some(flying), 0, NOW_MS),
        Verdict::Answer(Answer::InProgress(id.clone()))
    );
    // A record without a digest proves nothing for an unverified request…
    forged.credentials = None;
    assert_eq!(
        decide(&prepared, Some(forged.clone()), 0, NOW_MS),
        Verdict::Answer(Answer::AlreadyPerformed(id.clone()))
    );
    // …another Session's claims still fail check 1…
    let other = approving(first(session("s2")), &operation);
    assert_eq!(
        decide(&other, Some(forged.clone()), 0, NOW_MS),
        refused(Rejection::NotThisApprover)
    );
    // …but does answer a verified one.
    let verified = approving(first(verified("s1")), &minted(&first(verified("s1"))));
    assert_eq!(
        decide(&verified, Some(forged), 0, NOW_MS),
        Verdict::Answer(Answer::Replay(answer()))
    );
    // A digest under a retired key still matches.
    let rotated = Keys::new(vec![key("b"), key("a")]).unwrap();
    let kept = record(&keys, &approver, "exchange", done());
    assert_eq!(
        decide_with(&rotated, &prepared, Some(kept), 0, NOW_MS),
        Verdict::Answer(Answer::Replay(answer()))
    );
}

/// A Session re-signed by the delegated key that approved: the same proof, so the replay.
#[test]
fn a_delegated_key_proves_every_re_signed_session() {
    let keys = keys();
    let approver = session("s1");
    let operation = minted(&first(approver.clone()));
    let thumbprint = [7u8; 32];
    let by_key = |authorization: Option<&[u8]>| Approver {
        credentials: Some(crate::identity::Credentials::of_key(
            &thumbprint,
            authorization,
        )),
        ..session("s1")
    };
    let kept = record(&keys, &by_key(None), "exchange", done());
    let retry = approving(first(by_key(None)), &operation);
    assert_eq!(
        decide(&retry, Some(kept.clone()), 0, NOW_MS),
        Verdict::Answer(Answer::Replay(answer()))
    );
    // Another key, or the exact bytes of a Session: not the same proof.
    let other_key = Approver {
        credentials: Some(crate::identity::Credentials::of_key(&[8u8; 32], None)),
        ..session("s1")
    };
    let id = id_of(&operation);
    for other in [other_key, session("s1")] {
        assert_eq!(
            decide(
                &approving(first(other), &operation),
                Some(kept.clone()),
                0,
                NOW_MS
            ),
            Verdict::Answer(Answer::AlreadyPerformed(id.clone()))
        );
    }
}

// --- Check 2: not performed already ---------------------------------------------------------

#[test]
fn a_performed_operation_is_replayed() {
    let keys = keys();
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s1")), &operation);
    let mine = record(&keys, &session("s1"), "exchange", done());
    assert_eq!(
        decide(&prepared, Some(mine), 1, NOW_MS),
        Verdict::Answer(Answer::Replay(answer()))
    );
}

#[test]
fn an_operation_in_flight_is_in_progress_until_its_lease_runs_out_then_unknown() {
    let keys = keys();
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s1")), &operation);
    let id = id_of(&operation);
    let lease = NOW_MS + 10_000;
    let mine = record(&keys, &session("s1"), "exchange", in_flight(lease));
    for (now, expected) in [
        (NOW_MS, Answer::InProgress(id.clone())),
        (lease, Answer::InProgress(id.clone())),
        (lease + 1, Answer::Unknown(id.clone())),
    ] {
        assert_eq!(
            decide(&prepared, Some(mine.clone()), 0, now),
            Verdict::Answer(expected),
            "at lease {:+} ms",
            now - lease
        );
    }
}

#[test]
fn a_record_found_at_claim_time_is_checked_like_one_found_first() {
    let keys = keys();
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s1")), &operation);
    let id = id_of(&operation);
    let mine = record(&keys, &session("s1"), "exchange", in_flight(NOW_MS + 1));
    assert_eq!(
        existing(&keys, &prepared, &id, mine, NOW_MS),
        Verdict::Answer(Answer::InProgress(id.clone()))
    );
    let theirs = record(&keys, &session("s2"), "exchange", done());
    assert_eq!(
        existing(&keys, &prepared, &id, theirs, NOW_MS),
        refused(Rejection::NotThisApprover)
    );
}

// --- Check 3: this request's revision, still open -------------------------------------------

#[test]
fn an_expired_revision_is_refused() {
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s1")), &operation);
    let after = (NOW_S + FIFTEEN_MINUTES + 1) * 1000;
    assert_eq!(
        decide(&prepared, None, 0, after),
        refused(Rejection::RevisionExpired)
    );
}

#[test]
fn a_revision_for_other_terms_or_another_request_is_refused() {
    let operation = minted(&first(session("s1")));
    // Same action (order and item), another replacement: other terms.
    let other_sku = request(&exchange(), session("s1"), terms("o1", "i1", "s2"));
    assert_eq!(
        decide(&approving(other_sku, &operation), None, 0, NOW_MS),
        refused(Rejection::RevisionInvalid)
    );
    // Same terms, another request (another body byte, another header).
    let mut other_request = first(session("s1"));
    other_request.fingerprint.push(b' ');
    assert_eq!(
        decide(&approving(other_request, &operation), None, 0, NOW_MS),
        refused(Rejection::RevisionInvalid)
    );
    // A tampered expiry.
    let mut tampered = operation.clone();
    tampered.revision = tampered
        .revision
        .replacen(&NOW_S.to_string()[..3], "999", 1);
    assert_eq!(
        decide(&approving(first(session("s1")), &tampered), None, 0, NOW_MS),
        refused(Rejection::RevisionInvalid)
    );
}

#[test]
fn a_revision_that_outlives_a_shortened_policy_is_refused_as_expired() {
    let long = request(
        &policies("1h").remove(0),
        session("s1"),
        terms("o1", "i1", "s1"),
    );
    let operation = minted(&long);
    // Reloaded with 15 minutes: the hour-long revision could outlive what is remembered.
    let prepared = approving(first(session("s1")), &operation);
    assert_eq!(
        decide(&prepared, None, 0, NOW_MS),
        refused(Rejection::RevisionExpired)
    );
    // A second of slack: a re-minted revision may be one second later.
    let bumped = minted_at(&keys(), &first(session("s1")), 0, NOW_MS + 1000);
    assert_eq!(
        decide(&approving(first(session("s1")), &bumped), None, 0, NOW_MS),
        Verdict::Claim(Approved {
            id: id_of(&bumped),
            revision: bumped.revision.clone(),
            expires_at: NOW_S + 1 + FIFTEEN_MINUTES,
        })
    );
}

#[test]
fn an_operation_of_another_generation_is_refused() {
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s1")), &operation);
    assert_eq!(
        decide(&prepared, None, 1, NOW_MS),
        refused(Rejection::StaleGeneration)
    );
    let next = minted_at(&keys(), &first(session("s1")), 1, NOW_MS);
    assert_ne!(next.operation_id, operation.operation_id);
    let prepared = approving(first(session("s1")), &next);
    assert_eq!(
        decide(&prepared, None, 1, NOW_MS),
        Verdict::Claim(Approved {
            id: id_of(&next),
            revision: next.revision.clone(),
            expires_at: NOW_S + FIFTEEN_MINUTES,
        })
    );
}

// --- The order of the checks ----------------------------------------------------------------

#[test]
fn check_1_comes_before_check_2() {
    // Another Session's performed operation is not replayed to this one.
    let keys = keys();
    let theirs = minted(&first(session("s2")));
    let prepared = approving(first(session("s1")), &theirs);
    let record = record(&keys, &session("s2"), "exchange", done());
    assert_eq!(
        decide(&prepared, Some(record), 1, NOW_MS),
        refused(Rejection::NotThisApprover)
    );
}

#[test]
fn check_2_comes_before_check_3() {
    // Performed: replayed even once its revision expired, to a request for other terms.
    let keys = keys();
    let operation = minted(&first(session("s1")));
    let other_sku = request(&exchange(), session("s1"), terms("o1", "i1", "s9"));
    let prepared = approving(other_sku, &operation);
    let expired = (NOW_S + FIFTEEN_MINUTES + 60) * 1000;
    let mine = record(&keys, &session("s1"), "exchange", done());
    assert_eq!(
        decide(&prepared, Some(mine.clone()), 1, expired),
        Verdict::Answer(Answer::Replay(answer()))
    );
    // And in flight: in progress, not refused.
    let flying = record(&keys, &session("s1"), "exchange", in_flight(expired + 1));
    assert_eq!(
        decide(&prepared, Some(flying), 0, expired),
        Verdict::Answer(Answer::InProgress(id_of(&operation)))
    );
}

#[test]
fn check_1_comes_before_check_3() {
    // Another Session's expired approval is refused as not theirs, not as expired.
    let operation = minted(&first(session("s2")));
    let prepared = approving(first(session("s1")), &operation);
    let expired = (NOW_S + FIFTEEN_MINUTES + 60) * 1000;
    assert_eq!(
        decide(&prepared, None, 0, expired),
        refused(Rejection::NotThisApprover)
    );
}

#[test]
fn the_generation_is_checked_before_the_revision() {
    let operation = minted(&first(session("s1")));
    let prepared = approving(first(session("s1")), &operation);
    let expired = (NOW_S + FIFTEEN_MINUTES + 60) * 1000;
    assert_eq!(
        decide(&prepared, None, 3, expired),
        refused(Rejection::StaleGeneration)
    );
}

// --- Checks 1 and 2 before a policy's lookup ------------------------------------------------

#[test]
fn only_approvals_to_policies_with_a_lookup_are_answered_before_it() {
    let [plain, looked_up] = <[Arc<Policy>; 2]>::try_from(policies("15m")).unwrap();
    let approval = ApprovalHeader {
        operation_id: minted(&first(session("s1"))).operation_id,
        revision: "1-x".into(),
    };
    assert_eq!(record_before_lookup(&plain, Some(&approval)), None);
    assert_eq!(record_before_lookup(&looked_up, None), None);
    let bad = ApprovalHeader {
        operation_id: "nope".into(),
        revision: "1-x".into(),
    };
    assert_eq!(record_before_lookup(&looked_up, Some(&bad)), None);
    assert_eq!(
        record_before_lookup(&looked_up, Some(&approval)),
        OperationId::parse(&approval.operation_id)
    );
}

#[test]
fn a_record_answers_before_the_lookup_only_its_own_approver() {
    let keys = keys();
    let looked_up = policies("15m").remove(1);
    let id = id_of(&minted(&first(session("s1"))));
    let mine = record(&keys, &session("s1"), &looked_up.name, done());
    assert_eq!(
        from_record(&keys, &looked_up, &session("s1"), &id, mine.clone(), NOW_MS),
        Some(Answer::Replay(answer()))
    );
    // Signed in since (verified, so no credentials bind it): still the Session's operation.
    let verified_in = Approver {
        credentials: None,
        ..signed_in("s1", "a")
    };
    let verified_record = record(&keys, &verified("s1"), &looked_up.name, done());
    assert_eq!(
        from_record(
            &keys,
            &looked_up,
            &verified_in,
            &id,
            verified_record,
            NOW_MS
        ),
        Some(Answer::Replay(answer()))
    );
    // Unverified, the bearer token is part of the credentials: not the ones that approved,
    // so told it was performed, without the answer.
    assert_eq!(
        from_record(
            &keys,
            &looked_up,
            &signed_in("s1", "a"),
            &id,
            mine.clone(),
            NOW_MS
        ),
        Some(Answer::AlreadyPerformed(id.clone()))
    );
    assert_eq!(
        from_record(&keys, &looked_up, &session("s2"), &id, mine, NOW_MS),
        None
    );
    let other_policy = record(&keys, &session("s1"), "exchange", done());
    assert_eq!(
        from_record(&keys, &looked_up, &session("s1"), &id, other_policy, NOW_MS),
        None
    );
    let stuck = record(
        &keys,
        &session("s1"),
        &looked_up.name,
        in_flight(NOW_MS - 1),
    );
    assert_eq!(
        from_record(&keys, &looked_up, &session("s1"), &id, stuck, NOW_MS),
        Some(Answer::Unknown(id))
    );
}

// --- Minting --------------------------------------------------------------------------------

#[test]
fn a_minted_operation_shows_the_terms_and_expires_with_the_policy() {
    let operation = minted(&first(session("s1")));
    assert!(operation.operation_id.starts_with("exc_s"), "{operation:?}");
    assert!(
        operation
            .revision
            .starts_with(&format!("{}-", NOW_S + FIFTEEN_MINUTES))
    );
    assert_eq!(operation.summary, "Exchange item i1 on order o1 for s1.");
    assert_eq!(
        operation.terms,
        Some(json!({"order_id": "o1", "item_id": "i1", "sku": "s1"}))
    );
    assert_eq!(operation.expires_at, "2027-01-15T08:15:00Z");
    // The same request gets the same operation; another Session, another one.
    assert_eq!(minted(&first(session("s1"))), operation);
    assert_ne!(
        minted(&first(session("s2"))).operation_id,
        operation.operation_id
    );
    let signed_in = minted(&first(signed_in("s1", "acct")));
    assert!(signed_in.operation_id.starts_with("exc_a"), "{signed_in:?}");
}

#[test]
fn a_refused_approval_never_gets_the_revision_it_named_back() {
    let operation = minted(&first(session("s1")));
    // Refused (another generation), in the same second it was minted.
    let prepared = approving(first(session("s1")), &operation);
    let Minted::Hold(again) = mint(&keys(), &prepared, &ActionState::default(), NOW_MS) else {
        panic!("not minted")
    };
    assert_eq!(again.operation_id, operation.operation_id);
    assert_ne!(again.revision, operation.revision);
    assert!(
        again
            .revision
            .starts_with(&format!("{}-", NOW_S + FIFTEEN_MINUTES + 1))
    );
}

#[test]
fn no_new_operation_while_one_of_the_action_is_unknown() {
    let prepared = Prepared::new(first(session("s1")));
    let stuck = id_of(&minted(&first(session("s1"))));
    let state = |lease: i64| ActionState {
        generation: 0,
        in_flight: vec![(stuck.clone(), lease)],
    };
    assert_eq!(
        mint(&keys(), &prepared, &state(NOW_MS - 1), NOW_MS),
        Minted::Unknown(stuck.clone())
    );
    // Still in flight: a new operation may be asked for (it will be checked at claim time).
    assert!(matches!(
        mint(&keys(), &prepared, &state(NOW_MS), NOW_MS),
        Minted::Hold(_)
    ));
}

#[test]
fn the_action_tag_is_what_the_store_keys_the_actions_state_by() {
    let keys = keys();
    let prepared = Prepared::new(first(session("s1")));
    let id = id_of(&minted(&first(session("s1"))));
    assert_eq!(action_tag(&keys, &prepared).as_str(), id.action_tag());
    let other_sku = Prepared::new(request(&exchange(), session("s1"), terms("o1", "i1", "s2")));
    assert_eq!(
        action_tag(&keys, &other_sku).as_str(),
        id.action_tag(),
        "terms outside same_action are the same action"
    );
}

// --- The expiry and release rules -----------------------------------------------------------

fn upstream() -> Upstream {
    Upstream {
        url: "http://127.0.0.1:1".into(),
        tls: false,
        address: "127.0.0.1:1".into(),
        host: "127.0.0.1".into(),
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(30),
        release_statuses: vec![401, 429],
        release_503_with_retry_after: true,
        passthrough: crate::config::Passthrough::default(),
        approval_header: None,
    }
}

#[test]
fn a_claim_holds_for_the_longest_forward_and_a_second() {
    assert_eq!(
        lease_until_ms(&upstream().forward_rules(), NOW_MS),
        NOW_MS + 33_000
    );
}

#[test]
fn only_answers_that_prove_nothing_was_performed_release_the_claim() {
    let retry_after = vec![("retry-after".to_owned(), b"1".to_vec())];
    let mut settings = upstream().forward_rules();
    assert!(releases(&settings, 401, &[]));
    assert!(releases(&settings, 429, &[]));
    assert!(releases(&settings, 503, &retry_after));
    for status in [200, 201, 400, 404, 500, 502, 503] {
        assert!(!releases(&settings, status, &[]), "{status}");
    }
    settings.release_503_with_retry_after = false;
    assert!(!releases(&settings, 503, &retry_after));
    settings.release_statuses.clear();
    assert!(!releases(&settings, 401, &[]));
}

#[test]
fn an_answer_is_remembered_while_any_revision_could_be_approved_plus_the_grace() {
    let remember = Remember {
        expires_at: NOW_S + FIFTEEN_MINUTES,
        expires_in: Duration::from_secs(900),
        grace: Duration::from_secs(60),
    };
    // Completed at once: a revision re-minted now expires 15 min and 1 s later.
    assert_eq!(
        remember.until_ms(NOW_MS, None),
        NOW_MS + 900_000 + 1000 + 60_000
    );
    // Completed long before the approved revision expires (a clock the far side of it).
    assert_eq!(
        remember.until_ms(NOW_MS - 3_600_000, None),
        (NOW_S + FIFTEEN_MINUTES) * 1000 + 60_000
    );
    // A reload made `expires_in` longer during the forward: the longer one counts.
    assert_eq!(
        remember.until_ms(NOW_MS, Some(Duration::from_secs(3600))),
        NOW_MS + 3_600_000 + 1000 + 60_000
    );
    assert_eq!(
        remember.until_ms(NOW_MS, Some(Duration::from_secs(60))),
        remember.until_ms(NOW_MS, None),
        "a shorter one does not"
    );
}

#[test]
fn a_receipt_names_who_approved_which_terms() {
    let approver = signed_in("s1", "acct");
    let operation = minted(&first(approver.clone()));
    let prepared = approving(first(approver), &operation);
    let Verdict::Claim(approval) = decide(&prepared, None, 0, NOW_MS) else {
        panic!("not claimed")
    };
    let receipt = draft_receipt(&prepared, &approval, NOW_MS, None);
    assert_eq!(receipt.operation_id, operation.operation_id);
    assert_eq!(receipt.revision, operation.revision);
    assert_eq!(receipt.summary.as_deref(), Some(operation.summary.as_str()));
    assert_eq!(receipt.terms, operation.terms);
    assert_eq!(receipt.account.as_deref(), Some("claim:acct"));
    assert_eq!(receipt.identity, Some("unverified"));
    assert!(
        receipt
            .approved_at
            .unwrap()
            .starts_with("2027-01-15T08:00:00")
    );
}

/// A page decision of `operation` by `subject`, at `at_ms`.
fn page_decision(
    operation: &Operation,
    verdict: page::PageVerdict,
    subject: &str,
    at_ms: i64,
) -> page::PageDecision {
    page::PageDecision {
        operation_id: id_of(operation),
        revision: operation.revision.clone(),
        verdict,
        subject: subject.into(),
        at_ms,
    }
}

/// A page request's decisions: only the account's, for a revision of exactly this request
/// that is still open, stand; the latest of them decides; an approval is then checked as a
/// Poppy-Approval of it (checks 1 to 3).
#[test]
fn page_decisions_stand_for_their_own_request_and_account_only() {
    use page::{PageRead, PageVerdict, read_decisions};
    let keys = keys();
    let request = request(
        &exchange(),
        signed_in("s1", "alice"),
        terms("o1", "i1", "s1"),
    );
    let operation = minted(&request);
    let prepared = Prepared::new(request.clone());
    let approved = page_decision(&operation, PageVerdict::Approved, "alice", NOW_MS);
    assert_eq!(
        read_decisions(&keys, &prepared, &[], NOW_MS),
        PageRead::Hold
    );
    assert_eq!(
        read_decisions(&keys, &prepared, std::slice::from_ref(&approved), NOW_MS),
        PageRead::Approved(approved.clone())
    );
    // Another subject's decision, or one for other terms, is not this request's.
    let bobs = page_decision(&operation, PageVerdict::Approved, "bob", NOW_MS);
    assert_eq!(
        read_decisions(&keys, &prepared, &[bobs], NOW_MS),
        PageRead::Hold
    );
    let other_terms = Prepared::new(OperationRequest {
        terms: terms("o1", "i2", "s1"),
        ..request.clone()
    });
    assert_eq!(
        read_decisions(&keys, &other_terms, std::slice::from_ref(&approved), NOW_MS),
        PageRead::Hold
    );
    // Expired: not a decision any more.
    let later = NOW_MS + (FIFTEEN_MINUTES + 1) * 1000;
    assert_eq!(
        read_decisions(&keys, &prepared, std::slice::from_ref(&approved), later),
        PageRead::Hold
    );
    // The latest decision stands.
    let declined = page_decision(&operation, PageVerdict::Declined, "alice", NOW_MS + 1);
    assert_eq!(
        read_decisions(&keys, &prepared, &[approved.clone(), declined], NOW_MS),
        PageRead::Declined(id_of(&operation))
    );
    // The approval passes checks 1 to 3 as a Poppy-Approval would.
    let as_approval = prepared.with_approval(approved.as_approval());
    assert!(matches!(
        check(&keys, &as_approval, &id_of(&operation), None, 0, NOW_MS),
        Verdict::Claim(_)
    ));
    // Without an account, no decision is anybody's.
    let signed_out = Prepared::new(OperationRequest {
        approver: session("s1"),
        ..request
    });
    assert_eq!(
        read_decisions(&keys, &signed_out, &[approved], NOW_MS),
        PageRead::Hold
    );
}

/// A policy whose action is named by a looked-up term: only its lookup can say which action
/// a request is for.
const ACTION_LOOKED_UP_POLICY: &str = r#"
[[operation]]
name = "exchange_by_name"
method = "POST"
path = "/orders/{order_id}/by-name"
id_prefix = "exn"
expires_in = "15m"
same_action = ["name"]
summary = "Exchange on order {order_id} for {name}."
[operation.terms]
order_id = { path = "order_id" }
name = { lookup = "$.name" }
[operation.lookup]
url = "/catalog/{order_id}"
"#;

/// A page request's action is known from its request terms before its lookup, and is the
/// one its decisions are kept under once the lookup ran; unless `same_action` names a
/// looked-up term.
#[test]
fn a_page_requests_action_is_known_before_its_lookup() {
    let keys = keys();
    let looked_up = policies("15m").remove(1);
    let alice = signed_in("s1", "alice");
    let before: Terms = [("order_id".to_owned(), json!("o1"))].into_iter().collect();
    let mut after = before.clone();
    after.insert("name".into(), json!("Jacket"));
    let prepared = Prepared::new(request(&looked_up, alice.clone(), after));
    assert_eq!(
        page::action_before_lookup(&keys, &looked_up, &alice, &before),
        Some(action_tag(&keys, &prepared))
    );
    // Another account's request is another action.
    let bob = signed_in("s1", "bob");
    assert_ne!(
        page::action_before_lookup(&keys, &looked_up, &bob, &before),
        Some(action_tag(&keys, &prepared))
    );
    let by_name = crate::config::parse_policy_file(Path::new("n.toml"), ACTION_LOOKED_UP_POLICY)
        .unwrap()
        .remove(0);
    assert_eq!(
        page::action_before_lookup(&keys, &by_name, &alice, &before),
        None
    );
}

/// The operations a page retry reads the records of: the account's approvals only, newest
/// first, each operation once, a few at most; declines and other subjects' never.
#[test]
fn a_page_retry_reads_the_accounts_approved_operations_newest_first() {
    use page::{PageVerdict, approved_operations};
    let alice = signed_in("s1", "alice");
    let account = alice.who.account.as_deref();
    let one = minted(&request(
        &exchange(),
        alice.clone(),
        terms("o1", "i1", "s1"),
    ));
    let two = minted_at(
        &keys(),
        &request(&exchange(), alice.clone(), terms("o1", "i1", "s2")),
        1,
        NOW_MS,
    );
    let three = minted_at(
        &keys(),
        &request(&exchange(), alice.clone(), terms("o1", "i1", "s3")),
        2,
        NOW_MS,
    );
    let decisions = [
        page_decision(&one, PageVerdict::Approved, "alice", NOW_MS),
        page_decision(&two, PageVerdict::Approved, "alice", NOW_MS + 2),
        page_decision(&one, PageVerdict::Approved, "alice", NOW_MS + 3),
        page_decision(&three, PageVerdict::Declined, "alice", NOW_MS + 4),
        page_decision(&three, PageVerdict::Approved, "bob", NOW_MS + 5),
    ];
    assert_eq!(
        approved_operations(&decisions, account),
        vec![id_of(&one), id_of(&two)]
    );
    assert!(approved_operations(&decisions, None).is_empty());
    let many: Vec<_> = (0..10)
        .map(|g| {
            let operation = minted_at(
                &keys(),
                &request(&exchange(), alice.clone(), terms("o1", "i1", "s1")),
                g,
                NOW_MS,
            );
            page_decision(
                &operation,
                PageVerdict::Approved,
                "alice",
                NOW_MS + g as i64,
            )
        })
        .collect();
    let read = approved_operations(&many, account);
    assert_eq!(read.len(), 4, "a few at most");
    assert_eq!(read[0], many[9].operation_id, "the newest first");
}

/// A page retry is answered from the record of an operation its account approved on the page
/// only when the record was claimed for this very request (under any key), by this approver,
/// under this policy; then as a Poppy agent's retry would be, however long after the
/// revision's expiry.
#[test]
fn a_page_retry_is_answered_from_the_record_of_its_own_request_only() {
    use page::{replay_before_lookup, request_digest};
    let keys = keys();
    let policy = exchange();
    let alice = signed_in("s1", "alice");
    let operation = minted(&request(&policy, alice.clone(), terms("o1", "i1", "s1")));
    let id = id_of(&operation);
    let approved_request = b"POST /orders/o1/exchanges i1 s1".as_slice();
    let kept = |state: RecordState, digest: Option<String>| OperationRecord {
        request: digest,
        ..record(&keys, &alice, "exchange", state)
    };
    let digest = Some(request_digest(keys.current(), approved_request));
    let long_after = NOW_MS + 10 * FIFTEEN_MINUTES * 1000;
    let replay = |approver: &Approver, fingerprint: &[u8], record: OperationRecord, now: i64| {
        replay_before_lookup(&keys, &policy, approver, fingerprint, &id, record, now)
    };
    assert_eq!(
        replay(
            &alice,
            approved_request,
            kept(done(), digest.clone()),
            long_after
        ),
        Some(Answer::Replay(answer())),
        "the same request, after the revision expired"
    );
    assert_eq!(
        replay(
            &alice,
            b"POST /orders/o1/exchanges i1 s2",
            kept(done(), digest.clone()),
            NOW_MS
        ),
        None,
        "another request of the same action"
    );
    assert_eq!(
        replay(&alice, approved_request, kept(done(), None), NOW_MS),
        None,
        "a record that kept no request (a Poppy agent's, or an older one)"
    );
    assert_eq!(
        replay(
            &signed_in("s1", "bob"),
            approved_request,
            kept(done(), digest.clone()),
            NOW_MS
        ),
        None,
        "another account"
    );
    let other_policy = OperationRecord {
        policy: "cancel".into(),
        ..kept(done(), digest.clone())
    };
    assert_eq!(replay(&alice, approved_request, other_policy, NOW_MS), None);
    assert_eq!(
        replay(
            &alice,
            approved_request,
            kept(in_flight(NOW_MS + 1), digest.clone()),
            NOW_MS
        ),
        Some(Answer::InProgress(id.clone()))
    );
    assert_eq!(
        replay(
            &alice,
            approved_request,
            kept(in_flight(NOW_MS - 1), digest.clone()),
            NOW_MS
        ),
        Some(Answer::Unknown(id.clone()))
    );
    // Kept under a key that was retired since.
    let rotated = Keys::new(vec![key("b"), key("a")]).unwrap();
    assert_eq!(
        replay_before_lookup(
            &rotated,
            &policy,
            &alice,
            approved_request,
            &id,
            kept(done(), digest),
            NOW_MS
        ),
        Some(Answer::Replay(answer()))
    );
}
