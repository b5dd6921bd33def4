//! The durable Raft log and snapshots: what a store call acknowledged is
//! there after the store is dropped and its dir reopened; a torn tail is
//! cut and reported, damage elsewhere is an error naming file and offset;
//! a dir is open once; purged segments leave the disk. A three-node group
//! shut down whole and reopened from its dirs serves exactly what it held,
//! from the log alone and from a snapshot plus the log after it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leaseq::{Engine, QueueConfig};
use leaseq_cluster::{
    ClusterError, DurableLogOptions, DurableLogStore, Node, NodeId, Request, Router, TornTail, TypeConfig,
};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Config, Entry, EntryPayload, LogId, RaftLogReader, ServerState, Vote};
use tokio::runtime::Runtime;

mod support;

use support::{WAIT, lease};

/// A fresh dir under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("leaseq-durable-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    let request = Request { term, frames: vec![index as u8; 24] };
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(request) }
}

/// The ids of every entry in the store.
async fn ids(store: &mut DurableLogStore) -> Vec<(u64, u64)> {
    let entries = store.try_get_log_entries(..).await.unwrap();
    entries.iter().map(|e| (e.log_id.leader_id.term, e.log_id.index)).collect()
}

fn segments_on_disk(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    files.sort();
    files
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[tokio::test]
async fn vote_entries_truncation_purge_and_committed_survive_a_reopen() {
    let dir = TempDir::new("reopen");
    {
        let (mut store, recovery) = DurableLogStore::open(dir.path()).unwrap();
        assert_eq!((recovery.entries, recovery.torn, recovery.vote), (0, None, None));
        store.save_vote(&Vote::new(2, 1)).await.unwrap();
        store.blocking_append((1..=6).map(|i| entry(2, i))).await.unwrap();
        store.blocking_append((7..=10).map(|i| entry(2, i))).await.unwrap();
        store.save_committed(Some(log_id(2, 7))).await.unwrap();
        // 9 and 10 were never committed; a new leader replaces them.
        store.truncate(log_id(2, 9)).await.unwrap();
        store.save_vote(&Vote::new_committed(3, 2)).await.unwrap();
        store.blocking_append([entry(3, 9)]).await.unwrap();
        store.purge(log_id(2, 3)).await.unwrap();
    }
    let (mut store, recovery) = DurableLogStore::open(dir.path()).unwrap();
    assert_eq!(recovery.torn, None);
    assert_eq!(recovery.entries, 6);
    assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new_committed(3, 2)));
    assert_eq!(store.read_committed().await.unwrap(), Some(log_id(2, 7)));
    let state = store.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(2, 3)), Some(log_id(3, 9))));
    // The truncated term-2 entries 9 and 10 did not come back.
    assert_eq!(ids(&mut store).await, vec![(2, 4), (2, 5), (2, 6), (2, 7), (2, 8), (3, 9)]);
    // And it goes on from there.
    store.blocking_append([entry(3, 10)]).await.unwrap();
    drop(store);
    let (mut store, _) = DurableLogStore::open(dir.path()).unwrap();
    assert_eq!(ids(&mut store).await.last(), Some(&(3, 10)));
}

/// Writes 1..=5, one call each; returns the segment and where each
/// entry's record starts and the file's end.
async fn five_entries(dir: &Path) -> (PathBuf, Vec<u64>) {
    let (mut store, _) = DurableLogStore::open(dir).unwrap();
    let path = store.segment_files().pop().unwrap();
    let mut offsets = Vec::new();
    for i in 1..=5 {
        offsets.push(file_len(&path));
        store.blocking_append([entry(1, i)]).await.unwrap();
    }
    offsets.push(file_len(&path));
    (path, offsets)
}

