//! Message slots and the per-shard slab that owns them.
//!
//! Invariants:
//! * A slot's `body` is touched only by the thread that owns the slot: the one
//!   holding a claim on its lease word, or the sender that popped it off the
//!   free list (a `Free` slot is on the free list or owned by exactly one
//!   sender, never both).
//! * Slots are never deallocated while the shard lives, so an index from a
//!   receipt, a ready entry or a timer entry always names valid memory; the
//!   generation in the lease word decides whether it still means anything.
//! * The free list is a Treiber stack of slot indices whose head carries a
//!   32-bit tag bumped on every change, so a pop that raced a pop-and-push of
//!   the same index fails its compare-exchange instead of corrupting the list
//!   (the ABA problem). A free slot's link lives in the word that holds the
//!   send time while the slot holds a message (a free slot has no send time):
//!   whoever reads that word as a send time without owning the slot checks
//!   the lease word around the read (`Slot::ready_sent_at`).
//! * `armed` (the timer arm): while it holds a deadline `a`, a timer entry for
//!   this slot with deadline `a` is queued or about to be, and any lease or
//!   delay of the slot that is in force ends at `a` or later. Schedulers only
//!   lower it; only whoever runs the shard's timers clears it, and then looks
//!   at the slot again (see `lifecycle.rs`, timers).

use bytes::Bytes;

use crate::dead_letter::{AttemptRecord, DeadLetterRecord, MAX_ATTEMPT_RECORDS};
use crate::identity::Identity;
use crate::lease::LeaseWord;
use crate::sync::{AtomicU32, AtomicU64, Mutex, OnceLock, Ordering, StatCount32, UnsafeCell, lock};

/// Slots per page. Pages are allocated when first needed, so an empty queue
/// with a large `max_messages` costs only its page table.
pub(crate) const PAGE_SLOTS: usize = 512;

/// The fields of a message that only the slot's owner touches.
#[derive(Debug, Default)]
pub(crate) struct Body {
    pub(crate) payload: Bytes,
    /// The id, and the history once the message has one: failed attempts,
    /// the dead-letter record and the deliveries it had on earlier queues,
    /// allocated only once an attempt fails (on a queue with a dead-letter
    /// queue) or for a message that arrived with deliveries behind it, so
    /// the happy path allocates nothing here.
    pub(crate) identity: Identity,
    /// When the current attempt's receive happened (lease cap and processing
    /// time are measured from it).
    pub(crate) received_at: u64,
    /// When the current attempt's lease runs out.
    pub(crate) deadline: u64,
}

impl Body {
    /// Deliveries over the message's whole life, never reset (the fencing
    /// token), when `count` is its delivery count on this queue.
    pub(crate) fn lifetime_deliveries(&self, count: u32) -> u32 {
        self.identity.history().map_or(0, |history| history.carried).saturating_add(count)
    }
}

/// What a message remembers of its past.
#[derive(Debug, Default, Clone)]
pub(crate) struct History {
    /// The message's id (a message with a history keeps it here, see
    /// `Identity`).
    pub(crate) id: u64,
    /// The most recent failed attempts, oldest first, at most
    /// `MAX_ATTEMPT_RECORDS`.
    pub(crate) attempts: Vec<AttemptRecord>,
    /// Set once the message was dead-lettered.
    pub(crate) dead_letter: Option<std::sync::Arc<DeadLetterRecord>>,
    /// Deliveries on the queues the message was on before this one (it was
    /// dead-lettered or redriven here).
    pub(crate) carried: u32,
}

impl History {
    /// The history a message arrives with: `history` (a dead-letter record)
    /// and `carried` earlier deliveries; `None` when there is neither.
    pub(crate) fn on_arrival(history: Option<Box<History>>, carried: u32) -> Option<Box<History>> {
        match (history, carried) {
            (None, 0) => None,
            (Some(mut history), carried) => {
                history.carried = carried;
                Some(history)
            }
            (None, carried) => Some(Box::new(History { carried, ..History::default() })),
        }
    }
}

impl History {
    pub(crate) fn remember(&mut self, attempt: AttemptRecord) {
        if self.attempts.len() == MAX_ATTEMPT_RECORDS {
            self.attempts.remove(0);
        }
        self.attempts.push(attempt);
    }
}

