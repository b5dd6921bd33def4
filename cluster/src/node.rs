//! `Node`: one member of the group (a Raft instance, its log, in memory or
//! durable in a dir, and its state machine) and the way it becomes the
//! serving leader.
//!
//! Invariant: `start_engine` returns an engine only when this node leads a
//! term, has applied every entry committed before that term and its own
//! blank entry (`ensure_linearizable`), and still leads that same term after
//! the replica state was copied; the engine's sink is fenced to that term.
//! At most one engine per node per term proposes: `restart_engine` (for an
//! engine whose writes failed while this node kept leading) first retires
//! the previous engine's sink and waits until everything it proposed is
//! applied, so the new engine starts from a state that includes it.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leaseq::{Engine, EngineBuilder, ReplicaState};
use openraft::ServerState;
use openraft::network::RaftNetworkFactory;
use openraft::storage::RaftLogStorage;
use tokio::runtime::Handle;
use tokio::time::{Instant, timeout_at};

use crate::durable::{DurableLogStore, LogRecovery};
use crate::error::ClusterError;
use crate::log_store::LogStore;
use crate::network::Router;
use crate::sink::{DEFAULT_WRITE_TIMEOUT, RaftSink, SinkGate};
use crate::state_machine::StateMachine;
use crate::types::{NodeId, Raft, TypeConfig};

/// How often `start_engine` looks at the node's metrics while waiting.
const POLL: Duration = Duration::from_millis(10);

/// One member of a leaseq Raft group.
pub struct Node {
    id: NodeId,
    raft: Raft,
    state_machine: StateMachine,
    runtime: Handle,
    write_timeout: Duration,
    /// The term of the last engine started here, and its sink's gate.
    served: Mutex<Option<(u64, SinkGate)>>,
    log_recovery: Option<LogRecovery>,
    /// Its log and state held nothing when it started.
    started_empty: bool,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("id", &self.id).field("write_timeout", &self.write_timeout).finish_non_exhaustive()
    }
}

impl Node {
    /// Starts node `id` on the current tokio runtime with an empty log and
    /// state, and registers it on `router`.
    ///
    /// # Errors
    ///
    /// `ClusterError::Raft` if openraft refuses the config or cannot start.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime (as `Handle::current` does).
    pub async fn start(id: NodeId, config: Arc<openraft::Config>, router: &Router) -> Result<Node, ClusterError> {
        let node = Node::start_with(id, config, router.factory(id), LogStore::new(), StateMachine::new()).await?;
        router.register(id, node.raft.clone());
        Ok(node)
    }

    /// Starts node `id` on the current tokio runtime over any network and
    /// Raft log store, with `state_machine` (empty, or recovered from its
    /// snapshot).
    ///
    /// # Errors
    ///
    /// `ClusterError::Raft` if openraft refuses the config, or reading the
    /// log store fails.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime (as `Handle::current` does).
    pub async fn start_with<N, L>(
        id: NodeId,
        config: Arc<openraft::Config>,
        network: N,
        log: L,
        state_machine: StateMachine,
    ) -> Result<Node, ClusterError>
    where
        N: RaftNetworkFactory<TypeConfig>,
        L: RaftLogStorage<TypeConfig>,
    {
        let mut log = log;
        // Read from the stores, not from openraft's metrics, which show
        // defaults until Raft's core has loaded them.
        let state = log.get_log_state().await.map_err(|e| ClusterError::Raft(e.to_string()))?;
        let vote = log.read_vote().await.map_err(|e| ClusterError::Raft(e.to_string()))?;
        let started_empty = vote.is_none()
            && state.last_log_id.is_none()
            && state.last_purged_log_id.is_none()
            && state_machine.last_applied().is_none();
        let raft = Raft::new(id, config, network, log, state_machine.clone())
            .await
            .map_err(|e| ClusterError::Raft(e.to_string()))?;
        Ok(Node {
            id,
            raft,
            state_machine,
            runtime: Handle::current(),
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            served: Mutex::new(None),
            log_recovery: None,
            started_empty,
        })
    }

