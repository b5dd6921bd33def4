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
//!   propose is already in the node's log.

use std::sync::Arc;
use std::time::Duration;

use leaseq::ReplicationSink;
use openraft::BasicNode;
use tokio::runtime::Handle;

use crate::types::{Raft, Request, Response};

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

impl ReplicationSink for RaftSink {
    fn replicate(&self, frames: &[u8]) -> Result<(), String> {
        let request = Request { term: self.term, frames: frames.to_vec() };
        // The timer is made inside the runtime (made outside, it panics).
        // The gate is held until the write is answered or given up, so a
        // retire never overtakes a proposal on its way into the log.
        let write = async {
            let retired = self.gate.retired.lock().await;
            if *retired {
                return None;
            }
            Some(tokio::time::timeout(self.timeout, self.raft.client_write(request)).await)
        };
        let Some(written) = self.runtime.block_on(write) else {
            return Err("this engine was retired: a newer engine serves this node's term".into());
        };
        match written {
            Err(_) => Err(format!("the entry did not commit within {:?} (no quorum reachable?)", self.timeout)),
            Ok(Err(e)) => Err(match e.forward_to_leader::<BasicNode>() {
                Some(forward) => format!("this node no longer leads (leader: {:?})", forward.leader_id),
                None => format!("raft: {e}"),
            }),
            Ok(Ok(written)) => match written.data {
                Response::Fenced => Err(format!(
                    "fenced: the entry was appended in term {}, after the engine's term {} ended",
                    written.log_id.leader_id.term, self.term
                )),
                Response::Applied(_) | Response::Nothing => Ok(()),
            },
        }
    }
}