/// One message's home: 88 bytes.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) lease: LeaseWord,
    /// The send time while the slot holds a message (a statistic, readable
    /// without owning the slot: `ready_sent_at`); the free-list link while it
    /// is free (module invariant).
    sent_at_or_link: AtomicU64,
    /// The timer arm (module invariant), `NOT_ARMED` when none.
    armed: AtomicU64,
    /// Calls (ack, extend, release, dead-letter) that arrived for an attempt of
    /// the message now here after that attempt had lost its lease, packed with
    /// the generation the message arrived at (see `LateCalls`).
    late_calls: LateCalls,
    /// Deliveries on this queue (1 on the first); reset by redrive. Owned
    /// like the body; a cell of its own so that it packs beside `late_calls`.
    delivery_count: UnsafeCell<u32>,
    body: UnsafeCell<Body>,
}

/// `Slot::armed` when no timer entry covers the slot.
const NOT_ARMED: u64 = u64::MAX;

// SAFETY: `body` and `delivery_count` are `UnsafeCell`s accessed only by the
// slot's single owner (see the module invariant); ownership moves between
// threads only through the Acquire/Release operations on `lease` or on the
// free-list head, which order the accesses. Every other field is atomic.
unsafe impl Sync for Slot {}

impl Slot {
    fn new() -> Self {
        Slot {
            lease: LeaseWord::new(),
            sent_at_or_link: AtomicU64::new(0),
            armed: AtomicU64::new(NOT_ARMED),
            late_calls: LateCalls(StatCount32::new(0)),
            delivery_count: UnsafeCell::new(0),
            body: UnsafeCell::new(Body::default()),
        }
    }

    /// Reads the body.
    ///
    /// # Safety
    /// The caller owns the slot: it holds a claim on `lease`, or popped the
    /// slot off the free list and has not published it yet.
    #[inline]
    pub(crate) unsafe fn body<R>(&self, f: impl FnOnce(&Body) -> R) -> R {
        // SAFETY: the caller owns the slot, so no other thread writes the body
        // while this reference lives.
        self.body.with(|body| f(unsafe { &*body }))
    }

    /// Changes the body.
    ///
    /// # Safety
    /// As for `body`.
    #[inline]
    pub(crate) unsafe fn body_mut<R>(&self, f: impl FnOnce(&mut Body) -> R) -> R {
        // SAFETY: the caller owns the slot, so this is the only reference to
        // the body while it lives.
        self.body.with_mut(|body| f(unsafe { &mut *body }))
    }

    /// The message's delivery count on this queue.
    ///
    /// # Safety
    /// As for `body`.
    #[inline]
    pub(crate) unsafe fn delivery_count(&self) -> u32 {
        // SAFETY: the caller owns the slot, so no other thread writes the
        // count meanwhile.
        self.delivery_count.with(|count| unsafe { *count })
    }

    /// Sets the message's delivery count on this queue.
    ///
    /// # Safety
    /// As for `body`.
    #[inline]
    pub(crate) unsafe fn set_delivery_count(&self, count: u32) {
        // SAFETY: the caller owns the slot, so this is the only access to the
        // count while it lasts.
        self.delivery_count.with_mut(|cell| unsafe { *cell = count })
    }

    /// Stamps the send time. Called by the slot's owner before it publishes
    /// the message (Relaxed: published with the lease word that follows).
    #[inline]
    pub(crate) fn set_sent_at(&self, now: u64) {
        self.sent_at_or_link.store(now, Ordering::Relaxed);
    }

    /// The send time of the message the caller owns.
    #[inline]
    pub(crate) fn sent_at(&self) -> u64 {
        self.sent_at_or_link.load(Ordering::Relaxed)
    }

    /// The send time of the message here if it is ready, read without owning
    /// the slot (the oldest-ready age): the lease word is read before and
    /// after, and the time counts only if the word did not change, so a
    /// free-list link written meanwhile is never taken for a time. The link's
    /// store is Release (`Slab::free_all`), after the freeing publish: reading the
    /// link here (Acquire) makes that publish visible to the second look.
    pub(crate) fn ready_sent_at(&self) -> Option<u64> {
        self.waiting_sent_at().filter(|(word, _)| word.phase() == crate::lease::Phase::Ready).map(|(_, at)| at)
    }

