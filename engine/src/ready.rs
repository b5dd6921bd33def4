//! The per-shard queue of ready messages.
//!
//! Invariant: every `Ready(g)` slot has exactly one entry `(slot, g)` here,
//! pushed by the transition that made it ready. Entries whose slot has since
//! moved on (late ack, purge) stay behind as stale entries; the receiver that
//! pops one sees the generation mismatch and drops it.
//!
//! This is the loom seam: `crossbeam_queue::SegQueue` (lock-free, FIFO) is not
//! built on loom's atomics, so under `--cfg loom` a loom `Mutex<VecDeque>` with
//! the same FIFO contract stands in. The lease transitions around it are the
//! engine's own code in both builds.

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
#[derive(Debug, Default)]
pub(crate) struct ReadyQueue {
    #[cfg(not(loom))]
    entries: crossbeam_queue::SegQueue<u64>,
    #[cfg(loom)]
    entries: crate::sync::Mutex<std::collections::VecDeque<u64>>,
}

impl ReadyQueue {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub(crate) fn push(&self, entry: ReadyEntry) {
        #[cfg(not(loom))]
        self.entries.push(entry.pack());
        #[cfg(loom)]
        crate::sync::lock(&self.entries).push_back(entry.pack());
    }

    #[inline]
    pub(crate) fn pop(&self) -> Option<ReadyEntry> {
        #[cfg(not(loom))]
        let raw = self.entries.pop();
        #[cfg(loom)]
        let raw = crate::sync::lock(&self.entries).pop_front();
        raw.map(ReadyEntry::unpack)
    }
}
