//! `DurableLogStore`: the Raft log (entries, vote, committed id, purge
//! point) in segment files, with every live entry also kept in memory so
//! that reads never touch the disk.
//!
//! Invariants:
//!
//! * The log on disk is the sequence of records (`record.rs`) in segment
//!   order; replaying it through `Memory::apply`, the same function every
//!   live change goes through after its record is written, gives back the
//!   memory state. Nothing changes in memory before its record is written.
//! * Every segment starts with a checkpoint of the vote, committed id and
//!   purge point, so segments are deleted oldest first once all their
//!   entries are purged, without losing any of the three. The newest
//!   segment is never deleted.
//! * When each call is durable: `save_vote`, `truncate` and `purge` sync
//!   (`fdatasync`) before they return; `append` writes all its entries,
//!   syncs once (the group commit: openraft hands over every pending entry
//!   in one call) and then completes the callback; `save_committed` only
//!   writes (it runs on every commit, and a committed id that is older
//!   than the truth is safe: on restart fewer entries are re-applied, and
//!   the leader's next message brings the rest). So after `kill -9` every
//!   call that returned is kept (the page cache outlives the process);
//!   after a power cut, all but the newest committed ids. A segment is
//!   synced whole before the next one is started, and the purge record
//!   before any segment is deleted.
//! * A failed write leaves the segment's tail unknown, so the store then
//!   refuses every write until it is reopened (recovery cuts that tail).
//! * Recovery cuts a torn tail off the newest segment and reports it; a bad
//!   record anywhere else is `ClusterError::Corrupt` naming the file and
//!   offset. A committed id beyond the recovered log (its tail lost in a
//!   power cut) is lowered to the last entry.
//! * I/O runs on the calling task (openraft's core, which serializes log
//!   I/O anyway): one `fdatasync` blocks it per append call.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::fs::File;
use std::io::{self, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote};

use crate::durable::fs::sync_dir;
use crate::durable::lock::DirLock;
use crate::durable::record::{LogRecord, encode};
use crate::durable::segment::{self, HEADER};
use crate::error::ClusterError;
use crate::types::{NodeId, TypeConfig};

/// The size a segment grows to before the next one is started, by default.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// How a `DurableLogStore` lays out its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableLogOptions {
    segment_bytes: u64,
}

impl Default for DurableLogOptions {
    fn default() -> Self {
        DurableLogOptions { segment_bytes: DEFAULT_SEGMENT_BYTES }
    }
}

impl DurableLogOptions {
    /// The defaults (`DEFAULT_SEGMENT_BYTES`).
    #[must_use]
    pub fn new() -> Self {
        DurableLogOptions::default()
    }

    /// Starts a new segment once the current one holds `bytes` (a segment
    /// exceeds it by at most one record). Small values are for tests.
    #[must_use]
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }
}

/// A torn tail that recovery cut off the newest segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file.
    pub path: PathBuf,
    /// Where the valid records ended (the file is now this long; 0 if its
    /// header was torn and the file removed).
    pub offset: u64,
    /// Bytes dropped.
    pub bytes: u64,
}

/// What `DurableLogStore::open` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecovery {
    /// Segment files read.
    pub segments: usize,
    /// Entries in the log after recovery.
    pub entries: usize,
    /// The torn tail cut off, if there was one.
    pub torn: Option<TornTail>,
    /// The vote read back.
    pub vote: Option<Vote<NodeId>>,
    /// The committed id read back (lowered to the last entry if it was
    /// beyond it).
    pub committed: Option<LogId<NodeId>>,
    /// The purge point read back.
    pub purged: Option<LogId<NodeId>>,
    /// The last entry's id (or the purge point if no entry is left).
    pub last_log_id: Option<LogId<NodeId>>,
}

/// The log's state as replayed: what reads are served from.
#[derive(Debug, Default)]
struct Memory {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    purged: Option<LogId<NodeId>>,
    log: BTreeMap<u64, Entry<TypeConfig>>,
}

impl Memory {
    /// The one way the state changes, live and at replay alike.
    fn apply(&mut self, record: LogRecord) {
        match record {
            LogRecord::Entry(entry) => {
                self.log.insert(entry.log_id.index, entry);
            }
            LogRecord::Vote(vote) => self.vote = Some(vote),
            LogRecord::Committed(committed) => self.committed = committed,
            LogRecord::TruncatedFrom(index) => {
                let _dropped = self.log.split_off(&index);
            }
            LogRecord::PurgedUpTo(log_id) => self.purge(log_id),
            LogRecord::Checkpoint { vote, committed, purged } => {
                self.vote = vote;
                self.committed = committed;
                if let Some(purged) = purged {
                    self.purge(purged);
                }
            }
        }
    }

