//! A group whose nodes talk over HTTP on loopback TCP: each node has its own
//! listener served by `serve_raft` and sends through an `HttpNetwork`, as
//! separate processes would. The leader's writes reach the followers, a new
//! leader is elected over the wire when the old one goes away, a learner
//! catches up from a snapshot sent in chunks, each way an RPC can fail
//! comes back as the `RPCError` openraft acts on, and with a cluster secret
//! only nodes holding it take part.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leaseq::{Engine, Error, QueueConfig};
use leaseq_cluster::{
    AUTH_HEADER, ClusterSecret, HttpNetwork, LogStore, MAX_RAFT_BODY_BYTES, Node, NodeId, Raft, StateMachine,
    VOTE_PATH, serve_raft, unix_now_ms,
};
use openraft::error::RPCError;
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::VoteRequest;
use openraft::{BasicNode, Config, ServerState, Vote};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

mod support;

use support::{WAIT, lease, runtime};

/// A node and the listener task that answers its RPCs.
struct Member {
    node: Node,
    addr: String,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

struct Cluster {
    rt: Runtime,
    members: BTreeMap<NodeId, Member>,
}

fn config() -> Arc<Config> {
    // Small chunks, so a snapshot crosses the wire in several.
    support::raft_config(Some(256))
}

impl Cluster {
    /// `n` nodes, ids 1..=n, initialized as one group with each one's
    /// address.
    fn new(n: u64) -> Cluster {
        Self::with_secrets(n, |_| None)
    }

    /// Like `new`, node `id` signing and checking with `secret(id)`.
    fn with_secrets(n: u64, secret: impl Fn(NodeId) -> Option<ClusterSecret>) -> Cluster {
        let mut cluster = Cluster { rt: runtime(), members: BTreeMap::new() };
        for id in 1..=n {
            cluster.add_with(id, secret(id));
        }
        cluster.rt.block_on(cluster.raft(1).initialize(cluster.membership())).unwrap();
        cluster
    }

    /// Every member and its address.
    fn membership(&self) -> BTreeMap<NodeId, BasicNode> {
        self.members.iter().map(|(&id, m)| (id, BasicNode::new(m.addr.clone()))).collect()
    }

    /// Starts node `id` with its own listener on a free loopback port.
    fn add(&mut self, id: NodeId) {
        self.add_with(id, None);
    }

    /// Like `add`, the node signing its RPCs with `secret` and refusing
    /// those not signed with it.
    fn add_with(&mut self, id: NodeId, secret: Option<ClusterSecret>) {
        let (node, addr, stop, server) = self.rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let network = secret.clone().map_or_else(HttpNetwork::new, HttpNetwork::with_secret);
            let node = Node::start_with(id, config(), network, LogStore::new(), StateMachine::new())
                .await
                .unwrap()
                .with_write_timeout(Duration::from_secs(1));
            let (stop, stopped) = oneshot::channel::<()>();
            let server = tokio::spawn(serve_raft(listener, node.raft().clone(), secret, async {
                let _ = stopped.await;
            }));
            (node, addr, stop, server)
        });
        self.members.insert(id, Member { node, addr, stop: Some(stop), server: Some(server) });
    }

    fn raft(&self, id: NodeId) -> &Raft {
        self.members[&id].node.raft()
    }

    /// Closes node `id`'s listener (and its connections), then stops its
    /// Raft: the node is gone, as if its process had exited.
    fn stop(&mut self, id: NodeId) {
        let member = self.members.get_mut(&id).unwrap();
        let (stop, server) = (member.stop.take().unwrap(), member.server.take().unwrap());
        let raft = member.node.raft().clone();
        self.rt.block_on(async {
            stop.send(()).unwrap();
            tokio::time::timeout(WAIT, server).await.unwrap().unwrap().unwrap();
            raft.shutdown().await.unwrap();
        });
    }

    /// The node among `among` that leads (as it sees itself).
    fn leader(&self, among: &[NodeId]) -> NodeId {
        support::leader(among.iter().map(|&id| (id, self.raft(id))))
    }

    fn start_engine(&self, id: NodeId) -> Engine {
        support::start_engine(&self.rt, &self.members[&id].node)
    }

    /// Waits until `a` and `b` hold the same replica state, as `a`'s.
    fn converged(&self, a: NodeId, b: NodeId) -> leaseq::ReplicaState {
        support::converged(&self.members[&a].node, &self.members[&b].node)
    }

    fn last_applied(&self, id: NodeId) -> u64 {
        support::last_applied(self.raft(id))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let rafts: Vec<Raft> = self.members.values().map(|m| m.node.raft().clone()).collect();
        self.rt.block_on(async {
            for raft in rafts {
                let _ = raft.shutdown().await;
            }
        });
    }
}

