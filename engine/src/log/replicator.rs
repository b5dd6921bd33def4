//! The replicator: one thread per replicated engine that drains the journal
//! and hands groups of encoded records to the `ReplicationSink`, in the
//! order they were popped (which respects each message's history, see
//! `journal.rs`).
//!
//! Invariants:
//!
//! * `durable` is raised over a record only after the sink accepted the
//!   group holding it, or after that group failed (which its waiter learns
//!   from `Journal::mark_failed` before the raise).
//! * After one failure nothing more is handed to the sink and the journal
//!   refuses new sends: a group may be on some replicas and not others, so a
//!   later group could not be ordered after it. A leader that lost its
//!   quorum serves nothing more; the replication layer starts a new engine
//!   from its replica state once it leads again.

use std::sync::Arc;
use std::time::Duration;

use crate::journal::{Journal, StorageFailure};
use crate::log::record::encode_op;
use crate::log::replication::ReplicationSink;
use crate::log::watermark::{Watermark, ranges};
use crate::sync::Ordering;

/// Bytes one group gathers at most before it goes to the sink.
const GROUP_BYTES: usize = 1 << 20;
/// How long the replicator sleeps with nothing to do (pushes wake it).
const IDLE_SLEEP: Duration = Duration::from_millis(100);

pub(crate) struct Replicator {
    journal: Arc<Journal>,
    sink: Arc<dyn ReplicationSink>,
    buf: Vec<u8>,
    seqs: Vec<u64>,
    handled: Watermark,
    broken: Option<StorageFailure>,
}

impl Replicator {
    pub(crate) fn new(journal: Arc<Journal>, sink: Arc<dyn ReplicationSink>) -> Self {
        let handled = Watermark::new(journal.durable_below());
        Replicator { journal, sink, buf: Vec::new(), seqs: Vec::new(), handled, broken: None }
    }

    /// Runs until the journal closes and every record has been handled.
    pub(crate) fn run(mut self) {
        loop {
            if self.gather() > 0 {
                self.replicate_group();
                continue;
            }
            if self.journal.closing.load(Ordering::Acquire) && !self.journal.has_records() {
                self.journal.mark_durable(self.handled.below());
                return;
            }
            if self.journal.sync_requested() {
                // Everything handled is durable already; a flush that still
                // waits waits for a record whose pusher has not pushed it yet.
                self.journal.mark_durable(self.handled.below());
                std::thread::yield_now();
                continue;
            }
            self.journal.writer_idle_wait(IDLE_SLEEP);
        }
    }

    /// Pops records into the group buffer; returns how many.
    fn gather(&mut self) -> usize {
        self.buf.clear();
        self.seqs.clear();
        while self.buf.len() < GROUP_BYTES {
            let Some((seq, record)) = self.journal.pop() else { break };
            encode_op(&record, &mut self.buf);
            self.seqs.push(seq);
        }
        self.seqs.len()
    }

    /// Hands the group to the sink (or fails it), then raises the watermarks.
    fn replicate_group(&mut self) {
        let result = match &self.broken {
            Some(why) => Err(why.clone()),
            // A panicking sink is a failed sink: otherwise this thread would
            // die and every waiting call would wait for ever.
            None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.sink.replicate(&self.buf)))
                .unwrap_or_else(|_| Err("the replication sink panicked".into()))
                .map_err(|why| StorageFailure(format!("replication: {why}").into())),
        };
        let counters = &self.journal.counters;
        match result {
            Ok(()) => {
                counters.records.fetch_add(self.seqs.len() as u64, Ordering::Relaxed);
                counters.bytes.fetch_add(self.buf.len() as u64, Ordering::Relaxed);
                counters.syncs.fetch_add(1, Ordering::Relaxed);
            }
            Err(why) => {
                counters.failed_records.fetch_add(self.seqs.len() as u64, Ordering::Relaxed);
                for (start, end) in ranges(self.seqs.clone()) {
                    self.journal.mark_failed(start, end, why.clone());
                }
                self.journal.set_refusing(Some(why.clone()));
                self.broken = Some(why);
            }
        }
        for &seq in &self.seqs {
            self.handled.handled(seq);
        }
        self.journal.mark_written(self.handled.below());
        self.journal.mark_durable(self.handled.below());
    }
}
