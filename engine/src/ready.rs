//! The per-shard queue of ready messages.
//!
//! Invariant: every `Ready(g)` slot has exactly one entry `(slot, g)` here,
//! pushed by the transition that made it ready. Entries whose slot has since
//! moved on (late ack, purge) stay behind as stale entries; the receiver that
//! pops one sees the generation mismatch and drops it.
//!
//! Two lock-free queues make one FIFO: a bounded ring (`ArrayQueue`: one
//! compare-exchange per push and per pop) takes entries while nothing waits
//! in the unbounded overflow (`SegQueue`: two read-modify-writes per push,
//! two and a fence per pop of a short queue), which takes them once the ring
//! is full and until it has been drained. Pops take the ring first. An entry
//! pushed after another (the first push happens before the second) is popped
//! after it: if the first went to the overflow, the second sees the overflow
//! non-empty and follows it there, unless the first was popped already; if
//! the first went to the ring, a pop that takes the second from the overflow
//! found the ring empty, so the first was gone. The usual queue of a few
//! entries never leaves the ring.
//!
//! This is the loom seam: crossbeam's queues are not built on loom's atomics,
//! so under `--cfg loom` a loom `Mutex<VecDeque>` with the same FIFO contract
//! stands in. The lease transitions around it are the engine's own code in
//! both builds.

/// Ring entries per shard (16 bytes each): a burst deeper than this spills
/// into the overflow.
#[cfg(not(loom))]
const RING_ENTRIES: usize = 1024;

/// A ready-queue entry: slot index and the low 32 bits of its `Ready`
/// generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadyEntry {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

impl ReadyEntry {
    fn pack(self) -> u64 {
        (u64::from(self.slot) << 32) | u64::from(self.generation)
    }

    fn unpack(raw: u64) -> Self {
        ReadyEntry { slot: (raw >> 32) as u32, generation: raw as u32 }
    }
}

/// FIFO of ready entries.
#[derive(Debug)]
pub(crate) struct ReadyQueue {
    #[cfg(not(loom))]
    ring: crossbeam_queue::ArrayQueue<u64>,
    #[cfg(not(loom))]
    overflow: crossbeam_queue::SegQueue<u64>,
    #[cfg(loom)]
    entries: crate::sync::Mutex<std::collections::VecDeque<u64>>,
}

impl ReadyQueue {
    /// A queue for a shard of `capacity` slots (the ring is no larger than
    /// the shard can fill).
    pub(crate) fn new(capacity: u32) -> Self {
        #[cfg(not(loom))]
        return ReadyQueue {
            ring: crossbeam_queue::ArrayQueue::new((capacity as usize).clamp(1, RING_ENTRIES)),
            overflow: crossbeam_queue::SegQueue::new(),
        };
        #[cfg(loom)]
        {
            let _ = capacity;
            ReadyQueue { entries: Default::default() }
        }
    }

    #[inline]
    pub(crate) fn push(&self, entry: ReadyEntry) {
        #[cfg(not(loom))]
        {
            let raw = entry.pack();
            // `is_empty` is two loads of lines nobody writes while the
            // overflow is empty. An entry behind one in the overflow must go
            // there too (module docs).
            if self.overflow.is_empty() && self.ring.push(raw).is_ok() {
                return;
            }
            self.overflow.push(raw);
        }
        #[cfg(loom)]
        crate::sync::lock(&self.entries).push_back(entry.pack());
    }

    #[inline]
    pub(crate) fn pop(&self) -> Option<ReadyEntry> {
        #[cfg(not(loom))]
        let raw = self.ring.pop().or_else(|| self.overflow.pop());
        #[cfg(loom)]
        let raw = crate::sync::lock(&self.entries).pop_front();
        raw.map(ReadyEntry::unpack)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn entry(slot: u32) -> ReadyEntry {
        ReadyEntry { slot, generation: slot ^ 0x5555 }
    }

    /// A burst several rings deep comes out in push order, across the spill
    /// into the overflow and the return to the ring once it has drained.
    #[test]
    fn order_survives_spilling_into_the_overflow_and_back() {
        let queue = ReadyQueue::new(u32::MAX);
        let mut next_in = 0;
        let mut next_out = 0;
        // Fill past the ring, take half out, push more (they must queue behind
        // the overflow), then drain everything.
        for round in [3 * RING_ENTRIES, RING_ENTRIES / 2, 2 * RING_ENTRIES] {
            for _ in 0..round {
                queue.push(entry(next_in));
                next_in += 1;
            }
            for _ in 0..round / 2 {
                assert_eq!(queue.pop(), Some(entry(next_out)));
                next_out += 1;
            }
        }
        while let Some(popped) = queue.pop() {
            assert_eq!(popped, entry(next_out));
            next_out += 1;
        }
        assert_eq!(next_out, next_in, "every entry came out once");
        assert!(queue.overflow.is_empty());
        queue.push(entry(7));
        assert_eq!(queue.ring.len(), 1, "with the overflow drained, pushes use the ring again");
    }

    /// Two producers and a consumer at once, with a ring of four so pushes
    /// spill over and come back all the time: every entry comes out exactly
    /// once, and each producer's entries come out in the order it pushed them.
    #[test]
    fn concurrent_pushes_and_pops_keep_each_producers_order() {
        const PER_PRODUCER: u32 = 200_000;
        let queue = ReadyQueue::new(4);
        let seen = std::thread::scope(|scope| {
            for producer in 0..2u32 {
                let queue = &queue;
                scope.spawn(move || {
                    for n in 0..PER_PRODUCER {
                        queue.push(ReadyEntry { slot: producer, generation: n });
                    }
                });
            }
            let consumer = scope.spawn(|| {
                let mut next = [0u32; 2];
                while next.iter().any(|&n| n < PER_PRODUCER) {
                    if let Some(popped) = queue.pop() {
                        let expected = &mut next[popped.slot as usize];
                        assert_eq!(popped.generation, *expected, "producer {} out of order", popped.slot);
                        *expected += 1;
                    }
                }
                next
            });
            consumer.join().unwrap()
        });
        assert_eq!(seen, [PER_PRODUCER; 2]);
        assert_eq!(queue.pop(), None, "nothing popped twice, nothing left over");
    }

    /// A shard smaller than the ring gets a ring of its own size.
    #[test]
    fn the_ring_is_no_larger_than_the_shard() {
        assert_eq!(ReadyQueue::new(3).ring.capacity(), 3);
        assert_eq!(ReadyQueue::new(0).ring.capacity(), 1);
        assert_eq!(ReadyQueue::new(u32::MAX).ring.capacity(), RING_ENTRIES);
    }
}
