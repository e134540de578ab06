//! RFC 7662 introspection of opaque access tokens, asked as little as possible: each answer
//! is cached (refusals too, briefly), keyed by a salted hash of the token (never the token);
//! one call answers every concurrent request with the same token; and calls are rate-limited,
//! so a stream of made-up tokens costs the authorization server at most the configured rate
//! (the rest are answered `503 token_check_unavailable` with `Retry-After`).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lru::LruCache;
use prometheus::{IntCounterVec, Opts};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use super::TokenError;
use crate::identity::http::HttpClient;
use crate::identity::verify::{self, Expectations};
use crate::protocol::json;

/// How long one introspection may take.
pub(crate) const INTROSPECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest introspection answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Introspections by result, for the whole process (`poppy_token_introspections_total`):
/// `active`, `refused` (inactive, expired, another audience) and `failed` are calls to the
/// authorization server; `cached` was answered without one; `rate_limited` was refused `503`.
/// (`None` only if prometheus refused the name, which a unit test rules out.)
pub(crate) static INTROSPECTIONS: LazyLock<Option<IntCounterVec>> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            "poppy_token_introspections_total",
            "Opaque access tokens checked by RFC 7662 introspection, by result: active, refused and failed called the authorization server; cached did not; rate_limited was answered 503",
        ),
        &["result"],
    )
    .ok()
});

/// Every `result` label of [`INTROSPECTIONS`].
pub(crate) const RESULTS: [&str; 5] = ["active", "refused", "failed", "cached", "rate_limited"];

fn count(result: &str) {
    if let Some(counter) = INTROSPECTIONS.as_ref() {
        counter.with_label_values(&[result]).inc();
    }
}

/// RFC 7662 introspection endpoint and the gateway's client credentials for it.
#[derive(Clone)]
pub(crate) struct Introspection {
    pub(crate) url: String,
    pub(crate) client_id: String,
    pub(crate) client_secret: String,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Introspection({}, client {:?})",
            self.url, self.client_id
        )
    }
}

/// How much introspection may cost (`[session.token] introspection_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IntrospectionLimits {
    /// An active token is remembered until its `exp`, at most this long (a revoked token is
    /// noticed within it).
    pub(crate) cache_max: Duration,
    /// A refused one (inactive, expired, for another audience) is remembered this long.
    pub(crate) cache_refused: Duration,
    /// Answers remembered at most (the least recently used go first).
    pub(crate) cache_entries: NonZeroUsize,
    /// Calls to the authorization server per second, sustained.
    pub(crate) rate: u32,
    /// Calls it may get at once, beyond the rate.
    pub(crate) burst: u32,
}

impl Default for IntrospectionLimits {
    fn default() -> Self {
        IntrospectionLimits {
            cache_max: Duration::from_secs(300),
            cache_refused: Duration::from_secs(30),
            cache_entries: NonZeroUsize::new(10_000).unwrap_or(NonZeroUsize::MIN),
            rate: 50,
            burst: 100,
        }
    }
}

/// What the authorization server said about a token, as the gateway reads it.
#[derive(Debug, Clone)]
enum Verdict {
    Active(Arc<Map<String, Value>>),
    Refused(TokenError),
}

impl Verdict {
    fn into_result(self) -> Result<Map<String, Value>, TokenError> {
        match self {
            Verdict::Active(claims) => Ok(Map::clone(&claims)),
            Verdict::Refused(e) => Err(e),
        }
    }
}

/// A verdict and the Unix second it is kept until (exclusive).
#[derive(Debug, Clone)]
struct Cached {
    verdict: Verdict,
    until: u64,
}

type Key = [u8; 32];
/// One call to the authorization server, shared by every request waiting for its answer.
type Call = Arc<OnceCell<Result<Verdict, TokenError>>>;

