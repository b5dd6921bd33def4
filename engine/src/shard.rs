//! One shard of a queue: its slots, its ready queue, its timers, its counters.
//!
//! Invariant: a message lives in exactly one shard for its whole stay on a
//! queue (its slot's), so every structure here is touched mostly by the
//! threads whose home shard this is; other threads come only to steal ready
//! messages or to act on a receipt. The hot fields sit on separate cache
//! lines so two shards never share one.

use crossbeam_utils::CachePadded;

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
    #[inline]
    pub(crate) fn next_id(&self, blocks: &IdCount) -> MessageId {
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
            match self.id_cursor.compare_exchange(current, start + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return MessageId(start),
                Err(actual) => current = actual,
            }
        }
    }

    #[inline]
    pub(crate) fn push_ready(&self, slot: u32, generation: u64) {
        self.ready.push(ReadyEntry { slot, generation: generation as u32 });
    }
}

/// The calling thread's home shard among `shards`.
#[inline]
pub(crate) fn home_shard(shards: usize) -> usize {
    crate::sync::thread_number() % shards
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
                    (0..per_thread).map(|i| shards[(t + i) % 3].next_id(&blocks).as_u64()).collect::<Vec<_>>()
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
