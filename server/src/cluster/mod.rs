//! Cluster mode (`leaseq-server --cluster`): this server is one node of a
//! Raft group (`leaseq-cluster`) whose leader runs the replicated engine.
//!
//! * Every node answers SQS requests on one port: the leader from its
//!   engine, a follower by forwarding to the leader (`forward.rs`), a node
//!   without a serving leader with `ServiceUnavailable` (503, which the SDKs
//!   retry). Raft's own RPCs (`/raft/...`) and the cluster's endpoints
//!   (`/cluster/...`, `admin.rs`) share the port.
//! * Which of those applies is the node's `Role` (`role.rs`), kept by one
//!   controller task (`controller.rs`) from openraft's metrics.
//! * The Raft log and snapshots are durable in the data dir, synced before
//!   Raft counts an entry as stored, so an acknowledged call is on a quorum's
//!   disks (docs/replication.md says what each call survives).
//! * A node whose data dir holds nothing takes part in Raft only once its
//!   peers said it is not a voter (`admission.rs`): a voter that lost its dir
//!   must be removed and added again.
//!
//! Invariant: SQS requests are answered from a local engine only while the
//! node serves a confirmed leadership (`role.rs`); nothing reaches an engine
//! on a follower, and no request is forwarded twice.

mod admin;
mod admission;
mod controller;
mod forward;
mod role;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::StatusCode;
use hyper::http::request::Parts;
use leaseq_cluster::{AuthRefusal, ClusterSecret, HttpNetwork, Node, NodeId, RpcError, answer_raft_rpc};
use openraft::{BasicNode, SnapshotPolicy};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) use admin::{ADMIN_PREFIX, AdminAnswer, failure};
pub use admin::{Status, admin_request};
pub(crate) use forward::{FORWARDED_BY, ForwardFailed};
pub(crate) use role::Route;

use admission::Admission;
use controller::Shared;
use forward::Forwarder;
use role::Role;

/// Raft's timing: how often the leader sends heartbeats and how long a
/// follower waits without one before it stands for election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    /// Between heartbeats.
    pub heartbeat: Duration,
    /// The shortest election timeout.
    pub election_min: Duration,
    /// The longest election timeout (a random one in between is drawn).
    pub election_max: Duration,
}

impl Default for RaftTiming {
    /// 100 ms heartbeats and 400-800 ms election timeouts: a dead leader is
    /// replaced in about a second on loopback or a LAN.
    fn default() -> Self {
        RaftTiming {
            heartbeat: Duration::from_millis(100),
            election_min: Duration::from_millis(400),
            election_max: Duration::from_millis(800),
        }
    }
}

/// How to start a node.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node's id.
    pub node_id: NodeId,
    /// Every initial member's id and `host:port` (this node's included).
    pub peers: BTreeMap<NodeId, String>,
    /// Where this node keeps its Raft log and snapshots.
    pub data_dir: PathBuf,
    /// Make `peers` the group's first membership if this node's log is
    /// empty, once every other peer is up and passed its own check
    /// (`admission.rs`; give it to one node, once; a node that already holds
    /// a log ignores it).
    pub bootstrap: bool,
    /// Heartbeat and election timeouts.
    pub timing: RaftTiming,
    /// The group's shared secret: with it, this node signs its Raft RPCs
    /// and refuses (403) every Raft RPC and `/cluster/` request not signed
    /// with it; without, nothing is signed or checked.
    pub secret: Option<ClusterSecret>,
    /// On an empty data dir, take part even if no peer answers (the operator
    /// knows this node is not a voter); a peer that names it as a voter
    /// still refuses it.
    pub join_as_new: bool,
}

/// A running cluster node as the HTTP layer uses it.
#[derive(Debug)]
pub struct ClusterFront {
    shared: Arc<Shared>,
    secret: Option<ClusterSecret>,
    /// Where this node stands with the rejoin interlock.
    admission: Arc<watch::Sender<Admission>>,
    forwarder: Forwarder,
    stop: watch::Sender<bool>,
    controller: Mutex<Option<JoinHandle<()>>>,
    /// Raft, its network and the controller run here, apart from the HTTP
    /// runtime: an SQS write holds its HTTP worker until Raft commits it,
    /// so Raft must never wait for an HTTP worker.
    raft_runtime: Mutex<Option<tokio::runtime::Runtime>>,
    /// Raft RPCs this node has answered (appends, votes, snapshots).
    raft_requests: AtomicU64,
}

/// Threads of the Raft runtime: the core, the replication streams and the
/// network client are all light.
const RAFT_THREADS: usize = 2;