/// Resolves opaque tokens through one introspection endpoint.
pub(crate) struct Introspector {
    endpoint: Introspection,
    limits: IntrospectionLimits,
    audience: Vec<String>,
    clock_skew_secs: u64,
    http: Arc<HttpClient>,
    /// Random per process: the cache's keys say nothing about a token to whoever reads memory.
    salt: [u8; 32],
    cache: Mutex<LruCache<Key, Cached>>,
    bucket: Mutex<TokenBucket>,
    calls: Mutex<HashMap<Key, Call>>,
}

impl std::fmt::Debug for Introspector {
    // Configuration only: reload compares it, and the cache holds subjects.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspector")
            .field("endpoint", &self.endpoint)
            .field("limits", &self.limits)
            .field("audience", &self.audience)
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its state whole: a panic elsewhere does not spoil it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Introspector {
    /// `expect`: the `aud` values accepted and the clock allowance, as for JWT access tokens.
    pub(crate) fn new(
        endpoint: Introspection,
        limits: IntrospectionLimits,
        expect: &Expectations,
        http: Arc<HttpClient>,
    ) -> Introspector {
        Introspector {
            endpoint,
            audience: expect.audience.clone(),
            clock_skew_secs: expect.clock_skew_secs,
            http,
            salt: rand::random(),
            cache: Mutex::new(LruCache::new(limits.cache_entries)),
            bucket: Mutex::new(TokenBucket::new(limits.rate, limits.burst, Instant::now())),
            calls: Mutex::new(HashMap::new()),
            limits,
        }
    }

    /// The claims of an active token issued for this gateway's audience.
    pub(crate) async fn claims(
        &self,
        token: &str,
        now: u64,
    ) -> Result<Map<String, Value>, TokenError> {
        let key = self.key(token);
        if let Some(verdict) = self.cached(&key, now) {
            count("cached");
            return verdict.into_result();
        }
        let waiting = Waiting::join(&self.calls, key);
        let mut asked = false;
        let answer = waiting
            .call()
            .get_or_init(|| {
                asked = true;
                self.ask(token, &key, now)
            })
            .await
            .clone();
        drop(waiting);
        if !asked {
            count("cached");
        }
        answer?.into_result()
    }

    fn key(&self, token: &str) -> Key {
        let mut hash = Sha256::new();
        hash.update(self.salt);
        hash.update(token.as_bytes());
        hash.finalize().into()
    }

    fn cached(&self, key: &Key, now: u64) -> Option<Verdict> {
        let mut cache = lock(&self.cache);
        match cache.get(key) {
            Some(cached) if cached.until > now => Some(cached.verdict.clone()),
            Some(_) => {
                cache.pop(key);
                None
            }
            None => None,
        }
    }

    /// Ask the authorization server (if the rate allows), and remember its verdict.
    async fn ask(&self, token: &str, key: &Key, now: u64) -> Result<Verdict, TokenError> {
        // Another call may have finished between the cache lookup and this one's start.
        if let Some(verdict) = self.cached(key, now) {
            return Ok(verdict);
        }
        if let Err(wait) = lock(&self.bucket).take(Instant::now()) {
            count("rate_limited");
            return Err(TokenError::IntrospectionBusy {
                retry_after: u32::try_from(wait.as_secs().saturating_add(1)).unwrap_or(u32::MAX),
            });
        }
        let body = self
            .http
            .post_form(
                &self.endpoint.url,
                &[("token", token), ("token_type_hint", "access_token")],
                Some((&self.endpoint.client_id, &self.endpoint.client_secret)),
                INTROSPECTION_TIMEOUT,
                MAX_ANSWER_BYTES,
            )
            .await
            .map_err(TokenError::IntrospectionFailed);
        let verdict =
            body.and_then(|body| read_answer(&body, &self.audience, self.clock_skew_secs, now));
        match &verdict {
            Err(_) => count("failed"),
            Ok(answer) => {
                count(match answer {
                    Verdict::Active(_) => "active",
                    Verdict::Refused(_) => "refused",
                });
                self.remember(*key, answer, now);
            }
        }
        verdict
    }

    /// Keep a verdict: an active token until its `exp`, at most `cache_max`; a refused one
    /// for `cache_refused`. A zero duration keeps nothing.
    fn remember(&self, key: Key, verdict: &Verdict, now: u64) {
        let until = match verdict {
            Verdict::Active(claims) => {
                let exp = verify::numeric(claims, "exp").ok().flatten();
                exp.unwrap_or(u64::MAX)
                    .min(now.saturating_add(self.limits.cache_max.as_secs()))
            }
            Verdict::Refused(_) => now.saturating_add(self.limits.cache_refused.as_secs()),
        };
        if until > now {
            lock(&self.cache).put(
                key,
                Cached {
                    verdict: verdict.clone(),
                    until,
                },
            );
        }
    }
}

/// A request's share of the call about its token. Dropped (answered, or the request gone),
/// it takes the call out of the map once it has an answer or no one else waits, so that a
/// failure is asked again and a cancelled call leaves nothing behind.
struct Waiting<'a> {
    calls: &'a Mutex<HashMap<Key, Call>>,
    key: Key,
    /// Every clone and drop of it happens under the lock, so its count says who else waits.
    call: Call,
}

