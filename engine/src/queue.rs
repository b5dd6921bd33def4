//! A queue: the public handle and the shared state behind it.
//!
//! Invariant: every public operation validates its input before touching any
//! slot, so an error leaves the queue as it was; `QueueCore` is immutable
//! after creation except through atomics (the lease words, counters,
//! `deleted`, `retention`), so a `Queue` is cheap to clone and `Send + Sync`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;

use crate::clock::{Nanos, duration_nanos};
use crate::commit::{SendBatchFuture, SendFuture, Settle};
use crate::config::{MAX_BATCH, QueueConfig};
use crate::dead_letter::DeadLetterLog;
use crate::dead_letter_link::DeadLetterLink;
use crate::delivery::{Delivery, ReceiveOptions, SendOptions};
use crate::engine::{EngineInner, EngineShared};
use crate::error::{Error, LeaseError};
use crate::journal::SyncPolicy;
use crate::lifecycle::{SendStep, StagedBatch};
use crate::payload::Payload;
use crate::receipt::{MessageId, Receipt};
use crate::shard::{Shard, ShardRing, shard_capacity};
use crate::stats::QueueStats;
use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};
use crate::waiters::{Registration, Waiters};

/// Limits kept as nanoseconds for the hot paths.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) default_visibility: u64,
    pub(crate) max_lease: u64,
}

/// Everything a queue shares between its handles.
#[derive(Debug)]
pub(crate) struct QueueCore {
    pub(crate) name: String,
    pub(crate) ordinal: u32,
    pub(crate) config: QueueConfig,
    pub(crate) limits: Limits,
    pub(crate) engine: Arc<EngineShared>,
    pub(crate) shards: Box<[Shard]>,
    /// The order threads visit `shards` in (home first).
    pub(crate) ring: ShardRing,
    /// Where failures go (`set_dead_letter`; `config`'s link and ceiling
    /// are only their values at creation).
    pub(crate) dead_letter: DeadLetterLink,
    pub(crate) waiters: Waiters,
    pub(crate) deleted: AtomicBool,
    pub(crate) dead_letter_log: DeadLetterLog,
    /// The retention period in nanoseconds, 0 for none (`QueueConfig::
    /// retention`; `config.retention` is only its value at creation).
    /// Relaxed everywhere: a setting read on its own, publishing nothing.
    pub(crate) retention: AtomicU64,
    /// Held while `set_retention` logs and stores a change.
    pub(crate) retention_change: crate::sync::Mutex<()>,
    /// What `set_metadata` last stored; the lock is held while a change is
    /// logged, so the log's order of changes is the order they took effect.
    pub(crate) metadata: crate::sync::Mutex<Bytes>,
}

impl QueueCore {
    pub(crate) fn new(
        name: String,
        ordinal: u32,
        config: QueueConfig,
        shard_count: usize,
        engine: Arc<EngineShared>,
        dead_letter: Option<Arc<QueueCore>>,
    ) -> Self {
        let now = engine.clock.now().0;
        let shard_count = shard_count.min(config.max_messages).max(1);
        let shards = (0..shard_count)
            .map(|i| Shard::new(i as u16, shard_capacity(config.max_messages, shard_count, i), engine.tick_shift, now))
            .collect();
        let waiters = Waiters::new(engine.waiting.clone());
        let limits = Limits {
            default_visibility: duration_nanos(config.visibility_timeout),
            max_lease: duration_nanos(config.max_lease),
        };
        let retention = AtomicU64::new(config.retention.map_or(0, duration_nanos));
        let max_receives = config.max_receives;
        QueueCore {
            name,
            ordinal,
            config,
            limits,
            engine,
            ring: ShardRing::new(shard_count),
            shards,
            dead_letter: DeadLetterLink::new(dead_letter, max_receives),
            waiters,
            deleted: AtomicBool::new(false),
            dead_letter_log: DeadLetterLog::default(),
            retention,
            retention_change: crate::sync::Mutex::new(()),
            metadata: crate::sync::Mutex::new(Bytes::new()),
        }
    }

