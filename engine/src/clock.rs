//! Time as the engine sees it: nanoseconds on one monotonic clock.
//!
//! Invariant: a clock never goes backwards. Every deadline, lease check and
//! latency sample in an engine is measured on that engine's one clock, so a
//! `ManualClock` makes the whole engine deterministic: after
//! `ManualClock::advance`, the next operation observes every expiry due at the
//! new time, and blocked receivers are woken to look.

use std::fmt;
use std::time::{Duration, Instant};

use crate::sync::{Arc, AtomicU64, Mutex, Ordering, lock};

/// A point on an engine's clock, in nanoseconds since the clock's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

impl Nanos {
    /// The later of `self + d`, saturating instead of overflowing.
    pub fn saturating_add(self, d: Duration) -> Nanos {
        Nanos(self.0.saturating_add(duration_nanos(d)))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The nanosecond count.
    pub fn as_nanos(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", Duration::from_nanos(self.0))
    }
}

/// A duration as whole nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of monotonic time for an engine.
///
/// Implementations must never return a smaller value than an earlier call.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Nanos;

    /// Whether time moves only when told to. A manual clock needs no background
    /// driver: operations apply due expiries themselves.
    fn is_manual(&self) -> bool {
        false
    }

    /// Registers a callback the clock runs after it moves (manual clocks only),
    /// so an engine can wake receivers blocked in a long poll.
    fn on_advance(&self, _callback: Box<dyn Fn() + Send + Sync>) {}
}

/// The system's monotonic clock (`Instant`), read on every call.
///
/// Reading `Instant` costs about 20 ns with a TSC clock source; the engine reads
/// it once per operation (once per batch), never per message.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self { origin: Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        Nanos(duration_nanos(self.origin.elapsed()))
    }
}

type AdvanceCallback = Box<dyn Fn() + Send + Sync>;

struct ManualInner {
    now: AtomicU64,
    callbacks: Mutex<Vec<AdvanceCallback>>,
}

/// A clock that moves only when told to: for tests and simulation.
///
/// Clones share one time line.
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock").field("now", &self.now()).finish()
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock standing at zero.
    pub fn new() -> Self {
        Self { inner: Arc::new(ManualInner { now: AtomicU64::new(0), callbacks: Mutex::new(Vec::new()) }) }
    }

    /// Moves time forward by `d`, then wakes every engine using this clock.
    pub fn advance(&self, d: Duration) {
        // Release pairs with the Acquire in `now`: whoever sees the new time
        // also sees everything the advancing thread did before moving it.
        self.inner.now.fetch_add(duration_nanos(d), Ordering::AcqRel);
        self.notify();
    }

    /// Moves time forward to `t`; does nothing if `t` is not later than now.
    pub fn advance_to(&self, t: Nanos) {
        let before = self.inner.now.fetch_max(t.0, Ordering::AcqRel);
        if before < t.0 {
            self.notify();
        }
    }

    fn notify(&self) {
        let callbacks = lock(&self.inner.callbacks);
        for callback in callbacks.iter() {
            callback();
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        Nanos(self.inner.now.load(Ordering::Acquire))
    }

    fn is_manual(&self) -> bool {
        true
    }

    fn on_advance(&self, callback: Box<dyn Fn() + Send + Sync>) {
        lock(&self.inner.callbacks).push(callback);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new();
        assert_eq!(clock.now(), Nanos(0));
        clock.advance(Duration::from_millis(5));
        assert_eq!(clock.now(), Nanos(5_000_000));
        clock.advance_to(Nanos(1));
        assert_eq!(clock.now(), Nanos(5_000_000), "advance_to never moves backwards");
        let other = clock.clone();
        other.advance(Duration::from_nanos(7));
        assert_eq!(clock.now(), Nanos(5_000_007), "clones share one time line");
    }

    #[test]
    fn manual_clock_runs_callbacks_on_advance() {
        let clock = ManualClock::new();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = hits.clone();
        clock.on_advance(Box::new(move || {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        clock.advance(Duration::from_secs(1));
        clock.advance_to(Nanos(0));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
    }

    #[test]
    fn nanos_arithmetic_saturates() {
        assert_eq!(Nanos(u64::MAX - 1).saturating_add(Duration::from_secs(1)), Nanos(u64::MAX));
        assert_eq!(Nanos(5).saturating_since(Nanos(10)), Duration::ZERO);
        assert_eq!(duration_nanos(Duration::MAX), u64::MAX);
    }
}