    fn purge(&mut self, log_id: LogId<NodeId>) {
        self.purged = self.purged.max(Some(log_id));
        self.log = self.log.split_off(&(log_id.index + 1));
    }

    fn last_log_id(&self) -> Option<LogId<NodeId>> {
        self.log.values().next_back().map(|entry| entry.log_id).or(self.purged)
    }

    fn checkpoint(&self) -> LogRecord {
        LogRecord::Checkpoint { vote: self.vote, committed: self.committed, purged: self.purged }
    }
}

fn lock(memory: &Mutex<Memory>) -> MutexGuard<'_, Memory> {
    // Nothing panics while holding the lock; every change is one `apply`.
    memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One segment file of the log.
#[derive(Debug)]
struct Segment {
    number: u64,
    path: PathBuf,
    /// The highest index of an entry written to it.
    max_index: Option<u64>,
}

/// Appends records to the newest segment and rolls and deletes segments.
#[derive(Debug)]
struct Writer {
    dir: PathBuf,
    segment_bytes: u64,
    /// The newest segment, open to append.
    file: File,
    /// Its length with what is staged.
    len: u64,
    /// Its length right after its header and checkpoint.
    fresh_len: u64,
    /// Oldest first; the last is the one `file` writes.
    segments: VecDeque<Segment>,
    /// Encoded records not yet written.
    staged: Vec<u8>,
    /// Why the store refuses writes, after a failed one.
    failed: Option<String>,
    _lock: DirLock,
}

/// Creates segment `number` in `dir` holding its header and `checkpoint`,
/// synced with its directory entry.
fn create_segment(dir: &Path, number: u64, checkpoint: &LogRecord) -> io::Result<(File, PathBuf, u64)> {
    let path = dir.join(segment::file_name(number));
    let mut bytes = segment::header(number).to_vec();
    encode(checkpoint, &mut bytes).map_err(io::Error::other)?;
    let mut file = File::options().create_new(true).append(true).open(&path)?;
    file.write_all(&bytes)?;
    file.sync_data()?;
    sync_dir(dir)?;
    Ok((file, path, bytes.len() as u64))
}

impl Writer {
    /// Runs `op`; if it fails, the tail of the segment is unknown and every
    /// later write is refused.
    fn guarded<T>(&mut self, op: impl FnOnce(&mut Writer) -> io::Result<T>) -> io::Result<T> {
        if let Some(why) = &self.failed {
            return Err(io::Error::other(format!("an earlier write failed ({why}); reopen the log")));
        }
        op(self).inspect_err(|e| self.failed = Some(e.to_string()))
    }

