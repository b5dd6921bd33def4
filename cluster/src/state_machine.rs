//! The Raft state machine: a `leaseq::ReplicaState` fed every committed
//! entry's frames, in log order.
//!
//! Invariants:
//!
//! * The state is a pure function of the committed log (or of the snapshot
//!   it was installed from and the entries after it): every replica that
//!   applied up to the same log id holds the same queues and messages.
//! * A normal entry is applied only if it was appended in the term its
//!   request names (the term its engine was started in). An entry appended
//!   in another term came from an engine that outlived its leadership: its
//!   records may contradict what a later leader wrote, so every replica
//!   skips it alike and answers `Response::Fenced`.
//! * A leader only proposes frames its own engine encoded, so frames that do
//!   not decode mean a bug or corruption, not bad input: applying them is a
//!   `StorageError`, which stops this Raft node (openraft treats storage
//!   errors as fatal) rather than letting its state diverge. The state is
//!   left as it was before the bad entry (`ReplicaState::apply` changes
//!   nothing on error).
//! * A snapshot is `ReplicaState::snapshot()`'s frames; installing one is a
//!   fresh `ReplicaState` with those frames applied.
//! * A state machine opened on a dir (`open`) keeps its latest snapshot
//!   there: `build_snapshot` and `install_snapshot` have it on disk
//!   (`durable/snapshot_file.rs`) before they return, so openraft may purge
//!   the log behind it; `open` starts from it. The state itself is not
//!   written anywhere else: after a restart openraft re-applies the
//!   committed entries after the snapshot from the durable log. The file is
//!   written while the state's lock is held, so a snapshot being built and
//!   one being installed cannot overtake each other on disk.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use leaseq::ReplicaState;
use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};

use crate::durable::snapshot_file;
use crate::error::ClusterError;
use crate::types::{NodeId, Response, TypeConfig};

#[derive(Debug, Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

#[derive(Debug, Default)]
struct Inner {
    state: ReplicaState,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    snapshot: Option<StoredSnapshot>,
    snapshots_built: u64,
    /// Where snapshots are kept, if anywhere.
    dir: Option<PathBuf>,
}

impl Inner {
    /// Keeps `stored` as the latest snapshot: on disk first, if this state
    /// machine has a dir.
    fn keep(&mut self, stored: StoredSnapshot) -> std::io::Result<()> {
        if let Some(dir) = &self.dir {
            snapshot_file::write(dir, &stored.meta, &stored.data)?;
        }
        self.snapshot = Some(stored);
        Ok(())
    }
}

/// A node's state machine; clones share it, so one clone can be handed to
/// openraft and another kept to read the state (`replica_state`).
#[derive(Debug, Clone, Default)]
pub struct StateMachine {
    inner: Arc<Mutex<Inner>>,
}

impl StateMachine {
    /// An empty state machine (no queues).
    #[must_use]
    pub fn new() -> Self {
        StateMachine::default()
    }

    /// A state machine that keeps its snapshots in `dir` (created if
    /// missing), starting from the latest one there (or empty).
    ///
    /// # Errors
    ///
    /// `Corrupt` if the snapshot file is damaged or its frames do not
    /// decode; `Io` if it cannot be read.
    pub fn open(dir: &Path) -> Result<StateMachine, ClusterError> {
        std::fs::create_dir_all(dir).map_err(|e| ClusterError::io(format!("creating {}", dir.display()), e))?;
        let mut inner = Inner { dir: Some(dir.to_path_buf()), ..Inner::default() };
        if let Some((meta, data)) = snapshot_file::read(dir)? {
            inner.state.apply(&data).map_err(|e| ClusterError::Corrupt {
                path: dir.join(snapshot_file::FILE),
                offset: 0,
                reason: format!("the snapshot's frames do not decode: {e}"),
            })?;
            inner.last_applied = meta.last_log_id;
            inner.membership = meta.last_membership.clone();
            inner.snapshot = Some(StoredSnapshot { meta, data });
        }
        Ok(StateMachine { inner: Arc::new(Mutex::new(inner)) })
    }

