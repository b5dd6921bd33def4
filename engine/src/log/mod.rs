//! Durability: a write-ahead log in a data dir, with group commit, crash
//! recovery and compaction (docs/durability.md).
//!
//! The engine's core only hands records to the journal (`journal.rs`); this
//! module owns everything about files: the record format (`record.rs`),
//! segment files (`segment.rs`), the state the log describes
//! (`replica.rs`), and the writer thread (`writer.rs`). Opening a data dir
//! is this file.
//!
//! Invariant: an engine opened on a data dir serves only once its queues
//! and messages are restored from the log as the log describes them: every
//! queue with its config and ordinal, every message with its id, payload,
//! remaining delay, delivery count, carried deliveries and dead-letter
//! record. Leases do not survive a restart: a message in flight is
//! receivable at once (its attempt ended with the process), and one whose
//! delivery count reached its queue's `max_receives` moves to the
//! dead-letter queue at open, as its failed attempt would have moved it.

pub(crate) mod id_table;
pub(crate) mod record;
pub(crate) mod replica;
pub(crate) mod replication;
pub(crate) mod replicator;
pub(crate) mod segment;
pub(crate) mod watermark;
pub(crate) mod writer;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::clock::{Nanos, duration_nanos};
use crate::dead_letter::{AttemptOutcome, AttemptRecord, DeadLetterReason, DeadLetterRecord};
use crate::engine::{Engine, EngineBuilder};
use crate::error::Error;
use crate::journal::{Journal, Record, SyncPolicy};
use crate::lifecycle::{Arrival, Origin};
use crate::queue::QueueCore;
use crate::receipt::MessageId;
use crate::shard::ID_BLOCK;
use crate::slot::History;
use crate::sync::{Arc, lock};

use record::{Entry, Frame, frame_at};
use replica::Replica;
use writer::{OpenSegment, Sealed, Writer, WriterConfig};

/// Default size of a log segment (64 MiB).
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
/// Smallest segment size accepted.
pub const MIN_SEGMENT_BYTES: u64 = 64 << 10;

/// What recovery does with damage before the end of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Repair {
    /// Refuse to open (`Error::CorruptLog`): nothing is lost silently.
    #[default]
    Refuse,
    /// Skip damaged bytes and open with what the rest of the log holds;
    /// `RecoveryReport::damaged` lists what was skipped.
    SkipDamaged,
}

/// Damaged bytes that recovery skipped under `Repair::SkipDamaged`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DamagedRange {
    /// The segment file.
    pub file: PathBuf,
    /// Where the damage starts.
    pub offset: u64,
    /// How many bytes were skipped.
    pub bytes: u64,
}

/// What opening a data dir found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Segment files read.
    pub segments: usize,
    /// Records replayed.
    pub records: u64,
    /// Queues restored.
    pub queues: usize,
    /// Messages restored (those moved to a dead-letter queue at open
    /// included).
    pub messages: u64,
    /// Messages whose delivery count had reached `max_receives`, moved to
    /// their dead-letter queue at open.
    pub dead_lettered: u64,
    /// Bytes of a torn last write cut off the end of the log.
    pub torn_bytes: u64,
    /// Damage skipped under `Repair::SkipDamaged`.
    pub damaged: Vec<DamagedRange>,
    /// Segment files missing from the middle of the log, read past under
    /// `Repair::SkipDamaged` (the records they held are lost: messages
    /// acked in them may come back, and changes logged in them are undone).
    pub missing_segments: Vec<PathBuf>,
    /// Records that named a queue or message the log no longer held (for
    /// example a send racing its queue's deletion); they change nothing.
    pub ignored_records: u64,
    /// Messages that had outlived their queue's retention
    /// (`QueueConfig::retention`) by the open: dropped, not restored, and
    /// not in the queues' stats (which count this process's work).
    pub retention_dropped: u64,
    /// How long recovery took.
    pub elapsed: Duration,
}

