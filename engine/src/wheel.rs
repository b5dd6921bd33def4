//! A hierarchical timing wheel of lease and delay deadlines.
//!
//! Six levels of 64 slots; level `l` slots span `64^l` ticks. Each level keeps
//! an `occupied` bitfield so the next non-empty slot is one `trailing_zeros`
//! away. An entry is placed at the level of the highest bit in which its tick
//! differs from the wheel's `elapsed` tick, and falls to lower levels as time
//! reaches its slot (cascading), so insertion is O(1) and each entry moves at
//! most six times.
//!
//! An entry is an alarm for a slot, and the slot says when its alarm is set
//! for. The buckets, where a lease in flight spends its time, keep 6 bytes an
//! entry: the slot and where in the bucket's span its tick lies (`BucketEntry`;
//! exact at levels 0 to 2, in steps of 4 ticks and coarser above, always
//! rounded down, so an entry never reaches level 0 after its tick). That is
//! enough to cascade without touching the slot. When an entry is taken out of
//! a level-0 bucket (its tick has come) the wheel asks the caller for the
//! slot's alarm (`alarm(slot)`), the exact deadline, and fires the entry, files
//! it by that deadline if it lies later, or drops it if the slot has no alarm:
//! a read of the slot just before the caller fires it anyway. Entries of the
//! current tick and beyond the horizon keep their deadline with them
//! (`TimerEntry`, 12 bytes). The horizon is `PLACEABLE` ticks (about 208 days
//! at 2^19 ns ticks, 13 days at 2^15), shorter than the year a lease or delay
//! may last, so entries beyond it wait in an `Overflow` ordered by deadline,
//! of which a poll reads only the earliest deadline until it comes within
//! range: far entries cost nothing per poll however many there are.
//!
//! Invariant: `poll(now)` returns, each once, every entry whose deadline is
//! `<= now`, where the deadline of an entry from a bucket is its slot's alarm
//! when its tick is reached (for a slot whose alarm does not change, the
//! deadline it was inserted with), no matter how coarse the tick is: entries
//! of the current tick that are not yet due wait in a small min-heap
//! (`current`) ordered by deadline, so sub-tick exactness costs O(log n) in the
//! entries of one tick, not a scan. The wheel knows nothing of leases: the
//! caller decides whether a fired entry is still meaningful (lazy
//! cancellation) and re-inserts it if its lease was extended (lazy
//! rescheduling). Because cancellation is lazy, entries of leases that ended
//! early (acked, released) would stay until their deadline; `sweep` lets the
//! caller drop them a bounded number at a time, so the wheel holds O(live
//! timers) entries, not O(rate x visibility).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::ops::Bound;

/// One scheduled deadline: which slot, when. Ordered by deadline first. An
/// entry is an alarm for its slot, not for one lease: whoever fires it looks
/// at whatever the slot holds then (see `Slot::arm`).
///
/// Packed to 4-byte alignment: 12 bytes instead of 16 in the timer inbox and
/// the wheel's small lists (buckets keep only the slot). Fields are only ever
/// copied out (the compiler refuses references into a packed struct).
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
/// in the overflow (so a top-level slot can never be confused with the same
/// slot one rotation later) and are placed once time comes within range.
const HORIZON: u64 = 1 << (SLOT_BITS as u64 * LEVELS as u64);
const PLACEABLE: u64 = HORIZON / 2;

/// A bucket's entry: its slot, and its tick's offset from the bucket's start
/// in units of `2^OFFSET_SHIFT[level]` ticks, rounded down (module docs).
/// Packed to 2-byte alignment: 6 bytes instead of 8.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(2))]
struct BucketEntry {
    slot: u32,
    offset: u16,
}

/// A bucket: the entries whose ticks fall in its span.
type Bucket = Vec<BucketEntry>;