    /// Writes `records` (starting a new segment whenever the current one is
    /// full, with `checkpoint` first), without syncing the last segment.
    fn write(&mut self, records: &[LogRecord], checkpoint: &LogRecord) -> io::Result<()> {
        self.guarded(|w| {
            for record in records {
                if w.len >= w.segment_bytes && w.len > w.fresh_len {
                    w.roll(checkpoint)?;
                }
                let before = w.staged.len();
                encode(record, &mut w.staged).map_err(io::Error::other)?;
                w.len += (w.staged.len() - before) as u64;
                if let LogRecord::Entry(entry) = record
                    && let Some(current) = w.segments.back_mut()
                {
                    current.max_index = current.max_index.max(Some(entry.log_id.index));
                }
            }
            w.flush()
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        let result = self.file.write_all(&self.staged);
        self.staged.clear();
        result
    }

    fn sync(&mut self) -> io::Result<()> {
        self.guarded(|w| w.file.sync_data())
    }

    /// Seals the current segment (written and synced whole) and starts the
    /// next.
    fn roll(&mut self, checkpoint: &LogRecord) -> io::Result<()> {
        self.flush()?;
        self.file.sync_data()?;
        let number = self.segments.back().map_or(1, |s| s.number + 1);
        let (file, path, len) = create_segment(&self.dir, number, checkpoint)?;
        self.segments.push_back(Segment { number, path, max_index: None });
        self.file = file;
        self.len = len;
        self.fresh_len = len;
        Ok(())
    }

    /// Deletes the oldest segments whose entries are all at or before
    /// `index`, never the newest one.
    fn delete_purged(&mut self, index: u64) -> io::Result<()> {
        self.guarded(|w| {
            let mut deleted = false;
            while w.segments.len() > 1 && w.segments.front().is_some_and(|s| s.max_index.is_none_or(|m| m <= index)) {
                if let Some(oldest) = w.segments.pop_front() {
                    std::fs::remove_file(&oldest.path)?;
                    deleted = true;
                }
            }
            if deleted {
                sync_dir(&w.dir)?;
            }
            Ok(())
        })
    }
}

/// A Raft log kept in segment files under one dir (see the module docs).
#[derive(Debug)]
pub struct DurableLogStore {
    memory: Arc<Mutex<Memory>>,
    writer: Writer,
}

/// Reads a `DurableLogStore`'s entries (from memory); clones share them.
#[derive(Debug, Clone)]
pub struct DurableLogReader {
    memory: Arc<Mutex<Memory>>,
}

fn corrupt(path: &Path, offset: u64, reason: String) -> ClusterError {
    ClusterError::Corrupt { path: path.to_path_buf(), offset, reason }
}

impl DurableLogStore {
    /// Opens (creating if missing) the log in `dir` with default options.
    ///
    /// # Errors
    ///
    /// See [`DurableLogStore::open_with`].
    pub fn open(dir: &Path) -> Result<(DurableLogStore, LogRecovery), ClusterError> {
        DurableLogStore::open_with(dir, DurableLogOptions::default())
    }

    /// Opens (creating if missing) the log in `dir`: takes the dir's lock,
    /// replays every segment, cuts a torn tail off the newest one.
    ///
    /// # Errors
    ///
    /// `DataDirLocked` if another store holds `dir`; `Corrupt` for damage
    /// other than a torn tail (naming the file and offset) or a missing
    /// segment; `Io` if a file cannot be read or written.
    pub fn open_with(dir: &Path, options: DurableLogOptions) -> Result<(DurableLogStore, LogRecovery), ClusterError> {
        std::fs::create_dir_all(dir).map_err(|e| ClusterError::io(format!("creating {}", dir.display()), e))?;
        let dir_lock = DirLock::take(dir)?;
        let listed = segment::list(dir).map_err(|e| ClusterError::io(format!("listing {}", dir.display()), e))?;
        let mut memory = Memory::default();
        let mut segments = VecDeque::new();
        let mut torn = None;
        let mut current: Option<(u64, bool)> = None; // (length, starts with a checkpoint)
        let count = listed.len();
        for (i, (number, path)) in listed.into_iter().enumerate() {
            let newest = i + 1 == count;
            if let Some(previous) = segments.back().map(|s: &Segment| s.number)
                && number != previous + 1
            {
                return Err(corrupt(&path, 0, format!("segment {} is missing before it", previous + 1)));
            }
            let bytes = std::fs::read(&path).map_err(|e| ClusterError::io(format!("reading {}", path.display()), e))?;
            if newest && bytes.len() < HEADER {
                // A segment whose creation was cut short: no record in it.
                remove_torn_segment(dir, &path)?;
                torn = Some(TornTail { path, offset: 0, bytes: bytes.len() as u64 });
                continue;
            }
            let scan = segment::scan(&bytes, number, newest, |record| memory.apply(record))
                .map_err(|damage| corrupt(&path, damage.offset, damage.reason))?;
            if scan.torn > 0 {
                cut_torn_tail(&path, scan.end as u64)?;
                torn = Some(TornTail { path: path.clone(), offset: scan.end as u64, bytes: scan.torn as u64 });
            }
            if newest {
                current = Some((scan.end as u64, scan.starts_with_checkpoint));
            }
            segments.push_back(Segment { number, path, max_index: scan.max_index });
        }
        if let Some(last) = memory.log.keys().next_back()
            && let Some(first) = memory.log.keys().next()
            && (last - first + 1) as usize != memory.log.len()
        {
            return Err(corrupt(dir, 0, format!("the entries {first}..={last} have holes")));
        }
        let last_log_id = memory.last_log_id();
        if memory.committed.map(|c| c.index) > last_log_id.map(|l| l.index) {
            memory.committed = last_log_id;
        }

        let io = |what: &str, e: io::Error| ClusterError::io(format!("{what} in {}", dir.display()), e);
        let checkpoint = memory.checkpoint();
        let (file, len, fresh_len, needs_checkpoint) = match (current, segments.back()) {
            (Some((len, has_checkpoint)), Some(newest)) => {
                let file =
                    File::options().append(true).open(&newest.path).map_err(|e| io("opening the newest segment", e))?;
                (file, len, if has_checkpoint { 0 } else { len }, !has_checkpoint)
            }
            _ => {
                // No segment, or the newest one's creation was cut short.
                let number = segments.back().map_or(1, |s| s.number + 1);
                let (file, path, len) =
                    create_segment(dir, number, &checkpoint).map_err(|e| io("creating a segment", e))?;
                segments.push_back(Segment { number, path, max_index: None });
                (file, len, len, false)
            }
        };
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            segment_bytes: options.segment_bytes,
            file,
            len,
            fresh_len,
            segments,
            staged: Vec::new(),
            failed: None,
            _lock: dir_lock,
        };
        if needs_checkpoint {
            // The newest segment lost its checkpoint to a torn tail: write it
            // again, so that deleting the older segments loses nothing.
            writer.write(std::slice::from_ref(&checkpoint), &checkpoint).map_err(|e| io("writing a checkpoint", e))?;
            writer.sync().map_err(|e| io("syncing a checkpoint", e))?;
            writer.fresh_len = writer.len;
        }
        let recovery = LogRecovery {
            segments: count,
            entries: memory.log.len(),
            torn,
            vote: memory.vote,
            committed: memory.committed,
            purged: memory.purged,
            last_log_id,
        };
        Ok((DurableLogStore { memory: Arc::new(Mutex::new(memory)), writer }, recovery))
    }

    /// The segment files in use, oldest first.
    #[must_use]
    pub fn segment_files(&self) -> Vec<PathBuf> {
        self.writer.segments.iter().map(|s| s.path.clone()).collect()
    }

    fn checkpoint(&self) -> LogRecord {
        lock(&self.memory).checkpoint()
    }

    /// Writes `record`, syncs if `sync`, then applies it to memory.
    fn change(&mut self, record: LogRecord, sync: bool) -> io::Result<()> {
        let checkpoint = self.checkpoint();
        self.writer.write(std::slice::from_ref(&record), &checkpoint)?;
        if sync {
            self.writer.sync()?;
        }
        lock(&self.memory).apply(record);
        Ok(())
    }
}

fn remove_torn_segment(dir: &Path, path: &Path) -> Result<(), ClusterError> {
    std::fs::remove_file(path).map_err(|e| ClusterError::io(format!("removing {}", path.display()), e))?;
    sync_dir(dir).map_err(|e| ClusterError::io(format!("syncing {}", dir.display()), e))
}

fn cut_torn_tail(path: &Path, end: u64) -> Result<(), ClusterError> {
    let cut = || -> io::Result<()> {
        let file = File::options().write(true).open(path)?;
        file.set_len(end)?;
        file.sync_all()
    };
    cut().map_err(|e| ClusterError::io(format!("cutting the torn tail of {} at byte {end}", path.display()), e))
}

/// The same error again (an `io::Error` is not `Clone`).
fn copy_error(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

fn read_entries<RB: RangeBounds<u64>>(memory: &Mutex<Memory>, range: RB) -> Vec<Entry<TypeConfig>> {
    lock(memory).log.range(range).map(|(_, entry)| entry.clone()).collect()
}

impl RaftLogReader<TypeConfig> for DurableLogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(read_entries(&self.memory, range))
    }
}

