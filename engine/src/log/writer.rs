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
//! * Every segment the writer starts begins with a preamble (the queue
//!   table, `replica.rs`), so the oldest segment can be dropped once the
//!   messages homed in it are rewritten forward (with their place in the
//!   arrival order) and synced. Cleaning does that, oldest segment first,
//!   when the dead bytes pass half the live data (and a segment); it drops
//!   segments one at a time, syncing the directory after each, so the log
//!   on disk is always a run of consecutive segments whose first begins
//!   with a preamble. Disk use stays about 1.5x the live data plus a few
//!   segments, and no old log and new copy of the whole live state are ever
//!   held at once.
//! * A log that cannot be cleaned (segments written before preambles
//!   existed) is compacted whole: the live state goes to a temporary file,
//!   synced, renamed to the next segment name, and only then are older
//!   segments deleted, so a crash at any point leaves a log that recovers
//!   to the same state.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::journal::{Journal, Record, StorageFailure, SyncPolicy};
use crate::log::record::{Entry, encode_entry, encode_op};
use crate::log::replica::Replica;
use crate::log::segment::{self, HEADER};
use crate::log::watermark::{Watermark, ranges};
use crate::sync::Ordering;

/// Bytes one write gathers at most under `Always`, where every group is
/// synced, so a bigger group shares a sync among more records
/// (`Writer::group_bytes`).
const GROUP_BYTES: usize = 4 << 20;
/// Bytes one write gathers at most under `Interval` and `Never`, where
/// groups are not synced one by one: a group that fits in a core's cache is
/// encoded and copied to the page cache faster, and each group raises the
/// written watermark that releases held senders, so they wait less.
/// `never_sends`, 64 callers, against 4 MiB: 1.00-1.59x over ten
/// alternating runs (docs/durability.md).
const UNSYNCED_GROUP_BYTES: usize = 256 << 10;
/// Under `Interval` and `Never`, each aligned window of this many bytes is
/// handed to the disk as soon as it is written (`append_buf`).
const WRITEBACK_WINDOW: u64 = 1 << 20;
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
    /// Whether it begins with a preamble or a snapshot, so that no older
    /// segment is needed to replay it (the writer's module invariant).
    pub(crate) preamble: bool,
}