impl ClusterFront {
    /// Opens this node's data dir, starts its Raft node and its controller,
    /// and bootstraps the group when asked to. Call it on the runtime that
    /// will serve the node's listener.
    ///
    /// # Errors
    ///
    /// The config is invalid (this node missing from `peers` when
    /// bootstrapping, bad timings), or the data dir cannot be opened.
    pub async fn start(config: ClusterConfig) -> Result<Arc<ClusterFront>, String> {
        if config.bootstrap && !config.peers.contains_key(&config.node_id) {
            return Err(format!("--bootstrap: node {} is not among the peers", config.node_id));
        }
        let raft_config = openraft::Config {
            cluster_name: "leaseq".into(),
            heartbeat_interval: millis(config.timing.heartbeat),
            election_timeout_min: millis(config.timing.election_min),
            election_timeout_max: millis(config.timing.election_max),
            // A snapshot every 10,000 entries bounds the log (and so a
            // restart's replay) to that many entries past the last one.
            snapshot_policy: SnapshotPolicy::LogsSinceLast(10_000),
            max_in_snapshot_log_to_keep: 1_000,
            ..openraft::Config::default()
        };
        let raft_config = Arc::new(raft_config.validate().map_err(|e| format!("raft timing: {e}"))?);
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| format!("cannot create {}: {e}", config.data_dir.display()))?;
        let raft_runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RAFT_THREADS)
            .thread_name("leaseq-raft")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the Raft runtime: {e}"))?;
        let (id, dir) = (config.node_id, config.data_dir.clone());
        let network = config.secret.clone().map_or_else(HttpNetwork::new, HttpNetwork::with_secret);
        let node = raft_runtime
            .spawn(async move { Node::open(id, raft_config, network, &dir).await })
            .await
            .map_err(|e| format!("the Raft runtime failed: {e}"))?
            .map_err(|e| format!("cannot open node {} in {}: {e}", config.node_id, config.data_dir.display()))?;
        let members: BTreeMap<NodeId, BasicNode> =
            config.peers.iter().map(|(id, addr)| (*id, BasicNode::new(addr.clone()))).collect();
        let fresh = node.started_empty();
        let admission = Arc::new(watch::Sender::new(if fresh { Admission::Checking } else { Admission::Admitted }));
        if fresh {
            let intent =
                admission::Intent { me: config.node_id, bootstrap: config.bootstrap, join_as_new: config.join_as_new };
            let check = admission::run(intent, node.raft().clone(), members, config.secret.clone(), admission.clone());
            raft_runtime.spawn(check);
        } else if config.bootstrap {
            // Refused (NotAllowed) once the node holds a log: nothing to do.
            if let Err(e) = node.raft().initialize(members).await
                && e.api_error().is_none()
            {
                return Err(format!("cannot bootstrap the group: {e}"));
            }
        }
        let shared = Arc::new(Shared {
            node,
            role: RwLock::new(Role::Waiting("this node is starting".into())),
            lease: config.timing.election_min,
        });
        let (stop, stopping) = watch::channel(false);
        let controller = raft_runtime.spawn(controller::run(shared.clone(), stopping));
        Ok(Arc::new(ClusterFront {
            shared,
            secret: config.secret,
            admission,
            forwarder: Forwarder::new(config.node_id),
            stop,
            controller: Mutex::new(Some(controller)),
            raft_runtime: Mutex::new(Some(raft_runtime)),
            raft_requests: AtomicU64::new(0),
        }))
    }

    /// This node's id.
    #[must_use]
    pub fn node_id(&self) -> NodeId {
        self.shared.node.id()
    }

    /// Stops serving: the controller ends, the engine closes, and the Raft
    /// node shuts down.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let controller = self.controller.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(controller) = controller {
            let _ = controller.await;
        }
        let _ = self.shared.node.raft().shutdown().await;
        if let Some(runtime) = self.raft_runtime.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            runtime.shutdown_background();
        }
    }

    /// How to answer an SQS request now (`forwarded`: another node sent it).
    pub(crate) fn route(&self, forwarded: bool) -> Route {
        match self.shared.role().route() {
            Route::Forward { leader, .. } if forwarded => Route::Unavailable(format!(
                "this node is not the leader (node {leader} is, as far as it knows) and the request was already \
                 forwarded once"
            )),
            route => route,
        }
    }

    /// The registry this node serves from, if it leads (for `/metrics`,
    /// whatever the lease).
    pub(crate) fn leader_registry(&self) -> Option<Arc<crate::registry::Registry>> {
        match self.shared.role() {
            Role::Leading { registry, .. } => Some(registry),
            _ => None,
        }
    }

    /// Sends a request on to the node at `addr`.
    pub(crate) async fn forward(
        &self,
        addr: &str,
        parts: &Parts,
        body: Bytes,
    ) -> Result<hyper::Response<Full<Bytes>>, ForwardFailed> {
        self.forwarder.forward(addr, parts, body).await
    }

    /// Where this node stands with the rejoin interlock.
    pub(crate) fn admission(&self) -> Admission {
        self.admission.borrow().clone()
    }

    /// Completes, with the reason, if the rejoin interlock refuses this node
    /// (a node that holds a log never is); the caller stops serving.
    pub async fn refused(&self) -> String {
        let mut admission = self.admission.subscribe();
        loop {
            if let Admission::Refused(why) = &*admission.borrow_and_update() {
                return why.clone();
            }
            // The sender lives as long as `self`.
            if admission.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Why this node must not take part, if the interlock refused it.
    #[must_use]
    pub fn refusal(&self) -> Option<String> {
        match self.admission() {
            Admission::Refused(why) => Some(why),
            _ => None,
        }
    }

    /// Whether a Raft RPC or `/cluster/` request's header can pass before
    /// its body is read (always, without a secret).
    pub(crate) fn screen_peer(&self, headers: &hyper::HeaderMap) -> Result<(), AuthRefusal> {
        match &self.secret {
            Some(_) => ClusterSecret::screen(headers),
            None => Ok(()),
        }
    }

    /// Whether a Raft RPC or `/cluster/` request is signed with the group's
    /// secret (always, without one).
    pub(crate) fn verify_peer(&self, parts: &Parts, body: &[u8]) -> Result<(), AuthRefusal> {
        match &self.secret {
            Some(secret) => secret.verify_request(&parts.method, parts.uri.path(), &parts.headers, body),
            None => Ok(()),
        }
    }

    /// Answers one of Raft's RPCs; none reaches Raft before the interlock
    /// admitted this node.
    pub(crate) async fn raft_rpc(&self, path: &str, body: &[u8]) -> hyper::Response<Full<Bytes>> {
        if self.admission() != Admission::Admitted {
            return admin::failure(
                StatusCode::SERVICE_UNAVAILABLE,
                "this node started on an empty data dir and takes no part in Raft until its peers said it is not \
                 a voter",
            );
        }
        // Relaxed: a counter for /metrics, ordered with nothing else.
        self.raft_requests.fetch_add(1, Ordering::Relaxed);
        match answer_raft_rpc(self.shared.node.raft(), path, body).await {
            Ok(answer) => {
                let mut response = hyper::Response::new(Full::new(Bytes::from(answer)));
                response.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("application/octet-stream"),
                );
                response
            }
            Err(e @ RpcError::UnknownPath(_)) => admin::failure(StatusCode::NOT_FOUND, e),
            Err(e @ RpcError::BadBody(_)) => admin::failure(StatusCode::BAD_REQUEST, e),
        }
    }

    /// Lines for `/metrics` about this node's part in the group.
    pub(crate) fn metrics(&self) -> String {
        let status = self.status();
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, value: u64| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"));
        };
        gauge("leaseq_cluster_node_id", "This node's id in its Raft group.", status.node_id);
        gauge("leaseq_cluster_term", "The Raft term this node is in.", status.term);
        gauge("leaseq_cluster_leader", "The leader's node id (0: none known).", status.leader.unwrap_or(0));
        gauge("leaseq_cluster_serving", "1 while this node answers from its own engine.", u64::from(status.serving));
        gauge(
            "leaseq_cluster_last_log_index",
            "The last Raft log index held here.",
            status.last_log_index.unwrap_or(0),
        );
        gauge("leaseq_cluster_last_applied", "The last Raft log index applied here.", status.last_applied.unwrap_or(0));
        gauge("leaseq_cluster_voters", "Voting members of the group.", status.voters.len() as u64);
        let name = "leaseq_cluster_raft_requests_total";
        out.push_str(&format!(
            "# HELP {name} Raft RPCs this node answered (appends, votes, snapshots).\n# TYPE {name} counter\n{name} {}\n",
            self.raft_requests.load(Ordering::Relaxed)
        ));
        out
    }
}

impl Drop for ClusterFront {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which an async context forbids;
        // shutting it down in the background does not.
        if let Some(runtime) = self.raft_runtime.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            runtime.shutdown_background();
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