#[tokio::test]
async fn a_torn_last_record_is_cut_off_and_reported() {
    let dir = TempDir::new("torn");
    let (path, offsets) = five_entries(dir.path()).await;
    let whole = std::fs::read(&path).unwrap();
    let (last, end) = (offsets[4], offsets[5]);
    let mut damaged: Vec<(String, Vec<u8>, u64)> = Vec::new();
    for cut in [last + 1, last + 5, last + 10, last + 11, end - 1] {
        damaged.push((format!("cut at {cut}"), whole[..cut as usize].to_vec(), cut - last));
    }
    for byte in [last + 6, last + 9, end - 1] {
        let mut flipped = whole.clone();
        flipped[byte as usize] ^= 0x40;
        damaged.push((format!("byte {byte} flipped"), flipped, end - last));
    }
    for (case, bytes, dropped) in damaged {
        std::fs::write(&path, &bytes).unwrap();
        let (mut store, recovery) = DurableLogStore::open(dir.path()).unwrap();
        assert_eq!(recovery.torn, Some(TornTail { path: path.clone(), offset: last, bytes: dropped }), "{case}");
        assert_eq!(ids(&mut store).await, vec![(1, 1), (1, 2), (1, 3), (1, 4)], "{case}");
        assert_eq!(file_len(&path), last, "{case}: the tail is cut on disk");
        // Appends go on after the cut; the next open finds no damage.
        store.blocking_append([entry(1, 5)]).await.unwrap();
        drop(store);
        let (mut store, recovery) = DurableLogStore::open(dir.path()).unwrap();
        assert_eq!((recovery.torn, ids(&mut store).await.len()), (None, 5), "{case}");
    }
}

#[tokio::test]
async fn a_bad_record_before_the_last_is_an_error_naming_file_and_offset() {
    let dir = TempDir::new("middle");
    let (path, offsets) = five_entries(dir.path()).await;
    let whole = std::fs::read(&path).unwrap();
    for (record, byte) in [(1, offsets[1] + 3), (1, offsets[1] + 20), (3, offsets[3] + 7)] {
        let mut flipped = whole.clone();
        flipped[byte as usize] ^= 0x01;
        std::fs::write(&path, &flipped).unwrap();
        match DurableLogStore::open(dir.path()) {
            Err(e @ ClusterError::Corrupt { .. }) => {
                let ClusterError::Corrupt { path: named, offset, .. } = &e else { unreachable!() };
                assert_eq!((named, *offset), (&path, offsets[record]), "byte {byte}: {e}");
                let message = e.to_string();
                assert!(message.contains(&path.display().to_string()), "{message}");
                assert!(message.contains(&offsets[record].to_string()), "{message}");
            }
            other => panic!("byte {byte}: {other:?}"),
        }
        // Nothing was cut: the file is as it was found.
        assert_eq!(std::fs::read(&path).unwrap(), flipped);
    }
}

#[tokio::test]
async fn a_dir_is_open_in_one_store_at_a_time() {
    let dir = TempDir::new("lock");
    let (store, _) = DurableLogStore::open(dir.path()).unwrap();
    match DurableLogStore::open(dir.path()) {
        Err(ClusterError::DataDirLocked { path }) => assert_eq!(path, dir.path()),
        other => panic!("a second open of a locked dir: {other:?}"),
    }
    drop(store);
    assert!(DurableLogStore::open(dir.path()).is_ok());
}