impl std::fmt::Display for RecoveryReport {
    /// One line for an operator: what was restored, then anything recovery
    /// cut, moved, dropped or skipped (only what happened is named).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} queues and {} messages from {} records in {} segment files ({:.3} s)",
            self.queues,
            self.messages,
            self.records,
            self.segments,
            self.elapsed.as_secs_f64()
        )?;
        if self.torn_bytes > 0 {
            write!(f, "; cut a torn last write of {} bytes off the end", self.torn_bytes)?;
        }
        if self.dead_lettered > 0 {
            write!(f, "; moved {} messages at their receive limit to dead-letter queues", self.dead_lettered)?;
        }
        if self.retention_dropped > 0 {
            write!(f, "; dropped {} messages past their retention", self.retention_dropped)?;
        }
        if self.ignored_records > 0 {
            write!(f, "; ignored {} records naming a queue or message no longer held", self.ignored_records)?;
        }
        for range in &self.damaged {
            write!(f, "; SKIPPED {} damaged bytes at byte {} of {}", range.bytes, range.offset, range.file.display())?;
        }
        for missing in &self.missing_segments {
            write!(f, "; READ PAST missing segment file {}", missing.display())?;
        }
        Ok(())
    }
}

impl RecoveryReport {
    /// Whether recovery lost logged records: damage skipped or segment files
    /// missing (only under `Repair::SkipDamaged`). A torn tail is not a
    /// loss of anything acknowledged under `SyncPolicy::Always`.
    #[must_use]
    pub fn lost_records(&self) -> bool {
        !self.damaged.is_empty() || !self.missing_segments.is_empty()
    }
}

/// Builds a durable engine: `Engine::builder().data_dir(path)`.
#[derive(Debug)]
#[must_use = "a DurableBuilder does nothing until `open` is called"]
pub struct DurableBuilder {
    engine: EngineBuilder,
    dir: PathBuf,
    sync: SyncPolicy,
    segment_bytes: u64,
    repair: Repair,
}

impl DurableBuilder {
    pub(crate) fn new(engine: EngineBuilder, dir: PathBuf) -> Self {
        DurableBuilder {
            engine,
            dir,
            sync: SyncPolicy::default(),
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            repair: Repair::default(),
        }
    }

    /// When writes reach the disk (default `SyncPolicy::Always`).
    pub fn sync(mut self, policy: SyncPolicy) -> Self {
        self.sync = policy;
        self
    }

    /// Size of a log segment (default 64 MiB, at least 64 KiB). Disk use
    /// stays below about twice the live data plus three segments.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes.clamp(MIN_SEGMENT_BYTES, 1 << 40);
        self
    }

    /// What to do with damage before the end of the log (default: refuse).
    pub fn repair(mut self, repair: Repair) -> Self {
        self.repair = repair;
        self
    }

    /// Opens the data dir (creating it if needed), recovers every queue and
    /// message, and starts serving.
    ///
    /// # Errors
    /// `Error::DataDirLocked` if another engine has it open,
    /// `Error::CorruptLog` for damage before the end of the log (unless
    /// `Repair::SkipDamaged`), `Error::Storage` for I/O errors.
    pub fn open(self) -> Result<Engine, Error> {
        let started = Instant::now();
        let dir = self.dir.clone();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&format!("creating {}", dir.display()), &e))?;
        let lock_file = lock_dir(&dir)?;
        let (recovered, mut report) = recover(&dir, self.repair, self.segment_bytes)?;
        let Recovered { replica, current, sealed } = recovered;
        let current = match current {
            Some(current) => current,
            None => OpenSegment::create(&dir, 1, self.segment_bytes)
                .map_err(|e| Error::io("creating the first log segment", &e))?,
        };
        let id_start = replica.ids_below.div_ceil(ID_BLOCK).saturating_mul(ID_BLOCK);
        let journal = Arc::new(Journal::new(self.sync, id_start));
        let engine = self.engine.build_with(Some(journal.clone()));
        engine.inner.shared.id_blocks.store(id_start, std::sync::atomic::Ordering::Relaxed);
        let restored = restore(&engine, &replica, &mut report)?;
        let mut writer = Writer::new(
            journal.clone(),
            WriterConfig { dir: dir.clone(), segment_bytes: self.segment_bytes },
            current,
            sealed,
            replica,
        );
        writer.start().map_err(|e| Error::io("writing the current segment's preamble", &e))?;
        let handle = std::thread::Builder::new()
            .name("leaseq-log".into())
            .spawn(move || {
                writer.run();
                drop(lock_file);
            })
            .map_err(|e| Error::io("starting the log writer thread", &e))?;
        journal.set_writer(handle.thread().clone());
        let closing = journal.clone();
        *lock(&engine.inner.closer) = Some(Box::new(move || {
            closing.close();
            let _ = handle.join();
        }));
        // The moves made at open must be on disk before anyone is served.
        if restored.moved > 0 {
            engine.flush()?;
        }
        report.elapsed = started.elapsed();
        let _ = engine.inner.recovery.set(report);
        Ok(engine)
    }
}