#[test]
fn the_leaders_writes_reach_the_followers_over_http() {
    let cluster = Cluster::new(3);
    let leader = cluster.leader(&[1, 2, 3]);
    let engine = cluster.start_engine(leader);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    for i in 0..10u8 {
        q.send(vec![i]).unwrap();
    }
    let got = q.receive_with(4, lease()).unwrap();
    assert_eq!(got.len(), 4);
    for d in &got[..2] {
        q.ack(&d.receipt).unwrap();
    }
    for follower in [1, 2, 3].into_iter().filter(|&id| id != leader) {
        let state = cluster.converged(follower, leader);
        assert_eq!(state.queues(), vec!["q".to_string()]);
        assert_eq!(state.messages(), 8);
    }
    drop((q, engine));
}

#[test]
fn a_new_leader_is_elected_over_http_and_serves_the_unacked_messages() {
    let mut cluster = Cluster::new(3);
    let old = cluster.leader(&[1, 2, 3]);
    let engine = cluster.start_engine(old);
    let jobs = engine.create_queue("jobs", QueueConfig::default()).unwrap();
    for i in 0..10u8 {
        jobs.send(vec![i]).unwrap();
    }
    let held = jobs.receive_with(4, lease()).unwrap();
    jobs.ack(&held[0].receipt).unwrap();
    jobs.ack(&held[1].receipt).unwrap();
    let leased: Vec<u8> = held[2..].iter().map(|d| d.payload[0]).collect();

    cluster.stop(old);
    let others: Vec<NodeId> = [1, 2, 3].into_iter().filter(|&id| id != old).collect();
    let new = cluster.leader(&others);
    let successor = cluster.start_engine(new);
    let jobs2 = successor.queue("jobs").unwrap();
    let stats = jobs2.stats();
    assert_eq!((stats.ready, stats.delayed, stats.in_flight), (6, 0, 2), "{stats:?}");
    let got = jobs2.receive_with(100, lease()).unwrap();
    assert_eq!(got.len(), 6);
    assert!(got.iter().all(|d| !leased.contains(&d.payload[0])));
    for d in &got {
        jobs2.ack(&d.receipt).unwrap();
    }

    // The old leader's engine outlived its node: its next write fails, and
    // every one after it.
    assert!(matches!(jobs.send("stale"), Err(Error::Storage { .. })));
    assert!(matches!(jobs.send("later"), Err(Error::Storage { .. })));

    // The other survivor follows the new leader.
    let survivor = others.into_iter().find(|&id| id != new).unwrap();
    assert_eq!(cluster.converged(survivor, new).messages(), 2);
    drop((jobs, engine, jobs2, successor));
}