    /// The retention period now in force.
    pub(crate) fn retention(&self) -> Option<Duration> {
        match self.retention.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    pub(crate) fn check_live(&self) -> Result<(), Error> {
        if self.deleted.load(Ordering::Acquire) {
            return Err(Error::QueueDeleted { name: self.name.clone() });
        }
        Ok(())
    }

    fn visibility_of(&self, options: &ReceiveOptions) -> Result<u64, Error> {
        match options.visibility {
            None => Ok(self.limits.default_visibility),
            Some(v) if v > self.config.max_visibility => {
                Err(Error::VisibilityTooLong { requested: v, max: self.config.max_visibility })
            }
            Some(v) => Ok(duration_nanos(v)),
        }
    }

    /// A receive's count: 1..=`MAX_BATCH`.
    fn check_batch(max: usize) -> Result<(), Error> {
        if max == 0 {
            return Err(Error::InvalidBatchSize { requested: max, max: MAX_BATCH });
        }
        Self::check_batch_len(max)
    }

    /// A batch's length: at most `MAX_BATCH` (the one rule of every batch
    /// call, see `MAX_BATCH`).
    fn check_batch_len(len: usize) -> Result<(), Error> {
        if len > MAX_BATCH {
            return Err(Error::InvalidBatchSize { requested: len, max: MAX_BATCH });
        }
        Ok(())
    }

    /// Gauges of this queue (ready + delayed + in flight), from its counters.
    fn depth(&self) -> u64 {
        let stats = QueueStats::assemble(self.shards.iter().map(|s| &*s.stats), 0, None, Duration::ZERO);
        stats.ready + stats.delayed + stats.in_flight
    }

    /// Under `SyncPolicy::Always`, waits until the records this thread just
    /// pushed are durable; a failure turns a successful `result` into
    /// `LeaseError::Storage`.
    #[inline]
    pub(crate) fn settle<T>(&self, result: Result<T, LeaseError>) -> Result<T, LeaseError> {
        match (self.journal(), result) {
            (Some(journal), Ok(value)) => journal.settle().map(|()| value).map_err(LeaseError::from),
            (_, result) => result,
        }
    }

    /// `settle` on a replicated engine, where extensions are records too
    /// (elsewhere they are not logged, and nothing waits).
    #[inline]
    pub(crate) fn settle_replicated<T>(&self, result: Result<T, LeaseError>) -> Result<T, LeaseError> {
        match self.journal() {
            Some(journal) if journal.replicated => self.settle(result),
            _ => result,
        }
    }

    /// The record a write just made on this thread must wait for, if the
    /// engine waits for records (`SyncPolicy::Always`; with
    /// `replicated_only`, only a replicated engine): the last one this thread
    /// pushed, which covers every record it pushed before.
    pub(crate) fn commit_seq(&self, replicated_only: bool) -> Option<u64> {
        let journal = self.journal()?;
        if journal.policy != SyncPolicy::Always || (replicated_only && !journal.replicated) {
            return None;
        }
        journal.last_pushed_here()
    }

    /// A receive's end: under `SyncPolicy::Always` its delivery-count records
    /// must be durable before the deliveries are handed out. If they could
    /// not be written the deliveries are withheld (their leases run out as
    /// usual) and the call fails.
    pub(crate) fn settle_receive(&self, out: &mut Vec<Delivery>, start: usize) -> Result<usize, Error> {
        let received = out.len() - start;
        if received == 0 {
            return Ok(0);
        }
        match self.settle(Ok(received)) {
            Ok(received) => Ok(received),
            Err(error) => {
                out.truncate(start);
                Err(Error::from_lease_storage(error))
            }
        }
    }

    pub(crate) fn stats(&self) -> QueueStats {
        let now = self.now();
        self.run_all_timers(now);
        self.drop_past_retention(now);
        let dead_letter = self.dead_letter.target();
        if let Some(dead_letter) = &dead_letter {
            // Its depth below counts only what it still holds.
            dead_letter.drop_past_retention(now);
        }
        let oldest = self.oldest_ready_sent_at().map(|sent| Nanos(now).saturating_since(Nanos(sent)));
        let dead_letter_depth = dead_letter.as_ref().map_or(0, |d| d.depth());
        QueueStats::assemble(
            self.shards.iter().map(|s| &*s.stats),
            dead_letter_depth,
            oldest,
            self.config.visibility_timeout,
        )
    }
}

/// A handle to one queue of an engine. Cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct Queue {
    pub(crate) core: Arc<QueueCore>,
    /// Keeps the engine (and its driver thread) alive while handles exist.
    pub(crate) _engine: Arc<EngineInner>,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue").field("name", &self.core.name).field("shards", &self.core.shards.len()).finish()
    }
}

impl Queue {
    /// The queue's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The queue's configuration, as created (`QueueConfig::max_lease` says
    /// which defaults follow a lower cap) with the retention and the
    /// dead-letter link now in force (`set_retention`, `set_dead_letter`).
    #[must_use]
    pub fn config(&self) -> QueueConfig {
        QueueConfig {
            retention: self.core.retention(),
            dead_letter_queue: self.dead_letter_queue(),
            max_receives: self.core.dead_letter.max_receives(),
            ..self.core.config.clone()
        }
    }