    /// A copy of the replica state as of the last applied entry.
    #[must_use]
    pub fn replica_state(&self) -> ReplicaState {
        self.lock().state.clone()
    }

    /// The id of the last entry applied (or installed by snapshot).
    #[must_use]
    pub fn last_applied(&self) -> Option<LogId<NodeId>> {
        self.lock().last_applied
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding the lock; the state is only replaced
        // whole, so a poisoned lock still guards a consistent one.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn snapshot_of(stored: &StoredSnapshot) -> Snapshot<TypeConfig> {
    Snapshot { meta: stored.meta.clone(), snapshot: Box::new(Cursor::new(stored.data.clone())) }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let mut inner = self.lock();
        inner.snapshots_built += 1;
        let data = inner.state.snapshot();
        let snapshot_id = match inner.last_applied {
            Some(id) => format!("{}-{}-{}", id.leader_id.term, id.index, inner.snapshots_built),
            None => format!("none-{}", inner.snapshots_built),
        };
        let meta =
            SnapshotMeta { last_log_id: inner.last_applied, last_membership: inner.membership.clone(), snapshot_id };
        let stored = StoredSnapshot { meta, data };
        let snapshot = snapshot_of(&stored);
        let signature = Some(stored.meta.signature());
        inner.keep(stored).map_err(|e| StorageIOError::write_snapshot(signature, AnyError::new(&e)))?;
        Ok(snapshot)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>> {
        let inner = self.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut inner = self.lock();
        let mut responses = Vec::new();
        for entry in entries {
            let response = match entry.payload {
                EntryPayload::Blank => Response::Nothing,
                EntryPayload::Membership(membership) => {
                    inner.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Response::Nothing
                }
                EntryPayload::Normal(request) if request.term != entry.log_id.leader_id.term => Response::Fenced,
                EntryPayload::Normal(request) => match inner.state.apply(&request.frames) {
                    Ok(records) => Response::Applied(records),
                    Err(e) => return Err(StorageIOError::apply(entry.log_id, AnyError::new(&e)).into()),
                },
            };
            inner.last_applied = Some(entry.log_id);
            responses.push(response);
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let mut state = ReplicaState::new();
        if let Err(e) = state.apply(&data) {
            let signature = Some(meta.signature());
            return Err(StorageIOError::read_snapshot(signature, AnyError::new(&e)).into());
        }
        let mut inner = self.lock();
        let stored = StoredSnapshot { meta: meta.clone(), data };
        inner.keep(stored).map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e)))?;
        inner.state = state;
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(self.lock().snapshot.as_ref().map(snapshot_of))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId};

    use super::*;
    use crate::types::Request;

    fn entry(term: u64, index: u64, request_term: u64, frames: &[u8]) -> Entry<TypeConfig> {
        let payload = EntryPayload::Normal(Request { term: request_term, frames: frames.to_vec() });
        Entry { log_id: LogId::new(CommittedLeaderId::new(term, 1), index), payload }
    }

    #[tokio::test]
    async fn entries_of_another_term_are_fenced_and_bad_frames_are_a_storage_error() {
        let mut sm = StateMachine::new();
        let garbage = b"not a frame";
        // Appended in term 3 by an engine of term 2: skipped, frames unread.
        let fenced = sm.apply([entry(3, 1, 2, garbage)]).await.unwrap();
        assert_eq!(fenced, vec![Response::Fenced]);
        assert_eq!(sm.last_applied().map(|id| id.index), Some(1));
        // The same frames in their own term do not decode: an error, and
        // nothing changes.
        assert!(sm.apply([entry(3, 2, 3, garbage)]).await.is_err());
        assert_eq!(sm.last_applied().map(|id| id.index), Some(1));
        assert_eq!(sm.replica_state(), ReplicaState::new());
    }
}
