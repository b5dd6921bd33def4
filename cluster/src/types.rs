//! The Raft group's type configuration: what one log entry carries and what
//! applying it answers.
//!
//! Invariant: a normal entry's [`Request`] holds the frames of exactly one
//! `ReplicationSink::replicate` call, tagged with the term of the leader
//! whose engine encoded them; replicas apply it only if the entry was
//! appended in that same term (a fence against an engine that outlived its
//! leadership, see `state_machine.rs`).

use std::fmt;
use std::io::Cursor;

/// A node's id in the group.
pub type NodeId = u64;

/// One replicated group of engine records.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Request {
    /// The Raft term the proposing engine was started in.
    pub term: u64,
    /// Encoded engine records, as `ReplicationSink::replicate` got them.
    pub frames: Vec<u8>,
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Request(term {}, {} bytes)", self.term, self.frames.len())
    }
}

/// What applying one entry did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Response {
    /// A blank or membership entry: nothing for the engine.
    #[default]
    Nothing,
    /// The frames were applied; this many records.
    Applied(u64),
    /// The entry was appended in a later term than its engine's: every
    /// replica skipped it.
    Fenced,
}

openraft::declare_raft_types!(
    /// The openraft type configuration of a leaseq group.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A Raft handle of this group.
pub type Raft = openraft::Raft<TypeConfig>;