    /// Changes where this queue's failed messages go: `dead_letter_queue`
    /// (by name; `None` unlinks it) and `max_receives`, the delivery count at
    /// which an expiry or release moves a message there (`None`: only
    /// explicit `dead_letter` calls do), as `QueueConfig` sets them at
    /// creation. Takes effect for the messages already here at their next
    /// expiry or release; those the link's absence kept from remembering
    /// their failed attempts reach the dead-letter queue with only the
    /// attempts since. Durable (and replicated) like the queue's config.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` (`max_receives` of 0, or without a dead-letter queue;
    /// a target whose `max_payload` is below this queue's),
    /// `DeadLetterQueueNotFound`, `DeadLetterCycle` (the target's own links
    /// lead back here, or it is this queue), `QueueDeleted`, and on a durable
    /// engine `Storage` when the change could not be logged (then nothing
    /// changed).
    pub fn set_dead_letter(&self, dead_letter_queue: Option<&str>, max_receives: Option<u32>) -> Result<(), Error> {
        self._engine.set_dead_letter(&self.core, dead_letter_queue, max_receives)
    }

    /// Changes the queue's retention (`QueueConfig::retention`); `None` keeps
    /// messages until they are acked. It applies to the messages already
    /// here too: those a shorter period leaves past it are dropped (counted
    /// in `QueueStats::retention_dropped`) as they are next met, and at the
    /// latest by the next `stats`, `purge` or full-queue send. Durable.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` (zero, or above one year), `QueueDeleted`, and on a
    /// durable engine `Storage` when the change could not be logged (then
    /// nothing changed).
    pub fn set_retention(&self, retention: Option<Duration>) -> Result<(), Error> {
        self.core.check_live()?;
        if let Some(retention) = retention {
            crate::config::validate_retention(retention)?;
        }
        // One change at a time, so the log's order of changes is the order
        // in which they took effect.
        let _one_change = crate::sync::lock(&self.core.retention_change);
        if let Some(journal) = self.core.journal() {
            let record = crate::journal::Record::RetentionSet { queue: self.core.ordinal, retention };
            journal.commit_now(record).map_err(|failure| Error::storage(failure, None))?;
        }
        // What the old period let run out is gone already, in the contract's
        // view, even where nothing has met it yet: a longer period must not
        // bring it back.
        self.core.drop_past_retention(self.core.now());
        self.core.retention.store(retention.map_or(0, duration_nanos), Ordering::Relaxed);
        Ok(())
    }

    /// The bytes last stored by `set_metadata` (empty if none).
    #[must_use]
    pub fn metadata(&self) -> Bytes {
        crate::sync::lock(&self.core.metadata).clone()
    }

    /// Replaces the opaque bytes an application keeps with this queue (at
    /// most `MAX_QUEUE_METADATA`): settings of its own, say, which the
    /// engine does not read. On a durable engine they survive restarts and
    /// on a replicated one failovers, as the queue's config does; they go
    /// with the queue when it is deleted.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` (field `metadata`) above the limit, `QueueDeleted`,
    /// and on a durable or replicated engine `Storage` when the change could
    /// not be logged (then nothing changed).
    pub fn set_metadata(&self, metadata: impl Into<Bytes>) -> Result<(), Error> {
        let metadata = metadata.into();
        self.core.check_live()?;
        if metadata.len() > crate::config::MAX_QUEUE_METADATA {
            return Err(Error::InvalidConfig {
                field: "metadata",
                reason: format!(
                    "{} bytes is above the limit of {} bytes",
                    metadata.len(),
                    crate::config::MAX_QUEUE_METADATA
                ),
            });
        }
        let mut stored = crate::sync::lock(&self.core.metadata);
        if let Some(journal) = self.core.journal() {
            let record = crate::journal::Record::MetadataSet { queue: self.core.ordinal, metadata: metadata.clone() };
            journal.commit_now(record).map_err(|failure| Error::storage(failure, None))?;
        }
        *stored = metadata;
        Ok(())
    }

    /// The engine clock's current time (what deadlines are measured on).
    #[must_use]
    pub fn now(&self) -> Nanos {
        Nanos(self.core.now())
    }

    /// How long until the engine clock reads `t` (a `Delivery::deadline`,
    /// a `LeaseGuard::deadline`), zero if it has. It is measured on the
    /// engine clock, so it holds under a `ManualClock` too.
    #[must_use]
    pub fn time_until(&self, t: Nanos) -> Duration {
        t.saturating_since(self.core.engine.clock.now())
    }

    /// The `Instant` at which the engine clock reads `t`, to compare a
    /// deadline with `Instant::now()` or hand it to an API that takes an
    /// `Instant`. `None` under a `ManualClock`, whose time is not real time
    /// (use [`Queue::time_until`] there). A clock of your own that is not
    /// manual is taken to run at real time.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use leaseq::{Engine, QueueConfig, ReceiveOptions};
    ///
    /// let engine = Engine::new();
    /// let q = engine.create_queue("jobs", QueueConfig::default())?;
    /// q.send(b"job")?;
    /// let d = q.receive_with(1, ReceiveOptions::new().visibility(Duration::from_secs(30)))?.remove(0);
    /// let deadline: Instant = q.instant_of(d.deadline).expect("a system clock runs in real time");
    /// assert!(deadline > Instant::now() + Duration::from_secs(29));
    /// # Ok::<(), leaseq::Error>(())
    /// ```
    #[must_use]
    pub fn instant_of(&self, t: Nanos) -> Option<std::time::Instant> {
        crate::clock::instant_at(self.core.engine.clock.as_ref(), t)
    }

