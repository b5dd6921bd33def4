//! The journal: how lease transitions hand their durable effects to the log
//! writer without taking a lock.
//!
//! A durable engine's transitions describe what they changed as a
//! [`Record`] and push it, tagged with a sequence number, onto a lock-free
//! queue; the writer thread (`log/writer.rs`) pops, encodes, writes and syncs
//! them. The core of the engine knows only this hand-off, never files.
//!
//! Invariants:
//!
//! * **Log order respects each message's history.** A transition pushes its
//!   record while it holds the message's claim (or owns its unpublished
//!   slot), before it publishes the next lease word. The next transition of
//!   the same message claims after that publish, so it pushes after, and the
//!   queue is FIFO: the writer writes a message's records in the order its
//!   transitions happened. Records of different messages may interleave in
//!   any order; no record depends on another message's.
//! * **Watermarks.** `written` and `durable` are sequence numbers below which
//!   every record has been handed to the operating system, respectively
//!   synced to the disk (or failed, see `Failures`). A caller that waits for
//!   `durable > seq` therefore never returns before the sync that covers its
//!   record (the commit handshake, modelled in `loom-tests/tests/loom_journal.rs`).
//! * **No lost wake-up.** A waiter registers and re-reads `durable` under the
//!   commit mutex; the writer stores `durable` before it takes that mutex to
//!   notify. The writer's own sleep uses a Dekker pair of SeqCst fences with
//!   pushers (see `Journal::push`).

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc as StdArc;
use std::thread::Thread;
use std::time::Duration;

use bytes::Bytes;

use crate::config::QueueConfig;
use crate::dead_letter::DeadLetterRecord;
use crate::sync::{AtomicBool, AtomicU64, Condvar, Mutex, OnceLock, Ordering, fence, lock};

/// When a durable engine's writes reach the disk, and so what a crash can lose.
///
/// Whatever the policy, records reach the operating system in the order the
/// transitions happened, a segment is synced before the next one starts, and
/// queue creation and deletion are synced before they return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SyncPolicy {
    /// A send, ack, dead-letter, purge or redrive returns only after its
    /// record was synced (`fdatasync`); concurrent callers share one sync
    /// (group commit). A receive also waits for its delivery-count record, so
    /// `max_receives` holds exactly across crashes. Nothing that returned
    /// `Ok` is lost by a crash or a power cut.
    #[default]
    Always,
    /// Calls return once their record is queued for the writer; the writer
    /// writes continuously and syncs at least every `Duration` (like Redis
    /// `appendfsync everysec`). A crash loses at most the records of the
    /// last interval plus the writer's backlog (docs/durability.md).
    Interval(Duration),
    /// Like `Interval` without periodic syncs: the operating system decides
    /// when written records reach the disk. A process crash loses only the
    /// writer's backlog; a power cut may lose whatever the OS had not flushed.
    Never,
}

/// A durable effect of one transition (the log's vocabulary). Queues are
/// named by their ordinal, which a durable engine never reuses.
#[derive(Clone, PartialEq)]
pub(crate) enum Record {
    /// A queue was created.
    QueueCreated { queue: u32, name: String, config: Box<QueueConfig> },
    /// A queue and all its messages were deleted.
    QueueDeleted { queue: u32 },
    /// A message arrived by a send at `at` (Unix nanoseconds; 0 in records
    /// written before arrival times were logged). `deliver_at` is the Unix
    /// time in nanoseconds at which a delayed message matures, 0 for none.
    Sent { queue: u32, id: u64, at: u64, deliver_at: u64, payload: Bytes },
    /// A receive raised the message's delivery count on its queue to `count`;
    /// on a replicated engine also the lease's end, `until` (Unix
    /// nanoseconds; 0 when not logged, as on a local data dir).
    Received { queue: u32, id: u64, count: u32, until: u64 },
    /// Replicated engines only: the lease now ends at `until` (an extend;
    /// Unix nanoseconds). Logs written before `Released` existed also hold
    /// releases as this record.
    LeaseSet { queue: u32, id: u64, until: u64 },
    /// Replicated engines only: the lease was given up (a release); the
    /// message is eligible again at `until` (Unix nanoseconds; 0: now).
    Released { queue: u32, id: u64, until: u64 },
    /// The message left its queue for good (ack, purge).
    Gone { queue: u32, id: u64 },
    /// The message moved from `from` to `to` (dead-letter or redrive) with a
    /// delivery count of zero there, `carried` deliveries behind it, and the
    /// dead-letter record if it was dead-lettered, at `at` (Unix nanoseconds,
    /// as for `Sent`).
    Moved { from: u32, to: u32, id: u64, at: u64, carried: u32, dead_letter: Option<StdArc<DeadLetterRecord>> },
    /// The queue's retention period changed (`Queue::set_retention`).
    RetentionSet { queue: u32, retention: Option<std::time::Duration> },
    /// The queue's metadata was replaced (`Queue::set_metadata`).
    MetadataSet { queue: u32, metadata: Bytes },
    /// The queue's dead-letter queue (by name) and `max_receives` changed
    /// (`Queue::set_dead_letter`).
    DeadLetterSet { queue: u32, dead_letter_queue: Option<String>, max_receives: Option<u32> },
    /// No message id at or above `below` has been handed out.
    IdsReserved { below: u64 },
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::QueueCreated { queue, name, .. } => write!(f, "QueueCreated({queue}, {name:?})"),
            Record::QueueDeleted { queue } => write!(f, "QueueDeleted({queue})"),
            Record::Sent { queue, id, at, deliver_at, payload } => {
                write!(f, "Sent({queue}, {id}, at {at}, deliver at {deliver_at}, {} bytes)", payload.len())
            }
            Record::Received { queue, id, count, until } => {
                write!(f, "Received({queue}, {id}, count {count}, until {until})")
            }
            Record::LeaseSet { queue, id, until } => write!(f, "LeaseSet({queue}, {id}, until {until})"),
            Record::Released { queue, id, until } => write!(f, "Released({queue}, {id}, until {until})"),
            Record::Gone { queue, id } => write!(f, "Gone({queue}, {id})"),
            Record::Moved { from, to, id, at, carried, dead_letter } => {
                write!(f, "Moved({from} -> {to}, {id}, at {at}, carried {carried}, record {})", dead_letter.is_some())
            }
            Record::RetentionSet { queue, retention } => write!(f, "RetentionSet({queue}, {retention:?})"),
            Record::MetadataSet { queue, metadata } => write!(f, "MetadataSet({queue}, {} bytes)", metadata.len()),
            Record::DeadLetterSet { queue, dead_letter_queue, max_receives } => {
                write!(f, "DeadLetterSet({queue}, {dead_letter_queue:?}, {max_receives:?})")
            }
            Record::IdsReserved { below } => write!(f, "IdsReserved(below {below})"),
        }
    }
}

