//! Why a cluster operation failed.
//!
//! Invariant: every failure a caller can meet is a variant here with its
//! cause in words; nothing on these paths panics.

use std::fmt;
use std::io;
use std::path::PathBuf;

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
    /// Another open store (in this process or another) holds this Raft
    /// data dir.
    DataDirLocked {
        /// The dir.
        path: PathBuf,
    },
    /// A durable file holds damage that recovery may not repair: a bad
    /// record that is not the torn tail of the newest log segment, or a bad
    /// snapshot file.
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Where in it.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// Reading or writing a durable file failed.
    Io {
        /// What was being done, with the path.
        action: String,
        /// The operating system's error.
        source: io::Error,
    },
}

impl ClusterError {
    pub(crate) fn io(action: String, source: io::Error) -> ClusterError {
        ClusterError::Io { action, source }
    }
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Raft(why) => write!(f, "raft: {why}"),
            ClusterError::NotLeader => f.write_str("this node did not become a serving leader in time"),
            ClusterError::AlreadyServing { term } => write!(f, "an engine already serves term {term} on this node"),
            ClusterError::Engine(e) => write!(f, "engine: {e}"),
            ClusterError::DataDirLocked { path } => {
                write!(f, "{} is in use by another open Raft store (in this process or another)", path.display())
            }
            ClusterError::Corrupt { path, offset, reason } => {
                write!(f, "{} is damaged at byte {offset}: {reason}", path.display())
            }
            ClusterError::Io { action, source } => write!(f, "{action}: {source}"),
        }
    }
}

impl std::error::Error for ClusterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClusterError::Engine(e) => Some(e),
            ClusterError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