    /// Sends a message, receivable at once. The payload is anything that
    /// converts into a [`Payload`](crate::Payload): `Bytes` (never copied),
    /// `Vec<u8>` or `String` (moved in), `&[u8]`, `&[u8; N]` or `&str`
    /// (copied).
    ///
    /// # Errors
    ///
    /// `QueueDeleted`, `MessageTooLarge`, `QueueFull` (which hands the
    /// payload back) and, on a durable engine, `Storage`.
    pub fn send(&self, payload: impl Into<Payload>) -> Result<MessageId, Error> {
        self.send_with(payload, SendOptions::default())
    }

    /// Sends a message with options (a delay before it is receivable).
    ///
    /// # Errors
    ///
    /// As [`Queue::send`], and `DelayTooLong` for a delay over the queue's
    /// `max_delay`.
    pub fn send_with(&self, payload: impl Into<Payload>, options: impl Into<SendOptions>) -> Result<MessageId, Error> {
        let core = &self.core;
        core.check_live()?;
        let delay = self.delay_of(options.into())?;
        let id = core.send_one(payload.into().into_bytes(), delay, core.now())?;
        if delay == 0 {
            core.waiters.notify();
        }
        Ok(id)
    }

    fn delay_of(&self, options: SendOptions) -> Result<u64, Error> {
        if options.delay > self.core.config.max_delay {
            return Err(Error::DelayTooLong { requested: options.delay, max: self.core.config.max_delay });
        }
        Ok(duration_nanos(options.delay))
    }

    /// Sends up to `MAX_BATCH` messages; one result per payload, in order.
    /// Each payload succeeds or fails on its own (a full queue refuses the
    /// rest and hands each payload back). A larger batch is refused whole:
    /// every result is `InvalidBatchSize` and nothing is sent.
    pub fn send_batch<P: Into<Payload>>(&self, payloads: impl IntoIterator<Item = P>) -> Vec<Result<MessageId, Error>> {
        let core = &self.core;
        let payloads: Vec<Bytes> = payloads.into_iter().map(|p| p.into().into_bytes()).collect();
        let refusal = core.check_live().and_then(|()| QueueCore::check_batch_len(payloads.len()));
        if let Err(e) = refusal {
            return payloads.iter().map(|_| Err(e.clone())).collect();
        }
        let now = core.now();
        let results = core.send_many(payloads.into_iter(), now);
        if results.iter().any(Result::is_ok) {
            core.waiters.notify();
        }
        results
    }

    /// Like `send_with`, for async code: the send is made now (every check,
    /// and the message staged in its slot), and the future resolves when its
    /// log record is durable, without blocking the executor's thread under
    /// `SyncPolicy::Always` (elsewhere it is ready at once). The message is
    /// receivable from then, as with `send_with`. Dropping the future before
    /// it resolves does not cancel the send: the drop waits for the record
    /// (at most one group commit) and publishes the message (`commit.rs`).
    ///
    /// # Errors
    ///
    /// As [`Queue::send_with`], in the future's output.
    pub fn send_async(&self, payload: impl Into<Payload>, options: impl Into<SendOptions>) -> SendFuture {
        let core = &self.core;
        let step = core.check_live().and_then(|()| self.delay_of(options.into())).and_then(|delay| {
            let now = core.now();
            core.send_one_staging(payload.into().into_bytes(), delay, now).map(|step| (step, delay, now))
        });
        match step {
            Ok((SendStep::Sent(id), delay, _)) => {
                if delay == 0 {
                    core.waiters.notify();
                }
                SendFuture::done(Ok(id))
            }
            Ok((SendStep::Staged(staged, seq), _, now)) => SendFuture::staged(self, seq, staged.detach(), now),
            Err(e) => SendFuture::done(Err(e)),
        }
    }

