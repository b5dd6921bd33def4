//! The replicator: two threads per replicated engine. The starter drains
//! the journal and starts groups of encoded records on the
//! `ReplicationSink`, in the order they were popped (which respects each
//! message's history, see `journal.rs`), without waiting for one to finish
//! before it starts the next; the completer waits for the started groups in
//! that same order and raises the journal's watermarks. At most
//! `MAX_GROUPS_IN_FLIGHT` groups are started and not yet completed (the
//! starter blocks on the bounded hand-off beyond that).
//!
//! Invariants:
//!
//! * `durable` is raised over a record only after the sink accepted the
//!   group holding it and every group started before it, or after that group
//!   failed (which its waiter learns from `Journal::mark_failed` before the
//!   raise).
//! * After one failure no group is reported accepted any more: groups
//!   already in flight are failed whatever their outcome, nothing more is
//!   started, and the journal refuses new sends. A group may be on some
//!   replicas and not others, so a later group could not be ordered after
//!   it. A leader that lost its quorum serves nothing more; the replication
//!   layer starts a new engine from its replica state once it leads again.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Duration;

use crate::journal::{Journal, StorageFailure};
use crate::log::record::encode_op;
use crate::log::replication::{PendingReplication, ReplicationSink};
use crate::log::watermark::{Watermark, ranges};
use crate::sync::Ordering;

/// Bytes one group gathers at most before it is started.
const GROUP_BYTES: usize = 1 << 20;
/// Groups started on the sink and not yet completed, at most.
pub const MAX_GROUPS_IN_FLIGHT: usize = 8;
/// How long the starter sleeps with nothing to do (pushes wake it).
const IDLE_SLEEP: Duration = Duration::from_millis(100);
/// How long it sleeps while a flush waits for groups in flight.
const FLUSH_SLEEP: Duration = Duration::from_micros(200);

/// Where the starter hands a started group.
enum Completion<'a> {
    /// To the completer thread.
    Thread(&'a SyncSender<InFlight>),
    /// Completed on the starter's own thread (no second thread could be
    /// started): one group at a time, as a plain sink is.
    Inline(&'a mut Completer),
}

/// The first failure, shared by both threads.
type Broken = Arc<crate::sync::Mutex<Option<StorageFailure>>>;

/// A group started and not yet completed.
struct InFlight {
    pending: Box<dyn PendingReplication>,
    seqs: Vec<u64>,
    bytes: usize,
}

/// A group that failed before the sink saw it.
struct Refused(StorageFailure);

impl PendingReplication for Refused {
    fn wait(self: Box<Self>) -> Result<(), String> {
        Err(self.0.0.to_string())
    }
}

pub(crate) struct Replicator {
    journal: Arc<Journal>,
    sink: Arc<dyn ReplicationSink>,
    buf: Vec<u8>,
    seqs: Vec<u64>,
    broken: Broken,
}

impl Replicator {
    pub(crate) fn new(journal: Arc<Journal>, sink: Arc<dyn ReplicationSink>) -> Self {
        Replicator { journal, sink, buf: Vec::new(), seqs: Vec::new(), broken: Broken::default() }
    }

    /// Runs until the journal closes and every record has been handled.
    pub(crate) fn run(mut self) {
        let (hand_off, started) = sync_channel::<InFlight>(MAX_GROUPS_IN_FLIGHT - 1);
        let completer = self.completer();
        let spawned = std::thread::Builder::new().name("leaseq-replicated".into()).spawn(move || {
            completer.run(&started);
        });
        match spawned {
            Ok(handle) => {
                self.start_groups(Completion::Thread(&hand_off));
                drop(hand_off);
                let _ = handle.join();
            }
            Err(_) => {
                let mut inline = self.completer();
                self.start_groups(Completion::Inline(&mut inline));
                inline.journal.mark_durable(inline.handled.below());
            }
        }
    }

    fn completer(&self) -> Completer {
        Completer {
            journal: self.journal.clone(),
            handled: Watermark::new(self.journal.durable_below()),
            broken: self.broken.clone(),
        }
    }

    /// The starter's loop.
    fn start_groups(&mut self, mut completion: Completion<'_>) {
        loop {
            if self.gather() > 0 {
                let in_flight = InFlight {
                    pending: self.start_group(),
                    seqs: std::mem::take(&mut self.seqs),
                    bytes: self.buf.len(),
                };
                match &mut completion {
                    // Blocks while the hand-off is full.
                    Completion::Thread(hand_off) => {
                        if hand_off.send(in_flight).is_err() {
                            return;
                        }
                    }
                    Completion::Inline(completer) => completer.complete(in_flight),
                }
                continue;
            }
            if self.journal.closing.load(Ordering::Acquire) && !self.journal.has_records() {
                return;
            }
            if self.journal.sync_requested() {
                // The completer raises `durable` as groups complete; a flush
                // that still waits waits for a group in flight or for a
                // record whose pusher has not pushed it yet (which wakes us).
                self.journal.writer_idle_wait(FLUSH_SLEEP);
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

    /// Starts the gathered group on the sink, or fails it after a failure.
    fn start_group(&self) -> Box<dyn PendingReplication> {
        if let Some(why) = crate::sync::lock(&self.broken).clone() {
            return Box::new(Refused(why));
        }
        // A panicking sink is a failed sink: otherwise this thread would die
        // and every waiting call would wait for ever.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.sink.start(&self.buf)))
            .unwrap_or_else(|_| Box::new(Refused(StorageFailure("the replication sink panicked".to_string().into()))))
    }
}

/// The completer: waits for started groups in start order.
struct Completer {
    journal: Arc<Journal>,
    handled: Watermark,
    broken: Broken,
}

impl Completer {
    fn run(mut self, started: &Receiver<InFlight>) {
        while let Ok(in_flight) = started.recv() {
            self.complete(in_flight);
        }
        self.journal.mark_durable(self.handled.below());
    }

    /// Waits for one group (or fails it), then raises the watermarks.
    fn complete(&mut self, in_flight: InFlight) {
        let InFlight { pending, seqs, bytes } = in_flight;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pending.wait()))
            .unwrap_or_else(|_| Err("the replication sink panicked".into()));
        let mut broken = crate::sync::lock(&self.broken);
        let result = match (&*broken, outcome) {
            // After a failure nothing is reported accepted (module docs).
            (Some(why), _) => Err(why.clone()),
            (None, Ok(())) => Ok(()),
            (None, Err(why)) => Err(StorageFailure(format!("replication: {why}").into())),
        };
        let counters = &self.journal.counters;
        match result {
            Ok(()) => {
                counters.records.fetch_add(seqs.len() as u64, Ordering::Relaxed);
                counters.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                counters.syncs.fetch_add(1, Ordering::Relaxed);
            }
            Err(why) => {
                counters.failed_records.fetch_add(seqs.len() as u64, Ordering::Relaxed);
                for (start, end) in ranges(seqs.clone()) {
                    self.journal.mark_failed(start, end, why.clone());
                }
                self.journal.set_refusing(Some(why.clone()));
                *broken = Some(why);
            }
        }
        drop(broken);
        for &seq in &seqs {
            self.handled.handled(seq);
        }
        self.journal.mark_written(self.handled.below());
        self.journal.mark_durable(self.handled.below());
    }
}
