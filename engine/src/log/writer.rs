//! The log writer: one thread per durable engine that drains the journal,
//! writes groups of records, syncs them by the policy, and compacts.
//!
//! Invariants:
//!
//! * Records are written in the order they were popped, which respects each
//!   message's history (`journal.rs`); every record written is applied to
//!   the writer's `Replica` in that same order, and no other.
//! * `durable` is raised only after the sync that covers every record below
//!   it (or after the group holding a record failed, which its waiter learns
//!   from `Journal::mark_failed` before the raise).
//! * Disk space for the current segment is reserved (preallocated) before
//!   it is written to, and a spare segment is reserved once the current one
//!   is half full. When the spare cannot be reserved the journal refuses new
//!   sends (`Error::Storage`), while acks, receives and moves still have the
//!   rest of the current segment to be written to: a full disk stops the
//!   queue from growing, not from draining.
//! * A compaction writes the live state to a temporary file, syncs it,
//!   renames it to the next segment name and only then deletes older
//!   segments, so a crash at any point leaves a log that recovers to the
//!   same state.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::journal::{Journal, Record, StorageFailure, SyncPolicy};
use crate::log::record::{encode_entry, encode_op};
use crate::log::replica::Replica;
use crate::log::segment::{self, HEADER};
use crate::log::watermark::{Watermark, ranges};
use crate::sync::Ordering;

/// Bytes one write gathers at most before it is written.
const GROUP_BYTES: usize = 4 << 20;
/// How long the writer sleeps with nothing to do (it is woken by pushes).
const IDLE_SLEEP: Duration = Duration::from_millis(100);
/// How often a refused spare segment is tried again.
const SPARE_RETRY: Duration = Duration::from_millis(200);

/// A segment open for writing.
#[derive(Debug)]
pub(crate) struct OpenSegment {
    pub(crate) index: u64,
    pub(crate) file: File,
    /// Where the next frame goes.
    pub(crate) pos: u64,
    /// Bytes reserved on disk.
    pub(crate) capacity: u64,
}

impl OpenSegment {
    /// Creates segment `index` in `dir` with `capacity` bytes reserved.
    pub(crate) fn create(dir: &Path, index: u64, capacity: u64) -> io::Result<OpenSegment> {
        let path = dir.join(segment::file_name(index));
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        let made = (|| {
            segment::preallocate(&file, capacity)?;
            file.write_all_at(&segment::header(index), 0)?;
            file.sync_all()?;
            segment::sync_dir(dir)
        })();
        if let Err(error) = made {
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(error);
        }
        Ok(OpenSegment { index, file, pos: HEADER as u64, capacity })
    }

    /// Opens an existing segment to append at `pos`, with at least
    /// `capacity` bytes reserved (a full disk leaves it with what it has).
    pub(crate) fn reopen(path: &Path, index: u64, pos: u64, capacity: u64) -> io::Result<OpenSegment> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let mut reserved = file.metadata()?.len();
        if reserved < capacity && segment::preallocate(&file, capacity).is_ok() {
            reserved = capacity;
        }
        Ok(OpenSegment { index, file, pos, capacity: reserved })
    }
}

/// Settings the writer runs with.
#[derive(Debug, Clone)]
pub(crate) struct WriterConfig {
    pub(crate) dir: PathBuf,
    pub(crate) segment_bytes: u64,
}

pub(crate) struct Writer {
    journal: Arc<Journal>,
    config: WriterConfig,
    current: OpenSegment,
    spare: Option<OpenSegment>,
    spare_refused_at: Option<Instant>,
    /// Older segments still on disk: (index, bytes of data).
    sealed: Vec<(u64, u64)>,
    replica: Replica,
    buf: Vec<u8>,
    batch: Vec<(u64, Record)>,
    /// Which records were popped and handled.
    handled: Watermark,
    /// Records written since the last sync.
    unsynced: bool,
    last_sync: Instant,
    /// A sync failed: nothing is accepted again (the OS may have dropped
    /// written pages, so no later sync could vouch for them).
    broken: Option<StorageFailure>,
    compact_after: Option<Instant>,
}

impl Writer {
    pub(crate) fn new(
        journal: Arc<Journal>,
        config: WriterConfig,
        current: OpenSegment,
        sealed: Vec<(u64, u64)>,
        replica: Replica,
    ) -> Self {
        let handled = Watermark::new(journal.durable_below());
        Writer {
            journal,
            config,
            current,
            spare: None,
            spare_refused_at: None,
            sealed,
            replica,
            buf: Vec::with_capacity(GROUP_BYTES + (64 << 10)),
            batch: Vec::new(),
            handled,
            unsynced: false,
            last_sync: Instant::now(),
            broken: None,
            compact_after: None,
        }
    }

