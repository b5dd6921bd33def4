//! The lock that keeps one Raft data dir in use by one store at a time.
//!
//! Invariant: while a `DirLock` lives, no other `DirLock` on the same dir
//! can be taken, in this process or another. It is an exclusive
//! `File::try_lock` (an `flock`-style lock on Unix) on `dir/LOCK`: such a
//! lock belongs to the open file description, so a second open in this
//! same process conflicts too (an `fcntl` record lock, which the engine
//! uses, is per process and would need a registry of open dirs beside it;
//! it also needs `unsafe`, which this crate forbids). The price of
//! `flock`: a child forked without exec would share the lock; the file is
//! opened close-on-exec, so an exec'd child does not. The lock goes with
//! the file when the process dies, `kill -9` included.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

use crate::error::ClusterError;

/// Holds a data dir for one store.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes `dir`'s lock, or says who holds it.
    pub(crate) fn take(dir: &Path) -> Result<DirLock, ClusterError> {
        let path: PathBuf = dir.join("LOCK");
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| ClusterError::io(format!("opening {}", path.display()), source))?;
        match file.try_lock() {
            Ok(()) => Ok(DirLock { _file: file }),
            Err(TryLockError::WouldBlock) => Err(ClusterError::DataDirLocked { path: dir.to_path_buf() }),
            Err(TryLockError::Error(source)) => Err(ClusterError::io(format!("locking {}", path.display()), source)),
        }
    }
}