#[test]
fn a_learner_catches_up_from_a_snapshot_sent_over_http() {
    let mut cluster = Cluster::new(3);
    let leader = cluster.leader(&[1, 2, 3]);
    let engine = cluster.start_engine(leader);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    for i in 0..20u8 {
        q.send(vec![i; 16]).unwrap();
    }
    let got = q.receive_with(5, lease()).unwrap();
    for d in &got[..2] {
        q.ack(&d.receipt).unwrap();
    }

    // Snapshot and purge the log, so a newcomer can only start from the
    // snapshot.
    let raft = cluster.raft(leader).clone();
    let index = cluster.last_applied(leader);
    cluster.rt.block_on(raft.trigger().snapshot()).unwrap();
    let wait = raft.wait(Some(WAIT));
    cluster
        .rt
        .block_on(
            wait.metrics(|m| m.snapshot.is_some_and(|s| s.index >= index) && m.purged.is_some(), "snapshot and purge"),
        )
        .unwrap();
    let snapshot_bytes = cluster.members[&leader].node.replica_state().snapshot().len();
    assert!(snapshot_bytes > 2 * 256, "the snapshot ({snapshot_bytes} bytes) takes several chunks");

    cluster.add(4);
    let learner = BasicNode::new(cluster.members[&4].addr.clone());
    cluster.rt.block_on(raft.add_learner(4, learner, true)).unwrap();
    let wait = cluster.raft(4).wait(Some(WAIT));
    cluster.rt.block_on(wait.applied_index_at_least(Some(index), "applied")).unwrap();
    let newcomer = cluster.raft(4).metrics().borrow().clone();
    assert!(newcomer.snapshot.is_some(), "node 4 installed the snapshot: {newcomer:?}");

    let theirs = cluster.converged(4, leader);
    assert_eq!(theirs.messages(), 18);

    // Entries after the snapshot reach it as usual.
    q.send("after the snapshot").unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while cluster.converged(4, leader).messages() < 19 {
        assert!(std::time::Instant::now() < deadline, "node 4 did not get the write after the snapshot");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop((q, engine));
}

/// A vote request from node 2 in term `term`, sent to `addr` with a
/// `ttl`.
async fn vote_at(
    addr: &str,
    term: u64,
    ttl: Duration,
) -> Result<openraft::raft::VoteResponse<NodeId>, RPCError<NodeId, BasicNode, openraft::error::RaftError<NodeId>>> {
    let mut connection = HttpNetwork::new().new_client(1, &BasicNode::new(addr)).await;
    connection.vote(VoteRequest::new(Vote::new(term, 2), None), RPCOption::new(ttl)).await
}

/// A listener that answers every connection with `answer` (or, if empty,
/// reads and never answers).
async fn fake_server(answer: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0; 4096];
                let _ = stream.read(&mut buf).await;
                if answer.is_empty() {
                    tokio::time::sleep(WAIT).await;
                } else {
                    let _ = stream.write_all(answer).await;
                }
            });
        }
    });
    addr
}

#[test]
fn each_failure_comes_back_as_the_rpc_error_openraft_acts_on() {
    let rt = runtime();
    rt.block_on(async {
        let ttl = Duration::from_secs(2);

        // Nobody listening: unreachable.
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        let refused = vote_at(&addr, 1, ttl).await;
        assert!(matches!(refused, Err(RPCError::Unreachable(_))), "{refused:?}");

        // Not an HTTP Raft answer: a network error.
        let not_found = fake_server(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").await;
        let answer = vote_at(&not_found, 1, ttl).await;
        assert!(matches!(&answer, Err(RPCError::Network(e)) if e.to_string().contains("404")), "{answer:?}");
        let garbage = fake_server(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc").await;
        let answer = vote_at(&garbage, 1, ttl).await;
        assert!(matches!(answer, Err(RPCError::Network(_))), "{answer:?}");

        // No answer in time: a timeout, naming both ends.
        let silent = fake_server(b"").await;
        match vote_at(&silent, 1, Duration::from_millis(200)).await {
            Err(RPCError::Timeout(t)) => assert_eq!((t.id, t.target, t.timeout), (2, 1, Duration::from_millis(200))),
            other => panic!("{other:?}"),
        }

        // A batch too large for one body is split; one entry too large is
        // refused without being sent.
        let entry = |index, bytes| openraft::Entry {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 2), index),
            payload: openraft::EntryPayload::Normal(leaseq_cluster::Request { term: 1, frames: vec![0; bytes] }),
        };
        let append = |entries| openraft::raft::AppendEntriesRequest::<leaseq_cluster::TypeConfig> {
            vote: Vote::new_committed(1, 2),
            prev_log_id: None,
            leader_commit: None,
            entries,
        };
        let half = MAX_RAFT_BODY_BYTES / 2 + 1;
        let mut connection = HttpNetwork::new().new_client(1, &BasicNode::new(&silent)).await;
        match connection.append_entries(append(vec![entry(1, half), entry(2, half)]), RPCOption::new(ttl)).await {
            Err(RPCError::PayloadTooLarge(too_large)) => assert_eq!(too_large.entries_hint(), 1),
            other => panic!("{other:?}"),
        }
        let alone = connection.append_entries(append(vec![entry(1, MAX_RAFT_BODY_BYTES)]), RPCOption::new(ttl)).await;
        assert!(matches!(alone, Err(RPCError::Network(_))), "{alone:?}");

        // A real node answers; once its Raft is stopped, that is a remote
        // error, typed.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node =
            Node::start_with(1, config(), HttpNetwork::new(), LogStore::new(), StateMachine::new()).await.unwrap();
        let raft = node.raft().clone();
        let server = tokio::spawn(serve_raft(listener, raft.clone(), None, std::future::pending()));
        let granted = vote_at(&addr, 1, ttl).await.unwrap();
        assert!(granted.vote_granted, "{granted:?}");
        raft.shutdown().await.unwrap();
        let stopped = vote_at(&addr, 2, ttl).await;
        match stopped {
            Err(RPCError::RemoteError(e)) => {
                assert_eq!(e.target, 1);
                assert!(matches!(e.source, openraft::error::RaftError::Fatal(openraft::error::Fatal::Stopped)));
            }
            other => panic!("{other:?}"),
        }
        server.abort();
    });
}

