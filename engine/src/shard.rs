//! One shard of a queue: its slots, its ready queue, its timers, its counters.
//!
//! Invariant: a message lives in exactly one shard for its whole stay on a
//! queue (its slot's), so every structure here is touched mostly by the
//! threads whose home shard this is; other threads come only to steal ready
//! messages or to act on a receipt. The hot fields sit on separate cache
//! lines so two shards never share one.

use crossbeam_utils::CachePadded;

use crate::journal::Journal;
use crate::ready::{ReadyEntry, ReadyQueue};
use crate::receipt::MessageId;
use crate::slot::Slab;
use crate::stats::ShardStats;
use crate::sync::{IdCount, Ordering};
use crate::timers::Timers;

/// Message ids a shard takes from its engine at a time.
pub(crate) const ID_BLOCK: u64 = 1 << 16;

#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) index: u16,
    pub(crate) slab: Slab,
    pub(crate) ready: CachePadded<ReadyQueue>,
    pub(crate) timers: CachePadded<Timers>,
    pub(crate) stats: CachePadded<ShardStats>,
    /// The next id of this shard's current block of ids; a multiple of
    /// `ID_BLOCK` means the block is used up (or none was taken yet).
    id_cursor: CachePadded<IdCount>,
}

impl Shard {
    pub(crate) fn new(index: u16, capacity: u32, tick_shift: u32, now: u64) -> Self {
        Shard {
            index,
            slab: Slab::new(capacity),
            ready: CachePadded::new(ReadyQueue::new()),
            timers: CachePadded::new(Timers::new(tick_shift, now)),
            stats: CachePadded::new(ShardStats::new()),
            id_cursor: CachePadded::new(IdCount::new(0)),
        }
    }

    /// A new id, unique among every id the engine ever issued: shards take
    /// blocks of `ID_BLOCK` ids from the engine-wide `blocks` counter (one
    /// shared read-modify-write per 65,536 sends) and hand them out one
    /// compare-exchange at a time. 2^64 ids last 584 years at a billion sends
    /// a second; a block that lost the race to replace a used-up one is
    /// skipped, never reused.
    ///
    /// A durable engine's journal reserves ids in the log before a block
    /// is used (`Journal::reserve_ids`), so a restart never hands one out
    /// again; a failed reservation means the disk is failing, and the send's
    /// own record reports that.
    #[inline]
    pub(crate) fn next_id(&self, blocks: &IdCount, journal: Option<&Journal>) -> MessageId {
        // Relaxed throughout: uniqueness needs only the atomicity of each
        // read-modify-write, and no transition reads an id to decide anything.
        let mut current = self.id_cursor.load(Ordering::Relaxed);
        loop {
            if current % ID_BLOCK != 0 {
                match self.id_cursor.compare_exchange_weak(current, current + 1, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return MessageId(current),
                    Err(actual) => current = actual,
                }
                continue;
            }
            let start = blocks.fetch_add(ID_BLOCK, Ordering::Relaxed);
            if let Some(journal) = journal {
                let _ = journal.reserve_ids(start + ID_BLOCK);
            }
            match self.id_cursor.compare_exchange(current, start + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return MessageId(start),
                Err(actual) => current = actual,
            }
        }
    }

    /// When slot `index`'s timer alarm is set for (`Slot::alarm`), `None`
    /// for no alarm or no such slot: what the wheel files the slot's
    /// entries by (`Wheel::poll`, `Wheel::sweep`).
    #[inline]
    pub(crate) fn alarm(&self, index: u32) -> Option<u64> {
        self.slab.get(index).and_then(crate::slot::Slot::alarm)
    }

    #[inline]
    pub(crate) fn push_ready(&self, slot: u32, generation: u64) {
        self.ready.push(ReadyEntry { slot, generation: generation as u32 });
    }
}

/// The order in which a thread visits a queue's shards: its home shard
/// (its thread number modulo the shard count) first, then round the ring.
///
/// Every send and receive walks it, so it divides nothing: a hardware
/// division costs tens of cycles and the walk used to do two per call. The
/// home shard is a Lemire fastmod, `((magic * n) mod 2^64) * count / 2^64`
/// with `magic = floor((2^64 - 1) / count) + 1`, exact for any `n` and
/// `count` below 2^32 (Lemire, Kaser, Kurz, "Faster remainder by direct
/// computation", 2019); the ring steps wrap with a subtraction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShardRing {
    count: u32,
    magic: u64,
}

