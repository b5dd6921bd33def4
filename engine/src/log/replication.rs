//! Replication's seam in the engine: a leader engine whose durable effects
//! go to a [`ReplicationSink`] (a consensus log such as a Raft group's)
//! instead of a data dir, and [`ReplicaState`], the state any replica builds
//! by applying what the sink carried, from which a new leader engine starts
//! (docs/replication.md).
//!
//! Invariants:
//!
//! * What the sink is handed is the log's own record format (`record.rs`),
//!   in an order that respects each message's history, and a call that
//!   returned `Ok` had its records accepted by the sink first: a replicated
//!   engine runs under `SyncPolicy::Always`, and extensions and releases
//!   are records too (with the lease's end as Unix time), so a new leader
//!   keeps every lease that was granted in force until its deadline.
//! * `ReplicaState` is a pure function of the frames applied to it, as the
//!   log's replica is (`replica.rs`): replicas that applied the same frames
//!   hold the same state, and `snapshot` writes frames that rebuild it.
//! * A leader engine started from a state serves only once every queue and
//!   message of it is in place, as recovery from a data dir does; receipts of
//!   the engine before it are refused (`InvalidReceipt(WrongEngine)`), and
//!   message ids continue above every id the state has seen.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::{Engine, EngineBuilder};
use crate::error::Error;
use crate::journal::Journal;
use crate::log::record::{Frame, encode_entry, frame_at};
use crate::log::replica::Replica;
use crate::log::replicator::Replicator;
use crate::log::{RecoveryReport, restore};
use crate::shard::ID_BLOCK;
use crate::sync::lock;

/// Where a replicated engine's records go: typically a proposal to a
/// consensus group, returning once a quorum has it.
pub trait ReplicationSink: Send + Sync + 'static {
    /// Makes `frames` (one or more encoded records) durable where the
    /// replicas will apply them, ordered after every earlier call's frames;
    /// returns once they are. One call at a time (the engine's replicator
    /// thread makes them). An error fails every engine call whose records
    /// were in `frames` with `Error::Storage` (or `LeaseError::Storage`), and
    /// the engine then refuses writes for good: a leader that lost its quorum
    /// serves nothing more.
    ///
    /// # Errors
    ///
    /// Why the frames could not be made durable, in words.
    fn replicate(&self, frames: &[u8]) -> Result<(), String>;

    /// Starts making `frames` durable, ordered after every group started
    /// before, and returns without waiting; the replicator waits on the
    /// returned handle later, in start order, while it starts the next
    /// groups (at most `MAX_GROUPS_IN_FLIGHT` at once). A sink whose groups
    /// keep their order once handed on (a Raft leader's proposals) gains a
    /// pipeline; the default replicates at once, one group at a time.
    fn start(&self, frames: &[u8]) -> Box<dyn PendingReplication> {
        Box::new(Finished(self.replicate(frames)))
    }
}

/// A group a sink has started (`ReplicationSink::start`).
pub trait PendingReplication: Send {
    /// Waits until the group is durable where the replicas apply it, or
    /// says why it is not.
    ///
    /// # Errors
    ///
    /// As `ReplicationSink::replicate`.
    fn wait(self: Box<Self>) -> Result<(), String>;
}

/// A group whose outcome is already known.
struct Finished(Result<(), String>);

impl PendingReplication for Finished {
    fn wait(self: Box<Self>) -> Result<(), String> {
        self.0
    }
}

/// What a replica holds: the queues and messages that the frames applied to
/// it describe, as a data dir's log would (docs/replication.md).
///
/// Two states are equal when they hold the same queues and messages with
/// the same arrival numbering, whatever number of records brought each
/// there. A state rebuilt from a snapshot numbers arrivals afresh (their
/// order is kept): compare `snapshot()`s to compare it with its source.
#[derive(Debug, Default, Clone)]
pub struct ReplicaState {
    replica: Replica,
    applied: u64,
}

impl PartialEq for ReplicaState {
    fn eq(&self, other: &Self) -> bool {
        self.replica == other.replica
    }
}

impl ReplicaState {
    /// An empty state (no queues).
    #[must_use]
    pub fn new() -> Self {
        ReplicaState::default()
    }