/// Holds a data dir for one engine: in this process through a registry of
/// open dirs, against other processes through a POSIX record lock on its
/// LOCK file. (A record lock belongs to the process and is not inherited by
/// a forked child, unlike `flock`, whose lock a child forked at the wrong
/// moment would keep past the engine's close.)
#[derive(Debug)]
struct DirLock {
    key: PathBuf,
    _file: File,
}

/// Data dirs open in this process.
static OPEN_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

impl Drop for DirLock {
    fn drop(&mut self) {
        let mut open = OPEN_DIRS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        open.retain(|dir| *dir != self.key);
    }
}

/// Takes the data dir's lock, held while the engine is open.
fn lock_dir(dir: &Path) -> Result<DirLock, Error> {
    let key = dir.canonicalize().map_err(|e| Error::io(&format!("resolving {}", dir.display()), &e))?;
    // An engine is closed by the drop of its last handle, on the dropping
    // thread (the driver holds none: `driver.rs`), so a dir still listed
    // here is open, not closing.
    let mut open = OPEN_DIRS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if open.contains(&key) {
        return Err(Error::DataDirLocked { path: dir.to_path_buf() });
    }
    let path = dir.join("LOCK");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&format!("opening {}", path.display()), &e))?;
    use std::os::fd::AsRawFd;
    let whole_file = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    // SAFETY: `fcntl(F_SETLK)` on a descriptor this function owns, reading
    // the `flock` struct it is handed for the duration of the call.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &whole_file) };
    if rc != 0 {
        let error = std::io::Error::last_os_error();
        if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) {
            return Err(Error::DataDirLocked { path: dir.to_path_buf() });
        }
        return Err(Error::io(&format!("locking {}", path.display()), &error));
    }
    open.push(key.clone());
    Ok(DirLock { key, _file: file })
}

/// The log read back.
struct Recovered {
    replica: Replica,
    /// The newest segment, open to append after its last valid frame.
    current: Option<OpenSegment>,
    /// Older segments.
    sealed: Vec<Sealed>,
}