    /// Like `send_batch`, for async code: the batch is staged now and the
    /// future resolves when its one log group is durable (`send_async`).
    pub fn send_batch_async<P: Into<Payload>>(&self, payloads: impl IntoIterator<Item = P>) -> SendBatchFuture {
        let core = &self.core;
        let payloads: Vec<Bytes> = payloads.into_iter().map(|p| p.into().into_bytes()).collect();
        let now = core.now();
        if let Err(e) = core.check_live().and_then(|()| QueueCore::check_batch_len(payloads.len())) {
            let results = payloads.iter().map(|_| Err(e.clone())).collect();
            return SendBatchFuture::new(self, results, Vec::new(), None, now);
        }
        let StagedBatch { results, staged, seq } = core.send_many_staging(payloads.into_iter(), now);
        if seq.is_none() && results.iter().any(Result::is_ok) {
            core.waiters.notify();
        }
        let staged = staged.into_iter().map(|(at, stage)| (at, stage.detach())).collect();
        SendBatchFuture::new(self, results, staged, seq, now)
    }

    /// Receives up to `max` messages (1..=`MAX_BATCH`) with the queue's
    /// default visibility, without waiting.
    ///
    /// # Errors
    ///
    /// `InvalidBatchSize` unless `max` is in 1..=`MAX_BATCH`, `QueueDeleted`, and
    /// on a durable engine `Storage` when the delivery-count record could not be
    /// written under `SyncPolicy::Always`.
    pub fn receive(&self, max: usize) -> Result<Vec<Delivery>, Error> {
        self.receive_with(max, ReceiveOptions::default())
    }

    /// Receives up to `max` messages; with `options.wait`, blocks the calling
    /// thread up to that long (engine clock) for at least one.
    ///
    /// # Errors
    ///
    /// As [`Queue::receive`], and `VisibilityTooLong` for a visibility over the
    /// queue's `max_visibility`.
    pub fn receive_with(&self, max: usize, options: ReceiveOptions) -> Result<Vec<Delivery>, Error> {
        let mut out = Vec::new();
        self.receive_into(max, options, &mut out)?;
        Ok(out)
    }

    /// Like `receive_with`, appending the deliveries to `out` (which it does
    /// not clear) and returning how many it appended, so a consumer loop can
    /// reuse one buffer instead of allocating a `Vec` per call.
    ///
    /// # Errors
    ///
    /// As [`Queue::receive_with`]; on an error nothing is appended.
    pub fn receive_into(&self, max: usize, options: ReceiveOptions, out: &mut Vec<Delivery>) -> Result<usize, Error> {
        let core = &self.core;
        core.check_live()?;
        QueueCore::check_batch(max)?;
        let visibility = core.visibility_of(&options)?;
        let start = out.len();
        let limit = start.saturating_add(max);
        let now = core.now();
        core.receive_ready(limit, visibility, now, out);
        let wait = options.wait.unwrap_or(Duration::ZERO);
        if out.len() > start || wait.is_zero() {
            return core.settle_receive(out, start);
        }
        let until = now.saturating_add(duration_nanos(wait));
        let manual = core.engine.clock.is_manual();
        loop {
            let registration = core.waiters.register_thread();
            let now = core.now();
            core.receive_ready(limit, visibility, now, out);
            if out.len() > start || now >= until {
                core.waiters.deregister(registration);
                return core.settle_receive(out, start);
            }
            if let Err(deleted) = core.check_live() {
                core.waiters.deregister(registration);
                return Err(deleted);
            }
            if manual {
                // Virtual time: only a send, a release or the clock moving
                // (which notifies) can change anything.
                std::thread::park();
            } else {
                std::thread::park_timeout(Duration::from_nanos(until - now));
            }
            core.waiters.deregister(registration);
        }
    }

    /// Like `receive_with`, as a future that works on any executor: it is
    /// woken by sends, releases and expiries, and its wait runs out on the
    /// engine's driver tick (or, with a manual clock, when the clock passes it).
    pub fn receive_async(&self, max: usize, options: ReceiveOptions) -> ReceiveFuture {
        ReceiveFuture {
            queue: self.clone(),
            max,
            options,
            until: None,
            registration: None,
            committing: None,
            commit_waker: None,
        }
    }

    /// Acks the attempt `receipt` names: the message is gone for good.
    ///
    /// # Errors
    ///
    /// `Stale` (an older attempt), `Expired` (a late ack under
    /// `LateAck::Reject`), `InvalidReceipt` (another queue's, another engine's,
    /// forged or malformed), `QueueDeleted`, and on a durable engine `Storage`.
    pub fn ack(&self, receipt: &Receipt) -> Result<(), LeaseError> {
        let result = self.core.ack(receipt);
        self.core.note_late_call(receipt, &result);
        self.core.settle(result)
    }

    /// Acks up to `MAX_BATCH` receipts; one result per receipt, in order. The
    /// clock is read once: every ack of the batch is judged (on time or late)
    /// at the time the batch started. A larger batch is refused whole: every
    /// result is `LeaseError::InvalidBatchSize` and no receipt is touched.
    #[must_use]
    pub fn ack_batch(&self, receipts: &[Receipt]) -> Vec<Result<(), LeaseError>> {
        let mut results = self.ack_batch_unsettled(receipts);
        // Only an ack that took effect pushed a record to wait for (an
        // oversized batch touched nothing), as in `ack_batch_async`.
        if !results.iter().any(Result::is_ok) {
            return results;
        }
        if let Err(failure) = self.core.settle(Ok(())) {
            for result in results.iter_mut().filter(|r| r.is_ok()) {
                *result = Err(failure.clone());
            }
        }
        results
    }