    /// Applies `frames` as one `ReplicationSink::replicate` call (or a
    /// `snapshot`) carried them; returns how many records it held. Frames
    /// that do not decode change nothing.
    ///
    /// # Errors
    ///
    /// `Error::CorruptLog` naming the byte offset of the first bad frame
    /// (the file is `<replicated>`).
    pub fn apply(&mut self, frames: &[u8]) -> Result<u64, Error> {
        let mut entries = Vec::new();
        let mut at = 0;
        while at < frames.len() {
            match frame_at(&frames[at..]) {
                Frame::Valid { entry, len } => {
                    entries.push(entry);
                    at += len;
                }
                Frame::Bad(reason) => {
                    return Err(Error::CorruptLog {
                        file: "<replicated>".into(),
                        offset: at as u64,
                        reason: reason.to_string(),
                    });
                }
            }
        }
        let count = entries.len() as u64;
        for entry in entries {
            self.replica.apply(entry);
        }
        self.applied += count;
        Ok(count)
    }

    /// Frames that rebuild this state in an empty one (or replace any state
    /// they are applied to): for a consensus log's snapshots.
    #[must_use]
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for entry in self.replica.snapshot() {
            encode_entry(&entry, &mut out);
        }
        out
    }

    /// Names of the live queues, sorted.
    #[must_use]
    pub fn queues(&self) -> Vec<String> {
        let mut names: Vec<String> = self.replica.queues.values().map(|q| q.name.clone()).collect();
        names.sort();
        names
    }

    /// Live messages on all queues.
    #[must_use]
    pub fn messages(&self) -> usize {
        self.replica.messages.len()
    }

    /// Records applied so far (snapshots count their records).
    #[must_use]
    pub fn records_applied(&self) -> u64 {
        self.applied
    }
}

/// Builds a replicated engine: `Engine::builder().replicated(sink)`.
#[must_use = "a ReplicatedBuilder does nothing until `start` is called"]
pub struct ReplicatedBuilder {
    engine: EngineBuilder,
    sink: Arc<dyn ReplicationSink>,
    state: ReplicaState,
}

impl std::fmt::Debug for ReplicatedBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicatedBuilder").field("engine", &self.engine).field("state", &self.state).finish()
    }
}

impl ReplicatedBuilder {
    pub(crate) fn new(engine: EngineBuilder, sink: Arc<dyn ReplicationSink>) -> Self {
        ReplicatedBuilder { engine, sink, state: ReplicaState::default() }
    }

    /// Starts from `state` (what this replica applied) instead of empty: the
    /// engine of a new leader.
    pub fn state(mut self, state: ReplicaState) -> Self {
        self.state = state;
        self
    }

    /// Restores the state's queues and messages and starts serving. A
    /// message whose lease (or release delay) had not ended is hidden until
    /// it does; one whose last attempt at its queue's `max_receives` had
    /// ended moves to its dead-letter queue, as recovery moves it
    /// (`Engine::recovery` reports what was restored). Those moves, and the
    /// messages dropped past their retention, are replicated before the
    /// engine is returned.
    ///
    /// # Errors
    ///
    /// `Error::Storage` if the replicator thread cannot start, if the state
    /// holds more messages than a queue's `max_messages`, or if the records
    /// of the moves at start could not be replicated.
    pub fn start(self) -> Result<Engine, Error> {
        let started = Instant::now();
        let replica = self.state.replica;
        let id_start = replica.ids_below.div_ceil(ID_BLOCK).saturating_mul(ID_BLOCK);
        let journal = Arc::new(Journal::new_replicated(id_start));
        let engine = self.engine.build_with(Some(journal.clone()));
        engine.inner.shared.id_blocks.store(id_start, std::sync::atomic::Ordering::Relaxed);
        let mut report = RecoveryReport { records: self.state.applied, ..RecoveryReport::default() };
        let restored = restore(&engine, &replica, &mut report)?;
        let replicator = Replicator::new(journal.clone(), self.sink);
        let handle = std::thread::Builder::new()
            .name("leaseq-replicator".into())
            .spawn(move || replicator.run())
            .map_err(|e| Error::io("starting the replicator thread", &e))?;
        journal.set_writer(handle.thread().clone());
        let closing = journal.clone();
        *lock(&engine.inner.closer) = Some(Box::new(move || {
            closing.close();
            let _ = handle.join();
        }));
        if restored.moved > 0 || report.retention_dropped > 0 {
            engine.flush()?;
        }
        report.elapsed = started.elapsed();
        let _ = engine.inner.recovery.set(report);
        Ok(engine)
    }
}
