//! A hierarchical timing wheel of lease and delay deadlines.
//!
//! Six levels of 64 slots; level `l` slots span `64^l` ticks. Each level keeps
//! an `occupied` bitfield so the next non-empty slot is one `trailing_zeros`
//! away. An entry is placed at the level of the highest bit in which its tick
//! differs from the wheel's `elapsed` tick, and falls to lower levels as time
//! reaches its slot (cascading), so insertion is O(1) and each entry moves at
//! most six times.
//!
//! Invariant: `poll(now)` returns exactly the entries whose `deadline <= now`,
//! each once, no matter how coarse the tick is: entries of the current tick that
//! are not yet due wait in a small min-heap (`current`) ordered by deadline, so
//! sub-tick exactness costs O(log n) in the entries of one tick, not a scan.
//! The wheel knows nothing of leases: the caller decides whether a fired entry
//! is still meaningful (lazy cancellation) and re-inserts it if its lease was
//! extended (lazy rescheduling). Because cancellation is lazy, entries of
//! leases that ended early (acked, released) would stay until their deadline;
//! `sweep` lets the caller drop them a bounded number at a time, so the wheel
//! holds O(live timers) entries, not O(rate x visibility).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One scheduled deadline: which slot, when. Ordered by deadline first. An
/// entry is an alarm for its slot, not for one lease: whoever fires it looks
/// at whatever the slot holds then (see `Slot::arm`).
///
/// Packed to 4-byte alignment: 12 bytes instead of 16, and every in-flight
/// message on a fresh slot has one in a bucket. Fields are only ever copied
/// out (the compiler refuses references into a packed struct).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C, packed(4))]
pub(crate) struct TimerEntry {
    /// Nanoseconds on the engine clock.
    pub(crate) deadline: u64,
    /// Slot index within the shard.
    pub(crate) slot: u32,
}

const LEVELS: usize = 6;
const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// Ticks the wheel spans. Entries further than half of it from `elapsed` wait
/// in an overflow list (so a top-level slot can never be confused with the same
/// slot one rotation later) and are placed once time comes within range.
const HORIZON: u64 = 1 << (SLOT_BITS as u64 * LEVELS as u64);
const PLACEABLE: u64 = HORIZON / 2;

#[derive(Debug)]
struct Level {
    occupied: u64,
    slots: [Vec<TimerEntry>; SLOTS],
}

impl Level {
    fn new() -> Self {
        Level { occupied: 0, slots: std::array::from_fn(|_| Vec::new()) }
    }
}

/// The wheel. Not thread-safe by itself: each shard keeps it behind a mutex and
/// feeds it from a lock-free inbox.
#[derive(Debug)]
pub(crate) struct Wheel {
    /// log2 of the tick length in nanoseconds.
    tick_shift: u32,
    /// The tick the wheel has been advanced to.
    elapsed: u64,
    levels: Box<[Level; LEVELS]>,
    /// Entries whose tick has been reached but whose deadline has not.
    current: BinaryHeap<Reverse<TimerEntry>>,
    /// Entries beyond `PLACEABLE` ticks; at a 1 ms tick that is over a year away.
    overflow: Vec<TimerEntry>,
    len: usize,
    /// A drained slot's buffer, kept to avoid reallocating on the next one.
    spare: Vec<TimerEntry>,
    /// Where an unfinished `sweep` resumes.
    sweep: Option<SweepCursor>,
}

/// A position in the wheel's buckets: bucket `level * SLOTS + slot`, entry
/// `index` within it.
#[derive(Debug, Default, Clone, Copy)]
struct SweepCursor {
    bucket: usize,
    index: usize,
}

impl Wheel {
    /// A wheel with ticks of `2^tick_shift` nanoseconds, starting at `now`.
    pub(crate) fn new(tick_shift: u32, now: u64) -> Self {
        Wheel {
            tick_shift,
            elapsed: now >> tick_shift,
            levels: Box::new(std::array::from_fn(|_| Level::new())),
            current: BinaryHeap::new(),
            overflow: Vec::new(),
            len: 0,
            spare: Vec::new(),
            sweep: None,
        }
    }

