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
use crate::tsc::Tsc;

/// A point on an engine's clock, in nanoseconds since the clock's origin
/// (when a `SystemClock` was made, zero for a `ManualClock`).
/// It compares with other times of the same engine only; `Queue::time_until`
/// and `Queue::instant_of` (or `Engine::instant_of`) turn it into a
/// `Duration` from now or an `Instant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

impl Nanos {
    /// The later of `self + d`, saturating instead of overflowing.
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Nanos {
        Nanos(self.0.saturating_add(duration_nanos(d)))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    #[must_use]
    pub fn saturating_since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The nanosecond count.
    #[must_use]
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

/// The `Instant` at which `clock` reads `t`: `None` for a manual clock,
/// whose time is not real time. Any other clock is taken to run at real time
/// (`SystemClock` does), so `t` is placed by its distance from one reading
/// of each clock taken back to back: exact to the gap between the two reads,
/// and to the counter's calibration over that distance (parts per million).
pub(crate) fn instant_at(clock: &dyn Clock, t: Nanos) -> Option<Instant> {
    if clock.is_manual() {
        return None;
    }
    let (now, wall) = (clock.now(), Instant::now());
    if t >= now { wall.checked_add(t.saturating_since(now)) } else { wall.checked_sub(now.saturating_since(t)) }
}

/// A source of monotonic time for an engine.
///
/// Implementations must never return a smaller value than an earlier call.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Nanos;

    /// The current time for stamping an operation of the calling thread: like
    /// `now`, except that the reading need not wait for the caller's earlier
    /// instructions to complete, so it may fall behind a time that this thread
    /// has already seen (its own previous reading, or one another thread
    /// published) by the processor's reordering window, tens of nanoseconds.
    /// The engine stamps sends, receives and acks with it: every comparison it
    /// makes between two stamps saturates, and a deadline met or missed by a
    /// few nanoseconds is within what any clock can promise. The default is
    /// `now`.
    #[inline]
    fn now_relaxed(&self) -> Nanos {
        self.now()
    }

    /// Whether time moves only when told to. A manual clock needs no background
    /// driver: operations apply due expiries themselves.
    fn is_manual(&self) -> bool {
        false
    }

    /// Registers a callback the clock runs after it moves (manual clocks only),
    /// so an engine can wake receivers blocked in a long poll.
    fn on_advance(&self, _callback: Box<dyn Fn() + Send + Sync>) {}

    /// Wall-clock time, in nanoseconds since the Unix epoch. A durable engine
    /// stores the end of a send's delay in it: it is the one time base that
    /// means the same in the next process. The default reads the system's
    /// real-time clock; a manual clock reads `MANUAL_UNIX_ORIGIN` plus its own
    /// time, so that restarts under a manual clock are deterministic.
    fn unix_now(&self) -> u64 {
        system_unix_now()
    }
}

/// The system's real-time clock, in nanoseconds since the Unix epoch (0
/// before it, `u64::MAX` after 2554).
pub(crate) fn system_unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// How long the counter's reading of the real-time clock stands before it is
/// taken from the system again (`counter_unix_now`).
const UNIX_ANCHOR_FOR: u64 = 1_000_000_000;

/// The real-time clock as an offset from the time-stamp counter's time, for
/// the whole process (like the counter's calibration). A durable send stamps
/// its record with the Unix time, and `SystemTime::now` with its conversion
/// was 5-7% of a sending thread's time in `bench/examples/never_sends.rs`;
/// the counter and one load are a fraction of that.
///
/// Orderings: `renew_at` is stored with `Release` after `offset` and loaded
/// with `Acquire` before it, so a reader that sees a renewal time sees an
/// offset at least as new as the one stored with it, never the initial 0
/// (`renew_at` 0 sends the first reader to the system clock). Offsets stored
/// by threads renewing at once are all valid readings (they differ by the
/// time between them), so which one a reader sees does not matter.
struct UnixAnchor {
    offset: std::sync::atomic::AtomicU64,
    renew_at: std::sync::atomic::AtomicU64,
}

static UNIX_ANCHOR: UnixAnchor =
    UnixAnchor { offset: std::sync::atomic::AtomicU64::new(0), renew_at: std::sync::atomic::AtomicU64::new(0) };

/// The Unix time from the time-stamp counter: the system's real-time clock
/// as read within the last second, moved on by the counter. It follows a
/// step of the real-time clock (an NTP correction, an operator's change)
/// within a second, and may read a few microseconds back across a renewal
/// (the counter's calibration against the real-time clock's drift), as the
/// real-time clock itself may.
fn counter_unix_now(tsc: Tsc) -> u64 {
    use std::sync::atomic::Ordering as Std;
    let at = tsc.nanos(tsc.ticks_relaxed());
    if at < UNIX_ANCHOR.renew_at.load(Std::Acquire) {
        return at.wrapping_add(UNIX_ANCHOR.offset.load(Std::Relaxed));
    }
    let unix = system_unix_now();
    UNIX_ANCHOR.offset.store(unix.wrapping_sub(at), Std::Relaxed);
    UNIX_ANCHOR.renew_at.store(at.saturating_add(UNIX_ANCHOR_FOR), Std::Release);
    unix
}

/// The Unix time a `ManualClock` standing at zero reads (2024-01-01T00:00:00Z):
/// a manual clock's `unix_now` is this plus its own time. A test that
/// restarts a durable engine under a manual clock continues the time line by
/// advancing the new clock to where the old one stood.
pub const MANUAL_UNIX_ORIGIN: u64 = 1_704_067_200_000_000_000;

/// The system's monotonic clock.
///
/// Where Linux itself keeps time with the CPU's time-stamp counter (x86-64,
/// clocksource `tsc`), this reads that counter directly, calibrated against
/// `Instant` once per process (the first `new` takes about 10 ms): under 20 ns
/// a read instead of the 40–50 ns of `Instant`. Elsewhere, and with
/// `SystemClock::std`, it reads `Instant`. Either way times never go backwards,
/// also across threads that synchronise with each other (see `tsc.rs`).
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
    counter: Option<(Tsc, u64)>,
}