    /// Runs until the journal closes and every record has been written.
    pub(crate) fn run(mut self) {
        self.journal.counters.log_bytes.store(self.log_bytes(), Ordering::Relaxed);
        self.journal.counters.live_bytes.store(self.replica.live_bytes, Ordering::Relaxed);
        loop {
            let gathered = self.gather();
            if gathered > 0 {
                self.write_group();
                self.after_group();
                continue;
            }
            if self.journal.closing.load(Ordering::Acquire) && !self.journal.has_records() {
                self.sync();
                // A clean close hands the reserve back; the next open
                // reserves it again.
                if self.current.file.set_len(self.current.pos).is_ok() {
                    let _ = self.current.file.sync_all();
                }
                return;
            }
            if self.journal.sync_requested() || self.interval_due() {
                let before = self.handled.below();
                self.sync();
                if self.journal.sync_requested() && self.handled.below() == before {
                    // A flush waits on a record whose pusher took its number
                    // a moment ago and has not pushed it yet: let it run.
                    std::thread::yield_now();
                }
                continue;
            }
            let sleep = match self.journal.policy {
                SyncPolicy::Interval(every) if self.unsynced => every.saturating_sub(self.last_sync.elapsed()),
                _ => IDLE_SLEEP,
            };
            self.journal.writer_idle_wait(sleep.max(Duration::from_micros(50)));
        }
    }

    /// Pops records into the group buffer; returns how many.
    fn gather(&mut self) -> usize {
        self.buf.clear();
        self.batch.clear();
        while self.buf.len() < GROUP_BYTES {
            let Some((seq, record)) = self.journal.pop() else { break };
            encode_op(&record, &mut self.buf);
            self.batch.push((seq, record));
        }
        self.batch.len()
    }

    /// Writes the gathered group, or fails it.
    fn write_group(&mut self) {
        let result = match &self.broken {
            Some(why) => Err(why.clone()),
            None => self.append_buf(),
        };
        let batch = std::mem::take(&mut self.batch);
        let mut seqs = Vec::with_capacity(batch.len());
        match result {
            Ok(()) => {
                self.journal.counters.records.fetch_add(batch.len() as u64, Ordering::Relaxed);
                self.journal.counters.bytes.fetch_add(self.buf.len() as u64, Ordering::Relaxed);
                for (seq, record) in batch {
                    seqs.push(seq);
                    self.replica.apply_op(record);
                }
                self.unsynced = true;
            }
            Err(why) => {
                seqs.extend(batch.iter().map(|(seq, _)| *seq));
                self.journal.counters.failed_records.fetch_add(seqs.len() as u64, Ordering::Relaxed);
                for (start, end) in ranges(seqs.clone()) {
                    self.journal.mark_failed(start, end, why.clone());
                }
                self.journal.set_refusing(Some(why));
            }
        }
        for seq in seqs {
            self.handled.handled(seq);
        }
    }

    /// Appends the buffer to the current segment, rolling to the next one
    /// first when it does not fit.
    fn append_buf(&mut self) -> Result<(), StorageFailure> {
        let len = self.buf.len() as u64;
        if self.current.pos + len > self.current.capacity {
            self.roll(len)?;
        }
        if let Err(error) = self.current.file.write_all_at(&self.buf, self.current.pos) {
            // Leave no partial frame behind for a later group to follow.
            let zeros = vec![0u8; self.buf.len()];
            let _ = self.current.file.write_all_at(&zeros, self.current.pos);
            return Err(failure("writing the log", &error));
        }
        self.current.pos += len;
        Ok(())
    }

    /// Seals the current segment (synced) and continues in the spare, or in
    /// a new segment big enough for `need` bytes.
    fn roll(&mut self, need: u64) -> Result<(), StorageFailure> {
        let fits = need + HEADER as u64;
        let next = match self.spare.take() {
            Some(spare) if spare.capacity >= fits => spare,
            other => {
                if let Some(spare) = other {
                    drop(spare.file);
                    let _ = std::fs::remove_file(self.config.dir.join(segment::file_name(spare.index)));
                }
                let capacity = self.config.segment_bytes.max(fits);
                OpenSegment::create(&self.config.dir, self.current.index + 1, capacity)
                    .map_err(|error| failure("reserving a new log segment", &error))?
            }
        };
        self.sync_current()?;
        let old = std::mem::replace(&mut self.current, next);
        // The sealed segment keeps only its data (its reserve goes back).
        let _ = old.file.set_len(old.pos);
        self.sealed.push((old.index, old.pos));
        Ok(())
    }

    /// After a group: sync by the policy, raise the watermarks, keep a
    /// spare, compact when due.
    fn after_group(&mut self) {
        self.journal.mark_written(self.handled.below());
        self.publish_sizes();
        let must_sync = match self.journal.policy {
            SyncPolicy::Always => true,
            SyncPolicy::Interval(_) => self.interval_due(),
            SyncPolicy::Never => false,
        } || self.journal.sync_requested();
        if must_sync {
            self.sync();
        }
        self.keep_spare();
        if self.compaction_due() {
            self.compact();
        }
    }

    fn publish_sizes(&self) {
        self.journal.counters.log_bytes.store(self.log_bytes(), Ordering::Relaxed);
        self.journal.counters.live_bytes.store(self.replica.live_bytes, Ordering::Relaxed);
    }