    /// Entries scheduled and not yet returned by `poll` (or dropped by
    /// `sweep`).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn tick_of(&self, deadline: u64) -> u64 {
        deadline >> self.tick_shift
    }

    /// Schedules `entry`. O(1).
    pub(crate) fn insert(&mut self, entry: TimerEntry) {
        self.len += 1;
        self.place(entry);
    }

    fn place(&mut self, entry: TimerEntry) {
        let tick = self.tick_of(entry.deadline);
        if tick <= self.elapsed {
            self.current.push(Reverse(entry));
            return;
        }
        if tick - self.elapsed >= PLACEABLE {
            self.overflow.push(entry);
            return;
        }
        let level = level_for(self.elapsed, tick);
        let slot = ((tick >> (SLOT_BITS as usize * level)) & SLOT_MASK) as usize;
        let level = &mut self.levels[level];
        level.slots[slot].push(entry);
        level.occupied |= 1 << slot;
    }

    /// Moves every entry with `deadline <= now` into `fired`. Amortised O(1)
    /// per entry plus O(levels) per call.
    pub(crate) fn poll(&mut self, now: u64, fired: &mut Vec<TimerEntry>) {
        let before = fired.len();
        let now_tick = self.tick_of(now);
        while let Some(Reverse(first)) = self.current.peek() {
            if first.deadline > now {
                break;
            }
            fired.push(*first);
            self.current.pop();
        }
        while let Some((level, slot, start)) = self.next_slot() {
            if start > now_tick {
                break;
            }
            self.elapsed = self.elapsed.max(start);
            let lvl = &mut self.levels[level];
            lvl.occupied &= !(1 << slot);
            let mut entries = std::mem::replace(&mut lvl.slots[slot], std::mem::take(&mut self.spare));
            for entry in entries.drain(..) {
                if entry.deadline <= now {
                    fired.push(entry);
                } else {
                    self.place(entry);
                }
            }
            self.spare = entries;
        }
        if now_tick > self.elapsed {
            self.elapsed = now_tick;
        }
        if !self.overflow.is_empty() {
            let waiting = std::mem::take(&mut self.overflow);
            for entry in waiting {
                if entry.deadline <= now {
                    fired.push(entry);
                } else {
                    self.place(entry);
                }
            }
        }
        self.len -= fired.len() - before;
    }

    /// Whether a sweep has started and not finished.
    pub(crate) fn sweeping(&self) -> bool {
        self.sweep.is_some()
    }

    /// Drops the entries `keep` rejects, examining at most `budget` of them
    /// and resuming where the previous call stopped. Returns `true` when this
    /// call finished a pass over the whole wheel. Entries that `poll` moves
    /// to an already-swept bucket during a pass wait for the next pass;
    /// nothing `keep` accepts is ever dropped, and bucket order does not
    /// matter (a bucket is unordered; `current` is re-heapified).
    pub(crate) fn sweep(&mut self, budget: usize, mut keep: impl FnMut(&TimerEntry) -> bool) -> bool {
        let mut cursor = self.sweep.take().unwrap_or_default();
        let mut examined = 0;
        while cursor.bucket < LEVELS * SLOTS {
            let level = &mut self.levels[cursor.bucket / SLOTS];
            let slot = cursor.bucket % SLOTS;
            let entries = &mut level.slots[slot];
            while cursor.index < entries.len() {
                if examined == budget {
                    self.sweep = Some(cursor);
                    return false;
                }
                examined += 1;
                if keep(&entries[cursor.index]) {
                    cursor.index += 1;
                } else {
                    entries.swap_remove(cursor.index);
                    self.len -= 1;
                }
            }
            if entries.is_empty() {
                level.occupied &= !(1 << slot);
            }
            release_slack(entries);
            cursor = SweepCursor { bucket: cursor.bucket + 1, index: 0 };
        }
        // The two small lists, whole: they hold at most one tick's entries
        // and those beyond the horizon.
        let before = self.current.len() + self.overflow.len();
        self.overflow.retain(&mut keep);
        release_slack(&mut self.overflow);
        let mut current = std::mem::take(&mut self.current).into_vec();
        current.retain(|Reverse(entry)| keep(entry));
        self.current = BinaryHeap::from(current);
        self.len -= before - (self.current.len() + self.overflow.len());
        self.spare = Vec::new();
        true
    }

    /// The earliest time at which `poll` could return something, or `None` if
    /// the wheel is empty. A lower bound: an occupied slot reports its start.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        let mut best = self.current.peek().map(|Reverse(e)| e.deadline);
        if let Some(far) = self.overflow.iter().map(|e| e.deadline).min() {
            best = Some(best.map_or(far, |b| b.min(far)));
        }
        if let Some((_, _, start)) = self.next_slot() {
            let at = start.saturating_mul(1 << self.tick_shift).max(self.elapsed << self.tick_shift);
            best = Some(best.map_or(at, |b| b.min(at)));
        }
        best
    }

    /// The next occupied slot: lower levels always come first, because a level's
    /// entries lie inside the current slot of the level above.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for (index, level) in self.levels.iter().enumerate() {
            if level.occupied == 0 {
                continue;
            }
            let shift = SLOT_BITS as usize * index;
            let position = (self.elapsed >> shift) & SLOT_MASK;
            let ahead = level.occupied.rotate_right(position as u32).trailing_zeros() as u64;
            let slot = (position + ahead) & SLOT_MASK;
            let slot_span = 1u64 << shift;
            let level_span = slot_span << SLOT_BITS;
            let level_start = self.elapsed & !(level_span - 1);
            let mut start = level_start + slot * slot_span;
            if slot < position {
                start += level_span;
            }
            return Some((index, slot as usize, start));
        }
        None
    }
}