/// A segment the writer no longer appends to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sealed {
    pub(crate) index: u64,
    /// Bytes of data (header included).
    pub(crate) bytes: u64,
    /// See `OpenSegment::preamble`.
    pub(crate) preamble: bool,
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
        Ok(OpenSegment { index, file, pos: HEADER as u64, capacity, preamble: false })
    }

    /// Opens an existing segment to append at `pos`, with at least
    /// `capacity` bytes reserved (a full disk leaves it with what it has).
    pub(crate) fn reopen(path: &Path, index: u64, pos: u64, capacity: u64, preamble: bool) -> io::Result<OpenSegment> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let mut reserved = file.metadata()?.len();
        if reserved < capacity && segment::preallocate(&file, capacity).is_ok() {
            reserved = capacity;
        }
        Ok(OpenSegment { index, file, pos, capacity: reserved, preamble })
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
    /// Older segments still on disk, oldest first.
    sealed: Vec<Sealed>,
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
        sealed: Vec<Sealed>,
        mut replica: Replica,
    ) -> Self {
        let handled = Watermark::new(journal.durable_below());
        replica.segment = current.index;
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

    /// Starts an empty current segment with its preamble (a new data dir, or
    /// a spare that recovery made current).
    pub(crate) fn start(&mut self) -> io::Result<()> {
        if self.current.pos != HEADER as u64 {
            return Ok(());
        }
        let (head, entries) = self.encoded_preamble();
        if self.current.pos + head.len() as u64 > self.current.capacity {
            let capacity = self.current.pos + head.len() as u64 + self.config.segment_bytes;
            segment::preallocate(&self.current.file, capacity)?;
            self.current.capacity = capacity;
        }
        self.current.file.write_all_at(&head, self.current.pos)?;
        self.current.file.sync_data()?;
        self.started_segment(head.len() as u64, entries);
        Ok(())
    }

    /// The current replica's preamble, as frames and as entries.
    fn encoded_preamble(&self) -> (Vec<u8>, Vec<Entry>) {
        let entries = self.replica.preamble();
        let mut head = Vec::new();
        for entry in &entries {
            encode_entry(entry, &mut head);
        }
        (head, entries)
    }

    /// After a preamble of `len` bytes was written to the empty current
    /// segment: the writer's replica takes its entries as a replay would.
    fn started_segment(&mut self, len: u64, entries: Vec<Entry>) {
        self.current.pos += len;
        self.current.preamble = true;
        for entry in entries {
            self.replica.apply(entry);
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
            if self.spare_refused_at.is_some() {
                // Sends are refused until a spare is reserved, and a refused
                // send writes nothing that would bring the writer here after
                // a group: try again while idle, so that room freed on the
                // disk (by cleaning, or by hand) lets sends in again.
                self.reserve_spare();
            }
            let mut sleep = match self.journal.policy {
                SyncPolicy::Interval(every) if self.unsynced => every.saturating_sub(self.last_sync.elapsed()),
                _ => IDLE_SLEEP,
            };
            if self.spare_refused_at.is_some() {
                sleep = sleep.min(SPARE_RETRY);
            }
            self.journal.writer_idle_wait(sleep.max(Duration::from_micros(50)));
        }
    }

    /// Pops records into the group buffer; returns how many.
    fn gather(&mut self) -> usize {
        self.buf.clear();
        self.batch.clear();
        let limit = self.group_bytes();
        while self.buf.len() < limit {
            let Some((seq, record)) = self.journal.pop() else { break };
            encode_op(&record, &mut self.buf);
            self.batch.push((seq, record));
        }
        self.batch.len()
    }

    /// Bytes one write gathers at most: the policy's cap (`GROUP_BYTES`,
    /// `UNSYNCED_GROUP_BYTES`), and a quarter segment, so that a group never
    /// makes a segment bigger than configured (cleaning drops whole
    /// segments, and a segment is only dropped once sealed).
    fn group_bytes(&self) -> usize {
        let most = if self.journal.policy == SyncPolicy::Always { GROUP_BYTES } else { UNSYNCED_GROUP_BYTES };
        (self.config.segment_bytes / 4).clamp(4 << 10, most as u64) as usize
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
        if self.journal.policy != SyncPolicy::Always {
            // Start the disk on each window as it fills, so that the sync
            // that seals the segment (or ends an interval) waits for the
            // last window only: it had stalled the writer for about 30 ms a
            // 64 MiB segment (docs/durability.md).
            let filled = self.current.pos / WRITEBACK_WINDOW * WRITEBACK_WINDOW;
            let from = (self.current.pos - len) / WRITEBACK_WINDOW * WRITEBACK_WINDOW;
            if filled > from {
                segment::start_writeback(&self.current.file, from, filled - from);
            }
        }
        Ok(())
    }

    /// Seals the current segment (synced) and continues in the spare, or in
    /// a new segment big enough for `need` bytes after its preamble.
    fn roll(&mut self, need: u64) -> Result<(), StorageFailure> {
        let (head, entries) = self.encoded_preamble();
        let fits = need + HEADER as u64 + head.len() as u64;
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
        self.sealed.push(Sealed { index: old.index, bytes: old.pos, preamble: old.preamble });
        self.replica.segment = self.current.index;
        if let Err(error) = self.current.file.write_all_at(&head, self.current.pos) {
            let _ = self.current.file.write_all_at(&vec![0u8; head.len()], self.current.pos);
            return Err(failure("writing a segment's preamble", &error));
        }
        self.started_segment(head.len() as u64, entries);
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
        if self.cleaning_due() {
            self.clean();
        } else if self.compaction_due() {
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
        if self.current.pos * 2 >= self.current.capacity {
            self.reserve_spare();
        }
    }

    /// Reserves the next segment now, unless there is one (or it was refused
    /// a moment ago).
    fn reserve_spare(&mut self) {
        if self.spare.is_some() || self.broken.is_some() {
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
        self.sealed.iter().map(|s| s.bytes).sum::<u64>() + self.current.pos
    }

    /// Whether the last attempt to clean or compact failed a moment ago.
    fn resting(&self) -> bool {
        self.broken.is_some() || self.compact_after.is_some_and(|at| Instant::now() < at)
    }

    /// Bytes in the log beyond the live data.
    fn dead_bytes(&self) -> u64 {
        self.log_bytes().saturating_sub(self.replica.live_bytes)
    }

    /// Dead bytes the log may hold before it is cleaned: half the live data,
    /// and at least one segment (cleaning rewrites the live data once per
    /// that many dead bytes: a lower bound saves disk for more rewriting).
    fn dead_allowance(&self) -> u64 {
        (self.replica.live_bytes / 2).max(self.config.segment_bytes)
    }

    /// Whether the segment at `at` among the sealed ones (or the current one,
    /// at the end) begins with a preamble.
    fn starts_clean(&self, at: usize) -> bool {
        self.sealed.get(at).map_or(self.current.preamble, |s| s.preamble)
    }

    /// How many of the oldest sealed segments may be dropped: the longest
    /// run whose successor begins with a preamble.
    fn droppable(&self) -> usize {
        (1..=self.sealed.len()).rev().find(|&n| self.starts_clean(n)).unwrap_or(0)
    }

    fn cleaning_due(&self) -> bool {
        !self.resting() && self.dead_bytes() > self.dead_allowance() && self.droppable() > 0
    }

    /// Drops the oldest segments, rewriting forward the live messages homed
    /// in them, until the dead bytes are down to half the allowance (module
    /// invariant).
    fn clean(&mut self) {
        let started = Instant::now();
        let limit = self.droppable();
        let mut dead = self.dead_bytes();
        let mut count = 0;
        while count < limit && dead > self.dead_allowance() / 2 {
            let s = self.sealed[count];
            dead = dead.saturating_sub(s.bytes.saturating_sub(self.replica.live_in(s.index)));
            count += 1;
        }
        while count < limit && !self.starts_clean(count) {
            count += 1;
        }
        if count == 0 {
            return;
        }
        let last = self.sealed[count - 1].index;
        let mut rewrites = self.replica.rewrites_below(last + 1).into_iter().peekable();
        let mut left = count;
        while left > 0 {
            // One step: the oldest segments up to the next that starts clean.
            let mut step = 1;
            while !self.starts_clean(step) {
                step += 1;
            }
            let below = self.sealed[step - 1].index + 1;
            let mut moving = Vec::new();
            while let Some((_, entry)) = rewrites.next_if(|(home, _)| *home < below) {
                moving.push(entry);
            }
            if self.rewrite(moving).is_err() {
                // No room, or a failed write (the journal's groups report
                // their own failures): the log is as it was, apart from
                // rewrites that changed nothing. Try again later.
                self.compact_after = Some(Instant::now() + Duration::from_secs(1));
                self.journal.counters.compactions_failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // The rewrites must be on disk before the history they replace
            // goes.
            self.sync();
            if self.broken.is_some() {
                return;
            }
            for s in self.sealed.drain(..step).collect::<Vec<_>>() {
                debug_assert_eq!(self.replica.live_in(s.index), 0, "segment {} still homes messages", s.index);
                let _ = std::fs::remove_file(self.config.dir.join(segment::file_name(s.index)));
                // One at a time, so the log on disk never has a gap.
                let _ = segment::sync_dir(&self.config.dir);
                self.journal.counters.segments_cleaned.fetch_add(1, Ordering::Relaxed);
            }
            left = left.saturating_sub(step);
        }
        self.journal.counters.compactions.fetch_add(1, Ordering::Relaxed);
        self.journal.counters.compaction_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.publish_sizes();
    }

    /// Appends the rewrites of live messages (cleaning's), in groups that
    /// never take the current segment's last room without a spare to roll
    /// to: the journal's acks rely on that room when the disk is full.
    fn rewrite(&mut self, entries: Vec<Entry>) -> Result<(), StorageFailure> {
        let chunk_bytes = self.group_bytes();
        let mut entries = entries.into_iter().peekable();
        while entries.peek().is_some() {
            self.buf.clear();
            let mut group = Vec::new();
            while self.buf.len() < chunk_bytes {
                let Some(entry) = entries.next() else { break };
                encode_entry(&entry, &mut self.buf);
                group.push(entry);
            }
            let len = self.buf.len() as u64;
            if self.current.pos + len > self.current.capacity && self.spare.is_none() {
                self.reserve_spare();
                if self.spare.is_none() {
                    return Err(StorageFailure("no room to rewrite live messages".into()));
                }
            }
            self.append_buf()?;
            self.unsynced = true;
            self.journal.counters.rewritten_bytes.fetch_add(len, Ordering::Relaxed);
            for entry in group {
                self.replica.apply(entry);
            }
            self.keep_spare();
        }
        self.buf.clear();
        Ok(())
    }

    /// Whether the log needs a whole compaction: it cannot be cleaned (its
    /// oldest segments were written without preambles) and holds more than
    /// twice the live data plus two segments.
    fn compaction_due(&self) -> bool {
        !self.resting()
            && self.droppable() == 0
            && self.log_bytes() > 2 * self.replica.live_bytes + 2 * self.config.segment_bytes
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
        let mut frames = 0u64;
        let written = (|| -> io::Result<OpenSegment> {
            let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&tmp)?;
            let mut pos = 0u64;
            let mut chunk = segment::header(index).to_vec();
            for entry in self.replica.snapshot() {
                frames += 1;
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
            Ok(OpenSegment { index, file, pos, capacity, preamble: true })
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
        self.replica.rehome_all(index, frames);
        drop(old.file);
        let mut doomed: Vec<u64> = self.sealed.drain(..).map(|s| s.index).collect();
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