#[tokio::test]
async fn small_segments_roll_and_purged_ones_leave_the_disk() {
    let dir = TempDir::new("roll");
    let options = DurableLogOptions::new().segment_bytes(300);
    {
        let (mut store, _) = DurableLogStore::open_with(dir.path(), options).unwrap();
        store.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
        for i in 1..=60 {
            store.blocking_append([entry(1, i)]).await.unwrap();
            store.save_committed(Some(log_id(1, i))).await.unwrap();
        }
        let rolled = segments_on_disk(dir.path());
        assert!(rolled.len() >= 10, "{} segments", rolled.len());
        assert_eq!(rolled, store.segment_files());
        store.purge(log_id(1, 50)).await.unwrap();
        let kept = segments_on_disk(dir.path());
        assert_eq!(kept, store.segment_files());
        // About two entries to a segment: 51..=60 and the one 50 ends in.
        assert!(kept.len() <= 7, "{} segments kept of {}", kept.len(), rolled.len());
        assert!(kept.contains(rolled.last().unwrap()));
    }
    // The vote was written in a segment that is gone: each segment's
    // checkpoint carried it on.
    let (mut store, recovery) = DurableLogStore::open_with(dir.path(), options).unwrap();
    assert_eq!(recovery.vote, Some(Vote::new_committed(1, 1)));
    assert_eq!((recovery.purged, recovery.committed), (Some(log_id(1, 50)), Some(log_id(1, 60))));
    assert_eq!(ids(&mut store).await, (51..=60).map(|i| (1, i)).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_segment_cut_short_while_being_started_is_recovered() {
    let dir = TempDir::new("start");
    let options = DurableLogOptions::new().segment_bytes(300);
    let newest = {
        let (mut store, _) = DurableLogStore::open_with(dir.path(), options).unwrap();
        store.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
        for i in 1..=10 {
            store.blocking_append([entry(1, i)]).await.unwrap();
        }
        store.segment_files().pop().unwrap()
    };
    // Its header torn: the file is dropped.
    let name = newest.file_name().unwrap().to_str().unwrap();
    let number = u64::from_str_radix(&name[4..20], 16).unwrap();
    let next = dir.path().join(format!("log-{:016x}.seg", number + 1));
    std::fs::write(&next, &std::fs::read(&newest).unwrap()[..20]).unwrap();
    let (mut store, recovery) = DurableLogStore::open_with(dir.path(), options).unwrap();
    assert_eq!(recovery.torn, Some(TornTail { path: next.clone(), offset: 0, bytes: 20 }));
    assert_eq!(ids(&mut store).await.len(), 10);
    drop(store);
    // Its header whole but nothing after it: the checkpoint is written again,
    // so the older segments may go.
    let mut header = std::fs::read(&newest).unwrap()[..32].to_vec();
    header[16..24].copy_from_slice(&(number + 1).to_le_bytes());
    let crc = crc32c::crc32c(&header[..24]);
    header[24..28].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&next, &header).unwrap();
    {
        let (mut store, recovery) = DurableLogStore::open_with(dir.path(), options).unwrap();
        assert_eq!(recovery.torn, None);
        assert!(file_len(&next) > 32, "a checkpoint was written");
        store.blocking_append([entry(1, 11)]).await.unwrap();
        store.purge(log_id(1, 11)).await.unwrap();
        assert_eq!(segments_on_disk(dir.path()), vec![next.clone()]);
    }
    let (_, recovery) = DurableLogStore::open_with(dir.path(), options).unwrap();
    assert_eq!((recovery.vote, recovery.purged), (Some(Vote::new_committed(1, 1)), Some(log_id(1, 11))));
}

/// A group of three nodes, each on its own data dir.
struct Cluster {
    rt: Runtime,
    nodes: BTreeMap<NodeId, Node>,
    dirs: BTreeMap<NodeId, TempDir>,
}

fn config() -> Arc<Config> {
    support::steady_raft_config()
}

impl Cluster {
    /// Three new nodes, initialized as one group.
    fn new(name: &str) -> Cluster {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
        let dirs = (1..=3).map(|id| (id, TempDir::new(&format!("{name}-node{id}")))).collect();
        let cluster = Cluster::open(rt, dirs);
        let members: BTreeSet<NodeId> = cluster.nodes.keys().copied().collect();
        cluster.rt.block_on(cluster.nodes[&1].raft().initialize(members)).unwrap();
        cluster
    }

    /// Every node from its dir, on a new network.
    fn open(rt: Runtime, dirs: BTreeMap<NodeId, TempDir>) -> Cluster {
        let router = Router::new();
        let mut nodes = BTreeMap::new();
        for (&id, dir) in &dirs {
            let node = rt.block_on(Node::open(id, config(), router.factory(id), dir.path())).unwrap();
            router.register(id, node.raft().clone());
            nodes.insert(id, node.with_write_timeout(Duration::from_secs(1)));
        }
        Cluster { rt, nodes, dirs }
    }

    /// Shuts every node down and opens them all again from their dirs.
    fn restart(self) -> Cluster {
        let Cluster { rt, nodes, dirs } = self;
        for node in nodes.values() {
            rt.block_on(node.raft().shutdown()).unwrap();
        }
        drop(nodes);
        Cluster::open(rt, dirs)
    }

    fn leader(&self) -> NodeId {
        support::leader(self.nodes.iter().map(|(&id, node)| (id, node.raft())))
    }

    fn start_engine(&self, id: NodeId) -> Engine {
        support::start_engine(&self.rt, &self.nodes[&id])
    }

    fn last_applied(&self, id: NodeId) -> u64 {
        support::last_applied(self.nodes[&id].raft())
    }

    /// Waits until every node holds the state `leader` holds (compared by
    /// snapshot frames) and has applied as far, and returns those frames.
    /// (The leader's metrics may lag its state, so the state is polled.)
    fn converged(&self, leader: NodeId) -> Vec<u8> {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let frames = self.nodes[&leader].replica_state().snapshot();
            let index = self.last_applied(leader);
            let same = self
                .nodes
                .iter()
                .all(|(&id, node)| node.replica_state().snapshot() == frames && self.last_applied(id) >= index);
            if same && self.nodes[&leader].replica_state().snapshot() == frames {
                return frames;
            }
            assert!(std::time::Instant::now() < deadline, "the nodes did not converge");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every node, just opened and before any leader, holds `frames`.
    fn holds(&self, frames: &[u8]) {
        for (id, node) in &self.nodes {
            assert_eq!(node.replica_state().snapshot(), frames, "node {id} rebuilt its state at open");
        }
    }
}

#[test]
fn a_group_shut_down_and_reopened_serves_exactly_what_it_held() {
    let cluster = Cluster::new("restart");
    let leader = cluster.leader();
    let engine = cluster.start_engine(leader);
    engine.create_queue("dlq", QueueConfig::default()).unwrap();
    let jobs = engine.create_queue("jobs", QueueConfig::default().max_receives(5).dead_letter_queue("dlq")).unwrap();
    for i in 0..12u8 {
        jobs.send(vec![i]).unwrap();
    }
    let held = jobs.receive_with(4, lease()).unwrap();
    jobs.ack(&held[0].receipt).unwrap();
    jobs.release(&held[1].receipt, Duration::ZERO).unwrap();
    let leased: Vec<u8> = held[2..].iter().map(|d| d.payload[0]).collect();
    let (acked, released) = (held[0].payload[0], held[1].payload[0]);
    drop((jobs, engine));
    let before = cluster.converged(leader);

    let cluster = cluster.restart();
    cluster.holds(&before);
    for (id, node) in &cluster.nodes {
        let recovery = node.log_recovery().unwrap();
        assert_eq!(recovery.torn, None, "node {id}");
        assert!(recovery.committed.is_some() && recovery.vote.is_some(), "node {id}: {recovery:?}");
    }

    let leader = cluster.leader();
    let engine = cluster.start_engine(leader);
    let jobs = engine.queue("jobs").unwrap();
    assert_eq!(jobs.config().max_receives, Some(5));
    let stats = jobs.stats();
    assert_eq!((stats.ready, stats.delayed, stats.in_flight), (9, 0, 2), "{stats:?}");
    let got = jobs.receive_with(100, lease()).unwrap();
    assert_eq!(got.len(), 9);
    for d in &got {
        let payload = d.payload[0];
        assert!(payload != acked && !leased.contains(&payload), "message {payload} came back");
        assert_eq!(d.delivery_count, if payload == released { 2 } else { 1 }, "message {payload}");
    }
    drop((jobs, engine));
}

#[test]
fn a_group_restarts_from_its_snapshots_and_the_log_after_them() {
    let cluster = Cluster::new("snapshot");
    let leader = cluster.leader();
    let engine = cluster.start_engine(leader);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    for i in 0..10u8 {
        q.send(vec![i]).unwrap();
    }
    let got = q.receive_with(3, lease()).unwrap();
    q.ack(&got[0].receipt).unwrap();
    cluster.converged(leader);

    // Every node snapshots and purges its log behind the snapshot.
    for node in cluster.nodes.values() {
        let raft = node.raft();
        let index = node.raft().metrics().borrow().last_applied.map_or(0, |id| id.index);
        cluster.rt.block_on(raft.trigger().snapshot()).unwrap();
        let wait = raft.wait(Some(WAIT));
        let done = wait.metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= index) && m.purged.is_some_and(|p| p.index >= index),
            "snapshot and purge",
        );
        cluster.rt.block_on(done).unwrap();
    }
    // More after the snapshot: these only the log holds.
    for i in 10..15u8 {
        q.send(vec![i]).unwrap();
    }
    q.ack(&got[1].receipt).unwrap();
    drop((q, engine));
    let before = cluster.converged(leader);

    let cluster = cluster.restart();
    cluster.holds(&before);
    for (id, node) in &cluster.nodes {
        let recovery = node.log_recovery().unwrap();
        let purged = recovery.purged.map_or(0, |p| p.index);
        assert!(purged > 10, "node {id}: the log before the snapshot is gone: {recovery:?}");
        let wait = node.raft().wait(Some(WAIT));
        let from_snapshot = wait.metrics(|m| m.snapshot.is_some_and(|s| s.index >= purged), "snapshot");
        cluster.rt.block_on(from_snapshot).unwrap_or_else(|e| panic!("node {id}: {e}"));
    }
    let leader = cluster.leader();
    let engine = cluster.start_engine(leader);
    let q = engine.queue("q").unwrap();
    let stats = q.stats();
    assert_eq!((stats.ready, stats.delayed, stats.in_flight), (12, 0, 1), "{stats:?}");
    drop((q, engine));
}

