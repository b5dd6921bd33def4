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
use crate::sync::{AtomicU64, Ordering};
use crate::timers::Timers;

/// Bits of a `MessageId` for the per-shard sequence.
const SEQUENCE_BITS: u32 = 36;
/// Bits of a `MessageId` for the shard.
const SHARD_BITS: u32 = 8;

#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) index: u16,
    pub(crate) slab: Slab,
    pub(crate) ready: CachePadded<ReadyQueue>,
    pub(crate) timers: CachePadded<Timers>,
    pub(crate) stats: CachePadded<ShardStats>,
    next_sequence: CachePadded<AtomicU64>,
}

impl Shard {
    pub(crate) fn new(index: u16, capacity: u32, tick_shift: u32, now: u64) -> Self {
        Shard {
            index,
            slab: Slab::new(capacity),
            ready: CachePadded::new(ReadyQueue::new()),
            timers: CachePadded::new(Timers::new(tick_shift, now)),
            stats: CachePadded::new(ShardStats::new()),
            next_sequence: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// A new engine-unique id: queue ordinal, shard, per-shard sequence.
    #[inline]
    pub(crate) fn next_id(&self, queue_ordinal: u32) -> MessageId {
        // Relaxed: uniqueness needs only the atomicity of the increment.
        let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed) & ((1 << SEQUENCE_BITS) - 1);
        MessageId(
            (u64::from(queue_ordinal) << (SEQUENCE_BITS + SHARD_BITS))
                | (u64::from(self.index) << SEQUENCE_BITS)
                | sequence,
        )
    }

    #[inline]
    pub(crate) fn push_ready(&self, slot: u32, generation: u64) {
        self.ready.push(ReadyEntry { slot, generation: generation as u32 });
    }
}

/// Largest queue ordinal a `MessageId` can carry.
pub(crate) const MAX_QUEUE_ORDINAL: u32 = (1 << (64 - SEQUENCE_BITS - SHARD_BITS)) - 1;

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
