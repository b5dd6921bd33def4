//! A three-node group in one process: the leader's engine replicates
//! through Raft; when the leader is cut off, another node leads, starts an
//! engine from its replica state and serves the same queues, messages,
//! delivery counts and leases, while the old leader's engine can write
//! nothing more. A member that joins after a snapshot catches up from it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use leaseq::{Engine, Error, LeaseError, QueueConfig, ReceiptError};
use leaseq_cluster::{Node, NodeId, Router};
use openraft::{BasicNode, Config};
use tokio::runtime::Runtime;

mod support;

use support::{WAIT, lease};

struct Cluster {
    rt: Runtime,
    router: Router,
    nodes: BTreeMap<NodeId, Node>,
}

fn config() -> Arc<Config> {
    support::raft_config(None)
}

impl Cluster {
    /// `n` nodes, ids 1..=n, initialized as one group.
    fn new(n: u64) -> Cluster {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
        let router = Router::new();
        let mut cluster = Cluster { rt, router, nodes: BTreeMap::new() };
        for id in 1..=n {
            cluster.add(id);
        }
        let members: BTreeSet<NodeId> = (1..=n).collect();
        cluster.rt.block_on(cluster.nodes[&1].raft().initialize(members)).unwrap();
        cluster
    }

    fn add(&mut self, id: NodeId) {
        let node = self.rt.block_on(Node::start(id, config(), &self.router)).unwrap();
        self.nodes.insert(id, node.with_write_timeout(Duration::from_secs(1)));
    }

    /// The node among `among` that leads (as it sees itself).
    fn leader(&self, among: &[NodeId]) -> NodeId {
        support::leader(among.iter().map(|&id| (id, self.nodes[&id].raft())))
    }

    fn start_engine(&self, id: NodeId) -> Engine {
        support::start_engine(&self.rt, &self.nodes[&id])
    }

    /// Waits until node `id` has applied up to `index`.
    fn applied(&self, id: NodeId, index: u64) {
        let wait = self.nodes[&id].raft().wait(Some(WAIT));
        self.rt.block_on(wait.applied_index_at_least(Some(index), "applied")).unwrap();
    }

    /// Waits until `a` and `b` hold the same replica state, as `a`'s.
    fn converged(&self, a: NodeId, b: NodeId) -> leaseq::ReplicaState {
        support::converged(&self.nodes[&a], &self.nodes[&b])
    }

    fn last_applied(&self, id: NodeId) -> u64 {
        support::last_applied(self.nodes[&id].raft())
    }
}

