//! leaseq-cluster: a leaseq engine replicated through a Raft group
//! (openraft 0.9), on the engine's replication seam (docs/replication.md).
//!
//! The leader's engine hands its records to a [`RaftSink`], which proposes
//! each group as one Raft entry and returns once it committed; every node's
//! [`StateMachine`] applies committed entries to a `leaseq::ReplicaState`.
//! When leadership moves, the new leader's [`Node::start_engine`] waits
//! until it has applied everything committed, then starts a leader engine
//! from its replica state. The old leader's engine, cut off from a quorum,
//! fails its writes and then refuses all writes; entries it manages to get
//! appended in a later term are fenced (skipped by every replica).
//!
//! Nodes talk over HTTP/1.1 ([`HttpNetwork`] sends, [`answer_raft_rpc`] or
//! [`serve_raft`] answers; the wire format is in `rpc.rs`), each request
//! signed with the group's [`ClusterSecret`] when one is given
//! (`peer_auth.rs`), or in-process
//! through a [`Router`] in tests. A node keeps its Raft log and latest
//! snapshot in memory ([`LogStore`], [`StateMachine::new`]) or durably in a
//! dir ([`DurableLogStore`], [`StateMachine::open`], both through
//! [`Node::open`]), so that a node killed and restarted from its dir keeps
//! what it acknowledged.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod durable;
mod error;
mod http_network;
mod log_store;
mod network;
mod node;
mod peer_auth;
mod rpc;
mod sink;
mod state_machine;
mod types;

pub use durable::{DEFAULT_SEGMENT_BYTES, DurableLogOptions, DurableLogReader, DurableLogStore, LogRecovery, TornTail};
pub use error::ClusterError;
pub use http_network::{HttpConnection, HttpNetwork};
pub use log_store::LogStore;
pub use network::{Connection, Network, Router};
pub use node::Node;
pub use peer_auth::{
    AUTH_HEADER, AuthRefusal, ClusterSecret, MAX_CLOCK_SKEW, MIN_SECRET_BYTES, SecretError, unix_now_ms,
};
pub use rpc::{
    APPEND_PATH, MAX_RAFT_BODY_BYTES, RAFT_PATH_PREFIX, RpcError, SNAPSHOT_PATH, VOTE_PATH, answer_raft_rpc, serve_raft,
};
pub use sink::{DEFAULT_WRITE_TIMEOUT, RaftSink, SinkGate};
pub use state_machine::StateMachine;
pub use types::{NodeId, Raft, Request, Response, TypeConfig};