impl<'a> Waiting<'a> {
    fn join(calls: &'a Mutex<HashMap<Key, Call>>, key: Key) -> Waiting<'a> {
        let call = Call::clone(lock(calls).entry(key).or_default());
        Waiting { calls, key, call }
    }

    fn call(&self) -> &OnceCell<Result<Verdict, TokenError>> {
        &self.call
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut calls = lock(self.calls);
        // Swapped for a cell no one shares, so that this one is released under the lock.
        let call = std::mem::take(&mut self.call);
        let ours = calls.get(&self.key).is_some_and(|c| Arc::ptr_eq(c, &call));
        // The map's reference and this one: no one else waits.
        if ours && (call.initialized() || Arc::strong_count(&call) <= 2) {
            calls.remove(&self.key);
        }
        drop(call);
    }
}

/// The verdict of an introspection answer: active, not expired (with the clock allowance),
/// and for one of `audience` (`aud`, a string or an array, as in a JWT access token). An
/// answer that is not a JSON object, or whose `exp` is not a number, is no verdict.
fn read_answer(
    body: &[u8],
    audience: &[String],
    clock_skew_secs: u64,
    now: u64,
) -> Result<Verdict, TokenError> {
    // A member twice (`active`, `aud`) is no verdict: readers disagree on which one counts.
    let claims = match json::from_slice(body) {
        Ok(Value::Object(map)) => map,
        _ => {
            return Err(TokenError::IntrospectionFailed(
                "the answer is not a JSON object, or has a member twice".into(),
            ));
        }
    };
    if claims.get("active") != Some(&Value::Bool(true)) {
        return Ok(Verdict::Refused(TokenError::Inactive));
    }
    let exp = verify::numeric(&claims, "exp")
        .map_err(|e| TokenError::IntrospectionFailed(e.to_string()))?;
    if exp.is_some_and(|exp| exp.saturating_add(clock_skew_secs) < now) {
        return Ok(Verdict::Refused(TokenError::Inactive));
    }
    let named = |value: &Value| {
        value
            .as_str()
            .is_some_and(|aud| audience.iter().any(|a| a == aud))
    };
    let for_us = match claims.get("aud") {
        Some(Value::Array(values)) => values.iter().any(named),
        Some(value) => named(value),
        None => false,
    };
    if !for_us {
        return Ok(Verdict::Refused(TokenError::WrongAudience(
            audience.to_vec(),
        )));
    }
    Ok(Verdict::Active(Arc::new(claims)))
}

/// A token bucket: `burst` calls at once, refilled at `rate` per second.
#[derive(Debug)]
struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    fn new(rate: u32, burst: u32, now: Instant) -> TokenBucket {
        TokenBucket {
            rate: f64::from(rate.max(1)),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            at: now,
        }
    }

    /// Take one token, or say how long until there is one.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.at = now.max(self.at);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests;