/// How far a level's offsets are shifted to fit 16 bits: a level-`l` bucket
/// spans `64^l` ticks, so levels 0 to 2 are exact and level 3 counts in steps
/// of 4 ticks, level 4 of 256, level 5 of 16,384.
const OFFSET_SHIFT: [u32; LEVELS] = {
    let mut shifts = [0; LEVELS];
    let mut level = 0;
    while level < LEVELS {
        shifts[level] = (SLOT_BITS * level as u32).saturating_sub(16);
        level += 1;
    }
    shifts
};

#[derive(Debug)]
struct Level {
    occupied: u64,
    slots: [Bucket; SLOTS],
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
    /// Entries beyond `PLACEABLE` ticks, in deadline order.
    overflow: Overflow,
    len: usize,
    /// A drained bucket's buffer, kept to avoid reallocating on the next one.
    spare: Bucket,
    /// Where an unfinished `sweep` resumes.
    sweep: Option<SweepCursor>,
    /// Entries `poll` and `next_deadline` looked at (tests: work per poll).
    #[cfg(test)]
    examined: std::cell::Cell<u64>,
}

/// A position in the wheel's buckets: bucket `level * SLOTS + slot`, entry
/// `index` within it; past the buckets, the last overflow entry examined.
#[derive(Debug, Default, Clone, Copy)]
struct SweepCursor {
    bucket: usize,
    index: usize,
    after: Option<TimerEntry>,
}

/// Entries beyond the wheel's range, ordered by deadline, each with how many
/// times it was inserted (the wheel returns an entry as often as it was
/// scheduled). Only the earliest deadline, kept beside the map, is read
/// until it comes within range, so far entries cost a poll one comparison
/// however many there are: each is inserted and taken out once, O(log n).
#[derive(Debug, Default)]
struct Overflow {
    entries: BTreeMap<TimerEntry, u32>,
    first: Option<u64>,
}

impl Overflow {
    fn insert(&mut self, entry: TimerEntry) {
        *self.entries.entry(entry).or_insert(0) += 1;
        self.first = Some(self.first.map_or(entry.deadline, |first| first.min(entry.deadline)));
    }

    /// The earliest deadline, `None` when empty. O(1).
    fn first(&self) -> Option<u64> {
        self.first
    }

    /// Takes out one copy of the earliest entry.
    fn take_first(&mut self) -> Option<TimerEntry> {
        let mut first = self.entries.first_entry()?;
        let entry = *first.key();
        if *first.get() > 1 {
            *first.get_mut() -= 1;
        } else {
            first.remove();
            self.first = self.entries.keys().next().map(|e| e.deadline);
        }
        Some(entry)
    }

    /// Removes every copy of `entry`; returns how many there were.
    fn remove(&mut self, entry: TimerEntry) -> usize {
        let copies = self.entries.remove(&entry).unwrap_or(0);
        self.first = self.entries.keys().next().map(|e| e.deadline);
        copies as usize
    }
}

impl Wheel {
    /// A wheel with ticks of `2^tick_shift` nanoseconds, starting at `now`.
    pub(crate) fn new(tick_shift: u32, now: u64) -> Self {
        Wheel {
            tick_shift,
            elapsed: now >> tick_shift,
            levels: Box::new(std::array::from_fn(|_| Level::new())),
            current: BinaryHeap::new(),
            overflow: Overflow::default(),
            len: 0,
            spare: Vec::new(),
            sweep: None,
            #[cfg(test)]
            examined: Default::default(),
        }
    }