/// Sends one raw HTTP/1.1 request to `addr` and returns the status code.
async fn status_of(addr: &str, request: String) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("no status in {text:?}"))
}

#[test]
fn serve_raft_answers_only_raft_rpcs() {
    let rt = runtime();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node =
            Node::start_with(1, config(), HttpNetwork::new(), LogStore::new(), StateMachine::new()).await.unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(serve_raft(listener, node.raft().clone(), None, async {
            let _ = stopped.await;
        }));
        let post = |path: &str, body: &str| {
            format!(
                "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        assert_eq!(status_of(&addr, post("/other", "")).await, 404);
        assert_eq!(status_of(&addr, post("/raft/nothing", "")).await, 404);
        assert_eq!(status_of(&addr, post(VOTE_PATH, "garbage")).await, 400);
        assert_eq!(status_of(&addr, post(VOTE_PATH, "")).await, 400);
        let get = format!("GET {VOTE_PATH} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        assert_eq!(status_of(&addr, get).await, 405);
        let huge =
            format!("POST {VOTE_PATH} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 999999999\r\n\r\n");
        assert_eq!(status_of(&addr, huge).await, 413);

        // Shut down, the listener is closed.
        stop.send(()).unwrap();
        tokio::time::timeout(WAIT, server).await.unwrap().unwrap().unwrap();
        assert!(tokio::net::TcpStream::connect(&addr).await.is_err());
        node.raft().shutdown().await.unwrap();
    });
}

fn secret(text: &str) -> ClusterSecret {
    ClusterSecret::new(&text.repeat(64)).unwrap()
}

/// A raw `POST path` with `body` and, if given, an auth header.
fn raw_post(path: &str, body: &[u8], auth: Option<&str>) -> Vec<u8> {
    let auth = auth.map(|value| format!("{AUTH_HEADER}: {value}\r\n")).unwrap_or_default();
    let mut request =
        format!("POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{auth}content-length: {}\r\n\r\n", body.len())
            .into_bytes();
    request.extend_from_slice(body);
    request
}

/// Sends one raw request to `addr` and returns the status and the body.
async fn answer_of(addr: &str, request: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP answer");
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("{head:?}"));
    (status, answer[split + 4..].to_vec())
}