impl ShardRing {
    /// The ring of `count` shards (at least one, at most `u16::MAX + 1`).
    pub(crate) fn new(count: usize) -> Self {
        let count = u32::try_from(count.max(1)).expect("shard indices are u16");
        ShardRing { count, magic: (u64::MAX / u64::from(count)).wrapping_add(1) }
    }

    /// `n mod count`.
    #[inline]
    fn modulo(self, n: usize) -> usize {
        match u32::try_from(n) {
            Ok(n) => {
                let low = self.magic.wrapping_mul(u64::from(n));
                ((u128::from(low) * u128::from(self.count)) >> 64) as usize
            }
            // Four billion threads later: the plain division.
            Err(_) => n % self.count as usize,
        }
    }

    /// The calling thread's home shard.
    #[inline]
    pub(crate) fn home(self) -> usize {
        self.modulo(crate::sync::thread_number())
    }

    /// Every shard index once, the calling thread's home shard first.
    #[inline]
    pub(crate) fn walk(self) -> impl Iterator<Item = usize> {
        let (home, count) = (self.home(), self.count as usize);
        (0..count).map(move |k| {
            let index = home + k;
            if index >= count { index - count } else { index }
        })
    }
}

/// Split `total` capacity over `shards` so the parts sum exactly to `total`.
pub(crate) fn shard_capacity(total: usize, shards: usize, index: usize) -> u32 {
    let base = total / shards;
    let extra = usize::from(index < total % shards);
    (base + extra) as u32
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;

    /// The division-free remainder equals `%` for every shard count a queue
    /// can have, over small thread numbers, the edges of the u32 range and a
    /// spread of values between (the magic number's error is largest there).
    #[test]
    fn the_ring_remainder_is_exact() {
        let mut numbers: Vec<usize> = (0..4096).collect();
        numbers.extend((0..4096).map(|k| u32::MAX as usize - k));
        numbers.extend((0..4096u64).map(|k| (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize));
        numbers.push(u32::MAX as usize + 1);
        numbers.push(usize::MAX);
        for count in (1..=1024).chain([65_535, 65_536]) {
            let ring = ShardRing::new(count);
            for &n in &numbers {
                assert_eq!(ring.modulo(n), n % count, "{n} mod {count}");
            }
        }
    }

    /// The walk visits every shard exactly once, starting at home.
    #[test]
    fn the_walk_visits_every_shard_once_home_first() {
        for count in 1..=17 {
            let ring = ShardRing::new(count);
            let walk: Vec<usize> = ring.walk().collect();
            assert_eq!(walk[0], ring.home());
            assert_eq!(walk[0], crate::sync::thread_number() % count);
            let mut sorted = walk.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..count).collect::<Vec<_>>(), "walk {walk:?}");
            assert!(walk.windows(2).all(|w| w[1] == (w[0] + 1) % count), "walk {walk:?} steps by one");
        }
    }

    /// Ids stay unique across shards, threads and block boundaries, also past
    /// 2^36 (where the earlier per-shard 36-bit sequence wrapped around).
    #[test]
    fn ids_are_unique_across_shards_threads_and_blocks() {
        let blocks = Arc::new(IdCount::new((1 << 36) - ID_BLOCK));
        let shards: Arc<Vec<Shard>> = Arc::new((0..3).map(|i| Shard::new(i, 4, 20, 0)).collect());
        let per_thread = 3 * ID_BLOCK as usize;
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (blocks, shards) = (blocks.clone(), shards.clone());
                std::thread::spawn(move || {
                    (0..per_thread).map(|i| shards[(t + i) % 3].next_id(&blocks, None).as_u64()).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut seen = HashSet::new();
        for handle in threads {
            for id in handle.join().unwrap() {
                assert!(seen.insert(id), "id {id:#x} issued twice");
            }
        }
        assert_eq!(seen.len(), 4 * per_thread);
        assert!(seen.iter().any(|id| *id > 1 << 36), "ids went past 2^36 without wrapping");
    }
}