/// Set in the child process of the kill -9 test: its data dir.
const CHILD_DIR: &str = "LEASEQ_CLUSTER_KILL_CHILD_DIR";

/// The child: a one-node group on `dir` sending numbered messages and
/// printing each number once its send returned, until it is killed (or 20 s
/// pass).
fn sending_child(dir: &Path) -> ! {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let router = Router::new();
    let node = rt.block_on(Node::open(1, config(), router.factory(1), dir)).unwrap();
    router.register(1, node.raft().clone());
    rt.block_on(node.raft().initialize(BTreeSet::from([1]))).unwrap();
    let engine = rt.block_on(node.start_engine(Engine::builder(), WAIT)).unwrap();
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    let started = std::time::Instant::now();
    let mut stdout = std::io::stdout();
    for i in 0u32.. {
        q.send(i.to_le_bytes().to_vec()).unwrap();
        writeln!(stdout, "sent {i}").unwrap();
        stdout.flush().unwrap();
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    std::process::exit(0)
}

#[test]
fn a_node_killed_with_sigkill_keeps_every_acknowledged_send() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        sending_child(Path::new(&dir));
    }
    let dir = TempDir::new("kill");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_node_killed_with_sigkill_keeps_every_acknowledged_send", "--nocapture"])
        .env(CHILD_DIR, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("sent ").and_then(|n| n.parse::<u32>().ok())
                && tx.send(n).is_err()
            {
                break;
            }
        }
    });
    // Kill it in the middle of its sends.
    let mut acknowledged = None;
    while acknowledged.is_none_or(|n| n < 200) {
        match rx.recv_timeout(WAIT) {
            Ok(n) => acknowledged = Some(n),
            Err(e) => {
                let _ = child.kill();
                panic!("the child stopped sending ({e}) after {acknowledged:?}");
            }
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let acknowledged = rx.try_iter().last().max(acknowledged).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let router = Router::new();
    let node = rt.block_on(Node::open(1, config(), router.factory(1), dir.path())).unwrap();
    router.register(1, node.raft().clone());
    let engine = rt.block_on(node.start_engine(Engine::builder(), WAIT)).unwrap();
    let q = engine.queue("q").unwrap();
    let mut payloads = BTreeSet::new();
    loop {
        let got = q.receive_with(1000, lease()).unwrap();
        if got.is_empty() {
            break;
        }
        payloads.extend(got.iter().map(|d| u32::from_le_bytes(d.payload[..4].try_into().unwrap())));
    }
    // Every acknowledged send is there; at most the one in flight beyond it.
    assert!((0..=acknowledged).all(|i| payloads.contains(&i)), "lost some of 0..={acknowledged}");
    assert!(payloads.len() as u32 <= acknowledged + 2, "{} messages for {acknowledged}", payloads.len());
    drop((q, engine));
    rt.block_on(node.raft().shutdown()).unwrap();
}

#[test]
fn a_node_knows_whether_its_dir_held_anything_when_it_started() {
    let dir = TempDir::new("started-empty");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let open = |rt: &Runtime| {
        let router = Router::new();
        let node = rt.block_on(Node::open(1, config(), router.factory(1), dir.path())).unwrap();
        router.register(1, node.raft().clone());
        (router, node)
    };
    let (_router, node) = open(&rt);
    assert!(node.started_empty(), "a new dir");
    rt.block_on(node.raft().initialize(BTreeSet::from([1]))).unwrap();
    let wait = node.raft().wait(Some(WAIT));
    rt.block_on(wait.state(ServerState::Leader, "leads")).unwrap();
    rt.block_on(node.raft().shutdown()).unwrap();
    drop(node);
    // Reopened at once: the stores hold its vote and log, even before Raft's
    // metrics show them.
    let (_router, node) = open(&rt);
    assert!(!node.started_empty(), "a used dir");
    rt.block_on(node.raft().shutdown()).unwrap();
}
