//! A shard's deadlines: a lock-free inbox in front of a mutex-guarded wheel.
//!
//! Receivers and releasers never wait for the wheel: when their slot's arm
//! asks for an entry (`Slot::arm`), they push a `TimerEntry` into the inbox
//! and lower `next_due`. Whoever runs the timers (the driver
//! thread, or any operation that sees `next_due <= now`) takes the wheel with
//! `try_lock` (a busy wheel means someone else is already firing), drains the
//! inbox into it and polls it.
//!
//! Invariant (no lost deadline): after an entry is pushed, `next_due` is at
//! most its deadline until a drain has moved it into the wheel and the drainer
//! has folded the wheel's next deadline back in. The drainer swaps `next_due`
//! to `u64::MAX` *before* draining and `fetch_min`s the wheel's answer after;
//! a pusher pushes *before* its own `fetch_min`. Either the drain sees the
//! entry (it is in the wheel, and the wheel's hint covers it) or the pusher's
//! `fetch_min` lands after the swap (and survives it). The swap and the
//! `fetch_min`s are read-modify-writes on one location, so they are totally
//! ordered and AcqRel makes the push visible to the drain that follows.
//!
//! A pusher that skips its `fetch_min` (the hint was already at or below its
//! deadline) takes part in a store-load pattern instead: it pushes, then reads
//! the hint; the drainer swaps the hint, then reads the inbox. Acquire/Release
//! alone would let both miss each other (the pusher reads the old hint, the
//! drain misses the entry, fires the earlier deadline that kept the hint low,
//! and the entry waits for the driver's next periodic drain). So that load and
//! the swap are SeqCst: `SegQueue::push` claims its position with a SeqCst
//! compare-exchange and an emptiness check in `pop` follows a SeqCst fence
//! (crossbeam-queue 0.3), which puts the claim before the pusher's load, the
//! load before the swap (it read an older value) and the swap before the
//! drainer's fence in the single SeqCst order, so the drain sees the entry.
//! On x86-64 a SeqCst load is a plain load and the swap is `xchg` either way.
//!
//! Under loom the inbox is a loom `Mutex<Vec>` (crossbeam's `SegQueue` is not
//! built on loom's atomics); the protocol around it is the same code.

use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, try_lock};
use crate::wheel::{TimerEntry, Wheel};

/// Most entries `collect_due` takes from the inbox per call, so a burst of a
/// million due leases is applied in cache-sized batches instead of being
/// gathered into one large buffer first.
pub(crate) const FIRE_BATCH: usize = 4096;

/// The wheel plus a reusable buffer of fired entries.
#[derive(Debug)]
pub(crate) struct WheelState {
    pub(crate) wheel: Wheel,
    pub(crate) fired: Vec<TimerEntry>,
    /// A sweep of ended entries starts only above this many entries (twice
    /// what the last pass kept), so a wheel full of live timers is not swept
    /// over and over.
    pub(crate) sweep_above: usize,
}

/// One shard's timers.
#[derive(Debug)]
pub(crate) struct Timers {
    #[cfg(not(loom))]
    inbox: crossbeam_queue::SegQueue<TimerEntry>,
    #[cfg(loom)]
    inbox: Mutex<Vec<TimerEntry>>,
    wheel: Mutex<WheelState>,
    next_due: AtomicU64,
}

impl Timers {
    pub(crate) fn new(tick_shift: u32, now: u64) -> Self {
        Timers {
            inbox: Default::default(),
            wheel: Mutex::new(WheelState { wheel: Wheel::new(tick_shift, now), fired: Vec::new(), sweep_above: 0 }),
            next_due: AtomicU64::new(u64::MAX),
        }
    }

    /// Schedules `entry`. Lock-free outside loom. Returns whether it lowered
    /// the shard's `next_due` hint (a deadline earlier than any the shard had):
    /// a sleeping driver may then need waking (see `DriverSignal`).
    #[inline]
    pub(crate) fn schedule(&self, entry: TimerEntry) -> bool {
        #[cfg(not(loom))]
        self.inbox.push(entry);
        #[cfg(loom)]
        crate::sync::lock(&self.inbox).push(entry);
        // Only the read-modify-write when it lowers the hint: deadlines of a
        // fixed visibility arrive in increasing order, so usually this is a
        // plain load. SeqCst, not Acquire: when it skips the fetch_min, the
        // single SeqCst order is what guarantees the next drain sees the push
        // (see the module docs).
        if entry.deadline < self.next_due.load(Ordering::SeqCst) {
            self.next_due.fetch_min(entry.deadline, Ordering::AcqRel);
            return true;
        }
        false
    }