    /// Starts node `id` on the current tokio runtime from its data dir
    /// `dir` (created if missing): the durable Raft log and latest snapshot
    /// in `dir/raft/`. The state machine starts from the snapshot and
    /// openraft re-applies the committed entries after it before this
    /// returns, so the node holds its state before any leader is heard
    /// from. A new dir is an empty node, to be initialized or added as
    /// usual; a used one is the same member again.
    ///
    /// # Errors
    ///
    /// `DataDirLocked` if another node has `dir` open; `Corrupt` or `Io`
    /// if the log or snapshot cannot be recovered; `Raft` as for
    /// [`Node::start_with`].
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime (as `Handle::current` does).
    pub async fn open<N>(
        id: NodeId,
        config: Arc<openraft::Config>,
        network: N,
        dir: &Path,
    ) -> Result<Node, ClusterError>
    where
        N: RaftNetworkFactory<TypeConfig>,
    {
        let raft_dir = dir.join("raft");
        // The log first: it takes the dir's lock, which then covers the
        // snapshot too.
        let (log, recovery) = DurableLogStore::open(&raft_dir)?;
        let state_machine = StateMachine::open(&raft_dir)?;
        let mut node = Node::start_with(id, config, network, log, state_machine).await?;
        node.log_recovery = Some(recovery);
        Ok(node)
    }

    /// Whether the node's log and state held nothing when it started: no
    /// vote, no entry (kept or purged), no snapshot. A new data dir, or one
    /// that was lost: a voter must never come back this way
    /// (docs/replication.md).
    #[must_use]
    pub fn started_empty(&self) -> bool {
        self.started_empty
    }

    /// What opening the durable log found, for a node started by
    /// [`Node::open`].
    #[must_use]
    pub fn log_recovery(&self) -> Option<&LogRecovery> {
        self.log_recovery.as_ref()
    }

    /// How long an engine started from now on waits for each write to
    /// commit (default `DEFAULT_WRITE_TIMEOUT`).
    #[must_use]
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// This node's id.
    #[must_use]
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The node's Raft handle (membership changes, metrics, triggers).
    #[must_use]
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// A copy of what this node's state machine has applied.
    #[must_use]
    pub fn replica_state(&self) -> ReplicaState {
        self.state_machine.replica_state()
    }

    /// The term of the last engine started on this node, if any.
    #[must_use]
    pub fn serves_term(&self) -> Option<u64> {
        self.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref().map(|(term, _)| *term)
    }

    /// The term this node leads now, if it does.
    fn leading_term(&self) -> Option<u64> {
        self.led_in(&self.raft.metrics().borrow())
    }

