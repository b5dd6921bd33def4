//! `RaftSink`: the engine's `ReplicationSink` on a Raft group, proposing
//! each group of records as one log entry and returning once it committed.
//!
//! Invariants:
//!
//! * `replicate` returns `Ok` only once the entry is committed (on a quorum)
//!   and was applied in the term the engine was started in (not fenced).
//! * Every other outcome is an `Err` saying why: this node no longer leads
//!   (`ForwardToLeader`), the write did not commit within the timeout (no
//!   quorum reachable), the node stopped, or the entry was fenced. The
//!   engine then refuses writes for good. A write that timed out may still
//!   commit later if the quorum comes back within the same term: the engine
//!   reported it failed, so a caller may see a failed send delivered (at
//!   least once) or a failed ack take effect.
//! * `replicate` blocks on the runtime handle, so it must be called from a
//!   thread outside that runtime: the engine's replicator thread is one.
//! * Once its [`SinkGate`] is retired, a sink proposes nothing more, and
//!   `retire` returns only after any proposal in progress has been handed
//!   to Raft (or given up): after it, every entry this sink will ever
//!   propose is already in Raft's queue, ahead of anything proposed later.
//! * `start` proposes a group and returns without waiting (the engine's
//!   replicator pipelines up to `leaseq::MAX_GROUPS_IN_FLIGHT` groups);
//!   Raft appends proposals in the order it gets them, so the groups keep
//!   the replicator's order, and each one's `wait` reports as `replicate`
//!   does.

use std::sync::Arc;
use std::time::Duration;

use leaseq::{PendingReplication, ReplicationSink};
use openraft::BasicNode;
use openraft::error::ClientWriteError;
use openraft::raft::ClientWriteResponse;
use tokio::runtime::Handle;

use crate::types::{NodeId, Raft, Request, Response, TypeConfig};

/// What `Raft::client_write_ff` hands back (openraft's default responder on
/// the tokio runtime): the entry's outcome once applied.
type Answer =
    tokio::sync::oneshot::Receiver<Result<ClientWriteResponse<TypeConfig>, ClientWriteError<NodeId, BasicNode>>>;

/// How long `replicate` waits for a commit unless told otherwise.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Closes a sink for good: see the module docs.
#[derive(Debug, Clone, Default)]
pub struct SinkGate {
    /// `true` once retired; held across each proposal, so retiring waits
    /// for one in progress.
    retired: Arc<tokio::sync::Mutex<bool>>,
}

impl SinkGate {
    /// Stops the sink proposing; returns once no proposal is in progress.
    pub async fn retire(&self) {
        *self.retired.lock().await = true;
    }

    /// Whether `other` is this gate (or a clone of it).
    #[must_use]
    pub fn same(&self, other: &SinkGate) -> bool {
        Arc::ptr_eq(&self.retired, &other.retired)
    }
}

/// A replicated engine's sink on a Raft node (see the module docs).
#[derive(Clone)]
pub struct RaftSink {
    raft: Raft,
    runtime: Handle,
    term: u64,
    timeout: Duration,
    gate: SinkGate,
}

impl std::fmt::Debug for RaftSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftSink").field("term", &self.term).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl RaftSink {
    /// A sink proposing through `raft` (driven by `runtime`) for an engine
    /// started while this node led `term`.
    #[must_use]
    pub fn new(raft: Raft, runtime: Handle, term: u64, timeout: Duration) -> Self {
        RaftSink { raft, runtime, term, timeout, gate: SinkGate::default() }
    }

    /// The gate that retires this sink (and its clones).
    #[must_use]
    pub fn gate(&self) -> SinkGate {
        self.gate.clone()
    }
}

impl RaftSink {
    /// Hands `request` to Raft (fire and forget) unless the gate is retired;
    /// the receiver answers once the entry is applied.
    fn propose(&self, request: Request) -> Result<Answer, String> {
        // The gate is held until the proposal is in Raft's queue, so a
        // retire never overtakes a proposal on its way into the log.
        self.runtime.block_on(async {
            let retired = self.gate.retired.lock().await;
            if *retired {
                return Err("this engine was retired: a newer engine serves this node's term".to_string());
            }
            self.raft.client_write_ff(request).await.map_err(|e| format!("raft: {e}"))
        })
    }
}

/// An entry proposed by `RaftSink::start`, waited for by `wait`.
struct Proposed {
    answer: Answer,
    runtime: Handle,
    timeout: Duration,
    term: u64,
}

impl PendingReplication for Proposed {
    fn wait(self: Box<Self>) -> Result<(), String> {
        let Proposed { answer, runtime, timeout, term } = *self;
        // The timer is made inside the runtime (made outside, it panics).
        let answered = runtime.block_on(async { tokio::time::timeout(timeout, answer).await });
        match answered {
            Err(_) => Err(format!("the entry did not commit within {timeout:?} (no quorum reachable?)")),
            Ok(Err(_)) => Err("the Raft node stopped before the entry was applied".into()),
            Ok(Ok(Err(ClientWriteError::ForwardToLeader(forward)))) => {
                Err(format!("this node no longer leads (leader: {:?})", forward.leader_id))
            }
            Ok(Ok(Err(e))) => Err(format!("raft: {e}")),
            Ok(Ok(Ok(written))) => match written.data {
                Response::Fenced => Err(format!(
                    "fenced: the entry was appended in term {}, after the engine's term {term} ended",
                    written.log_id.leader_id.term
                )),
                Response::Applied(_) | Response::Nothing => Ok(()),
            },
        }
    }
}

impl ReplicationSink for RaftSink {
    fn replicate(&self, frames: &[u8]) -> Result<(), String> {
        self.start(frames).wait()
    }

    /// Proposes the group and returns at once: Raft appends proposals in
    /// the order they arrive, so groups keep the replicator's order.
    fn start(&self, frames: &[u8]) -> Box<dyn PendingReplication> {
        let request = Request { term: self.term, frames: frames.to_vec() };
        match self.propose(request) {
            Ok(answer) => {
                Box::new(Proposed { answer, runtime: self.runtime.clone(), timeout: self.timeout, term: self.term })
            }
            Err(why) => Box::new(NotProposed(why)),
        }
    }
}

/// A group that never reached Raft.
struct NotProposed(String);

impl PendingReplication for NotProposed {
    fn wait(self: Box<Self>) -> Result<(), String> {
        Err(self.0)
    }
}
