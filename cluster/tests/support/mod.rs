//! What the group tests share: the Raft settings they run with, the bound on
//! every wait, and the waits themselves (for a leader, for two nodes to hold
//! the same state), over whatever holds each test's nodes.
//!
//! Each test file declares `mod support;` and uses what it needs, so some
//! items are unused in some files.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq::{Engine, ReceiveOptions, ReplicaState};
use leaseq_cluster::{Node, NodeId, Raft};
use openraft::{Config, ServerState, SnapshotPolicy};
use tokio::runtime::Runtime;

/// Every wait in these tests is bounded by this.
pub const WAIT: Duration = Duration::from_secs(10);

/// Fast elections; snapshots only when a test asks, and then the log
/// before them purged; snapshots sent in chunks of `chunk` bytes where
/// given (so a small one still crosses the wire in several).
pub fn raft_config(chunk: Option<u64>) -> Arc<Config> {
    config_with(chunk, 50, (150, 300))
}

/// Like `raft_config`, with elections ten times slower: for groups that are
/// shut down and reopened whole, where every node starts at once on a
/// loaded machine and a 150 ms timeout let a late heartbeat start a second
/// election just after the first (the test's leader then lost its lead
/// under it: "this node no longer leads").
pub fn steady_raft_config() -> Arc<Config> {
    config_with(None, 200, (1500, 3000))
}

fn config_with(chunk: Option<u64>, heartbeat: u64, (election_min, election_max): (u64, u64)) -> Arc<Config> {
    let mut config = Config {
        heartbeat_interval: heartbeat,
        election_timeout_min: election_min,
        election_timeout_max: election_max,
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..Config::default()
    };
    if let Some(chunk) = chunk {
        config.snapshot_max_chunk_size = chunk;
    }
    Arc::new(config.validate().unwrap())
}

pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap()
}

/// A 30 s lease.
pub fn lease() -> ReceiveOptions {
    ReceiveOptions::default().visibility(Duration::from_secs(30))
}

/// Waits for the node among `rafts` that leads (as it sees itself).
pub fn leader<'a>(rafts: impl Iterator<Item = (NodeId, &'a Raft)> + Clone) -> NodeId {
    let deadline = Instant::now() + WAIT;
    loop {
        for (id, raft) in rafts.clone() {
            let metrics = raft.metrics().borrow().clone();
            if metrics.state == ServerState::Leader && metrics.current_leader == Some(id) {
                return id;
            }
        }
        let ids: Vec<NodeId> = rafts.clone().map(|(id, _)| id).collect();
        assert!(Instant::now() < deadline, "no leader among {ids:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn last_applied(raft: &Raft) -> u64 {
    raft.metrics().borrow().last_applied.map_or(0, |id| id.index)
}

/// Starts `node`'s engine (it must lead).
pub fn start_engine(rt: &Runtime, node: &Node) -> Engine {
    rt.block_on(node.start_engine(Engine::builder(), WAIT)).unwrap()
}

/// Waits until `a` and `b` hold the same replica state (compared by its
/// snapshot frames, which are a function of the state alone), and returns
/// it.
pub fn converged(a: &Node, b: &Node) -> ReplicaState {
    let deadline = Instant::now() + WAIT;
    loop {
        let (sa, sb) = (a.replica_state(), b.replica_state());
        if sa.snapshot() == sb.snapshot() {
            return sa;
        }
        assert!(Instant::now() < deadline, "nodes {} and {} did not converge", a.id(), b.id());
        std::thread::sleep(Duration::from_millis(10));
    }
}
