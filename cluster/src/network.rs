//! An in-process network: a router that hands each RPC straight to the
//! target node's `Raft` handle, and can isolate nodes.
//!
//! Invariant: an RPC reaches its target only if the target is registered and
//! neither end is isolated; otherwise it fails as `Unreachable`, as a cut
//! link would. Between processes, nodes use `http_network.rs` instead.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};

use crate::types::{NodeId, Raft, TypeConfig};

#[derive(Default)]
struct Inner {
    nodes: HashMap<NodeId, Raft>,
    isolated: HashSet<NodeId>,
}

/// The in-process network of one group; clones share it.
#[derive(Clone, Default)]
pub struct Router {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        let mut nodes: Vec<NodeId> = inner.nodes.keys().copied().collect();
        nodes.sort_unstable();
        f.debug_struct("Router").field("nodes", &nodes).field("isolated", &inner.isolated).finish()
    }
}

impl Router {
    /// An empty network.
    #[must_use]
    pub fn new() -> Self {
        Router::default()
    }

    /// Makes `raft` reachable as `id`.
    pub fn register(&self, id: NodeId, raft: Raft) {
        self.lock().nodes.insert(id, raft);
    }

    /// Cuts `id` off: nothing it sends arrives and nothing reaches it.
    pub fn isolate(&self, id: NodeId) {
        self.lock().isolated.insert(id);
    }

    /// Reconnects `id`.
    pub fn heal(&self, id: NodeId) {
        self.lock().isolated.remove(&id);
    }

    /// The factory node `from` sends its RPCs through.
    #[must_use]
    pub fn factory(&self, from: NodeId) -> Network {
        Network { router: self.clone(), from }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The target's handle, if the link `from` -> `target` is up; why not
    /// otherwise.
    fn route(&self, from: NodeId, target: NodeId) -> Result<Raft, String> {
        let inner = self.lock();
        if inner.isolated.contains(&from) || inner.isolated.contains(&target) {
            return Err(format!("link {from} -> {target} is partitioned"));
        }
        inner.nodes.get(&target).cloned().ok_or_else(|| format!("node {target} is not registered"))
    }
}

/// A cut link, as openraft's network errors name it.
fn cut<E: std::error::Error>(why: String) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&io::Error::new(io::ErrorKind::NotConnected, why)))
}

/// Node `from`'s view of the network (openraft's network factory).
#[derive(Debug, Clone)]
pub struct Network {
    router: Router,
    from: NodeId,
}

/// A connection from one node to another.
#[derive(Debug, Clone)]
pub struct Connection {
    router: Router,
    from: NodeId,
    target: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Self::Network {
        Connection { router: self.router.clone(), from: self.from, target }
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self.router.route(self.from, self.target).map_err(cut)?;
        raft.append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        let raft = self.router.route(self.from, self.target).map_err(cut)?;
        raft.install_snapshot(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self.router.route(self.from, self.target).map_err(cut)?;
        raft.vote(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}