/// Replays every segment in `dir`.
fn recover(dir: &Path, repair: Repair, segment_bytes: u64) -> Result<(Recovered, RecoveryReport), Error> {
    let segment::Listing { mut segments, leftovers } =
        segment::list(dir).map_err(|e| Error::io(&format!("listing {}", dir.display()), &e))?;
    for tmp in leftovers {
        // An unfinished compaction: the segments it would have replaced are
        // all still here.
        let _ = std::fs::remove_file(tmp);
    }
    let tail = read_tail(dir, &mut segments)?;
    let mut report = RecoveryReport { segments: segments.len(), ..RecoveryReport::default() };
    let mut replica = Replica::default();
    let mut sealed = Vec::new();
    let mut current = None;
    let count = segments.len();
    // The writer reserves its next segment (a header, then zeros) before the
    // current one is full, so the segment it was filling when the process
    // died may be followed by that spare: the newest segment holding data
    // (the tail's first), not the newest file, is where a torn tail may be.
    let filling = count - tail.len();
    let mut tail = tail.into_iter();
    let mut previous: Option<u64> = None;
    for (at, (index, path)) in segments.into_iter().enumerate() {
        let read_ahead = if at >= filling { tail.next() } else { None };
        let bytes = match read_ahead {
            Some(bytes) => bytes,
            None => read_segment(&path)?,
        };
        let last = at + 1 == count;
        let may_be_torn = at >= filling;
        let opening = opening_entry(&bytes);
        let starts_clean = matches!(opening, Some(Entry::Preamble { .. } | Entry::Snapshot { .. }));
        if let Some(previous) = previous.filter(|&p| p + 1 != index) {
            // Cleaning drops segments oldest first, syncing the directory
            // after each, so a gap is never its doing; a snapshot replaces
            // what came before it, so older leftovers before one are fine.
            if !matches!(opening, Some(Entry::Snapshot { .. })) {
                let missing: Vec<PathBuf> = (previous + 1..index).map(|i| dir.join(segment::file_name(i))).collect();
                if repair != Repair::SkipDamaged {
                    return Err(Error::CorruptLog {
                        file: path.clone(),
                        offset: 0,
                        reason: format!(
                            "{} segment file(s) missing before this one, from {}",
                            missing.len(),
                            missing[0].display()
                        ),
                    });
                }
                report.missing_segments.extend(missing);
            }
        }
        previous = Some(index);
        replica.segment = index;
        let scan =
            segment::scan(&bytes, index, may_be_torn, repair == Repair::SkipDamaged, |entry| replica.apply(entry))
                .map_err(|damage| Error::CorruptLog {
                    file: path.clone(),
                    offset: damage.offset,
                    reason: damage.reason,
                })?;
        report.records += scan.frames;
        for (offset, len) in &scan.skipped {
            report.damaged.push(DamagedRange { file: path.clone(), offset: *offset, bytes: *len });
        }
        if scan.torn > 0 {
            report.torn_bytes = scan.torn as u64;
        }
        if last {
            let segment = OpenSegment::reopen(&path, index, scan.end as u64, segment_bytes, starts_clean)
                .map_err(|e| Error::io(&format!("opening {}", path.display()), &e))?;
            if scan.torn > 0 {
                // Zero the torn bytes, so the next write starts on a clean
                // tail and no later scan meets them.
                use std::os::unix::fs::FileExt;
                let zeros = vec![0u8; scan.torn];
                segment
                    .file
                    .write_all_at(&zeros, scan.end as u64)
                    .and_then(|()| segment.file.sync_data())
                    .map_err(|e| Error::io(&format!("cutting the torn tail of {}", path.display()), &e))?;
            }
            current = Some(segment);
        } else {
            if scan.torn > 0 {
                // The segment being filled, with the spare after it: seal it
                // as the writer's roll would have (synced, its torn tail and
                // reserve cut off), since the spare becomes the current one.
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|file| file.set_len(scan.end as u64).and_then(|()| file.sync_all()))
                    .map_err(|e| Error::io(&format!("sealing {}", path.display()), &e))?;
            }
            sealed.push(Sealed { index, bytes: scan.end as u64, preamble: starts_clean });
        }
    }
    report.ignored_records = replica.ignored;
    Ok((Recovered { replica, current, sealed }, report))
}

/// The first entry of a segment's bytes, if it is a valid one.
fn opening_entry(bytes: &[u8]) -> Option<Entry> {
    match frame_at(bytes.get(segment::HEADER..)?) {
        Frame::Valid { entry, .. } => Some(entry),
        Frame::Bad(_) => None,
    }
}