#[test]
fn a_new_leader_serves_what_the_old_one_committed_and_the_old_one_writes_nothing() {
    let cluster = Cluster::new(3);
    let old = cluster.leader(&[1, 2, 3]);
    let engine = cluster.start_engine(old);
    engine.create_queue("dlq", QueueConfig::default()).unwrap();
    let jobs = engine.create_queue("jobs", QueueConfig::default().max_receives(3).dead_letter_queue("dlq")).unwrap();
    for i in 0..10u8 {
        jobs.send(vec![i]).unwrap();
    }
    let held = jobs.receive_with(4, lease()).unwrap();
    assert_eq!(held.len(), 4);
    jobs.ack(&held[0].receipt).unwrap();
    jobs.release(&held[1].receipt, Duration::ZERO).unwrap();
    let in_flight: Vec<u8> = held[2..].iter().map(|d| d.payload[0]).collect();
    let released = held[1].payload[0];
    let before = jobs.stats();
    assert_eq!((before.ready, before.in_flight), (7, 2));

    // Cut the leader off; one of the other two takes over.
    cluster.router.isolate(old);
    let others: Vec<NodeId> = [1, 2, 3].into_iter().filter(|&id| id != old).collect();
    let new = cluster.leader(&others);
    let successor = cluster.start_engine(new);
    assert_eq!(successor.recovery().unwrap().messages, 9);
    assert!(successor.queue("dlq").is_ok());
    let jobs2 = successor.queue("jobs").unwrap();
    assert_eq!(jobs2.config().max_receives, Some(3));
    let restored = jobs2.stats();
    // The two leased ones are hidden until their leases end, in flight here
    // as on the old leader (with no receipt of this engine naming them).
    assert_eq!((restored.ready, restored.delayed, restored.in_flight), (7, 0, 2), "{restored:?}");

    // Only the ready ones are delivered; the two leases are kept, and the
    // released one's delivery count carries on.
    let got = jobs2.receive_with(100, lease()).unwrap();
    assert_eq!(got.len(), 7);
    assert!(got.iter().all(|d| !in_flight.contains(&d.payload[0])));
    for d in &got {
        let want = if d.payload[0] == released { 2 } else { 1 };
        assert_eq!(d.delivery_count, want, "message {}", d.payload[0]);
    }
    // The old leader's receipts complete nothing here.
    for d in &held[2..] {
        assert_eq!(jobs2.ack(&d.receipt), Err(LeaseError::InvalidReceipt(ReceiptError::WrongEngine)));
    }
    for d in &got[..3] {
        jobs2.ack(&d.receipt).unwrap();
    }
    jobs2.send("after failover").unwrap();

    // No split brain: the old leader cannot reach a quorum, so its engine
    // fails the write and then refuses every write.
    match jobs.send("split") {
        Err(Error::Storage { reason, .. }) => assert!(reason.contains("replication"), "{reason}"),
        other => panic!("the cut-off leader took a write: {other:?}"),
    }
    assert!(matches!(jobs.send("later"), Err(Error::Storage { .. })));
    assert!(matches!(jobs.ack(&held[2].receipt), Err(LeaseError::Storage { .. })));
    drop((jobs, engine));

    // Healed, the old leader drops what it could not commit and converges
    // on the new leader's state.
    cluster.router.heal(old);
    cluster.converged(old, new);
    // Both applied the same entries from empty: equal in full.
    assert_eq!(cluster.nodes[&old].replica_state(), cluster.nodes[&new].replica_state());
    let state = cluster.nodes[&old].replica_state();
    assert_eq!(state.queues(), vec!["dlq".to_string(), "jobs".to_string()]);
    assert_eq!(state.messages(), 9 - 3 + 1);
    drop((jobs2, successor));
}

#[test]
fn a_member_added_after_a_snapshot_catches_up_from_it() {
    let mut cluster = Cluster::new(3);
    let leader = cluster.leader(&[1, 2, 3]);
    let engine = cluster.start_engine(leader);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    for i in 0..20u8 {
        q.send(vec![i]).unwrap();
    }
    let got = q.receive_with(5, lease()).unwrap();
    for d in &got[..2] {
        q.ack(&d.receipt).unwrap();
    }

    // Snapshot and purge the log, so a newcomer can only start from the
    // snapshot.
    let raft = cluster.nodes[&leader].raft().clone();
    let index = cluster.last_applied(leader);
    cluster.rt.block_on(raft.trigger().snapshot()).unwrap();
    let wait = raft.wait(Some(WAIT));
    cluster
        .rt
        .block_on(
            wait.metrics(|m| m.snapshot.is_some_and(|s| s.index >= index) && m.purged.is_some(), "snapshot and purge"),
        )
        .unwrap();

    cluster.add(4);
    cluster.rt.block_on(raft.add_learner(4, BasicNode::default(), true)).unwrap();
    cluster.applied(4, index);
    let newcomer = cluster.nodes[&4].raft().metrics().borrow().clone();
    assert!(newcomer.snapshot.is_some(), "node 4 installed the snapshot: {newcomer:?}");

    let theirs = cluster.converged(4, leader);
    let mine = cluster.nodes[&leader].replica_state();
    // Not `==`: `ReplicaState`'s equality includes `records_applied`, which
    // counts the snapshot's records on node 4 and every applied record on the
    // leader; the snapshot frames (the state itself) are compared instead.
    assert_eq!(theirs.queues(), mine.queues());
    assert_eq!(theirs.messages(), 18);
    assert_eq!(theirs.snapshot(), mine.snapshot(), "the same queues, messages, counts and leases");

    // Entries after the snapshot reach it as usual.
    q.send("after the snapshot").unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while cluster.nodes[&leader].replica_state().messages() < 19 {
        assert!(std::time::Instant::now() < deadline, "the leader did not apply its own write");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(cluster.converged(4, leader).messages(), 19);
    drop((q, engine));
}
