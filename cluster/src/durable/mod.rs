//! Durable storage of a Raft node: its log in segment files and its latest
//! snapshot in one file, all under one locked dir.
//!
//! Invariant: what a store call acknowledged is read back by the next open
//! of the same dir (`log_store.rs` says when each call syncs); damage other
//! than a torn tail is an error naming the file and offset, never a panic
//! and never silently dropped data.
//!
//! Layout of the dir: `LOCK` (held while a store is open), `log-<n>.seg`
//! (segments, `n` in 16 hex digits, oldest first), `snapshot.bin` (the
//! latest snapshot; `snapshot.bin.tmp` while one is written).

pub(crate) mod fs;
mod lock;
mod log_store;
mod record;
mod segment;
pub(crate) mod snapshot_file;

pub use log_store::{
    DEFAULT_SEGMENT_BYTES, DurableLogOptions, DurableLogReader, DurableLogStore, LogRecovery, TornTail,
};