/// Gives back a bucket's capacity once it is mostly unused, so a burst of
/// entries does not pin its peak memory after a sweep thinned it out.
fn release_slack(entries: &mut Vec<TimerEntry>) {
    if entries.capacity() > 4 * entries.len() + 16 {
        entries.shrink_to(2 * entries.len());
    }
}

/// The level whose slots distinguish `elapsed` from `when`. At the top level a
/// `when` past the end of the current rotation wraps to a lower slot index,
/// which `next_slot` reads as the next rotation.
fn level_for(elapsed: u64, when: u64) -> usize {
    let differing = (elapsed ^ when) | SLOT_MASK;
    let significant = 63 - differing.leading_zeros() as usize;
    (significant / SLOT_BITS as usize).min(LEVELS - 1)
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A test entry; the timer inbox's tests use it too.
    pub(crate) fn entry(deadline: u64, slot: u32) -> TimerEntry {
        TimerEntry { deadline, slot }
    }

    /// Packing keeps entries at 12 bytes and the order deadline first, then
    /// slot (the `current` heap relies on it).
    #[test]
    fn entries_are_twelve_bytes_ordered_by_deadline_then_slot() {
        assert_eq!(std::mem::size_of::<TimerEntry>(), 12);
        let mut entries = [entry(u64::MAX, 0), entry(7, 9), entry(1 << 40, 1), entry(7, 2), entry(8, 0)];
        entries.sort();
        let order: Vec<(u64, u32)> = entries.iter().map(|e| (e.deadline, e.slot)).collect();
        assert_eq!(order, vec![(7, 2), (7, 9), (8, 0), (1 << 40, 1), (u64::MAX, 0)]);
    }

    #[test]
    fn fires_exactly_at_the_deadline_not_at_the_tick() {
        let mut wheel = Wheel::new(20, 0);
        wheel.insert(entry(1_500_000, 1));
        let mut fired = Vec::new();
        wheel.poll(1_499_999, &mut fired);
        assert!(fired.is_empty());
        wheel.poll(1_500_000, &mut fired);
        assert_eq!(fired, vec![entry(1_500_000, 1)]);
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn cascades_from_high_levels() {
        let mut wheel = Wheel::new(0, 0);
        let far = 64u64.pow(3) * 5 + 77;
        wheel.insert(entry(far, 9));
        wheel.insert(entry(3, 1));
        let mut fired = Vec::new();
        wheel.poll(far - 1, &mut fired);
        assert_eq!(fired, vec![entry(3, 1)]);
        fired.clear();
        wheel.poll(far, &mut fired);
        assert_eq!(fired, vec![entry(far, 9)]);
    }

    #[test]
    fn past_deadlines_fire_on_the_next_poll() {
        let mut wheel = Wheel::new(10, 1 << 30);
        wheel.insert(entry(5, 1));
        let mut fired = Vec::new();
        wheel.poll(1 << 30, &mut fired);
        assert_eq!(fired.len(), 1);
    }

    #[test]
    fn beyond_the_horizon_waits_and_is_replaced() {
        let mut wheel = Wheel::new(0, 0);
        let far = HORIZON * 3 + 12;
        // Ticks of 1 ns: the horizon is about 69 s, so this waits in overflow.
        wheel.insert(entry(far, 1));
        let mut fired = Vec::new();
        let mut t = 0;
        while t < far {
            t = (t + HORIZON / 3).min(far - 1);
            wheel.poll(t, &mut fired);
            assert!(fired.is_empty(), "fired early at {t}");
            if t == far - 1 {
                break;
            }
        }
        wheel.poll(far, &mut fired);
        assert_eq!(fired, vec![entry(far, 1)]);
    }

    #[test]
    fn next_deadline_is_a_lower_bound() {
        let mut wheel = Wheel::new(4, 0);
        assert_eq!(wheel.next_deadline(), None);
        wheel.insert(entry(1000, 1));
        let hint = wheel.next_deadline().unwrap();
        assert!(hint <= 1000 && hint > 0, "{hint}");
    }

    #[test]
    fn sweep_resumes_within_its_budget_and_frees_emptied_buckets() {
        let mut wheel = Wheel::new(0, 0);
        for i in 0..100 {
            wheel.insert(entry(1_000 + i, i as u32));
        }
        let mut examined = 0;
        let mut passes = 0;
        while passes == 0 {
            let mut seen = 0;
            if wheel.sweep(7, |e| {
                seen += 1;
                e.slot % 2 == 0
            }) {
                passes += 1;
            }
            assert!(seen <= 7, "a sweep call examined {seen} entries, budget 7");
            examined += seen;
        }
        assert_eq!(examined, 100);
        assert_eq!(wheel.len(), 50);
        assert!(!wheel.sweeping());
        // Dropping the rest empties every bucket: nothing can fire any more.
        while !wheel.sweep(1000, |_| false) {}
        assert_eq!(wheel.len(), 0);
        assert_eq!(wheel.next_deadline(), None);
    }

    proptest! {
        /// Sweeping with a predicate drops only entries it rejects, and a
        /// full pass drops all of them: interleaved with inserts and polls,
        /// every due entry the predicate keeps still fires exactly once.
        #[test]
        fn sweep_drops_only_rejected_entries(
            tick_shift in 0u32..12,
            ops in prop::collection::vec((0u8..4, 0u64..5_000_000, 0u64..200_000, 1usize..50), 1..300),
        ) {
            let mut wheel = Wheel::new(tick_shift, 0);
            let mut model: Vec<TimerEntry> = Vec::new();
            let mut cancelled = std::collections::HashSet::new();
            let mut now = 0u64;
            for (i, (kind, delta, step, pick)) in ops.into_iter().enumerate() {
                match kind {
                    0 => {
                        let e = entry(now + delta, i as u32);
                        wheel.insert(e);
                        model.push(e);
                    }
                    1 => {
                        now += step;
                        let mut fired = Vec::new();
                        wheel.poll(now, &mut fired);
                        let mut slots: Vec<u32> = fired.iter().map(|e| e.slot).collect();
                        slots.sort_unstable();
                        let before = slots.len();
                        slots.dedup();
                        prop_assert_eq!(before, slots.len(), "an entry fired twice");
                        for e in &fired {
                            prop_assert!(model.contains(e) && e.deadline <= now, "{:?} fired unexpectedly", e);
                        }
                        for e in model.iter().filter(|e| e.deadline <= now && !cancelled.contains(&e.slot)) {
                            prop_assert!(fired.contains(e), "kept entry {:?} did not fire", e);
                        }
                        model.retain(|e| e.deadline > now);
                    }
                    2 => {
                        if !model.is_empty() {
                            cancelled.insert(model[pick % model.len()].slot);
                        }
                    }
                    _ => {
                        wheel.sweep(pick, |e| !cancelled.contains(&e.slot));
                    }
                }
            }
            // Finish the pass in progress, then one whole pass.
            while !wheel.sweep(64, |e| !cancelled.contains(&e.slot)) {}
            while !wheel.sweep(64, |e| !cancelled.contains(&e.slot)) {}
            let kept: Vec<TimerEntry> = model.iter().filter(|e| !cancelled.contains(&e.slot)).copied().collect();
            prop_assert_eq!(wheel.len(), kept.len());
            let mut fired = Vec::new();
            wheel.poll(u64::MAX / 2, &mut fired);
            fired.sort_by_key(|e| e.slot);
            prop_assert_eq!(fired, kept);
        }
    }

    proptest! {
        /// Against a plain list: whatever the insert and poll pattern, each
        /// poll returns exactly the entries due, each once.
        #[test]
        fn matches_a_sorted_list(
            tick_shift in 0u32..12,
            ops in prop::collection::vec((any::<bool>(), 0u64..5_000_000, 0u64..200_000), 1..200),
        ) {
            let mut wheel = Wheel::new(tick_shift, 0);
            let mut model: Vec<TimerEntry> = Vec::new();
            let mut now = 0u64;
            for (i, (is_insert, delta, step)) in ops.into_iter().enumerate() {
                if is_insert {
                    let e = entry(now + delta, i as u32);
                    wheel.insert(e);
                    model.push(e);
                } else {
                    now += step;
                    let mut fired = Vec::new();
                    wheel.poll(now, &mut fired);
                    let mut expected: Vec<_> = model.iter().filter(|e| e.deadline <= now).copied().collect();
                    model.retain(|e| e.deadline > now);
                    fired.sort_by_key(|e| e.slot);
                    expected.sort_by_key(|e| e.slot);
                    prop_assert_eq!(fired, expected);
                    prop_assert_eq!(wheel.len(), model.len());
                    if let (Some(hint), Some(min)) = (wheel.next_deadline(), model.iter().map(|e| e.deadline).min()) {
                        prop_assert!(hint <= min, "hint {} after earliest {}", hint, min);
                    }
                }
            }
        }
    }
}
