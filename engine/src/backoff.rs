//! Retry backoff: how long a failed attempt's message waits before it is
//! eligible again.
//!
//! Invariant: the delay is a pure function of the policy, the message id and
//! its delivery count, so runs under a `ManualClock` are reproducible (jitter
//! comes from a hash, not from a thread-local generator).

use std::time::Duration;

use crate::receipt::{MessageId, mix};

/// A queue's retry backoff, applied when a lease expires (and by
/// `Queue::release_with_backoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Backoff {
    /// Eligible again at once.
    #[default]
    None,
    /// The same delay after every failure.
    Fixed(Duration),
    /// `base * 2^(failures - 1)`, capped at `max`; with `jitter`, a uniform
    /// value in the upper half of that (so retries of many messages spread out
    /// but never wait less than half the nominal delay).
    Exponential {
        /// Delay after the first failure.
        base: Duration,
        /// Largest delay.
        max: Duration,
        /// Spread delays over `[d/2, d]`.
        jitter: bool,
    },
}

impl Backoff {
    /// The delay after the attempt numbered `delivery_count` (1-based) failed.
    #[must_use]
    pub fn delay(&self, id: MessageId, delivery_count: u32) -> Duration {
        match *self {
            Backoff::None => Duration::ZERO,
            Backoff::Fixed(d) => d,
            Backoff::Exponential { base, max, jitter } => {
                let doublings = delivery_count.saturating_sub(1).min(63);
                let nominal = base.checked_mul(1u32 << doublings.min(31)).unwrap_or(max).min(max);
                let nominal = if doublings > 31 { max } else { nominal };
                if !jitter || nominal.is_zero() {
                    return nominal;
                }
                let nanos = crate::clock::duration_nanos(nominal);
                let half = nanos / 2;
                let spread = mix(id.0 ^ u64::from(delivery_count).rotate_left(32)) % (nanos - half + 1);
                Duration::from_nanos(half + spread)
            }
        }
    }

    /// `delay` in whole nanoseconds, for the engine's transitions. The id is
    /// asked for only by a jittered policy: with no backoff (the default) an
    /// expiry reads nothing more of the message than its deadline.
    #[inline]
    pub(crate) fn delay_nanos(&self, id: impl FnOnce() -> MessageId, delivery_count: u32) -> u64 {
        match *self {
            Backoff::None => 0,
            Backoff::Fixed(d) => crate::clock::duration_nanos(d),
            Backoff::Exponential { .. } => crate::clock::duration_nanos(self.delay(id(), delivery_count)),
        }
    }

    /// The largest delay this policy can produce.
    #[must_use]
    pub fn max_delay(&self) -> Duration {
        match *self {
            Backoff::None => Duration::ZERO,
            Backoff::Fixed(d) => d,
            Backoff::Exponential { max, .. } => max,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const ID: MessageId = MessageId(77);

    #[test]
    fn exponential_doubles_and_caps() {
        let b = Backoff::Exponential { base: Duration::from_secs(1), max: Duration::from_secs(10), jitter: false };
        let delays: Vec<_> = (1..=6).map(|n| b.delay(ID, n).as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(b.delay(ID, u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn jitter_stays_in_the_upper_half_and_is_reproducible() {
        let b = Backoff::Exponential { base: Duration::from_millis(100), max: Duration::from_secs(60), jitter: true };
        let mut distinct = std::collections::HashSet::new();
        for id in 0..200 {
            let d = b.delay(MessageId(id), 3);
            assert!(d >= Duration::from_millis(200) && d <= Duration::from_millis(400), "{d:?}");
            assert_eq!(d, b.delay(MessageId(id), 3));
            distinct.insert(d);
        }
        assert!(distinct.len() > 100, "jitter does not spread: {}", distinct.len());
    }

    #[test]
    fn delay_nanos_agrees_with_delay_and_asks_for_the_id_only_when_jittered() {
        let policies = [
            Backoff::None,
            Backoff::Fixed(Duration::from_millis(7)),
            Backoff::Exponential { base: Duration::from_millis(3), max: Duration::from_secs(1), jitter: false },
            Backoff::Exponential { base: Duration::from_millis(3), max: Duration::from_secs(1), jitter: true },
        ];
        for policy in policies {
            for count in [1, 2, 9, u32::MAX] {
                let mut asked = false;
                let nanos = policy.delay_nanos(
                    || {
                        asked = true;
                        ID
                    },
                    count,
                );
                assert_eq!(nanos, crate::clock::duration_nanos(policy.delay(ID, count)), "{policy:?} {count}");
                let jittered = matches!(policy, Backoff::Exponential { jitter: true, .. });
                assert!(!asked || matches!(policy, Backoff::Exponential { .. }), "{policy:?} read the id");
                assert!(asked || !jittered, "{policy:?} computed jitter without the id");
            }
        }
    }

    #[test]
    fn fixed_and_none() {
        assert_eq!(Backoff::None.delay(ID, 5), Duration::ZERO);
        assert_eq!(Backoff::Fixed(Duration::from_secs(3)).delay(ID, 1), Duration::from_secs(3));
    }
}