    /// The lease word and send time of the message here if it is ready or
    /// delayed (the retention sweep), read as `ready_sent_at` reads them.
    pub(crate) fn waiting_sent_at(&self) -> Option<(crate::lease::Word, u64)> {
        let before = self.lease.load();
        if !matches!(before.phase(), crate::lease::Phase::Ready | crate::lease::Phase::Delayed) {
            return None;
        }
        let sent_at = self.sent_at_or_link.load(Ordering::Acquire);
        (self.lease.load() == before).then_some((before, sent_at))
    }

    /// The free-list link (Relaxed: see `Slab::pop_free`).
    fn next_free(&self) -> u32 {
        self.sent_at_or_link.load(Ordering::Relaxed) as u32
    }

    /// Sets the free-list link of a slot the caller owns and has published
    /// `Free`. Release: see `ready_sent_at`.
    fn set_next_free(&self, next: u32) {
        #[cfg(not(leaseq_mutant = "relaxed_link"))]
        let order = Ordering::Release;
        // Mutant (loom-tests only): a scan that reads the link is not shown
        // the freeing publish, so its second look can still see `Ready`.
        #[cfg(leaseq_mutant = "relaxed_link")]
        let order = Ordering::Relaxed;
        self.sent_at_or_link.store(u64::from(next), order);
    }
}

impl Slot {
    /// Makes sure a timer entry of this slot fires at `deadline` or earlier,
    /// after the caller published the lease or delay ending then. Returns
    /// whether the caller must queue an entry for `deadline` (the arm was
    /// later or absent); `false` means an earlier entry is queued already, and
    /// whoever fires it will find this lease or delay and arm again for it.
    ///
    /// AcqRel: the release half hands the published lease word to the timer
    /// runner whose `disarm` reads this write (it then sees the lease); the
    /// acquire half orders a `false` after that runner's last look.
    #[inline]
    pub(crate) fn arm(&self, deadline: u64) -> bool {
        self.armed.fetch_min(deadline, Ordering::AcqRel) > deadline
    }

    /// Retires the arm if it rests on the entry for `deadline` that the timer
    /// runner is handling. Call with the shard's wheel held, then look at the
    /// lease word: a scheduler whose `arm` came before this sees the arm in
    /// place (and queued nothing), and its lease is visible to that look
    /// (AcqRel, also on failure: Acquire); one whose `arm` comes after finds
    /// no arm and queues its own entry. Returns whether the arm was retired.
    pub(crate) fn disarm(&self, deadline: u64) -> bool {
        self.armed.compare_exchange(deadline, NOT_ARMED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The arm's deadline, `u64::MAX` when none (the timer runner's sweep).
    pub(crate) fn armed(&self) -> u64 {
        self.armed.load(Ordering::Acquire)
    }

    /// The arm's deadline, `None` when none: what the timing wheel files
    /// this slot's entries by when it moves them (`Wheel::poll`). Acquire,
    /// like `armed`; the wheel's decisions need no order, only `fire`'s
    /// `disarm` does, and it reads the arm again.
    #[inline]
    pub(crate) fn alarm(&self) -> Option<u64> {
        Some(self.armed()).filter(|&deadline| deadline != NOT_ARMED)
    }

    /// Starts the count of late calls for a message arriving at `generation`.
    /// Called by the slot's owner before it publishes the message.
    #[inline]
    pub(crate) fn reset_late_calls(&self, generation: u64) {
        // Relaxed: published with the lease word that follows.
        self.late_calls.0.store(LateCalls::pack(generation, 0), Ordering::Relaxed);
    }

    /// Counts a refused call with a receipt of `receipt_generation`, if that
    /// receipt belongs to the message now in the slot (it was issued after the
    /// message arrived). Off the hot path: only refused calls come here.
    pub(crate) fn note_late_call(&self, receipt_generation: u64) {
        // Relaxed: the word carries its own identity (the arrival generation),
        // and the compare-exchange fails if another message took the slot in
        // between, so no other memory needs ordering with it.
        let _ = self.late_calls.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |packed| {
            let (arrival, count) = LateCalls::unpack(packed);
            (LateCalls::issued_after(receipt_generation, arrival) && count < LateCalls::MAX)
                .then(|| LateCalls::pack(arrival, count + 1))
        });
    }