/// Why the log could not make a record durable (kept short: it is copied
/// into every error it causes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StorageFailure(pub(crate) StdArc<str>);

/// Sequence ranges whose records the writer could not write (`Always`
/// discards a failed group, and its callers learn it here).
#[derive(Debug, Default)]
struct Failures {
    /// `(start, end, why)`, oldest first; a few at most (pruned below
    /// `oldest waiter`).
    ranges: VecDeque<(u64, u64, StorageFailure)>,
}

/// Most failed ranges remembered; a waiter older than all of them has long
/// been answered.
const MAX_FAILED_RANGES: usize = 64;

/// The hand-off between transitions and the log writer.
pub(crate) struct Journal {
    pub(crate) policy: SyncPolicy,
    /// The records go to a `ReplicationSink`, not a data dir: lease ends are
    /// logged too (`Received::until`, `LeaseSet`), so a new leader keeps
    /// leases in force.
    pub(crate) replicated: bool,
    /// Records handed in and not yet popped by the writer, in push order.
    entries: Backlog,
    next_seq: AtomicU64,
    written: AtomicU64,
    durable: AtomicU64,
    /// Set while the writer sleeps (Dekker pair with `push`).
    writer_idle: AtomicBool,
    /// Senders parked in `throttle` (Dekker pair with `mark_written`).
    throttled: AtomicU64,
    throttle_lock: Mutex<()>,
    /// Notified when the writer's backlog falls to half of `MAX_BACKLOG`.
    backlog_drained: Condvar,
    /// Pushes waiting in `wait_for_room` (Dekker pair with `mark_written`).
    waiting_for_room: AtomicU64,
    /// Notified when the ring is down to half full.
    room_made: Condvar,
    writer: OnceLock<Thread>,
    /// Threads blocked in `wait_durable`: (the record each waits for, the
    /// thread). `mark_durable` unparks only those its raise covers, so a sync
    /// wakes the callers it completes and no others (a condvar's
    /// `notify_all` had woken every waiter for every sync).
    sleepers: Mutex<Vec<(u64, crate::sync::thread::Thread)>>,
    /// Tasks (async receives under `Always`) waiting for a record to become
    /// durable: (its sequence number, the task's waker).
    durable_tasks: Mutex<Vec<(u64, std::task::Waker)>>,
    /// Nonzero once any range failed: waiters look at `failures` only then.
    any_failure: AtomicBool,
    failures: Mutex<Failures>,
    /// Sends are refused (disk full, or writes failing), with the reason.
    refusing: Mutex<Option<StorageFailure>>,
    refusing_flag: AtomicBool,
    /// Message ids below this are durably reserved (`IdsReserved`).
    pub(crate) ids_reserved: AtomicU64,
    reserve_lock: Mutex<()>,
    /// Records waiting or being written; the writer closes when this is set
    /// and the queue is empty.
    pub(crate) closing: AtomicBool,
    /// Records below this must be synced whatever the policy (a flush).
    sync_wanted: AtomicU64,
    /// What the writer has done.
    pub(crate) counters: LogCounters,
    /// Tells this journal from every other in the process (the thread-local
    /// `LAST_PUSHED` is keyed by it, not by address, which a later journal
    /// may reuse).
    unique: u64,
}

/// Source of `Journal::unique`.
static JOURNALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl fmt::Debug for Journal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Journal")
            .field("policy", &self.policy)
            .field("next_seq", &self.next_seq.load(Ordering::Relaxed))
            .field("durable", &self.durable.load(Ordering::Relaxed))
            .finish()
    }
}

/// Most records the writer may lag behind before sends wait for it.
pub(crate) const MAX_BACKLOG: u64 = 1 << 16;

/// Records the backlog holds before any push waits for room: twice what
/// sends let through, so receives, acks and moves (which do not wait in
/// `throttle`) have as much room again before they wait.
const BACKLOG_CAPACITY: usize = 2 * MAX_BACKLOG as usize;

/// Ids reserved at a time: one synced record per 2^40 ids (30 hours at ten
/// million sends a second), and a restart skips at most that many.
pub(crate) const ID_RESERVATION: u64 = 1 << 40;

impl Journal {
    /// A local writer's journal.
    pub(crate) fn new(policy: SyncPolicy, ids_reserved: u64) -> Self {
        Self::with_backlog(policy, ids_reserved, Backlog::bounded(), false)
    }

    /// A replicated engine's journal (`Always`, unbounded backlog, lease
    /// ends logged).
    pub(crate) fn new_replicated(ids_reserved: u64) -> Self {
        Self::with_backlog(SyncPolicy::Always, ids_reserved, Backlog::unbounded(), true)
    }

