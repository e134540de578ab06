//! Unit tests of introspection: reading answers, the cache, the bucket, shared calls.

use serde_json::json;

use super::*;

const AUDIENCE: &str = "https://shop.example";

fn read(answer: Value, now: u64) -> Result<Verdict, TokenError> {
    read_answer(answer.to_string().as_bytes(), &[AUDIENCE.into()], 60, now)
}

fn refused(answer: Value) -> Option<TokenError> {
    match read(answer, 1000) {
        Ok(Verdict::Refused(e)) => Some(e),
        _ => None,
    }
}

#[test]
fn an_answer_is_active_only_for_this_audience() {
    for aud in [json!(AUDIENCE), json!(["https://other.example", AUDIENCE])] {
        let answer = json!({"active": true, "sub": "u1", "aud": aud, "exp": 2000});
        assert!(
            matches!(read(answer, 1000), Ok(Verdict::Active(_))),
            "{aud}"
        );
    }
    for aud in [
        json!("https://other.example"),
        json!(["https://other.example"]),
        json!([]),
        json!(7),
        json!([7]),
        json!(null),
    ] {
        let answer = json!({"active": true, "sub": "u1", "aud": aud, "exp": 2000});
        assert_eq!(
            refused(answer),
            Some(TokenError::WrongAudience(vec![AUDIENCE.into()])),
            "{aud}"
        );
    }
    // No aud at all: not shown to be for this gateway.
    assert!(matches!(
        refused(json!({"active": true, "sub": "u1", "exp": 2000})),
        Some(TokenError::WrongAudience(_))
    ));
}

#[test]
fn inactive_expired_and_unreadable_answers() {
    assert_eq!(
        refused(json!({"active": false})),
        Some(TokenError::Inactive)
    );
    assert_eq!(
        refused(json!({"active": "true", "aud": AUDIENCE})),
        Some(TokenError::Inactive)
    );
    // Expired beyond the 60 s allowance; within it, still active.
    assert_eq!(
        refused(json!({"active": true, "aud": AUDIENCE, "exp": 939})),
        Some(TokenError::Inactive)
    );
    assert!(matches!(
        read(json!({"active": true, "aud": AUDIENCE, "exp": 940}), 1000),
        Ok(Verdict::Active(_))
    ));
    for unreadable in [&b"[1]"[..], b"not json", br#"{"active":true,"exp":"soon"}"#] {
        assert!(matches!(
            read_answer(unreadable, &[AUDIENCE.into()], 60, 1000),
            Err(TokenError::IntrospectionFailed(_))
        ));
    }
}

#[test]
fn the_bucket_allows_a_burst_then_the_rate() {
    let start = Instant::now();
    let mut bucket = TokenBucket::new(2, 3, start);
    for _ in 0..3 {
        assert_eq!(bucket.take(start), Ok(()));
    }
    let wait = bucket.take(start).unwrap_err();
    assert_eq!(wait, Duration::from_millis(500));
    // Half a second later: one more, then none.
    let later = start + Duration::from_millis(500);
    assert_eq!(bucket.take(later), Ok(()));
    assert!(bucket.take(later).is_err());
    // Long idle: never more than the burst.
    let idle = later + Duration::from_secs(3600);
    let taken = (0..10).filter(|_| bucket.take(idle).is_ok()).count();
    assert_eq!(taken, 3);
}

fn introspector(limits: IntrospectionLimits) -> Introspector {
    let endpoint = Introspection {
        url: "http://127.0.0.1:9/introspect".into(),
        client_id: "gw".into(),
        client_secret: "s".into(),
    };
    let expect = Expectations {
        audience: vec![AUDIENCE.into()],
        clock_skew_secs: 60,
        origins: Vec::new(),
    };
    let http = Arc::new(HttpClient::new(None).unwrap());
    Introspector::new(endpoint, limits, &expect, http)
}

fn active_until(exp: u64) -> Verdict {
    Verdict::Active(Arc::new(
        json!({"active": true, "aud": AUDIENCE, "exp": exp})
            .as_object()
            .unwrap()
            .clone(),
    ))
}

/// An active answer is kept until `exp`, at most `cache_max`; a refused one for
/// `cache_refused`; at most `cache_entries`, the least recently used going first; and
/// the keys are salted hashes, never the token.
#[test]
fn answers_are_kept_as_long_as_allowed_and_no_more() {
    let limits = IntrospectionLimits {
        cache_max: Duration::from_secs(300),
        cache_refused: Duration::from_secs(30),
        cache_entries: NonZeroUsize::new(2).unwrap(),
        ..IntrospectionLimits::default()
    };
    let cache = introspector(limits);
    let (soon, late, refused) = (cache.key("soon"), cache.key("late"), cache.key("refused"));
    cache.remember(soon, &active_until(1100), 1000);
    cache.remember(late, &active_until(99_999), 1000);
    assert!(cache.cached(&soon, 1099).is_some());
    assert!(cache.cached(&soon, 1100).is_none(), "until exp");
    assert!(cache.cached(&late, 1299).is_some());
    assert!(cache.cached(&late, 1300).is_none(), "at most cache_max");
    cache.remember(refused, &Verdict::Refused(TokenError::Inactive), 1000);
    assert!(cache.cached(&refused, 1029).is_some());
    assert!(cache.cached(&refused, 1030).is_none(), "cache_refused");

    for (i, token) in ["a", "b", "c"].iter().enumerate() {
        cache.remember(cache.key(token), &active_until(5000), 1000 + i as u64);
    }
    assert_eq!(lock(&cache.cache).len(), 2, "at most cache_entries");
    assert!(
        cache.cached(&cache.key("a"), 1010).is_none(),
        "the oldest went first"
    );
    assert!(cache.cached(&cache.key("c"), 1010).is_some());

    let other = introspector(limits);
    assert_ne!(cache.key("a"), other.key("a"), "salted per process");
    assert_ne!(cache.key("a").as_slice(), Sha256::digest(b"a").as_slice());

    let off = introspector(IntrospectionLimits {
        cache_max: Duration::ZERO,
        cache_refused: Duration::ZERO,
        ..limits
    });
    off.remember(off.key("a"), &active_until(5000), 1000);
    off.remember(off.key("b"), &Verdict::Refused(TokenError::Inactive), 1000);
    assert_eq!(lock(&off.cache).len(), 0, "zero keeps nothing");
}

/// A call leaves the map once answered, or once no request waits for it (a cancelled
/// request leaves nothing behind), but not while another request still waits.
#[test]
fn a_call_leaves_the_map_when_no_one_waits() {
    let calls = Mutex::new(HashMap::new());
    let key = [7u8; 32];
    let first = Waiting::join(&calls, key);
    let second = Waiting::join(&calls, key);
    assert!(Arc::ptr_eq(&first.call, &second.call));
    drop(first);
    assert_eq!(lock(&calls).len(), 1, "the second still waits");
    drop(second);
    assert!(lock(&calls).is_empty(), "cancelled, nothing left");

    let answered = Waiting::join(&calls, key);
    let waiting = Waiting::join(&calls, key);
    assert!(
        answered
            .call()
            .set(Ok(Verdict::Refused(TokenError::Inactive)))
            .is_ok()
    );
    drop(answered);
    assert!(
        lock(&calls).is_empty(),
        "answered: the next request asks afresh"
    );
    drop(waiting);
    assert!(lock(&calls).is_empty());
}

#[test]
fn the_metric_is_well_formed() {
    let counter = INTROSPECTIONS.as_ref().unwrap();
    for result in RESULTS {
        counter.with_label_values(&[result]);
    }
}
