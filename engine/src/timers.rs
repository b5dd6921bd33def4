//! A shard's deadlines: a lock-free inbox in front of a mutex-guarded wheel.
//!
//! Receivers and releasers never wait for the wheel: they push a `TimerEntry`
//! into the inbox and lower `next_due`. Whoever runs the timers (the driver
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
//! Under loom the inbox is a loom `Mutex<Vec>` (crossbeam's `SegQueue` is not
//! built on loom's atomics); the protocol around it is the same code.

use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, try_lock};
use crate::wheel::{TimerEntry, Wheel};

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

    /// Schedules `entry`. Lock-free outside loom.
    #[inline]
    pub(crate) fn schedule(&self, entry: TimerEntry) {
        #[cfg(not(loom))]
        self.inbox.push(entry);
        #[cfg(loom)]
        crate::sync::lock(&self.inbox).push(entry);
        // Only the read-modify-write when it lowers the hint: deadlines of a
        // fixed visibility arrive in increasing order, so usually this is a
        // plain load. The load may be stale-high, never stale-low in a way that
        // matters: a skipped fetch_min means the hint was already <= deadline.
        if entry.deadline < self.next_due.load(Ordering::Acquire) {
            self.next_due.fetch_min(entry.deadline, Ordering::AcqRel);
        }
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
    /// `state.fired`. Call with the wheel held.
    pub(crate) fn collect_due(&self, state: &mut WheelState, now: u64) {
        self.next_due.swap(u64::MAX, Ordering::AcqRel);
        #[cfg(not(loom))]
        while let Some(entry) = self.inbox.pop() {
            state.wheel.insert(entry);
        }
        #[cfg(loom)]
        for entry in crate::sync::lock(&self.inbox).drain(..) {
            state.wheel.insert(entry);
        }
        state.fired.clear();
        let WheelState { wheel, fired, .. } = state;
        wheel.poll(now, fired);
        if let Some(next) = wheel.next_deadline() {
            self.next_due.fetch_min(next, Ordering::AcqRel);
        }
    }
}