    /// Counts `n` entries looked at (tests only).
    #[inline]
    fn examine(&self, _n: usize) {
        #[cfg(test)]
        self.examined.set(self.examined.get() + _n as u64);
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
            self.overflow.insert(entry);
            return;
        }
        self.file(tick, entry.slot);
    }

    /// Files `slot` in the bucket for `tick`, which lies after `elapsed` and
    /// within `PLACEABLE` of it.
    fn file(&mut self, tick: u64, slot: u32) {
        let level = level_for(self.elapsed, tick);
        let span_bits = SLOT_BITS as usize * level;
        let index = ((tick >> span_bits) & SLOT_MASK) as usize;
        let within = tick & ((1 << span_bits) - 1);
        let offset = (within >> OFFSET_SHIFT[level]) as u16;
        let level = &mut self.levels[level];
        level.slots[index].push(BucketEntry { slot, offset });
        level.occupied |= 1 << index;
    }

    /// Moves every entry with `deadline <= now` into `fired`, asking `alarm`
    /// for the deadline of each entry whose tick comes (module docs), until
    /// `fired` holds `limit` entries: a bucket of a million due leases is
    /// taken in batches, each fired while the slots its alarms were read from
    /// are still in cache. Call again while `fired` comes back full (entries
    /// left due keep `next_deadline` at or before `now`). Amortised O(1) per
    /// entry plus O(levels) per call; an entry beyond the horizon costs
    /// O(log n) once, when it comes within range.
    pub(crate) fn poll(
        &mut self,
        now: u64,
        fired: &mut Vec<TimerEntry>,
        limit: usize,
        mut alarm: impl FnMut(u32) -> Option<u64>,
    ) {
        let before = fired.len();
        let mut dropped = 0;
        let now_tick = self.tick_of(now);
        while let Some(Reverse(first)) = self.current.peek() {
            if first.deadline > now {
                break;
            }
            fired.push(*first);
            self.current.pop();
            self.examine(1);
        }
        let mut stopped_early = false;
        while let Some((level, index, start)) = self.next_slot() {
            if start > now_tick {
                break;
            }
            if fired.len() >= limit {
                stopped_early = true;
                break;
            }
            self.elapsed = self.elapsed.max(start);
            let lvl = &mut self.levels[level];
            lvl.occupied &= !(1 << index);
            // Nothing is filed back into this bucket while it is processed: a
            // cascade goes to a lower level, an alarm not yet due to a later
            // tick or to `current`.
            let mut entries = std::mem::replace(&mut lvl.slots[index], std::mem::take(&mut self.spare));
            let shift = OFFSET_SHIFT[level];
            while fired.len() < limit {
                let Some(BucketEntry { slot, offset }) = entries.pop() else {
                    break;
                };
                self.examine(1);
                if level > 0 {
                    let tick = start + (u64::from(offset) << shift);
                    if tick > self.elapsed {
                        // A cascade: the offset says where, the slot is not read.
                        self.file(tick, slot);
                        continue;
                    }
                }
                // The entry's tick has come: the slot's alarm is its deadline.
                #[cfg(not(leaseq_mutant = "bucket_start_deadline"))]
                let deadline = alarm(slot);
                // The mutant (loom-tests only): an entry fired by its bucket's
                // start, as if it had no alarm of its own to ask for.
                #[cfg(leaseq_mutant = "bucket_start_deadline")]
                let deadline = alarm(slot).map(|_| start << self.tick_shift);
                let Some(deadline) = deadline else {
                    dropped += 1;
                    continue;
                };
                let entry = TimerEntry { deadline, slot };
                if deadline <= now {
                    fired.push(entry);
                } else {
                    self.place(entry);
                }
            }
            if !entries.is_empty() {
                // The batch is full: the rest of the bucket waits for the next
                // call, and `elapsed` stays at its start.
                let lvl = &mut self.levels[level];
                self.spare = std::mem::replace(&mut lvl.slots[index], entries);
                debug_assert!(self.spare.is_empty(), "an entry was filed into the bucket being processed");
                lvl.occupied |= 1 << index;
                stopped_early = true;
                break;
            }
            self.spare = entries;
        }
        if !stopped_early {
            if now_tick > self.elapsed {
                self.elapsed = now_tick;
            }
            // Far entries are looked at only once the earliest of them comes
            // within range (saturating: `elapsed` may have jumped past it).
            while let Some(first) = self.overflow.first() {
                if self.tick_of(first).saturating_sub(self.elapsed) >= PLACEABLE || fired.len() >= limit {
                    break;
                }
                let Some(entry) = self.overflow.take_first() else {
                    break;
                };
                self.examine(1);
                if entry.deadline <= now {
                    fired.push(entry);
                } else {
                    self.place(entry);
                }
            }
        }
        self.len -= fired.len() - before + dropped;
    }

    /// Whether a sweep has started and not finished.
    pub(crate) fn sweeping(&self) -> bool {
        self.sweep.is_some()
    }

    /// Drops the entries `keep` rejects, and those in buckets whose slot has
    /// no `alarm` (`keep` sees a bucket's entry with its slot's alarm as the
    /// deadline), examining at most `budget` of them and resuming where the
    /// previous call stopped. Returns `true` when this call finished a pass
    /// over the whole wheel. Entries that `poll` moves to an already-swept
    /// bucket during a pass wait for the next pass; nothing `keep` accepts is
    /// ever dropped, and bucket order does not matter (a bucket is unordered;
    /// `current` is re-heapified).
    pub(crate) fn sweep(
        &mut self,
        budget: usize,
        mut alarm: impl FnMut(u32) -> Option<u64>,
        mut keep: impl FnMut(&TimerEntry) -> bool,
    ) -> bool {
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
                let slot = entries[cursor.index].slot;
                if alarm(slot).is_some_and(|deadline| keep(&TimerEntry { deadline, slot })) {
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
            cursor = SweepCursor { bucket: cursor.bucket + 1, index: 0, after: None };
        }
        // Beyond the horizon, in deadline order from where the last call
        // stopped: there may be millions (leases of months).
        let from = cursor.after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut rejected = Vec::new();
        let mut unfinished = false;
        for &entry in self.overflow.entries.range((from, Bound::Unbounded)).map(|(entry, _)| entry) {
            if examined == budget {
                unfinished = true;
                break;
            }
            examined += 1;
            cursor.after = Some(entry);
            if !keep(&entry) {
                rejected.push(entry);
            }
        }
        for entry in rejected {
            self.len -= self.overflow.remove(entry);
        }
        if unfinished {
            self.sweep = Some(cursor);
            return false;
        }
        // The current tick's entries, whole: one tick's worth.
        let before = self.current.len();
        let mut current = std::mem::take(&mut self.current).into_vec();
        current.retain(|Reverse(entry)| keep(entry));
        self.current = BinaryHeap::from(current);
        self.len -= before - self.current.len();
        self.spare = Vec::new();
        true
    }

    /// The earliest time at which `poll` could return something, or `None` if
    /// the wheel is empty. A lower bound: an occupied slot reports its start.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        let mut best = self.current.peek().map(|Reverse(e)| e.deadline);
        if let Some(far) = self.overflow.first() {
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

/// Gives back a list's capacity once it is mostly unused, so a burst of
/// entries does not pin its peak memory after a sweep thinned it out.
fn release_slack<T>(entries: &mut Vec<T>) {
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

    /// A wheel with a table of alarms standing in for the engine's slots:
    /// a slot's alarm is the deadline it was last inserted with, unless a
    /// test moves or clears it.
    struct Alarmed {
        wheel: Wheel,
        alarms: std::collections::HashMap<u32, u64>,
    }

    impl Alarmed {
        fn new(tick_shift: u32, now: u64) -> Self {
            Alarmed { wheel: Wheel::new(tick_shift, now), alarms: Default::default() }
        }

        fn insert(&mut self, entry: TimerEntry) {
            self.alarms.insert(entry.slot, entry.deadline);
            self.wheel.insert(entry);
        }

        fn poll(&mut self, now: u64, fired: &mut Vec<TimerEntry>) {
            let alarms = &self.alarms;
            self.wheel.poll(now, fired, usize::MAX, |slot| alarms.get(&slot).copied());
        }

        fn sweep(&mut self, budget: usize, keep: impl FnMut(&TimerEntry) -> bool) -> bool {
            let alarms = &self.alarms;
            self.wheel.sweep(budget, |slot| alarms.get(&slot).copied(), keep)
        }
    }

    impl std::ops::Deref for Alarmed {
        type Target = Wheel;
        fn deref(&self) -> &Wheel {
            &self.wheel
        }
    }

    /// A bucket's entry cascades by the tick it was filed for, and when that
    /// tick comes it follows its slot's alarm: fires if the alarm is due, is
    /// filed again if the alarm moved later, is dropped without firing if the
    /// slot has no alarm. An alarm moved earlier is seen only then (the entry
    /// fires at once): an earlier alarm needs an entry of its own, which
    /// `Slot::arm` always queues.
    #[test]
    fn bucket_entries_follow_their_slots_alarm_when_their_tick_comes() {
        let mut wheel = Alarmed::new(0, 0);
        // Level 2: filed in the bucket spanning ticks [3 * 4096, 4 * 4096).
        let far = 64u64.pow(2) * 3 + 5;
        for slot in 1..=3 {
            wheel.insert(entry(far, slot));
        }
        wheel.alarms.insert(1, far - 3);
        wheel.alarms.insert(2, far + 100);
        wheel.alarms.remove(&3);
        let mut fired = Vec::new();
        wheel.poll(far - 1, &mut fired);
        assert!(fired.is_empty(), "nothing fires before the tick it was filed for");
        wheel.poll(far, &mut fired);
        assert_eq!(fired, vec![entry(far - 3, 1)]);
        assert_eq!(wheel.len(), 1, "slot 3's entry was dropped, slot 2's waits");
        fired.clear();
        wheel.poll(far + 99, &mut fired);
        assert!(fired.is_empty());
        wheel.poll(far + 100, &mut fired);
        assert_eq!(fired, vec![entry(far + 100, 2)]);
        assert_eq!(wheel.len(), 0);
    }

    /// Above level 2 offsets are rounded down to fit 16 bits: an entry
    /// filed at level 3 or higher reaches level 0 up to a few ticks early
    /// and then waits for its exact deadline, never fires late, and fires
    /// exactly once, at every level.
    #[test]
    fn coarse_offsets_never_fire_early_or_late() {
        for level in 3..LEVELS as u32 {
            let mut wheel = Alarmed::new(0, 0);
            let base = 1u64 << (SLOT_BITS * level);
            let deadlines: Vec<u64> = (0..40).map(|k| base + k * 7_919 % base + k).collect();
            for (slot, &deadline) in deadlines.iter().enumerate() {
                wheel.insert(entry(deadline, slot as u32));
            }
            let mut sorted = deadlines.clone();
            sorted.sort_unstable();
            let mut fired = Vec::new();
            for &deadline in &sorted {
                wheel.poll(deadline - 1, &mut fired);
                assert!(fired.iter().all(|e| e.deadline < deadline), "level {level}: fired early");
                wheel.poll(deadline, &mut fired);
                assert!(fired.iter().any(|e| e.deadline == deadline), "level {level}: {deadline} did not fire");
            }
            assert_eq!(fired.len(), deadlines.len(), "level {level}: each entry fires once");
            assert_eq!(wheel.len(), 0);
        }
    }

    /// With a limit, a poll stops once `fired` is full, in the middle of a
    /// bucket if need be, and the next poll resumes there: every due entry
    /// fires exactly once, the hint stays due meanwhile, and buckets after
    /// the unfinished one are not skipped.
    #[test]
    fn a_limited_poll_resumes_where_it_stopped() {
        let mut wheel = Alarmed::new(0, 0);
        let mut expected = Vec::new();
        for slot in 0..50u32 {
            // Ten ticks, five entries each, at levels 1 and 2.
            let deadline = 3_000 + u64::from(slot % 10) * 700;
            wheel.insert(entry(deadline, slot));
            expected.push(entry(deadline, slot));
        }
        wheel.insert(entry(1_000_000, 99));
        let now = 10_000;
        let mut all = Vec::new();
        loop {
            let mut fired = Vec::new();
            let alarms = &wheel.alarms;
            wheel.wheel.poll(now, &mut fired, 4, |slot| alarms.get(&slot).copied());
            assert!(fired.len() <= 4, "a batch of {} past its limit", fired.len());
            if fired.is_empty() {
                break;
            }
            all.extend(fired);
            if all.len() < expected.len() {
                assert!(wheel.next_deadline().is_some_and(|d| d <= now), "due entries left behind a later hint");
            }
        }
        all.sort_by_key(|e| e.slot);
        assert_eq!(all, expected);
        assert_eq!(wheel.len(), 1);
        let mut fired = Vec::new();
        wheel.poll(1_000_000, &mut fired);
        assert_eq!(fired, vec![entry(1_000_000, 99)]);
    }

    #[test]
    fn bucket_entries_are_six_bytes() {
        assert_eq!(std::mem::size_of::<BucketEntry>(), 6);
    }

    /// The sweep drops a bucket's entry whose slot has no alarm without
    /// asking `keep`, and shows `keep` the others with their alarm.
    #[test]
    fn the_sweep_drops_entries_without_an_alarm_and_shows_keep_the_alarm() {
        let mut wheel = Alarmed::new(0, 0);
        wheel.insert(entry(50_000, 1));
        wheel.insert(entry(50_000, 2));
        wheel.alarms.remove(&1);
        wheel.alarms.insert(2, 60_000);
        let mut seen = Vec::new();
        while !wheel.sweep(10, |e| {
            seen.push(*e);
            true
        }) {}
        assert_eq!(seen, vec![entry(60_000, 2)]);
        assert_eq!(wheel.len(), 1);
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
        let mut wheel = Alarmed::new(20, 0);
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
        let mut wheel = Alarmed::new(0, 0);
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
        let mut wheel = Alarmed::new(10, 1 << 30);
        wheel.insert(entry(5, 1));
        let mut fired = Vec::new();
        wheel.poll(1 << 30, &mut fired);
        assert_eq!(fired.len(), 1);
    }

    #[test]
    fn beyond_the_horizon_waits_and_is_replaced() {
        let mut wheel = Alarmed::new(0, 0);
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

    /// Entries past the horizon (250 days at the default tick, whose horizon
    /// is about 208 days) cost a poll nothing until the earliest of them
    /// comes within range: an idle driver polls every 100 ms, and each poll
    /// looks at its own few entries, not at the far ones. They still fire
    /// exactly at their deadlines, each once.
    #[test]
    fn far_entries_cost_a_poll_nothing_until_they_come_within_range() {
        const MS: u64 = 1_000_000;
        let day = 86_400_000 * MS;
        let far = 250 * day;
        let count = 100_000u32;
        let mut wheel = Alarmed::new(19, 0);
        for slot in 0..count {
            wheel.insert(entry(far + u64::from(slot), slot));
        }
        let mut fired = Vec::new();
        for step in 1..=1_000u64 {
            let now = step * 100 * MS;
            // An unrelated 2 ms lease, due before the next poll.
            wheel.insert(entry(now + 2 * MS, count + step as u32));
            let before = wheel.examined.get();
            wheel.poll(now, &mut fired);
            let hint = wheel.next_deadline().unwrap();
            let work = wheel.examined.get() - before;
            assert!(work <= 8, "poll {step} looked at {work} entries");
            assert!(hint <= now + 2 * MS, "hint {hint} after the 2 ms lease");
        }
        assert_eq!(fired.len(), 999, "every short lease but the last fired");
        assert!(fired.iter().all(|e| e.slot > count));
        fired.clear();
        wheel.poll(far - 1, &mut fired);
        assert_eq!(fired.len(), 1, "only the last short lease");
        fired.clear();
        for k in [0, 1, 4_999, 50_000, u64::from(count) - 1] {
            wheel.poll(far + k, &mut fired);
            assert_eq!(fired.len() as u64, k + 1, "at {k} ns past the first far deadline");
            assert!(fired.iter().all(|e| e.deadline <= far + k), "fired early");
        }
        let mut slots: Vec<u32> = fired.iter().map(|e| e.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), count as usize, "each far entry fired once");
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn next_deadline_is_a_lower_bound() {
        let mut wheel = Alarmed::new(4, 0);
        assert_eq!(wheel.next_deadline(), None);
        wheel.insert(entry(1000, 1));
        let hint = wheel.next_deadline().unwrap();
        assert!(hint <= 1000 && hint > 0, "{hint}");
    }

    #[test]
    fn sweep_resumes_within_its_budget_and_frees_emptied_buckets() {
        let mut wheel = Alarmed::new(0, 0);
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

    /// How far ahead an entry is: mostly within a few milliseconds, some
    /// past the horizon (at tick shifts below 12 it is under 2^48 ns).
    fn delta() -> impl Strategy<Value = u64> {
        prop_oneof![4 => 0u64..5_000_000, 1 => 0u64..1 << 48]
    }

    /// How far a poll moves time: mostly small steps, some long jumps.
    fn step() -> impl Strategy<Value = u64> {
        prop_oneof![6 => 0u64..200_000, 1 => 0u64..1 << 47]
    }

    /// The same entry inserted twice beyond the horizon comes back twice,
    /// and a sweep that rejects it drops both copies, within its budget.
    #[test]
    fn far_duplicates_fire_as_often_as_inserted_and_sweep_in_budget() {
        let mut wheel = Alarmed::new(0, 0);
        let far = HORIZON * 2;
        wheel.insert(entry(far, 1));
        wheel.insert(entry(far, 1));
        for slot in 2..40 {
            wheel.insert(entry(far + u64::from(slot), slot));
        }
        assert_eq!(wheel.len(), 40);
        let mut calls = 0;
        loop {
            let mut seen = 0;
            let done = wheel.sweep(5, |e| {
                seen += 1;
                e.slot % 2 == 0
            });
            assert!(seen <= 5, "a sweep call examined {seen} entries, budget 5");
            calls += 1;
            if done {
                break;
            }
        }
        assert!(calls >= 8, "39 distinct far entries need at least 8 calls of 5");
        assert_eq!(wheel.len(), 19, "slot 1's two copies and the other odd slots dropped");
        wheel.insert(entry(far, 3));
        wheel.insert(entry(far, 3));
        let mut fired = Vec::new();
        wheel.poll(far, &mut fired);
        assert_eq!(fired, vec![entry(far, 3), entry(far, 3)]);
        fired.clear();
        wheel.poll(far + 100, &mut fired);
        assert_eq!(fired.len(), 19);
        assert_eq!(wheel.len(), 0);
    }

    proptest! {
        /// Sweeping with a predicate drops only entries it rejects, and a
        /// full pass drops all of them: interleaved with inserts and polls,
        /// every due entry the predicate keeps still fires exactly once.
        #[test]
        fn sweep_drops_only_rejected_entries(
            tick_shift in 0u32..12,
            ops in prop::collection::vec((0u8..4, delta(), step(), 1usize..50), 1..300),
        ) {
            let mut wheel = Alarmed::new(tick_shift, 0);
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
        /// poll (in batches of any size) returns exactly the entries due,
        /// each once.
        #[test]
        fn matches_a_sorted_list(
            tick_shift in 0u32..12,
            limit in 1usize..40,
            ops in prop::collection::vec((any::<bool>(), delta(), step()), 1..200),
        ) {
            let mut wheel = Alarmed::new(tick_shift, 0);
            let mut model: Vec<TimerEntry> = Vec::new();
            let mut now = 0u64;
            for (i, (is_insert, delta, step)) in ops.into_iter().enumerate() {
                if is_insert {
                    let e = entry(now + delta, i as u32);
                    wheel.insert(e);
                    model.push(e);
                } else {
                    now += step;
                    // In batches of `limit`, called again while a batch comes back full.
                    let mut fired = Vec::new();
                    loop {
                        let mut batch = Vec::new();
                        let alarms = &wheel.alarms;
                        wheel.wheel.poll(now, &mut batch, limit, |slot| alarms.get(&slot).copied());
                        let full = batch.len() >= limit;
                        fired.extend(batch);
                        if !full {
                            break;
                        }
                    }
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