    /// `ack_batch` without the wait for its records (the size check
    /// included: an oversized batch touches no receipt).
    fn ack_batch_unsettled(&self, receipts: &[Receipt]) -> Vec<Result<(), LeaseError>> {
        if receipts.len() > MAX_BATCH {
            let refusal = LeaseError::InvalidBatchSize { requested: receipts.len(), max: MAX_BATCH };
            return receipts.iter().map(|_| Err(refusal.clone())).collect();
        }
        let results = self.core.ack_batch_at(receipts, self.core.now());
        for (receipt, result) in receipts.iter().zip(&results) {
            self.core.note_late_call(receipt, result);
        }
        results
    }

    /// Like `ack`, for async code: the ack is applied now and the future
    /// resolves when its record is durable, without blocking the executor's
    /// thread (`commit.rs`). Dropping the future does not undo the ack.
    pub fn ack_async(&self, receipt: &Receipt) -> Settle<Result<(), LeaseError>> {
        let result = self.core.ack(receipt);
        self.core.note_late_call(receipt, &result);
        self.settle_async(result, false)
    }

    /// Like `ack_batch`, for async code (`ack_async`).
    pub fn ack_batch_async(&self, receipts: &[Receipt]) -> Settle<Vec<Result<(), LeaseError>>> {
        let results = self.ack_batch_unsettled(receipts);
        let seq = results.iter().any(Result::is_ok).then(|| self.core.commit_seq(false)).flatten();
        Settle::new(self, seq, results, crate::commit::batch_failed)
    }

    /// Like `extend`, for async code (`ack_async`); only a replicated engine
    /// has a record to wait for.
    pub fn extend_async(&self, receipt: &Receipt, visibility: Duration) -> Settle<Result<Nanos, LeaseError>> {
        let result = self.core.extend(receipt, visibility, false);
        self.core.note_late_call(receipt, &result);
        self.settle_async(result, true)
    }

    /// Like `release`, for async code (`ack_async`).
    pub fn release_async(&self, receipt: &Receipt, delay: Duration) -> Settle<Result<(), LeaseError>> {
        let result = self.core.release(receipt, Some(delay));
        self.core.note_late_call(receipt, &result);
        self.settle_async(result, false)
    }

    /// A `Settle` future for a lease operation's result: it waits for this
    /// thread's last record when the operation succeeded and the engine
    /// waits for records (`replicated_only`: only a replicated engine does).
    fn settle_async<T: Unpin>(
        &self,
        result: Result<T, LeaseError>,
        replicated_only: bool,
    ) -> Settle<Result<T, LeaseError>> {
        let seq = result.is_ok().then(|| self.core.commit_seq(replicated_only)).flatten();
        Settle::new(self, seq, result, crate::commit::lease_failed)
    }

    /// Extends the lease to now + `visibility`. Only while the lease is held
    /// (before its deadline); refused past `max_lease` for one attempt.
    ///
    /// # Errors
    ///
    /// `Stale`, `Expired` (the deadline already passed), `InvalidReceipt`,
    /// `VisibilityTooLong` (over `max_visibility`), `CapExceeded` (past
    /// `max_lease` for this attempt), `QueueDeleted`.
    pub fn extend(&self, receipt: &Receipt, visibility: Duration) -> Result<Nanos, LeaseError> {
        let result = self.core.extend(receipt, visibility, false);
        self.core.note_late_call(receipt, &result);
        self.core.settle_replicated(result)
    }

    /// Like `extend`, except that a deadline past `max_lease` is lowered to
    /// the cap (`received_at + max_lease`) instead of refused: for a renewal
    /// sized to end at the cap from a clock reading taken a moment before
    /// this call, which `extend` would refuse for those moments. Refused with
    /// `CapExceeded` only when the lease already ends at the cap. Returns the
    /// deadline granted.
    ///
    /// # Errors
    ///
    /// As [`Queue::extend`]; `CapExceeded` only when the lease already ends at
    /// the cap.
    pub fn extend_up_to_cap(&self, receipt: &Receipt, visibility: Duration) -> Result<Nanos, LeaseError> {
        let result = self.core.extend(receipt, visibility, true);
        self.core.note_late_call(receipt, &result);
        self.core.settle_replicated(result)
    }

