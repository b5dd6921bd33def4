//! Why a cluster operation failed.
//!
//! Invariant: every failure a caller can meet is a variant here with its
//! cause in words; nothing on these paths panics.

use std::fmt;

/// A cluster operation's failure.
#[derive(Debug)]
pub enum ClusterError {
    /// The Raft node failed or refused (its message).
    Raft(String),
    /// The node did not become a leader that had applied its term's
    /// entries within the wait.
    NotLeader,
    /// This node already started an engine in this term: a second one would
    /// not see the first one's writes.
    AlreadyServing {
        /// The term the first engine was started in.
        term: u64,
    },
    /// The engine would not start from the replica state.
    Engine(leaseq::Error),
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Raft(why) => write!(f, "raft: {why}"),
            ClusterError::NotLeader => f.write_str("this node did not become a serving leader in time"),
            ClusterError::AlreadyServing { term } => write!(f, "an engine already serves term {term} on this node"),
            ClusterError::Engine(e) => write!(f, "engine: {e}"),
        }
    }
}

impl std::error::Error for ClusterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClusterError::Engine(e) => Some(e),
            _ => None,
        }
    }
}