    fn interval_due(&self) -> bool {
        match self.journal.policy {
            SyncPolicy::Interval(every) => self.unsynced && self.last_sync.elapsed() >= every,
            _ => false,
        }
    }

    /// Syncs what was written and raises `durable` over every record handled.
    fn sync(&mut self) {
        let handled = self.handled.below();
        if self.unsynced {
            if let Err(why) = self.sync_current() {
                // The OS may have dropped the written pages: nothing after
                // this can be vouched for, so every later record fails too.
                self.broken = Some(why.clone());
                self.journal.set_refusing(Some(why.clone()));
                self.journal.mark_failed(self.journal.durable_below(), handled, why);
            }
        }
        self.journal.mark_durable(handled);
    }

    fn sync_current(&mut self) -> Result<(), StorageFailure> {
        let started = Instant::now();
        self.current.file.sync_data().map_err(|error| failure("syncing the log (fdatasync)", &error))?;
        self.journal.counters.syncs.fetch_add(1, Ordering::Relaxed);
        self.journal.counters.sync_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.unsynced = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Reserves the next segment once the current one is half full; while it
    /// cannot be reserved, sends are refused (module invariant).
    fn keep_spare(&mut self) {
        if self.spare.is_some() || self.broken.is_some() || self.current.pos * 2 < self.current.capacity {
            return;
        }
        if self.spare_refused_at.is_some_and(|at| at.elapsed() < SPARE_RETRY) {
            return;
        }
        match OpenSegment::create(&self.config.dir, self.current.index + 1, self.config.segment_bytes) {
            Ok(spare) => {
                self.spare = Some(spare);
                if self.spare_refused_at.take().is_some() {
                    self.journal.set_refusing(None);
                }
            }
            Err(error) => {
                self.spare_refused_at = Some(Instant::now());
                self.journal.set_refusing(Some(failure("reserving the next log segment", &error)));
            }
        }
    }

    /// Bytes of data in the log's segments.
    fn log_bytes(&self) -> u64 {
        self.sealed.iter().map(|(_, bytes)| bytes).sum::<u64>() + self.current.pos
    }

    /// Whether the log holds more than twice the live data plus two
    /// segments (so disk use stays O(live data + a segment)).
    fn compaction_due(&self) -> bool {
        if self.broken.is_some() || self.compact_after.is_some_and(|at| Instant::now() < at) {
            return false;
        }
        self.log_bytes() > 2 * self.replica.live_bytes + 2 * self.config.segment_bytes
    }

    /// Writes the live state as a snapshot segment and deletes every older
    /// segment (module invariant).
    fn compact(&mut self) {
        let started = Instant::now();
        self.sync();
        if let Err(error) = self.write_snapshot() {
            // Try again later; the log is as it was.
            self.compact_after = Some(Instant::now() + Duration::from_secs(1));
            self.journal.counters.compactions_failed.fetch_add(1, Ordering::Relaxed);
            let _ = error;
            return;
        }
        self.journal.counters.compactions.fetch_add(1, Ordering::Relaxed);
        self.journal.counters.compaction_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.publish_sizes();
    }

    fn write_snapshot(&mut self) -> io::Result<()> {
        let dir = self.config.dir.clone();
        let index = self.current.index + 1;
        if let Some(spare) = self.spare.take() {
            drop(spare.file);
            std::fs::remove_file(dir.join(segment::file_name(spare.index)))?;
        }
        let name = segment::file_name(index);
        let tmp = dir.join(format!("{name}.tmp"));
        let written = (|| -> io::Result<OpenSegment> {
            let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&tmp)?;
            let mut pos = 0u64;
            let mut chunk = segment::header(index).to_vec();
            for entry in self.replica.snapshot() {
                encode_entry(&entry, &mut chunk);
                if chunk.len() >= GROUP_BYTES {
                    file.write_all_at(&chunk, pos)?;
                    pos += chunk.len() as u64;
                    chunk.clear();
                }
            }
            file.write_all_at(&chunk, pos)?;
            pos += chunk.len() as u64;
            let capacity = pos + self.config.segment_bytes;
            segment::preallocate(&file, capacity)?;
            file.sync_all()?;
            Ok(OpenSegment { index, file, pos, capacity })
        })();
        let snapshot = match written {
            Ok(snapshot) => snapshot,
            Err(error) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(error);
            }
        };
        std::fs::rename(&tmp, dir.join(&name))?;
        segment::sync_dir(&dir)?;
        // The snapshot is the log's start now: older segments go.
        let old = std::mem::replace(&mut self.current, snapshot);
        drop(old.file);
        let mut doomed: Vec<u64> = self.sealed.drain(..).map(|(index, _)| index).collect();
        doomed.push(old.index);
        for index in doomed {
            let _ = std::fs::remove_file(dir.join(segment::file_name(index)));
        }
        segment::sync_dir(&dir)
    }
}

fn failure(context: &str, error: &io::Error) -> StorageFailure {
    StorageFailure(format!("{context}: {error}").into())
}