    /// The `next_due` hint: no deadline in this shard is earlier.
    #[inline]
    pub(crate) fn next_due(&self) -> u64 {
        self.next_due.load(Ordering::Acquire)
    }

    /// Whether something may be due at `now` (cheap: one load).
    #[inline]
    pub(crate) fn maybe_due(&self, now: u64) -> bool {
        self.next_due.load(Ordering::Acquire) <= now
    }

    /// Entries waiting in the inbox or the wheel (tests: retention bounds).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn entries(&self) -> usize {
        self.inbox.len() + crate::sync::lock(&self.wheel).wheel.len()
    }

    /// Takes the wheel if nobody else has it.
    pub(crate) fn try_wheel(&self) -> Option<MutexGuard<'_, WheelState>> {
        try_lock(&self.wheel)
    }

    /// Moves inbox entries into the wheel and fires what is due at `now` into
    /// `state.fired`; `alarm` tells the wheel when a slot's alarm is set for
    /// (see `Wheel::poll`). Call with the wheel held, and again while it
    /// returns entries: at most `FIRE_BATCH` come from the inbox per call.
    pub(crate) fn collect_due(&self, state: &mut WheelState, now: u64, alarm: impl FnMut(u32) -> Option<u64>) {
        // SeqCst: ordered after the load of any pusher that read an older
        // hint, and before the inbox's emptiness check (module docs).
        self.next_due.swap(u64::MAX, Ordering::SeqCst);
        state.fired.clear();
        let WheelState { wheel, fired, .. } = state;
        #[cfg(not(loom))]
        while fired.len() < FIRE_BATCH {
            let Some(entry) = self.inbox.pop() else {
                break;
            };
            Self::sort_in(entry, now, wheel, fired);
        }
        #[cfg(loom)]
        for entry in crate::sync::lock(&self.inbox).drain(..) {
            Self::sort_in(entry, now, wheel, fired);
        }
        if fired.len() >= FIRE_BATCH {
            // The inbox may hold more, whose pushers' `fetch_min`s the swap
            // above erased, and the wheel was not polled: until the caller
            // comes back, the hint must say "due now" (time never goes
            // backwards, so every later check sees it due).
            self.next_due.fetch_min(now, Ordering::AcqRel);
            return;
        }
        wheel.poll(now, fired, FIRE_BATCH, alarm);
        if let Some(next) = wheel.next_deadline() {
            self.next_due.fetch_min(next, Ordering::AcqRel);
        }
    }

    /// An entry already due skips the wheel: a burst of expiries goes from
    /// the inbox straight to `fired`, without a bucket move per entry.
    #[inline]
    fn sort_in(entry: TimerEntry, now: u64, wheel: &mut Wheel, fired: &mut Vec<TimerEntry>) {
        if entry.deadline <= now {
            fired.push(entry);
        } else {
            wheel.insert(entry);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::wheel::tests::entry;

    /// A burst larger than one batch comes out over several calls, every due
    /// entry exactly once, and between calls the hint says "due now" so the
    /// rest cannot be stranded in the inbox; entries not yet due go to the
    /// wheel and set the hint once the inbox is empty.
    #[test]
    fn a_burst_is_collected_in_batches_without_losing_entries() {
        let timers = Timers::new(10, 0);
        let due = 2 * FIRE_BATCH + 17;
        for slot in 0..due as u32 {
            timers.schedule(entry(500, slot));
        }
        timers.schedule(entry(5_000, u32::MAX));
        let mut state = timers.try_wheel().unwrap();
        let mut seen = Vec::new();
        loop {
            timers.collect_due(&mut state, 1_000, |_| Some(5_000));
            if state.fired.is_empty() {
                break;
            }
            assert!(state.fired.len() <= FIRE_BATCH);
            seen.extend(state.fired.iter().map(|e| e.slot));
            if seen.len() < due {
                assert!(timers.maybe_due(1_000), "inbox entries left behind a hint in the future");
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..due as u32).collect::<Vec<_>>());
        assert_eq!(state.wheel.len(), 1, "the entry not yet due waits in the wheel");
        assert!(!timers.maybe_due(1_000) && timers.maybe_due(5_000));
    }
}