impl SystemClock {
    /// A clock whose origin is now, on the time-stamp counter where that is
    /// safe.
    #[must_use]
    pub fn new() -> Self {
        let counter = Tsc::get().map(|tsc| (tsc, tsc.ticks()));
        Self { origin: Instant::now(), counter }
    }

    /// A clock whose origin is now that always reads `Instant` (it follows
    /// `CLOCK_MONOTONIC`'s NTP slewing, which the counter's fixed calibration
    /// does not).
    #[must_use]
    pub fn std() -> Self {
        Self { origin: Instant::now(), counter: None }
    }

    /// Whether this clock reads the time-stamp counter.
    #[must_use]
    pub fn uses_counter(&self) -> bool {
        self.counter.is_some()
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        match self.counter {
            // Wrapping: the counter only grows, so `ticks - origin` is the
            // true count even if the counter wrapped (after centuries).
            Some((tsc, origin)) => Nanos(tsc.nanos(tsc.ticks().wrapping_sub(origin))),
            None => Nanos(duration_nanos(self.origin.elapsed())),
        }
    }

    /// An unfenced counter read (see `tsc.rs`): 10–15 ns less per reading
    /// than `now` on the machines we measured. `Instant` has no such variant.
    #[inline]
    fn now_relaxed(&self) -> Nanos {
        match self.counter {
            // Saturating: an unordered read taken just after `new` on another
            // thread could precede `origin`; wrapping would jump centuries.
            Some((tsc, origin)) => Nanos(tsc.nanos(tsc.ticks_relaxed().saturating_sub(origin))),
            None => Nanos(duration_nanos(self.origin.elapsed())),
        }
    }