    /// Late calls counted for the message now in the slot.
    pub(crate) fn late_calls(&self) -> u32 {
        LateCalls::unpack(self.late_calls.0.load(Ordering::Relaxed)).1
    }
}

/// The low 24 bits of the arrival generation and a saturating 8-bit count in
/// one 32-bit word (it fits beside `delivery_count` in one 8-byte pair), so a count
/// can never land on a later occupant of the slot.
/// A receipt belongs to the current occupant when its generation is ahead of
/// the arrival generation by less than 2^23 transitions (modulo 2^24).
#[derive(Debug)]
struct LateCalls(StatCount32);

impl LateCalls {
    const MAX: u32 = 0xff;
    const GEN_BITS: u32 = 24;
    const GEN_MASK: u64 = (1 << Self::GEN_BITS) - 1;

    fn pack(generation: u64, count: u32) -> u32 {
        (((generation & Self::GEN_MASK) as u32) << 8) | count.min(Self::MAX)
    }

    fn unpack(packed: u32) -> (u64, u32) {
        (u64::from(packed >> 8), packed & 0xff)
    }

    /// Whether a receipt of `generation` was issued after arrival `arrival`
    /// (both reduced to 24 bits).
    fn issued_after(generation: u64, arrival: u64) -> bool {
        let ahead = (generation & Self::GEN_MASK).wrapping_sub(arrival) & Self::GEN_MASK;
        ahead != 0 && ahead < (1 << (Self::GEN_BITS - 1))
    }
}

const NIL: u32 = u32::MAX;

/// Pages per chunk of the page table: a chunk covers 2^19 slots, so even a
/// shard at `MAX_CAPACITY` needs only 4,096 chunk entries up front.
const CHUNK_PAGES: usize = 1024;

/// One chunk of page-table entries: up to `CHUNK_PAGES` pages, each created
/// on first use.
type Chunk = Box<[OnceLock<Box<[Slot]>>]>;

/// A shard's slots: a page table, a bump counter for never-used slots and the
/// free list of used ones.
///
/// Memory follows the slots in use, not the capacity. The page table has two
/// parts: the entries of the first `CHUNK_PAGES` pages (2^19 slots, enough
/// for most shards) exist up front, at most 24 KiB, and are one lookup away;
/// the pages beyond are reached through a table of chunks (24 bytes per 2^19
/// slots of capacity) whose entries are created when the bump counter first
/// reaches them. Each page's slots are created on first use either way.
#[derive(Debug)]
pub(crate) struct Slab {
    /// Entries of pages `0..CHUNK_PAGES` (fewer for a small capacity).
    near: Chunk,
    /// Chunks of the pages from `CHUNK_PAGES` on.
    far: Box<[OnceLock<Chunk>]>,
    /// Pages the capacity needs (the last chunk holds the remainder).
    page_count: usize,
    capacity: u32,
    /// Slots handed out at least once; indices below it exist.
    allocated: AtomicU32,
    /// Treiber stack head: tag in the high 32 bits, top index in the low 32.
    free_head: AtomicU64,
    /// Serialises page allocation (rare; never on a slot's hot path once its
    /// page exists).
    grow: Mutex<()>,
}

impl Slab {
    pub(crate) fn new(capacity: u32) -> Self {
        let page_count = (capacity as usize).div_ceil(PAGE_SLOTS);
        let near = (0..page_count.min(CHUNK_PAGES)).map(|_| OnceLock::new()).collect();
        let far = (0..page_count.saturating_sub(CHUNK_PAGES).div_ceil(CHUNK_PAGES)).map(|_| OnceLock::new()).collect();
        let slab = Slab {
            near,
            far,
            page_count,
            capacity,
            allocated: AtomicU32::new(0),
            free_head: AtomicU64::new(u64::from(NIL)),
            grow: Mutex::new(()),
        };
        // Under loom, std's `OnceLock` could block outside the model's view;
        // loom slabs are tiny, so allocate every page up front instead.
        #[cfg(loom)]
        for page in 0..page_count {
            slab.page(page);
        }
        slab
    }