fn read_segment(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::io(&format!("reading {}", path.display()), &e))
}

/// Whether a segment's bytes hold anything past its header.
fn holds_data(bytes: &[u8]) -> bool {
    bytes.get(segment::HEADER..).is_some_and(|rest| rest.iter().any(|&b| b != 0))
}

/// Reads the newest segments, down to the newest that holds data, and
/// returns their bytes oldest first. On the way it removes newest files
/// that hold nothing at all (not even a header: a reservation that a crash
/// cut short between creating the file and writing its header; it never
/// held a record).
fn read_tail(dir: &Path, segments: &mut Vec<(u64, PathBuf)>) -> Result<Vec<Vec<u8>>, Error> {
    let mut tail = Vec::new();
    let mut removed = false;
    while tail.len() < segments.len() {
        let path = &segments[segments.len() - 1 - tail.len()].1;
        let bytes = read_segment(path)?;
        if tail.is_empty() && bytes.iter().all(|&b| b == 0) {
            std::fs::remove_file(path).map_err(|e| Error::io(&format!("removing {}", path.display()), &e))?;
            segments.pop();
            removed = true;
            continue;
        }
        let data = holds_data(&bytes);
        tail.push(bytes);
        if data {
            break;
        }
    }
    if removed {
        segment::sync_dir(dir).map_err(|e| Error::io(&format!("syncing {}", dir.display()), &e))?;
    }
    tail.reverse();
    Ok(tail)
}

/// What `restore` did.
pub(crate) struct Restored {
    /// Messages moved to a dead-letter queue (their moves are recorded).
    pub(crate) moved: u64,
}