impl RaftLogReader<TypeConfig> for DurableLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(read_entries(&self.memory, range))
    }
}

impl RaftLogStorage<TypeConfig> for DurableLogStore {
    type LogReader = DurableLogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let memory = lock(&self.memory);
        Ok(LogState { last_purged_log_id: memory.purged, last_log_id: memory.last_log_id() })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        DurableLogReader { memory: self.memory.clone() }
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.change(LogRecord::Vote(*vote), true).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(lock(&self.memory).vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
        self.change(LogRecord::Committed(committed), false).map_err(|e| StorageIOError::write(AnyError::new(&e)).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(lock(&self.memory).committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let records: Vec<LogRecord> = entries.into_iter().map(LogRecord::Entry).collect();
        let checkpoint = self.checkpoint();
        if let Err(e) = self.writer.write(&records, &checkpoint) {
            callback.log_io_completed(Err(copy_error(&e)));
            return Err(StorageIOError::write_logs(AnyError::new(&e)).into());
        }
        {
            let mut memory = lock(&self.memory);
            for record in records {
                memory.apply(record);
            }
        }
        // The entries are readable now; the callback says when they are
        // durable (or that they could not be made so, which stops the node).
        callback.log_io_completed(self.writer.sync());
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.change(LogRecord::TruncatedFrom(log_id.index), true)
            .map_err(|e| StorageIOError::write_logs(AnyError::new(&e)).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.change(LogRecord::PurgedUpTo(log_id), true)
            .and_then(|()| self.writer.delete_purged(log_id.index))
            .map_err(|e| StorageIOError::write_logs(AnyError::new(&e)).into())
    }
}