    /// On the time-stamp counter, `counter_unix_now`; else the system's
    /// real-time clock.
    fn unix_now(&self) -> u64 {
        match self.counter {
            Some((tsc, _)) => counter_unix_now(tsc),
            None => system_unix_now(),
        }
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
    #[must_use]
    pub fn new() -> Self {
        Self { inner: Arc::new(ManualInner { now: AtomicU64::new(0), callbacks: Mutex::new(Vec::new()) }) }
    }

    /// Moves time forward by `d`, then wakes every engine using this clock.
    /// Time stops at `u64::MAX` nanoseconds (584 years) instead of wrapping
    /// round to the past.
    pub fn advance(&self, d: Duration) {
        let step = duration_nanos(d);
        // Saturating, not `fetch_add`: a wrapped clock would put every
        // deadline granted since back in the future. Release pairs with the
        // Acquire in `now`: whoever sees the new time also sees everything the
        // advancing thread did before moving it.
        let _ = self.inner.now.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| Some(now.saturating_add(step)));
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

    fn unix_now(&self) -> u64 {
        MANUAL_UNIX_ORIGIN.saturating_add(self.now().0)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The counter's Unix time stays within a generous bound of the system's
    /// real-time clock read around it (the bound allows for a loaded machine
    /// descheduling the test between reads, not for drift, which is
    /// microseconds).
    #[test]
    fn the_counters_unix_time_tracks_the_real_time_clock() {
        let clock = SystemClock::new();
        for _ in 0..1000 {
            let before = system_unix_now();
            let read = clock.unix_now();
            let after = system_unix_now();
            let slack = 50_000_000;
            assert!(read + slack >= before && read <= after + slack, "{before} <= {read} <= {after}");
        }
        assert!(clock.unix_now() > MANUAL_UNIX_ORIGIN, "a time after 2024, not the counter's own");
    }

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

    /// Two advances of 300 years each pass `u64::MAX` nanoseconds (584
    /// years): time stops at the end of the clock rather than wrapping back
    /// to the early past, where every lease granted since would be hidden
    /// again.
    #[test]
    fn manual_clock_saturates_instead_of_wrapping() {
        let clock = ManualClock::new();
        let centuries = Duration::from_secs(300 * 365 * 24 * 3600);
        clock.advance(centuries);
        let first = clock.now();
        clock.advance(centuries);
        assert!(clock.now() >= first, "time went backwards: {:?} after {first:?}", clock.now());
        assert_eq!(clock.now(), Nanos(u64::MAX));
        clock.advance(Duration::MAX);
        assert_eq!(clock.now(), Nanos(u64::MAX));
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
        for clock in [SystemClock::new(), SystemClock::std()] {
            let mut last = clock.now();
            for _ in 0..100_000 {
                let now = clock.now();
                assert!(now >= last, "{now:?} after {last:?}");
                last = now;
            }
        }
    }

    /// Both kinds of system clock measure a sleep as `Instant` does
    /// (generous bounds: the thread may be descheduled; the rate may not be
    /// wrong).
    #[test]
    fn system_clocks_keep_instants_pace() {
        for clock in [SystemClock::new(), SystemClock::std()] {
            let (a, started) = (clock.now(), Instant::now());
            std::thread::sleep(Duration::from_millis(30));
            let (b, elapsed) = (clock.now(), started.elapsed());
            let measured = b.saturating_since(a);
            let slack = Duration::from_micros(200) + elapsed / 500;
            assert!(
                measured + slack >= elapsed && measured <= elapsed + slack,
                "clock (counter: {}) measured {measured:?}, Instant {elapsed:?}",
                clock.uses_counter()
            );
        }
    }

    /// A relaxed reading lies between the ordered readings around it (give or
    /// take the reordering window) and on the same scale: with the counter,
    /// it is a different instruction sequence that must agree with `now`.
    #[test]
    fn relaxed_readings_agree_with_ordered_ones() {
        for clock in [SystemClock::new(), SystemClock::std()] {
            for _ in 0..100_000 {
                let before = clock.now();
                let relaxed = clock.now_relaxed();
                let after = clock.now();
                assert!(
                    relaxed <= after && relaxed.0 + 1_000 >= before.0,
                    "relaxed {relaxed:?} outside [{before:?}, {after:?}] (counter: {})",
                    clock.uses_counter()
                );
            }
        }
        let manual = ManualClock::new();
        manual.advance(Duration::from_millis(5));
        assert_eq!(manual.now_relaxed(), manual.now(), "the default is `now`");
    }

    /// Times never go backwards across threads: a reader that sees a time
    /// another thread published (Release/Acquire, as a lease word is) reads a
    /// time at least as late.
    #[test]
    fn system_clock_is_monotonic_across_threads() {
        use std::sync::atomic::AtomicU64 as StdAtomicU64;
        let clock = SystemClock::new();
        let published = std::sync::Arc::new(StdAtomicU64::new(0));
        let writer = {
            let published = published.clone();
            std::thread::spawn(move || {
                for _ in 0..200_000 {
                    published.store(clock.now().0, std::sync::atomic::Ordering::Release);
                }
            })
        };
        let mut checked = 0u64;
        while !writer.is_finished() || checked == 0 {
            let seen = published.load(std::sync::atomic::Ordering::Acquire);
            let now = clock.now().0;
            assert!(now >= seen, "read {now} after seeing {seen} published");
            checked += 1;
        }
        writer.join().unwrap();
    }

    #[test]
    fn nanos_arithmetic_saturates() {
        assert_eq!(Nanos(u64::MAX - 1).saturating_add(Duration::from_secs(1)), Nanos(u64::MAX));
        assert_eq!(Nanos(5).saturating_since(Nanos(10)), Duration::ZERO);
        assert_eq!(duration_nanos(Duration::MAX), u64::MAX);
    }
}