    fn page(&self, page: usize) -> &[Slot] {
        let entry = if page < CHUNK_PAGES {
            &self.near[page]
        } else {
            let chunk = (page - CHUNK_PAGES) / CHUNK_PAGES;
            let entries = self.far[chunk].get_or_init(|| {
                let pages = CHUNK_PAGES.min(self.page_count - (chunk + 1) * CHUNK_PAGES);
                (0..pages).map(|_| OnceLock::new()).collect()
            });
            &entries[page % CHUNK_PAGES]
        };
        entry.get_or_init(|| {
            let _serial = lock(&self.grow);
            (0..PAGE_SLOTS).map(|_| Slot::new()).collect()
        })
    }

    /// The slot at `index`, if it was ever allocated.
    #[inline]
    pub(crate) fn get(&self, index: u32) -> Option<&Slot> {
        // Acquire: pairs with the Release in `allocate`, so the page a slot
        // index was handed out from is visible here.
        if index >= self.allocated.load(Ordering::Acquire) {
            return None;
        }
        let index = index as usize;
        let page = index / PAGE_SLOTS;
        let entry = if page < CHUNK_PAGES {
            self.near.get(page)?
        } else {
            self.far.get(page / CHUNK_PAGES - 1)?.get()?.get(page % CHUNK_PAGES)?
        };
        entry.get()?.get(index % PAGE_SLOTS)
    }

    /// Slots ever allocated (for scans).
    pub(crate) fn allocated(&self) -> u32 {
        self.allocated.load(Ordering::Acquire)
    }