    /// Ends the attempt now; the message is receivable again after `delay`
    /// (zero: at once). At the retry ceiling it goes to the dead-letter queue.
    ///
    /// # Errors
    ///
    /// `Stale`, `Expired`, `InvalidReceipt`, `DelayTooLong` (over `max_delay`),
    /// `DeadLetterQueueFull` at the retry ceiling (the message stays leased),
    /// `QueueDeleted`, and on a durable engine `Storage`.
    pub fn release(&self, receipt: &Receipt, delay: Duration) -> Result<(), LeaseError> {
        let result = self.core.release(receipt, Some(delay));
        self.core.note_late_call(receipt, &result);
        self.core.settle(result)
    }

    /// Like `release`, with the delay the queue's `backoff` gives for this
    /// message's delivery count.
    ///
    /// # Errors
    ///
    /// As [`Queue::release`], less `DelayTooLong`.
    pub fn release_with_backoff(&self, receipt: &Receipt) -> Result<(), LeaseError> {
        let result = self.core.release(receipt, None);
        self.core.note_late_call(receipt, &result);
        self.core.settle(result)
    }

    /// Moves the message to the dead-letter queue now (the consumer declares it
    /// poison), with `reason` in its record.
    ///
    /// # Errors
    ///
    /// `Stale`, `Expired`, `InvalidReceipt`, `NoDeadLetterQueue`,
    /// `DeadLetterQueueFull` (the message stays leased here), `QueueDeleted`, and
    /// on a durable engine `Storage`.
    pub fn dead_letter(&self, receipt: &Receipt, reason: &str) -> Result<(), LeaseError> {
        let result = self.core.dead_letter(receipt, reason);
        self.core.note_late_call(receipt, &result);
        self.core.settle(result)
    }

    /// Removes every message (ready, delayed and in flight); returns how many.
    /// Receipts of purged messages become stale.
    ///
    /// # Errors
    ///
    /// `QueueDeleted`, and on a durable engine `Storage`.
    pub fn purge(&self) -> Result<u64, Error> {
        self.core.check_live()?;
        let purged = self.core.purge_all();
        self.core.settle(Ok(purged)).map_err(Error::from_lease_storage)
    }

    /// Lease pressure right now. O(shards) plus a scan of the slots in use
    /// for `oldest_ready_age` (and one more on a queue with a retention, to
    /// drop what outlived it, here and on the dead-letter queue); applies
    /// due timers first.
    #[must_use]
    pub fn stats(&self) -> QueueStats {
        self.core.stats()
    }

    /// The dead-letter queue's name, if one is set now.
    #[must_use]
    pub fn dead_letter_queue(&self) -> Option<String> {
        self.core.dead_letter.target().map(|d| d.name.clone())
    }
}

/// The future of `Queue::receive_async`.
#[must_use = "a ReceiveFuture receives nothing until awaited; dropping it cancels the wait"]
pub struct ReceiveFuture {
    queue: Queue,
    max: usize,
    options: ReceiveOptions,
    until: Option<u64>,
    registration: Option<Registration>,
    /// Under `SyncPolicy::Always`: the deliveries taken, held back until the
    /// log record of the last one's delivery count is durable.
    committing: Option<(Vec<Delivery>, u64)>,
    /// The waker registered for that commit (`Journal::poll_durable`).
    commit_waker: Option<std::task::Waker>,
}

impl fmt::Debug for ReceiveFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceiveFuture").field("queue", &self.queue.core.name).field("max", &self.max).finish()
    }
}

impl Future for ReceiveFuture {
    type Output = Result<Vec<Delivery>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let core = &this.queue.core;
        if let Some((_, seq)) = this.committing {
            let journal = core.journal().expect("only a durable queue commits");
            return match journal.poll_durable(seq, cx, &mut this.commit_waker) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(result) => {
                    let (out, _) = this.committing.take().expect("checked above");
                    // A failed record withholds the deliveries (their leases
                    // run out as usual), as `settle_receive` does.
                    Poll::Ready(result.map(|()| out).map_err(|f| Error::from_lease_storage(LeaseError::from(f))))
                }
            };
        }
        if let Err(e) = core.check_live().and_then(|()| QueueCore::check_batch(this.max)) {
            return Poll::Ready(Err(e));
        }
        let visibility = match core.visibility_of(&this.options) {
            Ok(v) => v,
            Err(e) => return Poll::Ready(Err(e)),
        };
        let now = core.now();
        let until = *this
            .until
            .get_or_insert_with(|| now.saturating_add(duration_nanos(this.options.wait.unwrap_or(Duration::ZERO))));
        let mut out = Vec::new();
        core.receive_ready(this.max, visibility, now, &mut out);
        if out.is_empty() && now < until {
            let registration = core.waiters.register_task(cx.waker(), until, this.registration);
            // The driver wakes this task at `until` to let it time out.
            core.engine.driver.deadline_added(until);
            this.registration = Some(registration);
            core.receive_ready(this.max, visibility, core.now(), &mut out);
            if out.is_empty() {
                return Poll::Pending;
            }
        }
        if let Some(registration) = this.registration.take() {
            core.waiters.deregister(registration);
        }
        // Under `SyncPolicy::Always` the deliveries wait, without blocking
        // the executor's thread, for the group commit of their delivery
        // counts (docs/durability.md): the records were pushed by this
        // thread just now, so the last one it pushed covers them all.
        if let Some(journal) = core.journal().filter(|j| j.policy == SyncPolicy::Always && !out.is_empty()) {
            if let Some(seq) = journal.last_pushed_here() {
                this.committing = Some((out, seq));
                return Pin::new(this).poll(cx);
            }
        }
        Poll::Ready(core.settle_receive(&mut out, 0).map(|_| out))
    }
}