    /// The term `metrics` show this node leading, if they do (in the state
    /// of leader, and naming itself the leader).
    #[must_use]
    pub fn led_in(&self, metrics: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> Option<u64> {
        let leads = metrics.state == ServerState::Leader && metrics.current_leader == Some(self.id);
        leads.then_some(metrics.current_term)
    }

    /// Waits (up to `wait`) until this node leads and has applied everything
    /// committed in its term, then starts a leader engine from its replica
    /// state, built from `builder` (its clock must continue the previous
    /// leader's time line: the system clock does). Once this node has led
    /// a term during the wait and lost it, it returns `NotLeader` at once
    /// rather than wait on: the caller learns who leads now (a node
    /// restarted as the leader of its old term steps down as soon as its
    /// peers answer with a newer one).
    ///
    /// # Errors
    ///
    /// `NotLeader` if that did not happen within `wait`, or the term it led
    /// was lost; `AlreadyServing` if an engine was started on this node in
    /// this term; `Raft` if the node stopped; `Engine` if the engine would
    /// not start.
    pub async fn start_engine(&self, builder: EngineBuilder, wait: Duration) -> Result<Engine, ClusterError> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(term) = self.leading_term() {
                let confirmed = self.while_leading(term, timeout_at(deadline, self.raft.ensure_linearizable())).await;
                let Some(confirmed) = confirmed else { return Err(ClusterError::NotLeader) };
                match confirmed {
                    Err(_) => return Err(ClusterError::NotLeader),
                    Ok(Err(e)) if e.fatal().is_some() => return Err(ClusterError::Raft(e.to_string())),
                    Ok(Err(_)) => return Err(ClusterError::NotLeader),
                    Ok(Ok(_)) => {
                        // A node that restarted as the leader of the term it
                        // led before appends no blank entry: entries its
                        // previous engine left uncommitted may still commit
                        // in this term, so wait for all of them (or until
                        // the term is lost: then they may never be).
                        self.while_leading(term, self.applied_everything(deadline))
                            .await
                            .unwrap_or(Err(ClusterError::NotLeader))?;
                        let state = self.state_machine.replica_state();
                        if self.leading_term() != Some(term) {
                            return Err(ClusterError::NotLeader);
                        }
                        return self.serve(builder, state, term).await;
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::NotLeader);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Runs `wait` while this node leads `term`: its output, or `None` as
    /// soon as the node no longer leads that term (at once if it does not
    /// now, or if Raft stopped).
    async fn while_leading<T>(&self, term: u64, wait: impl Future<Output = T>) -> Option<T> {
        let lost = async {
            let mut metrics = self.raft.metrics();
            while self.led_in(&metrics.borrow_and_update()) == Some(term) {
                if metrics.changed().await.is_err() {
                    break;
                }
            }
        };
        tokio::select! {
            output = wait => Some(output),
            () = lost => None,
        }
    }

    /// Like `start_engine`, for a node that already serves its term with an
    /// engine that can no longer write (a write failed: no quorum for a
    /// while, then one again). Retires the old engine's sink, waits until
    /// this node has applied every entry in its log (so the state includes
    /// whatever the old engine got committed), then starts a new engine.
    /// Receipts of the old engine are refused by the new one.
    ///
    /// # Errors
    ///
    /// As `start_engine`; `NotLeader` also when this node does not lead the
    /// term its last engine was started in.
    pub async fn restart_engine(&self, builder: EngineBuilder, wait: Duration) -> Result<Engine, ClusterError> {
        let deadline = Instant::now() + wait;
        let served = self.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let Some((term, gate)) = served else {
            return self.start_engine(builder, wait).await;
        };
        if self.leading_term() != Some(term) {
            return Err(ClusterError::NotLeader);
        }
        gate.retire().await;
        let confirmed = self.while_leading(term, timeout_at(deadline, self.raft.ensure_linearizable())).await;
        if !matches!(confirmed, Some(Ok(Ok(_)))) {
            return Err(ClusterError::NotLeader);
        }
        // Everything the old sink proposed is in the log now (retire waited
        // for any proposal in flight, and ensure_linearizable was queued
        // behind it): wait until it is all applied.
        self.while_leading(term, self.applied_everything(deadline)).await.unwrap_or(Err(ClusterError::NotLeader))?;
        let state = self.state_machine.replica_state();
        if self.leading_term() != Some(term) {
            return Err(ClusterError::NotLeader);
        }
        let sink = RaftSink::new(self.raft.clone(), self.runtime.clone(), term, self.write_timeout);
        {
            let mut served = self.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // Another restart got here first: it owns the term now.
            if served.as_ref().is_none_or(|(_, current)| !current.same(&gate)) {
                return Err(ClusterError::AlreadyServing { term });
            }
            *served = Some((term, sink.gate()));
        }
        open_engine(builder, sink, state).await
    }

    /// Waits (until `deadline`) until this node has applied every entry
    /// its log holds now.
    async fn applied_everything(&self, deadline: Instant) -> Result<(), ClusterError> {
        let last_log = self.raft.metrics().borrow().last_log_index;
        let wait = self.raft.wait(Some(deadline.saturating_duration_since(Instant::now())));
        wait.applied_index_at_least(last_log, "every entry in the log applied")
            .await
            .map(drop)
            .map_err(|_| ClusterError::NotLeader)
    }

    async fn serve(&self, builder: EngineBuilder, state: ReplicaState, term: u64) -> Result<Engine, ClusterError> {
        let sink = RaftSink::new(self.raft.clone(), self.runtime.clone(), term, self.write_timeout);
        {
            let mut served = self.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((served, _)) = &*served
                && *served >= term
            {
                return Err(ClusterError::AlreadyServing { term: *served });
            }
            *served = Some((term, sink.gate()));
        }
        open_engine(builder, sink, state).await
    }
}

/// Starts a replicated engine on `sink` from `state`.
async fn open_engine(builder: EngineBuilder, sink: RaftSink, state: ReplicaState) -> Result<Engine, ClusterError> {
    // Starting may replicate (moves at start) and so block on this runtime:
    // do it off the runtime's workers.
    tokio::task::spawn_blocking(move || builder.replicated(sink).state(state).start())
        .await
        .map_err(|e| ClusterError::Raft(format!("the engine's start task failed: {e}")))?
        .map_err(ClusterError::Engine)
}
