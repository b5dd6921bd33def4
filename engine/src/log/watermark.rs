//! The handled watermark of a journal consumer (the log writer, the
//! replicator): the sequence number below which every record was handled.
//!
//! Invariant: `below` rises only over sequence numbers that were all
//! handled. Records are popped in push order, but sequence numbers are taken
//! a moment before the push, so they arrive out of order; the ones above the
//! watermark wait in a min-heap until the gap below them closes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug)]
pub(crate) struct Watermark {
    /// Every sequence number below this was handled.
    below: u64,
    /// Sequence numbers at or above `below` already handled.
    early: BinaryHeap<Reverse<u64>>,
}

impl Watermark {
    /// A watermark starting at `below` (the journal's durable watermark).
    pub(crate) fn new(below: u64) -> Self {
        Watermark { below, early: BinaryHeap::new() }
    }

    /// Every sequence number below this was handled.
    pub(crate) fn below(&self) -> u64 {
        self.below
    }

    /// Notes that record `seq` was handled (written, replicated or failed).
    pub(crate) fn handled(&mut self, seq: u64) {
        if seq != self.below {
            self.early.push(Reverse(seq));
            return;
        }
        self.below += 1;
        while self.early.peek() == Some(&Reverse(self.below)) {
            self.early.pop();
            self.below += 1;
        }
    }
}

/// Sorted sequence numbers as half-open ranges (what failed, for
/// `Journal::mark_failed`).
pub(crate) fn ranges(mut seqs: Vec<u64>) -> Vec<(u64, u64)> {
    seqs.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for seq in seqs {
        match out.last_mut() {
            Some((_, end)) if *end == seq => *end += 1,
            _ => out.push((seq, seq + 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rises_only_over_a_closed_gap() {
        let mut w = Watermark::new(10);
        w.handled(12);
        w.handled(11);
        assert_eq!(w.below(), 10, "10 is still missing");
        w.handled(10);
        assert_eq!(w.below(), 13);
        w.handled(13);
        assert_eq!(w.below(), 14);
    }

    #[test]
    fn ranges_merge_neighbours() {
        assert_eq!(ranges(vec![5, 3, 4, 9, 7, 8]), vec![(3, 6), (7, 10)]);
        assert!(ranges(Vec::new()).is_empty());
    }
}
