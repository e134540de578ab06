//! When a delivery is tried again: pure, so each rule is unit-tested. A `2xx` is delivered;
//! `5xx`, `429`, `408` and no answer at all (refused, reset, timed out) are retried with
//! exponential backoff and jitter, as the Standard Webhooks spec recommends, until
//! `max_attempts` or `max_age`; any other answer (`3xx`, `4xx`) is the receiver saying no, or
//! a wrong URL, and is not retried.

use std::time::Duration;

/// The longest pause between two attempts.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempted {
    Delivered,
    /// Worth trying again; `after` is the receiver's `Retry-After`, if it sent one.
    Again {
        after: Option<Duration>,
    },
    /// Not worth trying again.
    Refused,
}

/// What an answer (`None`: none came) means.
pub(crate) fn attempted(status: Option<u16>, retry_after: Option<Duration>) -> Attempted {
    match status {
        Some(200..=299) => Attempted::Delivered,
        None | Some(408 | 429 | 500..=599) => Attempted::Again { after: retry_after },
        Some(_) => Attempted::Refused,
    }
}

/// The retry settings of `[webhook]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    pub(crate) first_backoff: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) max_age: Duration,
}

impl RetryPolicy {
    /// The pause before the next attempt, after `made` attempts of an event `age` old, or
    /// `None` to give up. `jitter` in `[0, 1)` takes up to half the pause off, so that
    /// events that failed together are not retried together.
    pub(crate) fn next(
        &self,
        made: u32,
        age: Duration,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> Option<Duration> {
        if made >= self.max_attempts {
            return None;
        }
        let doubled = self
            .first_backoff
            .saturating_mul(1u32 << made.saturating_sub(1).min(20))
            .min(MAX_BACKOFF);
        let pause = doubled.mul_f64(1.0 - 0.5 * jitter.clamp(0.0, 1.0));
        let pause = retry_after.map_or(pause, |after| pause.max(after.min(MAX_BACKOFF)));
        (age.saturating_add(pause) <= self.max_age).then_some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn answers_and_what_they_mean() {
        assert_eq!(attempted(Some(200), None), Attempted::Delivered);
        assert_eq!(attempted(Some(204), None), Attempted::Delivered);
        for again in [None, Some(500), Some(502), Some(503), Some(429), Some(408)] {
            assert_eq!(
                attempted(again, Some(S)),
                Attempted::Again { after: Some(S) },
                "{again:?}"
            );
        }
        for refused in [
            Some(301),
            Some(400),
            Some(401),
            Some(404),
            Some(410),
            Some(100),
        ] {
            assert_eq!(attempted(refused, None), Attempted::Refused, "{refused:?}");
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_its_limits() {
        let policy = RetryPolicy {
            first_backoff: S,
            max_attempts: 5,
            max_age: Duration::from_secs(3600),
        };
        let age = Duration::ZERO;
        assert_eq!(policy.next(1, age, None, 0.0), Some(S));
        assert_eq!(policy.next(2, age, None, 0.0), Some(2 * S));
        assert_eq!(policy.next(4, age, None, 0.0), Some(8 * S));
        // Jitter takes at most half off.
        assert_eq!(
            policy.next(2, age, None, 0.999_999).map(|d| d >= S),
            Some(true)
        );
        assert_eq!(
            policy.next(2, age, None, 0.5),
            Some(Duration::from_millis(1500))
        );
        // The fifth attempt was the last.
        assert_eq!(policy.next(5, age, None, 0.0), None);
        // Retry-After is a floor.
        assert_eq!(policy.next(1, age, Some(30 * S), 0.0), Some(30 * S));
        // Never past max_age.
        assert_eq!(policy.next(3, Duration::from_secs(3597), None, 0.0), None);
        assert_eq!(
            policy.next(3, Duration::from_secs(3596), None, 0.0),
            Some(4 * S)
        );
        let long = RetryPolicy {
            max_attempts: 100,
            ..policy
        };
        assert_eq!(long.next(60, age, None, 0.0), Some(MAX_BACKOFF));
    }
}