    fn with_backlog(policy: SyncPolicy, ids_reserved: u64, entries: Backlog, replicated: bool) -> Self {
        let first_seq = 0;
        Journal {
            policy,
            replicated,
            entries,
            next_seq: AtomicU64::new(first_seq),
            written: AtomicU64::new(first_seq),
            durable: AtomicU64::new(first_seq),
            writer_idle: AtomicBool::new(false),
            throttled: AtomicU64::new(0),
            throttle_lock: Mutex::new(()),
            backlog_drained: Condvar::new(),
            waiting_for_room: AtomicU64::new(0),
            room_made: Condvar::new(),
            writer: OnceLock::new(),
            sleepers: Mutex::new(Vec::new()),
            durable_tasks: Mutex::new(Vec::new()),
            any_failure: AtomicBool::new(false),
            failures: Mutex::new(Failures::default()),
            refusing: Mutex::new(None),
            refusing_flag: AtomicBool::new(false),
            ids_reserved: AtomicU64::new(ids_reserved),
            reserve_lock: Mutex::new(()),
            closing: AtomicBool::new(false),
            sync_wanted: AtomicU64::new(0),
            counters: LogCounters::default(),
            unique: JOURNALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    // ----- the transitions' side --------------------------------------------

    /// Hands `record` to the writer; returns its sequence number.
    #[inline]
    pub(crate) fn push(&self, record: Record) -> u64 {
        // Relaxed: the number only needs to be unique and increasing per
        // thread; the queue's own synchronisation publishes the record.
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.entries.push((seq, record), || self.wait_for_room());
        LAST_PUSHED.with(|last| last.set((self.unique, seq)));
        // SeqCst fence, pairing with the writer's before it sleeps: either
        // the writer's second look at the queue sees this record, or this
        // load sees `writer_idle` and wakes it.
        fence(Ordering::SeqCst);
        self.wake_idle_writer();
        seq
    }

    /// Holds a sender back while the writer lags more than `MAX_BACKLOG`
    /// records behind: the backlog is what a process crash loses under
    /// `Interval` and `Never`, and memory, so it must stay bounded. Called
    /// before a send claims anything.
    ///
    /// A held sender sleeps on `backlog_drained` until the writer has worked
    /// the backlog down to half, so the writer gets the cores while it
    /// catches up (senders that polled the backlog on a timer took most of
    /// two cores from it at 64 callers). No lost wake-up: the sender counts
    /// itself in `throttled` and then re-reads `written` under the lock;
    /// the writer stores `written` and then reads `throttled`, a SeqCst
    /// fence on each side (so one of them sees the other), and notifies
    /// under the same lock.
    #[inline]
    pub(crate) fn throttle(&self) {
        if self.lag() <= MAX_BACKLOG {
            return;
        }
        self.throttle_slow();
    }

    #[cold]
    fn throttle_slow(&self) {
        self.hold(&self.throttled, &self.backlog_drained, || self.lag() > MAX_BACKLOG / 2);
    }

    /// The held side of `throttle`'s protocol, shared with `wait_for_room`:
    /// wakes the writer if it sleeps, counts this thread in `count`, and
    /// sleeps on `released` (under `throttle_lock`) while `held()` and the
    /// journal is not closing. The writer changes what `held` reads, issues
    /// a SeqCst fence, reads `count` and notifies under the same lock.
    fn hold(&self, count: &AtomicU64, released: &Condvar, held: impl Fn() -> bool) {
        self.wake_idle_writer();
        count.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let mut guard = lock(&self.throttle_lock);
        while held() && !self.closing.load(Ordering::Acquire) {
            // The timeout is a backstop only (the protocol above needs none).
            guard = match released.wait_timeout(guard, Duration::from_millis(50)) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        drop(guard);
        count.fetch_sub(1, Ordering::Relaxed);
    }

    /// Unparks the writer if it sleeps (`push` and `request_sync` issue the
    /// SeqCst fence of their Dekker pair with `writer_may_sleep` first).
    fn wake_idle_writer(&self) {
        if self.writer_idle.load(Ordering::Relaxed) && self.writer_idle.swap(false, Ordering::Relaxed) {
            if let Some(writer) = self.writer.get() {
                writer.unpark();
            }
        }
    }

    /// A push found the ring full (`BACKLOG_CAPACITY` records queued: more
    /// than sends let through, so receives, acks or a purge filled it). The
    /// pusher sleeps until the writer has popped the ring down to half, so a
    /// transition that outruns the writer is paced by it too and what a
    /// crash can lose stays bounded for every record. The condition is the
    /// ring's length, not the backlog `throttle` reads: that counts from
    /// the lowest record not yet written, which may be this pusher's own
    /// (its number is taken, its record not yet queued), so it could never
    /// fall while the pusher waited. No lost wake-up, by the protocol of
    /// `throttle` (`waiting_for_room` and the ring's length in place of
    /// `throttled` and the backlog; its own condvar, so that waking these
    /// pushers never wakes the held senders for nothing). While closing,
    /// the writer drains the ring before it stops, so the push just tries
    /// again. Returns `false` when no writer runs yet (an open's restore):
    /// nothing would make room.
    #[cold]
    fn wait_for_room(&self) -> bool {
        if self.writer.get().is_none() {
            return false;
        }
        if self.closing.load(Ordering::Acquire) {
            std::thread::yield_now();
            return true;
        }
        self.hold(&self.waiting_for_room, &self.room_made, || self.entries.ring_len() > BACKLOG_CAPACITY / 2);
        true
    }

    /// Records pushed but not yet handed to the operating system.
    #[inline]
    fn lag(&self) -> u64 {
        self.next_seq.load(Ordering::Relaxed).saturating_sub(self.written.load(Ordering::Acquire))
    }

    /// Wakes the senders `throttle` holds once the backlog is down to half
    /// (the writer's side of its protocol).
    fn release_throttled(&self) {
        fence(Ordering::SeqCst);
        if self.lag() <= MAX_BACKLOG / 2 {
            self.wake_throttled();
        }
        if self.waiting_for_room.load(Ordering::Relaxed) > 0 && self.entries.ring_len() <= BACKLOG_CAPACITY / 2 {
            let _guard = lock(&self.throttle_lock);
            self.room_made.notify_all();
        }
    }

    /// Wakes the senders `throttle` holds, if any (they look again).
    fn wake_throttled(&self) {
        if self.throttled.load(Ordering::Relaxed) > 0 || self.waiting_for_room.load(Ordering::Relaxed) > 0 {
            let _guard = lock(&self.throttle_lock);
            self.backlog_drained.notify_all();
            self.room_made.notify_all();
        }
    }

    /// The sequence number this thread last pushed here, if any.
    pub(crate) fn last_pushed_here(&self) -> Option<u64> {
        let (journal, seq) = LAST_PUSHED.with(std::cell::Cell::get);
        (journal == self.unique).then_some(seq)
    }

    /// Under `Always`, waits until the last record this thread pushed is
    /// durable; otherwise returns at once. An error means that record was
    /// not written (its group failed).
    #[inline]
    pub(crate) fn settle(&self) -> Result<(), StorageFailure> {
        if self.policy != SyncPolicy::Always {
            return Ok(());
        }
        match self.last_pushed_here() {
            Some(seq) => self.wait_durable(seq),
            None => Ok(()),
        }
    }

    /// Waits until record `seq` is durable (or failed).
    pub(crate) fn wait_durable(&self, seq: u64) -> Result<(), StorageFailure> {
        use crate::sync::thread;
        if self.durable.load(Ordering::Acquire) <= seq {
            {
                let mut sleepers = lock(&self.sleepers);
                // Checked again under the lock: `mark_durable` raises
                // `durable` before it takes this lock to wake, so either this
                // sees the raise or that sees this entry (no lost wake-up).
                if self.durable.load(Ordering::Acquire) <= seq {
                    sleepers.push((seq, thread::current()));
                }
            }
            // Unparked once due; a park may also return early (an unpark
            // left from an earlier wait, or none at all), so look again.
            while self.durable.load(Ordering::Acquire) <= seq {
                thread::park();
            }
        }
        self.failure_of(seq).map_or(Ok(()), Err)
    }

    /// Unparks the threads waiting for records below `seq`.
    fn wake_sleepers(&self, seq: u64) {
        for thread in take_due(&self.sleepers, seq) {
            thread.unpark();
        }
    }

    /// `wait_durable` for a task: ready once record `seq` is durable (or
    /// failed), else registers the task's waker, which `mark_durable` wakes.
    /// `registered` is the caller's memory of the waker it registered last:
    /// a poll with a waker that wakes the same task adds nothing, so polls
    /// that nothing woke (a `select!` loop's) do not grow the list. That
    /// registration is still listed whenever `durable` is not past `seq`
    /// (`mark_durable` removes only those it wakes, after raising it).
    pub(crate) fn poll_durable(
        &self,
        seq: u64,
        cx: &mut std::task::Context<'_>,
        registered: &mut Option<std::task::Waker>,
    ) -> std::task::Poll<Result<(), StorageFailure>> {
        let done = |j: &Journal| j.durable.load(Ordering::Acquire) > seq;
        if !done(self) {
            if registered.as_ref().is_some_and(|waker| waker.will_wake(cx.waker())) {
                return std::task::Poll::Pending;
            }
            let mut tasks = lock(&self.durable_tasks);
            // Checked again under the lock: `mark_durable` raises `durable`
            // before it takes this lock to wake, so either this sees the
            // raise or the waker is in the list when the wake-up runs.
            if !done(self) {
                tasks.push((seq, cx.waker().clone()));
                *registered = Some(cx.waker().clone());
                return std::task::Poll::Pending;
            }
        }
        std::task::Poll::Ready(self.failure_of(seq).map_or(Ok(()), Err))
    }

    /// Pushes `record` and waits until it is durable, whatever the policy
    /// (queue creation and deletion).
    pub(crate) fn commit_now(&self, record: Record) -> Result<(), StorageFailure> {
        let seq = self.push(record);
        self.request_sync(seq + 1);
        self.wait_durable(seq)
    }

    /// Waits until every record pushed before this call is durable, whatever
    /// the policy (an explicit flush).
    pub(crate) fn flush(&self) -> Result<(), StorageFailure> {
        let upto = self.next_seq.load(Ordering::Acquire);
        if upto == 0 {
            return Ok(());
        }
        self.request_sync(upto);
        self.wait_durable(upto - 1)
    }

    /// Why record `seq` failed, if it did.
    fn failure_of(&self, seq: u64) -> Option<StorageFailure> {
        if !self.any_failure.load(Ordering::Acquire) {
            return None;
        }
        let failures = lock(&self.failures);
        failures.ranges.iter().find(|(start, end, _)| (*start..*end).contains(&seq)).map(|(_, _, why)| why.clone())
    }

    /// Sends are refused now (disk full or writes failing), with the reason.
    #[inline]
    pub(crate) fn refusal(&self) -> Option<StorageFailure> {
        if !self.refusing_flag.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.refusing).clone()
    }

    /// Makes sure ids below `end` are durably reserved before one is handed
    /// out: a restart must never hand out an id again, or an idempotent
    /// consumer would take a new message for one it already processed.
    /// Cold: a shard takes a block of ids once per 65,536 sends, and a
    /// reservation covers 2^40 ids.
    pub(crate) fn reserve_ids(&self, end: u64) -> Result<(), StorageFailure> {
        if end <= self.ids_reserved.load(Ordering::Acquire) {
            return Ok(());
        }
        let _serial = lock(&self.reserve_lock);
        if end <= self.ids_reserved.load(Ordering::Acquire) {
            return Ok(());
        }
        let below = end.saturating_add(ID_RESERVATION);
        let seq = self.push(Record::IdsReserved { below });
        self.request_sync(seq + 1);
        self.wait_durable(seq)?;
        self.ids_reserved.store(below, Ordering::Release);
        Ok(())
    }

    // ----- the writer's side ------------------------------------------------

    /// Registers the writer thread (it is unparked by pushes while it sleeps).
    pub(crate) fn set_writer(&self, thread: Thread) {
        let _ = self.writer.set(thread);
    }

    /// Pops the next record, if any.
    #[inline]
    pub(crate) fn pop(&self) -> Option<(u64, Record)> {
        self.entries.pop()
    }

    /// Whether records are waiting.
    pub(crate) fn has_records(&self) -> bool {
        !self.entries.is_empty()
    }

    /// The writer is about to sleep: returns `false` (and stays awake) if a
    /// record arrived meanwhile.
    pub(crate) fn writer_may_sleep(&self) -> bool {
        self.writer_idle.store(true, Ordering::Relaxed);
        // SeqCst fence: see `push`.
        fence(Ordering::SeqCst);
        if self.has_records() || self.sync_requested() || self.closing.load(Ordering::Acquire) {
            self.writer_idle.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The writer woke.
    pub(crate) fn writer_awake(&self) {
        self.writer_idle.store(false, Ordering::Relaxed);
    }

    /// The writer (or replicator) has nothing to do: sleeps up to `sleep`
    /// unless a record or a flush arrived meanwhile (a push wakes it), or
    /// yields when a flush waits on a record not pushed yet (its pusher took
    /// a sequence number a moment ago) so that pusher can run.
    pub(crate) fn writer_idle_wait(&self, sleep: std::time::Duration) {
        if self.writer_may_sleep() {
            std::thread::park_timeout(sleep);
            self.writer_awake();
        } else if !self.has_records() {
            std::thread::yield_now();
        }
    }

    /// Every record below `seq` was handed to the operating system.
    pub(crate) fn mark_written(&self, seq: u64) {
        self.written.store(seq, Ordering::Release);
        self.release_throttled();
    }

    /// Every record below `seq` is durable (or failed): wakes its waiters.
    pub(crate) fn mark_durable(&self, seq: u64) {
        // Mutant (loom-tests only): wake before the store, so a waiter woken
        // then looks, finds its record not durable, and sleeps through it.
        #[cfg(leaseq_mutant = "notify_before_store")]
        self.wake_sleepers(seq);
        // Release: a waiter that reads it (Acquire) sees the sync and the
        // failure ranges recorded before. Stored before the lock below (no
        // lost wake-up).
        #[cfg(not(leaseq_mutant = "relaxed_durable"))]
        self.durable.store(seq, Ordering::Release);
        // Mutant (loom-tests only): a waiter on the fast path may return
        // without seeing the writer's work.
        #[cfg(leaseq_mutant = "relaxed_durable")]
        self.durable.store(seq, Ordering::Relaxed);
        #[cfg(not(leaseq_mutant = "notify_before_store"))]
        self.wake_sleepers(seq);
        // Woken outside the lock: a waker may poll its task at once.
        for waker in take_due(&self.durable_tasks, seq) {
            waker.wake();
        }
    }

    /// The records in `start..end` were not written, for `why`.
    pub(crate) fn mark_failed(&self, start: u64, end: u64, why: StorageFailure) {
        let mut failures = lock(&self.failures);
        if failures.ranges.len() == MAX_FAILED_RANGES {
            failures.ranges.pop_front();
        }
        failures.ranges.push_back((start, end, why));
        self.any_failure.store(true, Ordering::Release);
    }

    /// From now on sends are refused with `why` (`None`: accepted again).
    pub(crate) fn set_refusing(&self, why: Option<StorageFailure>) {
        let mut refusing = lock(&self.refusing);
        self.refusing_flag.store(why.is_some(), Ordering::Release);
        *refusing = why;
    }

    pub(crate) fn durable_below(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Asks the writer to sync everything below `seq` even under a policy
    /// that would not (a flush, an id reservation).
    pub(crate) fn request_sync(&self, seq: u64) {
        self.sync_wanted.fetch_max(seq, Ordering::AcqRel);
        fence(Ordering::SeqCst);
        self.wake_idle_writer();
    }

    /// Tells the writer to finish: it writes and syncs every record pushed
    /// so far, then exits.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        fence(Ordering::SeqCst);
        self.writer_idle.store(false, Ordering::Relaxed);
        if let Some(writer) = self.writer.get() {
            writer.unpark();
        }
        self.wake_throttled();
    }

    /// Whether a flush asked for a sync not done yet.
    pub(crate) fn sync_requested(&self) -> bool {
        self.sync_wanted.load(Ordering::Acquire) > self.durable.load(Ordering::Acquire)
    }
}

thread_local! {
    /// The journal (by `unique`) and sequence number this thread last pushed:
    /// how a public call finds the record it must wait for without passing it
    /// through every transition.
    static LAST_PUSHED: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Now as Unix time in nanoseconds (what a delayed send's record stores, so
/// its delay survives a restart, whose engine clock starts anew).
/// The Unix time a message sent at `unix_now` with `delay` nanoseconds
/// matures at (0: no delay).
pub(crate) fn deliver_at(unix_now: u64, delay: u64) -> u64 {
    if delay == 0 { 0 } else { unix_now.saturating_add(delay).max(1) }
}

/// The records between the transitions and the writer: a FIFO queue, many
/// pushers and one popper.
///
/// A local writer's is a bounded ring (`ArrayQueue`), allocated once: the
/// unbounded `SegQueue` allocates a block for every 31 records on the
/// pushers' threads and frees it on the writer's, and at 64 callers the
/// writer waited on the allocator's arena locks for about a tenth of its
/// time (docs/durability.md). A push that finds the ring full waits for the
/// writer (`Journal::wait_for_room`), except before the writer runs: an
/// open restores its messages before it starts the writer, and the records
/// that restore pushes (a drop past the retention, a move to a dead-letter
/// queue) may be more than the ring holds. Such a push sets `overflowing`
/// and goes to `overflow`, and so does every push after it, for good; the
/// writer pops the ring before the overflow. Order holds: a later record of
/// the same message is pushed after the earlier one's push returned (the
/// claim orders them, `journal.rs`), so it too sees the flag, and every
/// record in the ring that a pusher put there before the flag was set is
/// popped before any overflow record.
///
/// A replicated engine's stays unbounded: its popper waits on a quorum,
/// which the pushers must not wait behind.
// One per engine, inside its journal: the padded queue heads' size is moot.
#[allow(clippy::large_enum_variant)]
enum Backlog {
    #[cfg(not(loom))]
    Bounded {
        ring: crossbeam_queue::ArrayQueue<(u64, Record)>,
        overflow: crossbeam_queue::SegQueue<(u64, Record)>,
        overflowing: AtomicBool,
    },
    #[cfg(not(loom))]
    Unbounded(crossbeam_queue::SegQueue<(u64, Record)>),
    /// The loom seam, as in `ready.rs`: crossbeam's queues have no loom twin.
    #[cfg(loom)]
    Model(Mutex<VecDeque<(u64, Record)>>),
}

impl Backlog {
    fn bounded() -> Self {
        #[cfg(not(loom))]
        return Backlog::Bounded {
            ring: crossbeam_queue::ArrayQueue::new(BACKLOG_CAPACITY),
            overflow: crossbeam_queue::SegQueue::new(),
            overflowing: AtomicBool::new(false),
        };
        #[cfg(loom)]
        return Backlog::Model(Mutex::new(VecDeque::new()));
    }

    fn unbounded() -> Self {
        #[cfg(not(loom))]
        return Backlog::Unbounded(crossbeam_queue::SegQueue::new());
        #[cfg(loom)]
        return Backlog::Model(Mutex::new(VecDeque::new()));
    }

    /// Appends `entry`. When the ring is full, `wait` waits for room and
    /// returns `true`, or returns `false` when no writer runs to make room
    /// (the entry then overflows, see the type's docs).
    #[inline]
    fn push(&self, entry: (u64, Record), wait: impl Fn() -> bool) {
        match self {
            #[cfg(not(loom))]
            Backlog::Bounded { ring, overflow, overflowing } => {
                let mut entry = entry;
                loop {
                    // Acquire/Release: see the type's docs (the claim alone
                    // would order a message's pushes; these keep the flag's
                    // meaning independent of that).
                    if overflowing.load(Ordering::Acquire) {
                        overflow.push(entry);
                        return;
                    }
                    match ring.push(entry) {
                        Ok(()) => return,
                        Err(back) => {
                            entry = back;
                            if !wait() {
                                overflowing.store(true, Ordering::Release);
                            }
                        }
                    }
                }
            }
            #[cfg(not(loom))]
            Backlog::Unbounded(queue) => {
                let _ = &wait;
                queue.push(entry);
            }
            #[cfg(loom)]
            Backlog::Model(queue) => {
                let _ = &wait;
                lock(queue).push_back(entry);
            }
        }
    }

    #[inline]
    fn pop(&self) -> Option<(u64, Record)> {
        match self {
            #[cfg(not(loom))]
            Backlog::Bounded { ring, overflow, overflowing } => {
                ring.pop().or_else(|| if overflowing.load(Ordering::Acquire) { overflow.pop() } else { None })
            }
            #[cfg(not(loom))]
            Backlog::Unbounded(queue) => queue.pop(),
            #[cfg(loom)]
            Backlog::Model(queue) => lock(queue).pop_front(),
        }
    }

    /// Records in the bounded ring (0 for the other kinds, whose pushes
    /// never wait).
    fn ring_len(&self) -> usize {
        match self {
            #[cfg(not(loom))]
            Backlog::Bounded { ring, .. } => ring.len(),
            #[allow(unreachable_patterns)]
            _ => 0,
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            #[cfg(not(loom))]
            Backlog::Bounded { ring, overflow, .. } => ring.is_empty() && overflow.is_empty(),
            #[cfg(not(loom))]
            Backlog::Unbounded(queue) => queue.is_empty(),
            #[cfg(loom)]
            Backlog::Model(queue) => lock(queue).is_empty(),
        }
    }
}

/// Removes from a waiting list (record number, waiter) the waiters of
/// records below `seq` and returns them, to be woken outside the lock.
fn take_due<T>(list: &Mutex<Vec<(u64, T)>>, seq: u64) -> Vec<T> {
    let mut waiting = lock(list);
    if waiting.is_empty() {
        return Vec::new();
    }
    let (due, still): (Vec<_>, Vec<_>) = std::mem::take(&mut *waiting).into_iter().partition(|(s, _)| *s < seq);
    *waiting = still;
    due.into_iter().map(|(_, waiter)| waiter).collect()
}

/// What the log writer has done, as counters it updates (Relaxed: they are
/// statistics that no decision reads).
#[derive(Debug, Default)]
pub(crate) struct LogCounters {
    pub(crate) records: std::sync::atomic::AtomicU64,
    pub(crate) bytes: std::sync::atomic::AtomicU64,
    pub(crate) syncs: std::sync::atomic::AtomicU64,
    pub(crate) sync_nanos: std::sync::atomic::AtomicU64,
    pub(crate) failed_records: std::sync::atomic::AtomicU64,
    pub(crate) compactions: std::sync::atomic::AtomicU64,
    pub(crate) compactions_failed: std::sync::atomic::AtomicU64,
    pub(crate) compaction_nanos: std::sync::atomic::AtomicU64,
    pub(crate) segments_cleaned: std::sync::atomic::AtomicU64,
    pub(crate) rewritten_bytes: std::sync::atomic::AtomicU64,
    pub(crate) log_bytes: std::sync::atomic::AtomicU64,
    pub(crate) live_bytes: std::sync::atomic::AtomicU64,
}

/// A durable engine's log, as `Engine::log_stats` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogStats {
    /// Records written since the engine opened.
    pub records: u64,
    /// Records handed to the log since the engine opened (each call that
    /// changes durable state hands one or more; they are numbered from 0).
    pub handed: u64,
    /// Of those, the records the writer has not yet written to the OS: what
    /// a process crash loses under `Interval` and `Never` (bounded: sends
    /// wait while it is above 65,536).
    pub backlog: u64,
    /// Bytes written since the engine opened.
    pub bytes: u64,
    /// Syncs (`fdatasync`) since the engine opened.
    pub syncs: u64,
    /// Time spent in those syncs.
    pub sync_time: Duration,
    /// Records that could not be written (disk full or I/O errors).
    pub failed_records: u64,
    /// Compactions done: cleaning passes (which drop the oldest segments,
    /// rewriting forward the live messages homed there) and whole
    /// compactions (of logs written before segments had preambles).
    pub compactions: u64,
    /// Compactions that failed (the log stayed as it was; retried later).
    pub compactions_failed: u64,
    /// Time spent compacting.
    pub compaction_time: Duration,
    /// Segments dropped by cleaning.
    pub segments_cleaned: u64,
    /// Bytes of live messages that cleaning rewrote forward.
    pub rewritten_bytes: u64,
    /// Bytes of data in the log's segments now.
    pub log_bytes: u64,
    /// Estimated bytes the live queues and messages take in a snapshot.
    pub live_bytes: u64,
    /// Whether sends are refused now (disk full or failing), and why.
    pub refusing: Option<String>,
}

impl LogStats {
    /// Records per sync on average (what group commit achieved).
    #[must_use]
    pub fn records_per_sync(&self) -> f64 {
        if self.syncs == 0 { 0.0 } else { self.records as f64 / self.syncs as f64 }
    }
}

impl Journal {
    /// The writer's counters as a report.
    pub(crate) fn stats(&self) -> LogStats {
        let counters = &self.counters;
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        // `written` first: it only grows and never passes `next_seq`, so
        // `handed - backlog` is a position the writer really reached.
        let written = self.written.load(Ordering::Acquire);
        let handed = self.next_seq.load(Ordering::Acquire);
        LogStats {
            records: get(&counters.records),
            handed,
            backlog: handed.saturating_sub(written),
            bytes: get(&counters.bytes),
            syncs: get(&counters.syncs),
            sync_time: Duration::from_nanos(get(&counters.sync_nanos)),
            failed_records: get(&counters.failed_records),
            compactions: get(&counters.compactions),
            compactions_failed: get(&counters.compactions_failed),
            compaction_time: Duration::from_nanos(get(&counters.compaction_nanos)),
            segments_cleaned: get(&counters.segments_cleaned),
            rewritten_bytes: get(&counters.rewritten_bytes),
            log_bytes: get(&counters.log_bytes),
            live_bytes: get(&counters.live_bytes),
            refusing: self.refusal().map(|failure| failure.0.to_string()),
        }
    }
}

/// The commit handshake, exposed to the loom models (`loom-tests`) only.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_hooks {
    use super::{Journal, Record, SyncPolicy};

    /// A journal with no writer thread: the model plays the writer.
    #[derive(Debug)]
    pub struct Commits(Journal);

    impl Default for Commits {
        fn default() -> Self {
            Commits(Journal::new(SyncPolicy::Always, 0))
        }
    }

    impl Commits {
        /// A caller hands in a record; returns its sequence number.
        pub fn push(&self) -> u64 {
            self.0.push(Record::IdsReserved { below: 0 })
        }
        /// The writer pops the next record's sequence number, if any.
        pub fn pop(&self) -> Option<u64> {
            self.0.pop().map(|(seq, _)| seq)
        }
        /// A caller waits for `seq`; `false` if its group failed.
        pub fn wait(&self, seq: u64) -> bool {
            self.0.wait_durable(seq).is_ok()
        }
        /// The writer synced every record below `seq`.
        pub fn mark_durable(&self, seq: u64) {
            self.0.mark_durable(seq);
        }
        /// The writer could not write `start..end`.
        pub fn mark_failed(&self, start: u64, end: u64) {
            self.0.mark_failed(start, end, super::StorageFailure("model".into()));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A journal whose writer fell `MAX_BACKLOG + 1` records behind (no
    /// writer thread: the test plays it).
    fn backlogged() -> StdArc<Journal> {
        let journal = StdArc::new(Journal::new(SyncPolicy::Never, 0));
        for id in 0..=MAX_BACKLOG {
            journal.push(Record::Gone { queue: 0, id });
        }
        journal
    }

    fn park_a_sender(journal: &StdArc<Journal>) -> std::thread::JoinHandle<()> {
        let sender = {
            let journal = journal.clone();
            std::thread::spawn(move || journal.throttle())
        };
        while journal.throttled.load(Ordering::Relaxed) == 0 {
            assert!(!sender.is_finished(), "a sender {} records behind was not held", MAX_BACKLOG + 1);
            std::thread::yield_now();
        }
        sender
    }

    #[test]
    fn a_throttled_sender_waits_until_the_backlog_is_down_to_half() {
        let journal = backlogged();
        let pushed = journal.next_seq.load(Ordering::Relaxed);
        let sender = park_a_sender(&journal);
        // One record more than half still behind: the sender stays held
        // through several of its backstop timeouts.
        journal.mark_written(pushed - MAX_BACKLOG / 2 - 1);
        std::thread::sleep(Duration::from_millis(200));
        assert!(!sender.is_finished(), "released while the backlog was above half");
        assert_eq!(journal.throttled.load(Ordering::Relaxed), 1);
        journal.mark_written(pushed - MAX_BACKLOG / 2);
        sender.join().unwrap();
        assert_eq!(journal.throttled.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn close_releases_a_throttled_sender() {
        let journal = backlogged();
        let sender = park_a_sender(&journal);
        journal.close();
        sender.join().unwrap();
    }

    #[test]
    fn polls_that_nothing_woke_register_the_task_once() {
        /// A task's waker that counts its wake-ups (its clones share the
        /// data pointer and vtable, as an executor's do; a no-op waker's
        /// vtable may differ between uses in a debug build).
        struct Wakes(std::sync::atomic::AtomicUsize);
        impl std::task::Wake for Wakes {
            fn wake(self: StdArc<Self>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let journal = Journal::new(SyncPolicy::Always, 0);
        let seq = journal.push(Record::Gone { queue: 0, id: 0 });
        let wakes = StdArc::new(Wakes(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let mut registered = None;
        for _ in 0..100 {
            assert!(journal.poll_durable(seq, &mut cx, &mut registered).is_pending());
        }
        assert_eq!(lock(&journal.durable_tasks).len(), 1);
        journal.mark_durable(seq + 1);
        assert!(lock(&journal.durable_tasks).is_empty());
        assert_eq!(wakes.0.load(std::sync::atomic::Ordering::Relaxed), 1, "woken once");
        assert!(matches!(journal.poll_durable(seq, &mut cx, &mut registered), std::task::Poll::Ready(Ok(()))));
    }

    #[test]
    fn a_push_into_a_full_backlog_waits_for_room_and_loses_nothing() {
        let journal = StdArc::new(Journal::new(SyncPolicy::Never, 0));
        // A writer runs (this thread plays it).
        journal.set_writer(std::thread::current());
        let full = BACKLOG_CAPACITY as u64;
        for id in 0..full {
            journal.push(Record::Gone { queue: 0, id });
        }
        let late = {
            let journal = journal.clone();
            std::thread::spawn(move || journal.push(Record::Gone { queue: 0, id: full }))
        };
        // Nothing is popped meanwhile, so the push cannot have found room.
        std::thread::sleep(Duration::from_millis(100));
        assert!(!late.is_finished(), "a push into a full backlog returned without waiting");
        let mut popped = vec![journal.pop().expect("the first record")];
        journal.mark_written(1);
        std::thread::sleep(Duration::from_millis(100));
        assert!(!late.is_finished(), "the push went on before the ring was down to half");
        // While it waits, the ring is drained and filled again by later
        // records (numbered after the waiting one), and drained again: the
        // records below the waiting one are all written, but the backlog
        // `throttle` reads (from the waiting record on) stays above half of
        // `MAX_BACKLOG`. The ring is empty, so the push must go on.
        while popped.len() < BACKLOG_CAPACITY / 2 {
            popped.push(journal.pop().expect("a queued record"));
        }
        for id in full + 1..full + 1 + BACKLOG_CAPACITY as u64 / 2 {
            journal.push(Record::Gone { queue: 0, id });
        }
        while let Some(entry) = journal.pop() {
            popped.push(entry);
        }
        journal.mark_written(full);
        assert!(journal.lag() > MAX_BACKLOG / 2);
        let started = std::time::Instant::now();
        while !late.is_finished() {
            assert!(started.elapsed() < Duration::from_secs(30), "the push still waits on an empty ring");
            std::thread::sleep(Duration::from_millis(1));
        }
        let late_seq = late.join().unwrap();
        assert_eq!(late_seq, full);
        while let Some(entry) = journal.pop() {
            popped.push(entry);
        }
        // Every record once; each in its number's place but the late one,
        // which was queued last.
        let mut seqs: Vec<u64> = popped.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(seqs.pop(), Some(full));
        assert_eq!(seqs, (0..full).chain(full + 1..full + 1 + BACKLOG_CAPACITY as u64 / 2).collect::<Vec<_>>());
        assert!(popped.iter().all(|(seq, r)| matches!(r, Record::Gone { id, .. } if id == seq)));
    }

    #[test]
    fn before_the_writer_runs_a_full_backlog_overflows_in_order() {
        // An open's restore pushes before the writer starts: it must not
        // wait, and the writer must then pop everything in push order.
        let journal = Journal::new(SyncPolicy::Never, 0);
        let pushed = BACKLOG_CAPACITY as u64 + 1000;
        for id in 0..pushed {
            journal.push(Record::Gone { queue: 0, id });
        }
        journal.set_writer(std::thread::current());
        // Pushes after the writer started go behind the overflow too.
        for id in pushed..pushed + 10 {
            journal.push(Record::Gone { queue: 0, id });
        }
        let mut seqs = Vec::new();
        while let Some((seq, record)) = journal.pop() {
            assert!(matches!(record, Record::Gone { id, .. } if id == seq));
            seqs.push(seq);
        }
        assert_eq!(seqs, (0..pushed + 10).collect::<Vec<_>>());
    }

    #[test]
    fn a_replicated_backlog_has_no_bound() {
        // Its popper waits on a quorum, so pushes must never wait on it. On a
        // thread, so that a push that waits fails the test, not hangs it.
        let journal = StdArc::new(Journal::new_replicated(0));
        let pusher = {
            let journal = journal.clone();
            std::thread::spawn(move || {
                for id in 0..=BACKLOG_CAPACITY as u64 {
                    journal.push(Record::Gone { queue: 0, id });
                }
            })
        };
        let started = std::time::Instant::now();
        while !pusher.is_finished() {
            assert!(started.elapsed() < Duration::from_secs(30), "a replicated push waited for room");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(journal.stats().backlog, BACKLOG_CAPACITY as u64 + 1);
    }

    #[test]
    fn a_sender_within_the_backlog_is_not_held() {
        let journal = StdArc::new(Journal::new(SyncPolicy::Never, 0));
        for id in 0..MAX_BACKLOG {
            journal.push(Record::Gone { queue: 0, id });
        }
        // On a thread, so that a wrongly held sender fails the test instead
        // of hanging it (nothing would ever release it).
        let sender = {
            let journal = journal.clone();
            std::thread::spawn(move || journal.throttle())
        };
        let started = std::time::Instant::now();
        while !sender.is_finished() {
            assert!(started.elapsed() < Duration::from_secs(10), "a sender within the backlog was held");
            std::thread::yield_now();
        }
        assert_eq!(journal.throttled.load(Ordering::Relaxed), 0);
    }
}