impl Drop for ReceiveFuture {
    fn drop(&mut self) {
        if let Some(registration) = self.registration.take() {
            self.queue.core.waiters.deregister(registration);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{Engine, ManualClock, QueueConfig, ReceiveOptions};

    #[test]
    fn receive_into_appends_without_clearing_and_counts_what_it_added() {
        let engine = Engine::builder().clock(ManualClock::new()).build();
        let q = engine.create_queue("q", QueueConfig::default().shards(1)).unwrap();
        for i in 0..5u8 {
            q.send(vec![i]).unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(q.receive_into(2, ReceiveOptions::default(), &mut out).unwrap(), 2);
        assert_eq!(q.receive_into(2, ReceiveOptions::default(), &mut out).unwrap(), 2);
        let payloads: Vec<u8> = out.iter().map(|d| d.payload[0]).collect();
        assert_eq!(payloads, vec![0, 1, 2, 3], "appended in FIFO order, earlier ones kept");
        assert_eq!(q.receive_into(4, ReceiveOptions::default(), &mut out).unwrap(), 1);
        assert_eq!(q.receive_into(4, ReceiveOptions::default(), &mut out).unwrap(), 0);
        assert!(q.receive_into(0, ReceiveOptions::default(), &mut out).is_err(), "batch size is still checked");
        assert_eq!(out.len(), 5, "a refused call leaves the buffer alone");
    }

    #[test]
    fn ack_batch_judges_every_ack_and_refuses_stale_ones() {
        let clock = ManualClock::new();
        let engine = Engine::builder().clock(clock.clone()).build();
        let config = QueueConfig::default().shards(1).visibility_timeout(std::time::Duration::from_secs(10));
        let q = engine.create_queue("q", config).unwrap();
        for i in 0..3u8 {
            q.send(vec![i]).unwrap();
        }
        let deliveries = q.receive(3).unwrap();
        let mut receipts: Vec<_> = deliveries.iter().map(|d| d.receipt).collect();
        q.ack(&receipts[1]).unwrap();
        clock.advance(std::time::Duration::from_secs(11));
        receipts.push(receipts[0]);
        let results = q.ack_batch(&receipts);
        assert_eq!(results[0], Ok(()), "a late ack nobody else received is accepted");
        assert_eq!(results[1], Err(crate::LeaseError::Stale), "already acked");
        assert_eq!(results[2], Ok(()));
        assert_eq!(results[3], Err(crate::LeaseError::Stale), "a second ack in the same batch");
        let stats = q.stats();
        assert_eq!((stats.acked, stats.late_acks, stats.stale_acks), (3, 2, 2));
    }

    /// `ack_batch` returns its slots to the free lists together: on a full
    /// queue over several shards, every slot it freed takes a new message as
    /// soon as it returns, and no more than those.
    #[test]
    fn ack_batch_frees_every_slot_it_acked() {
        let engine = Engine::builder().clock(ManualClock::new()).build();
        let config = QueueConfig::default().shards(3).max_messages(7);
        let q = engine.create_queue("q", config).unwrap();
        for i in 0..7u8 {
            q.send(vec![i]).unwrap();
        }
        assert!(q.send(vec![7]).is_err(), "full");
        let deliveries = q.receive(7).unwrap();
        let receipts: Vec<_> = deliveries.iter().map(|d| d.receipt).collect();
        let shards: std::collections::HashSet<_> = receipts.iter().map(|r| r.shard).collect();
        assert_eq!(shards.len(), 3, "the batch spans every shard");
        assert!(q.ack_batch(&receipts[..5]).iter().all(Result::is_ok));
        for i in 0..5u8 {
            q.send(vec![10 + i]).unwrap_or_else(|e| panic!("slot {i} of 5 freed by the batch: {e:?}"));
        }
        assert!(q.send(vec![99]).is_err(), "the two unacked messages still hold theirs");
        assert_eq!(q.stats().in_flight, 2);
    }
}