    /// Takes a free slot, or `None` if the shard is at capacity. The caller
    /// owns the returned slot until it publishes a non-`Free` word.
    pub(crate) fn allocate(&self) -> Option<(u32, &Slot)> {
        if let Some(popped) = self.pop_free() {
            return Some(popped);
        }
        let mut current = self.allocated.load(Ordering::Relaxed);
        loop {
            if current >= self.capacity {
                // Another thread may have freed one since we looked.
                return self.pop_free();
            }
            // Create the page before publishing the index, so `get` never
            // sees an index whose page is missing.
            self.page(current as usize / PAGE_SLOTS);
            // Release: publishes the page creation with the index.
            match self.allocated.compare_exchange_weak(current, current + 1, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => {
                    let slot = &self.page(current as usize / PAGE_SLOTS)[current as usize % PAGE_SLOTS];
                    return Some((current, slot));
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Returns slot `index` (`slot`, which the caller already holds) to the
    /// free list. The caller owns it and has published a `Free` word.
    #[inline]
    pub(crate) fn free(&self, index: u32, slot: &Slot) {
        self.free_all(std::iter::once((index, slot)));
    }

    /// Returns several slots to the free list with one compare-exchange: each
    /// is linked to the next, the last to the old head. The caller owns every
    /// one and has published each `Free`.
    pub(crate) fn free_all<'s>(&self, slots: impl Iterator<Item = (u32, &'s Slot)>) {
        let mut first = None;
        let mut last: Option<&Slot> = None;
        for (index, slot) in slots {
            debug_assert!(self.get(index).is_some_and(|s| std::ptr::eq(s, slot)), "slot {index} freed with another");
            match last {
                // Release, for `Slot::ready_sent_at`.
                Some(previous) => previous.set_next_free(index),
                None => first = Some(index),
            }
            last = Some(slot);
        }
        let (Some(first), Some(last)) = (first, last) else {
            return;
        };
        let mut head = self.free_head.load(Ordering::Relaxed);
        loop {
            // Published to poppers by the Release CAS below; the store itself
            // is Release for `Slot::ready_sent_at`.
            last.set_next_free(head as u32);
            let next = (head & !0xffff_ffff).wrapping_add(1 << 32) | u64::from(first);
            // Release: the popper's Acquire load of the head sees the links
            // and everything the freeing owner did to each slot of the chain.
            match self.free_head.compare_exchange_weak(head, next, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    /// Pops the free list: the slot's index and the slot itself (found once,
    /// for the link, and handed back rather than looked up again).
    fn pop_free(&self) -> Option<(u32, &Slot)> {
        let mut head = self.free_head.load(Ordering::Acquire);
        loop {
            let top = head as u32;
            if top == NIL {
                return None;
            }
            let slot = self.get(top)?;
            // Relaxed: if another thread popped and re-pushed `top` since we
            // read the head, the tag changed and the CAS below fails, so a
            // stale link is never installed.
            let below = slot.next_free();
            let next = (head & !0xffff_ffff).wrapping_add(1 << 32) | u64::from(below);
            // Acquire: takes ownership of the slot the freer released.
            match self.free_head.compare_exchange_weak(head, next, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Some((top, slot)),
                Err(actual) => head = actual,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn allocates_up_to_capacity_then_reuses_freed_slots() {
        let slab = Slab::new(3);
        let a = slab.allocate().unwrap().0;
        let b = slab.allocate().unwrap().0;
        let c = slab.allocate().unwrap().0;
        assert_eq!((a, b, c), (0, 1, 2));
        assert!(slab.allocate().is_none(), "capacity is a hard limit");
        slab.free(b, slab.get(b).unwrap());
        slab.free(a, slab.get(a).unwrap());
        assert_eq!(slab.allocate().unwrap().0, a, "free list is LIFO");
        assert_eq!(slab.allocate().unwrap().0, b);
        assert!(slab.allocate().is_none());
    }

    /// A chain freed in one push comes back slot by slot (its first slot
    /// first), on top of what the free list held, and capacity stays exact.
    #[test]
    fn a_chain_freed_at_once_is_reused_like_single_frees() {
        let slab = Slab::new(5);
        let taken: Vec<u32> = (0..5).map(|_| slab.allocate().unwrap().0).collect();
        assert!(slab.allocate().is_none());
        slab.free(taken[4], slab.get(taken[4]).unwrap());
        slab.free_all([1, 3, 0].into_iter().map(|i| (i, slab.get(i).unwrap())));
        slab.free_all(std::iter::empty());
        let again: Vec<u32> = (0..4).map(|_| slab.allocate().unwrap().0).collect();
        assert_eq!(again, vec![1, 3, 0, 4], "the chain in its order, then the older free slot");
        assert!(slab.allocate().is_none(), "slot 2 was never freed");
    }

    #[test]
    fn unallocated_indices_are_absent() {
        let slab = Slab::new(10_000);
        assert!(slab.get(0).is_none());
        slab.allocate().unwrap();
        assert!(slab.get(0).is_some());
        assert!(slab.get(1).is_none());
        assert!(slab.get(u32::MAX).is_none());
    }

    #[test]
    fn pages_grow_lazily_across_boundaries() {
        let slab = Slab::new((PAGE_SLOTS * 2 + 5) as u32);
        for expected in 0..(PAGE_SLOTS * 2 + 5) as u32 {
            assert_eq!(slab.allocate().unwrap().0, expected);
        }
        assert!(slab.allocate().is_none());
    }

    #[test]
    fn slots_past_a_chunk_boundary_are_distinct_and_found_again() {
        let capacity = (CHUNK_PAGES * PAGE_SLOTS + PAGE_SLOTS + 3) as u32;
        let slab = Slab::new(capacity);
        let mut addresses = Vec::with_capacity(capacity as usize);
        for expected in 0..capacity {
            let (index, slot) = slab.allocate().unwrap();
            assert_eq!(index, expected);
            addresses.push(slot as *const Slot);
        }
        assert!(slab.allocate().is_none(), "capacity is exact across chunks");
        for (index, &address) in addresses.iter().enumerate() {
            assert!(std::ptr::eq(slab.get(index as u32).unwrap(), address), "slot {index} moved");
        }
        let distinct: std::collections::HashSet<_> = addresses.iter().collect();
        assert_eq!(distinct.len(), addresses.len());
    }

    #[test]
    fn an_unused_slab_holds_only_its_chunk_table() {
        let slab = Slab::new(u32::MAX);
        assert_eq!(slab.near.len(), CHUNK_PAGES);
        assert_eq!(slab.far.len(), (u32::MAX as usize).div_ceil(PAGE_SLOTS * CHUNK_PAGES) - 1);
        assert!(slab.far.iter().all(|chunk| chunk.get().is_none()));
        assert!(slab.near.iter().all(|page| page.get().is_none()));
        slab.allocate().unwrap();
        assert_eq!(slab.near.iter().filter(|page| page.get().is_some()).count(), 1);
        assert!(slab.far.iter().all(|chunk| chunk.get().is_none()));
    }

    #[test]
    fn concurrent_allocate_and_free_never_hands_out_a_slot_twice() {
        let slab = std::sync::Arc::new(Slab::new(64));
        // One ownership mark per slot; a double hand-out trips the assert.
        let owned: std::sync::Arc<Vec<std::sync::atomic::AtomicBool>> =
            std::sync::Arc::new((0..64).map(|_| std::sync::atomic::AtomicBool::new(false)).collect());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (slab, owned) = (slab.clone(), owned.clone());
                std::thread::spawn(move || {
                    let release = |index: u32| {
                        owned[index as usize].store(false, std::sync::atomic::Ordering::Release);
                        index
                    };
                    let mut held = Vec::new();
                    for round in 0..20_000 {
                        if let Some((index, _)) = slab.allocate() {
                            let was = owned[index as usize].swap(true, std::sync::atomic::Ordering::AcqRel);
                            assert!(!was, "slot {index} handed out twice");
                            held.push(index);
                        }
                        if round % 3 == 0 || held.len() > 20 {
                            // One at a time or as one chain, alternately.
                            if round % 2 == 0 {
                                while let Some(index) = held.pop() {
                                    slab.free(release(index), slab.get(index).unwrap());
                                }
                            } else {
                                let chain: Vec<u32> = held.drain(..).map(release).collect();
                                slab.free_all(chain.iter().map(|&i| (i, slab.get(i).unwrap())));
                            }
                        }
                    }
                    for index in held {
                        slab.free(release(index), slab.get(index).unwrap());
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let mut all = std::collections::HashSet::new();
        while let Some((index, _)) = slab.allocate() {
            assert!(all.insert(index));
        }
        assert_eq!(all.len(), 64, "no slot lost");
    }
}

#[cfg(all(test, not(loom)))]
mod late_call_tests {
    use super::*;

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn slots_stay_96_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 88);
    }

    #[test]
    fn an_arm_only_moves_earlier_until_retired() {
        let slot = Slot::new();
        assert!(slot.arm(500), "no arm yet: the caller queues an entry");
        assert!(!slot.arm(700), "a later deadline is covered by the entry at 500");
        assert!(slot.arm(300), "an earlier one needs its own entry");
        assert_eq!(slot.armed(), 300);
        assert!(!slot.disarm(500), "the entry at 500 no longer holds the arm");
        assert!(slot.disarm(300));
        assert_eq!(slot.armed(), NOT_ARMED);
        assert!(slot.arm(700), "after retiring, the next scheduler queues again");
    }

    #[test]
    fn late_calls_count_only_for_the_current_occupant() {
        let slot = Slot::new();
        slot.reset_late_calls(10);
        slot.note_late_call(11);
        slot.note_late_call(13);
        assert_eq!(slot.late_calls(), 2);
        // A receipt of an earlier occupant (issued before generation 10) does not count.
        slot.note_late_call(9);
        slot.note_late_call(10);
        assert_eq!(slot.late_calls(), 2);
        // A new occupant starts from zero and ignores the old one's receipts.
        slot.reset_late_calls(20);
        slot.note_late_call(13);
        assert_eq!(slot.late_calls(), 0);
        // Generations compare modulo 2^24.
        slot.reset_late_calls((1 << 24) - 1);
        slot.note_late_call(1 << 24);
        slot.note_late_call((1 << 24) - 2);
        assert_eq!(slot.late_calls(), 1);
        slot.reset_late_calls(20);
        for _ in 0..300 {
            slot.note_late_call(21);
        }
        assert_eq!(slot.late_calls(), LateCalls::MAX, "saturates");
    }
}