#[test]
fn a_group_with_a_secret_elects_replicates_and_refuses_unsigned_rpcs() {
    let cluster = Cluster::with_secrets(3, |_| Some(secret("s")));
    let leader = cluster.leader(&[1, 2, 3]);
    let engine = cluster.start_engine(leader);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    for i in 0..5u8 {
        q.send(vec![i]).unwrap();
    }
    for follower in [1, 2, 3].into_iter().filter(|&id| id != leader) {
        assert_eq!(cluster.converged(follower, leader).messages(), 5);
    }

    let target = cluster.members[&leader].addr.clone();
    let ttl = Duration::from_secs(2);
    cluster.rt.block_on(async {
        // A vote request in a much later term: granted, it would depose the
        // leader. Unsigned or signed with another secret it never reaches
        // Raft.
        let vote = leaseq_cluster_vote_body(1_000);
        let (status, body) = answer_of(&target, &raw_post(VOTE_PATH, &vote, None)).await;
        assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("cluster authentication failed"));
        let forged = secret("w").sign("POST", VOTE_PATH, &vote, unix_now_ms());
        assert_eq!(answer_of(&target, &raw_post(VOTE_PATH, &vote, Some(&forged))).await.0, 403);
        // The right signature on another body, or an old one, is refused.
        let other_body = secret("s").sign("POST", VOTE_PATH, b"something else", unix_now_ms());
        assert_eq!(answer_of(&target, &raw_post(VOTE_PATH, &vote, Some(&other_body))).await.0, 403);
        let stale = secret("s").sign("POST", VOTE_PATH, &vote, unix_now_ms() - 10 * 60 * 1000);
        assert_eq!(answer_of(&target, &raw_post(VOTE_PATH, &vote, Some(&stale))).await.0, 403);
        assert_eq!(answer_of(&target, &raw_post(VOTE_PATH, &vote, Some("v1:garbage"))).await.0, 403);
        // Properly signed garbage gets past the check, to the body's.
        let signed_garbage = secret("s").sign("POST", VOTE_PATH, b"garbage", unix_now_ms());
        assert_eq!(answer_of(&target, &raw_post(VOTE_PATH, b"garbage", Some(&signed_garbage))).await.0, 400);

        // Through an unsigned client, the 403 is a network error, not a
        // Raft answer.
        let unsigned = vote_at(&target, 1_000, ttl).await;
        assert!(matches!(&unsigned, Err(RPCError::Network(e)) if e.to_string().contains("403")), "{unsigned:?}");
        let mut wrong = HttpNetwork::with_secret(secret("w")).new_client(leader, &BasicNode::new(&target)).await;
        let refused = wrong.vote(VoteRequest::new(Vote::new(1_000, 2), None), RPCOption::new(ttl)).await;
        assert!(matches!(&refused, Err(RPCError::Network(e)) if e.to_string().contains("403")), "{refused:?}");
    });
    // None of it reached Raft: a vote granted in term 1,000 would have
    // moved every node there.
    for id in [1, 2, 3] {
        let metrics = cluster.raft(id).metrics().borrow().clone();
        assert!(metrics.current_term < 1_000, "node {id}: {metrics:?}");
    }
    q.send("still served").unwrap();
    drop((q, engine));
}

/// The body of a vote request from node 2 in `term`, as the wire carries it.
fn leaseq_cluster_vote_body(term: u64) -> Vec<u8> {
    use bincode::Options;
    let request = VoteRequest::<NodeId>::new(Vote::new(term, 2), None);
    bincode::DefaultOptions::new().serialize(&request).unwrap()
}

#[test]
fn a_node_with_another_secret_can_neither_vote_nor_be_appended_to() {
    // Node 3 holds another secret; all three start from the same
    // membership, so node 3 stands for election when it hears no leader.
    let cluster = Cluster::with_secrets(3, |id| Some(secret(if id == 3 { "w" } else { "s" })));
    cluster.rt.block_on(cluster.raft(3).initialize(cluster.membership())).unwrap();
    let leader = cluster.leader(&[1, 2]);
    let engine = cluster.start_engine(leader);
    let q = engine.create_queue("q", QueueConfig::default()).unwrap();
    for i in 0..5u8 {
        q.send(vec![i]).unwrap();
    }
    let other = if leader == 1 { 2 } else { 1 };
    assert_eq!(cluster.converged(other, leader).messages(), 5);
    let term = cluster.raft(leader).metrics().borrow().current_term;

    // Several of node 3's election timeouts pass.
    std::thread::sleep(Duration::from_millis(1_500));
    let outsider = cluster.raft(3).metrics().borrow().clone();
    assert_ne!(outsider.state, ServerState::Leader, "{outsider:?}");
    assert!(outsider.current_leader.is_none_or(|id| id == 3), "{outsider:?}");
    // Nothing was appended to it beyond the membership it started with.
    assert_eq!(outsider.last_log_index, Some(0), "{outsider:?}");
    assert_eq!(cluster.members[&3].node.replica_state().messages(), 0);
    assert!(outsider.current_term > term, "node 3 stood for election: {outsider:?}");
    // Its vote requests never reached the others (their term did not follow
    // its), and the group's leader has no match for it.
    let leader = cluster.leader(&[1, 2]);
    let metrics = cluster.raft(leader).metrics().borrow().clone();
    assert!(metrics.current_term < outsider.current_term, "{metrics:?}\n{outsider:?}");
    let replication = metrics.replication.clone().expect("the leader replicates");
    assert_eq!(replication.get(&3), Some(&None), "{replication:?}");
    let other = if leader == 1 { 2 } else { 1 };
    assert!(replication.get(&other).is_some_and(|matched| matched.is_some()), "{replication:?}");
    drop((q, engine));
}