/// Re-creates the replica's queues and messages in a new engine.
pub(crate) fn restore(engine: &Engine, replica: &Replica, report: &mut RecoveryReport) -> Result<Restored, Error> {
    let mut cores: HashMap<u32, Arc<QueueCore>> = HashMap::new();
    for (ordinal, queue) in replica.queues_in_link_order() {
        let q = engine.restore_queue(ordinal, &queue.name, queue.config.clone())?;
        *crate::sync::lock(&q.core.metadata) = queue.metadata.clone();
        cores.insert(ordinal, q.core.clone());
    }
    engine.skip_ordinals(replica.next_queue);
    report.queues = cores.len();
    let unix_now = engine.unix_now();
    let now = engine.now();
    // A message's arrival on the old process's clock, moved onto this one's
    // (an arrival not logged, or after now, counts as now).
    let arrived_at =
        |m: &replica::MessageState| (m.arrived != 0).then(|| now.0.saturating_sub(unix_now.saturating_sub(m.arrived)));
    let arrival_of = |id: u64, m: &replica::MessageState| {
        let history =
            m.dead_letter.clone().map(|record| Box::new(History { dead_letter: Some(record), ..History::default() }));
        Arrival {
            id: Some(MessageId(id)),
            arrived_at: arrived_at(m),
            payload: m.payload.clone(),
            lifetime_deliveries: m.carried,
            history,
            delivery_count: m.count,
            origin: Origin::Restored,
        }
    };
    let too_many = |core: &QueueCore| Error::Storage {
        reason: format!(
            "the log holds more messages for queue '{}' than its max_messages ({}); recovery stopped",
            core.name, core.config.max_messages
        ),
        payload: None,
    };
    let in_place = |core: &QueueCore, id: u64, m: &replica::MessageState| {
        core.restore(arrival_of(id, m), m.deliver_at.saturating_sub(unix_now)).map(drop).map_err(|_| too_many(core))
    };
    // Two passes. First every message that stays where it is, in arrival
    // order. Then, in arrival order, each message whose delivery count
    // reached its queue's ceiling (its last attempt ended with the process)
    // moves to its dead-letter queue if that has room beyond what it already
    // holds and what the messages still to be decided there need; otherwise
    // it stays, behind the others, as a failed attempt at the ceiling stays
    // when its dead-letter queue is full. Deciding moves only after every
    // staying message is placed means a move can never take the room a
    // message of the dead-letter queue itself needs.
    let mut held: HashMap<u32, usize> = HashMap::new();
    let mut undecided: HashMap<u32, usize> = HashMap::new();
    let mut at_ceiling = Vec::new();
    for (id, m) in replica.messages_in_order() {
        let Some(core) = cores.get(&m.queue) else { continue };
        if let Some(retention) = core.retention().map(duration_nanos) {
            // Outlived its retention while the engine was down: gone before
            // this process began, so not restored (and not in its stats);
            // recorded as gone so that the log agrees.
            if now.0 >= arrived_at(m).unwrap_or(now.0).saturating_add(retention) {
                if let Some(journal) = core.journal() {
                    journal.push(Record::Gone { queue: m.queue, id });
                }
                report.retention_dropped += 1;
                continue;
            }
        }
        let at_ceiling_count = core.dead_letter.max_receives().is_some_and(|ceiling| m.count >= ceiling);
        if m.leased && m.deliver_at > unix_now {
            // A replicated engine's failover found a lease still in force
            // (only a replicated engine logs leases): that attempt has not
            // ended, so the message stays in flight (counted so in the
            // stats) until its lease ends, and then expires as leases do:
            // back with the queue's backoff, or at the ceiling to the
            // dead-letter queue.
            core.restore_leased(arrival_of(id, m), m.deliver_at - unix_now).map_err(|_| too_many(core))?;
            *held.entry(m.queue).or_default() += 1;
            report.messages += 1;
            continue;
        }
        if at_ceiling_count && core.dead_letter.linked() {
            *undecided.entry(m.queue).or_default() += 1;
            at_ceiling.push((id, m, core));
            continue;
        }
        in_place(core, id, m)?;
        *held.entry(m.queue).or_default() += 1;
        report.messages += 1;
    }
    let mut moved = 0;
    for (id, m, core) in at_ceiling {
        *undecided.get_mut(&m.queue).expect("counted above") -= 1;
        let dead_letter = core.dead_letter.target().expect("filtered above: nothing changes links during a restore");
        let to = dead_letter.ordinal;
        let taken = held.get(&to).copied().unwrap_or(0) + undecided.get(&to).copied().unwrap_or(0);
        if taken < dead_letter.config.max_messages
            && dead_letter.accept(poison_arrival(core, id, m, now), 0, now.0).is_ok()
        {
            *held.entry(to).or_default() += 1;
            moved += 1;
            report.messages += 1;
            continue;
        }
        in_place(core, id, m)?;
        *held.entry(m.queue).or_default() += 1;
        report.messages += 1;
    }
    report.dead_lettered = moved;
    Ok(Restored { moved })
}

/// The arrival on its dead-letter queue of a message whose delivery count
/// reached the ceiling before the restart.
fn poison_arrival(core: &QueueCore, id: u64, m: &replica::MessageState, now: Nanos) -> Arrival {
    let record = DeadLetterRecord {
        source_queue: core.name.clone(),
        reason: DeadLetterReason::Expired,
        delivery_count: m.count,
        attempts: vec![AttemptRecord {
            delivery: m.count,
            received_at: now,
            ended_at: now,
            outcome: AttemptOutcome::Expired,
        }],
        dead_lettered_at: now,
    };
    let history = History { dead_letter: Some(std::sync::Arc::new(record)), ..History::default() };
    Arrival {
        id: Some(MessageId(id)),
        arrived_at: None,
        payload: m.payload.clone(),
        lifetime_deliveries: m.carried.saturating_add(m.count),
        history: Some(Box::new(history)),
        delivery_count: 0,
        origin: Origin::Moved { from: core.ordinal },
    }
}
