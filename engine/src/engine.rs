//! The engine: a registry of named queues sharing one clock and one driver.
//!
//! Invariants: queue names are unique among live queues; a queue's
//! dead-letter queue exists before it and cannot be deleted while any queue
//! dead-letters into it (so dead-letter chains are acyclic and never dangle);
//! create and delete are serialised by one mutex (they are rare), while every
//! message operation goes straight to the queue without touching the registry.

use std::fmt;
use std::time::Duration;

use dashmap::DashMap;

use crate::clock::{Clock, Nanos, SystemClock, duration_nanos};
use crate::config::{QueueConfig, validate_name};
use crate::driver::{Driver, DriverSignal};
use crate::error::Error;
use crate::journal::{Journal, Record, SyncPolicy};
use crate::log::RecoveryReport;
use crate::queue::{Queue, QueueCore};
use crate::receipt::{ReceiptKey, random_u64};
use crate::sync::{Arc, AtomicU32, IdCount, Mutex, OnceLock, Ordering, StatCountUsize, fence, lock};

/// What every queue of an engine shares.
/// Most queues one engine creates over its life (a queue's ordinal is a `u32`
/// in its receipts).
const MAX_QUEUE_ORDINAL: u32 = u32::MAX - 1;

#[derive(Debug)]
pub(crate) struct EngineShared {
    pub(crate) id: u64,
    /// The start of the next block of message ids a shard may take.
    pub(crate) id_blocks: IdCount,
    pub(crate) key: ReceiptKey,
    pub(crate) clock: Box<dyn Clock>,
    pub(crate) tick_shift: u32,
    /// Long-polling receivers waiting on any queue of this engine.
    pub(crate) waiting: Arc<StatCountUsize>,
    /// How operations wake a sleeping driver for a deadline it has not seen.
    pub(crate) driver: Arc<DriverSignal>,
    /// The hand-off to the log writer of a durable engine (`journal.rs`).
    pub(crate) journal: Option<Arc<Journal>>,
}

pub(crate) struct EngineInner {
    pub(crate) shared: Arc<EngineShared>,
    pub(crate) queues: DashMap<String, Arc<QueueCore>>,
    /// Every live queue, rebuilt on create and delete: what the driver and a
    /// moving manual clock walk, at the cost of one lock and one `Arc` clone
    /// rather than a walk of the name map's shards. Shared with them (not
    /// the engine itself), so they never hold an engine handle: the last
    /// handle a user drops closes the engine on that user's thread.
    live: Arc<LiveQueues>,
    next_ordinal: AtomicU32,
    default_shards: usize,
    registry: Mutex<()>,
    driver: Mutex<Option<Driver>>,
    /// Stops a durable engine's log writer after its last records are
    /// written (set by the `log` module, which the core does not know).
    pub(crate) closer: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// What opening the data dir found (a durable engine).
    pub(crate) recovery: OnceLock<RecoveryReport>,
}

impl fmt::Debug for EngineInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine").field("queues", &self.queues.len()).field("clock", &self.shared.clock).finish()
    }
}

impl EngineInner {
    /// Points `core`'s dead-letter link at `dead_letter_queue` with ceiling
    /// `max_receives` (`Queue::set_dead_letter`), durably first.
    pub(crate) fn set_dead_letter(
        &self,
        core: &Arc<QueueCore>,
        dead_letter_queue: Option<&str>,
        max_receives: Option<u32>,
    ) -> Result<(), Error> {
        // The rules a config's link follows at creation.
        let probe = QueueConfig {
            dead_letter_queue: dead_letter_queue.map(str::to_string),
            max_receives,
            ..QueueConfig::default()
        };
        probe.validate()?;
        let _serial = lock(&self.registry);
        core.check_live()?;
        let target = match dead_letter_queue {
            None => None,
            Some(name) => {
                let Some(target) = self.queues.get(name).map(|q| q.value().clone()) else {
                    return Err(Error::DeadLetterQueueNotFound { name: name.to_string() });
                };
                // Links change only under this lock, so the walk sees them all.
                let mut path = vec![core.name.clone()];
                let mut next = Some(target.clone());
                while let Some(queue) = next {
                    path.push(queue.name.clone());
                    if Arc::ptr_eq(&queue, core) {
                        return Err(Error::DeadLetterCycle { path });
                    }
                    next = queue.dead_letter.target();
                }
                check_takes_payloads(&target, core.config.max_payload)?;
                Some(target)
            }
        };
        if let Some(journal) = &self.shared.journal {
            // Durable before the link changes: a failed write changes nothing.
            let record = Record::DeadLetterSet {
                queue: core.ordinal,
                dead_letter_queue: dead_letter_queue.map(str::to_string),
                max_receives,
            };
            journal.commit_now(record).map_err(|failure| Error::storage(failure, None))?;
        }
        core.dead_letter.set(target, max_receives);
        Ok(())
    }

    /// Rebuilds the live list; call with the registry lock held, after the
    /// name map changed.
    fn refresh_live(&self) {
        let mut queues: Vec<Arc<QueueCore>> = self.queues.iter().map(|q| q.value().clone()).collect();
        queues.sort_by_key(|q| q.ordinal);
        *lock(&self.live.0) = queues.into();
    }
}

/// The list of an engine's live queues, as the driver and a manual clock's
/// advance walk them.
#[derive(Debug, Default)]
pub(crate) struct LiveQueues(Mutex<Arc<[Arc<QueueCore>]>>);

impl LiveQueues {
    pub(crate) fn snapshot(&self) -> Arc<[Arc<QueueCore>]> {
        lock(&self.0).clone()
    }
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        if let Some(driver) = lock(&self.driver).take() {
            driver.stop();
        }
        if let Some(close) = lock(&self.closer).take() {
            close();
        }
    }
}

/// An in-process queue engine. Cheap to clone, `Send + Sync`.
///
/// With the system clock a background driver thread (one per engine, stopped
/// when the last handle is dropped) applies expiries within one tick and wakes
/// long-polling receivers. With a `ManualClock` there is no thread: every
/// operation applies the expiries due at the clock's current time.
#[derive(Clone, Debug)]
pub struct Engine {
    pub(crate) inner: Arc<EngineInner>,
}

/// Builds an `Engine`.
#[derive(Debug)]
#[must_use = "an EngineBuilder does nothing until `build` is called"]
pub struct EngineBuilder {
    clock: Option<Box<dyn Clock>>,
    tick: Duration,
    default_shards: Option<usize>,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder { clock: None, tick: Duration::from_millis(1), default_shards: None }
    }
}

impl EngineBuilder {
    /// Uses `clock` (a `ManualClock` for tests and simulation).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// The driver's tick (default 1 ms, clamped to 50 µs ..= 1 s): expiries
    /// are applied within one tick of their deadline with the system clock.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick.clamp(Duration::from_micros(50), Duration::from_secs(1));
        self
    }

    /// Shards of queues whose config does not name a count (default: the
    /// machine's available parallelism).
    pub fn default_shards(mut self, shards: usize) -> Self {
        self.default_shards = Some(shards.clamp(1, crate::config::MAX_SHARDS));
        self
    }

    /// Starts the engine (and, with a non-manual clock, its driver thread).
    #[must_use]
    pub fn build(self) -> Engine {
        self.build_with(None)
    }

    /// Makes the engine durable: it keeps its queues and messages in a
    /// write-ahead log in `path` and recovers them when opened again
    /// (docs/durability.md). Finish with `DurableBuilder::open`.
    pub fn data_dir(self, path: impl Into<std::path::PathBuf>) -> crate::log::DurableBuilder {
        crate::log::DurableBuilder::new(self, path.into())
    }

    /// Makes the engine the leader of a replicated queue set: every record a
    /// durable engine would log goes to `sink` (a consensus log), and a call
    /// returns only once the sink has its records (docs/replication.md).
    /// Finish with `ReplicatedBuilder::start`, from an empty state or from a
    /// replica's (`ReplicatedBuilder::state`).
    pub fn replicated(
        self,
        sink: impl crate::log::replication::ReplicationSink,
    ) -> crate::log::replication::ReplicatedBuilder {
        crate::log::replication::ReplicatedBuilder::new(self, std::sync::Arc::new(sink))
    }

    /// The builder's parts the `log` module needs to open an engine.
    pub(crate) fn build_with(self, journal: Option<Arc<Journal>>) -> Engine {
        let clock = self.clock.unwrap_or_else(|| Box::new(SystemClock::new()));
        let manual = clock.is_manual();
        // The wheel's tick: the largest power of two of nanoseconds within the
        // driver tick, so a wheel slot never spans more than one driver tick.
        let tick_nanos = duration_nanos(self.tick).max(1);
        let tick_shift = 63 - tick_nanos.leading_zeros();
        let default_shards = self.default_shards.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| n.get()).min(crate::config::MAX_SHARDS)
        });
        let waiting = Arc::new(StatCountUsize::new(0));
        let id = random_u64();
        let shared = Arc::new(EngineShared {
            id,
            id_blocks: IdCount::new(0),
            key: ReceiptKey::random(id),
            clock,
            tick_shift,
            waiting,
            driver: Arc::default(),
            journal,
        });
        let inner = Arc::new(EngineInner {
            shared,
            queues: DashMap::new(),
            live: Arc::new(LiveQueues(Mutex::new(Arc::from(Vec::new())))),
            next_ordinal: AtomicU32::new(0),
            default_shards,
            registry: Mutex::new(()),
            driver: Mutex::new(None),
            closer: Mutex::new(None),
            recovery: OnceLock::new(),
        });
        if manual {
            let shared = Arc::downgrade(&inner.shared);
            let live = Arc::downgrade(&inner.live);
            // Virtual time has no driver thread: when it moves, apply every
            // expiry and end of delay now due on every queue (so no operation,
            // on any queue, can observe a lease that is over but not yet
            // expired), then wake long-polling receivers.
            inner.shared.clock.on_advance(Box::new(move || {
                // Virtual time has no driver thread: when it moves, apply every
                // expiry and end of delay now due on every queue, so no
                // operation on any queue can observe a lease that is over but
                // not yet expired (a no-op per shard when nothing is due).
                let (Some(shared), Some(live)) = (shared.upgrade(), live.upgrade()) else { return };
                let now = shared.clock.now().0;
                let queues = live.snapshot();
                for queue in queues.iter() {
                    queue.run_all_timers(now);
                }
                // SeqCst fence: the clock's new time is ordered before the
                // read of `waiting`, pairing with the fence a waiter issues
                // after registering and before it reads the time (a Dekker
                // pattern, as in `waiters.rs`). Nobody waiting: nothing more
                // to do, which keeps a simulation's many advances cheap.
                fence(Ordering::SeqCst);
                if shared.waiting.load(Ordering::Relaxed) == 0 {
                    return;
                }
                for queue in queues.iter() {
                    queue.waiters.notify();
                }
            }));
        } else {
            let driver = Driver::spawn(inner.shared.clone(), inner.live.clone(), self.tick);
            *lock(&inner.driver) = Some(driver);
        }
        Engine { inner }
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

impl Engine {
    /// An engine on the system clock with default settings.
    #[must_use]
    pub fn new() -> Self {
        EngineBuilder::default().build()
    }

    /// A builder for an engine with another clock, tick or shard count.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The engine clock's current time.
    #[must_use]
    pub fn now(&self) -> Nanos {
        self.inner.shared.clock.now()
    }

    /// The `Instant` at which the engine clock reads `t`; `None` under a
    /// `ManualClock`. See [`Queue::instant_of`].
    #[must_use]
    pub fn instant_of(&self, t: Nanos) -> Option<std::time::Instant> {
        crate::clock::instant_at(self.inner.shared.clock.as_ref(), t)
    }

    /// The engine clock's Unix time (`Clock::unix_now`).
    pub(crate) fn unix_now(&self) -> u64 {
        self.inner.shared.clock.unix_now()
    }

    /// Creates a queue. Validates the name and config, that the name is free
    /// and that the dead-letter queue exists and takes payloads as large as
    /// this queue's (`max_payload` at least this one's); on error nothing is
    /// created. A `max_visibility` or `visibility_timeout` left at its
    /// default follows a lower `max_lease` down (`QueueConfig::max_lease`).
    ///
    /// # Errors
    ///
    /// `InvalidQueueName`, `InvalidConfig`, `QueueAlreadyExists`,
    /// `DeadLetterQueueNotFound`, `DeadLetterCycle`, or on a durable engine
    /// `Storage` when the creation could not be logged.
    pub fn create_queue(&self, name: &str, config: QueueConfig) -> Result<Queue, Error> {
        validate_name(name)?;
        let config = config.resolved();
        config.validate()?;
        let _serial = lock(&self.inner.registry);
        if self.inner.queues.contains_key(name) {
            return Err(Error::QueueAlreadyExists { name: name.to_string() });
        }
        let dead_letter = match &config.dead_letter_queue {
            None => None,
            Some(dlq) if dlq == name => {
                return Err(Error::DeadLetterCycle { path: vec![name.to_string(), name.to_string()] });
            }
            Some(dlq) => match self.inner.queues.get(dlq.as_str()) {
                Some(core) => Some(core.value().clone()),
                None => return Err(Error::DeadLetterQueueNotFound { name: dlq.clone() }),
            },
        };
        if let Some(dlq) = &dead_letter {
            check_takes_payloads(dlq, config.max_payload)?;
        }
        let ordinal = self.inner.next_ordinal.load(Ordering::Relaxed);
        if ordinal > MAX_QUEUE_ORDINAL {
            return Err(Error::InvalidConfig {
                field: "name",
                reason: format!("this engine has created {MAX_QUEUE_ORDINAL} queues, the most one engine can"),
            });
        }
        self.inner.next_ordinal.store(ordinal + 1, Ordering::Relaxed);
        if let Some(journal) = &self.inner.shared.journal {
            // Durable before the queue exists, so every record of its
            // messages follows it in the log.
            let record =
                Record::QueueCreated { queue: ordinal, name: name.to_string(), config: Box::new(config.clone()) };
            journal.commit_now(record).map_err(|failure| Error::storage(failure, None))?;
        }
        Ok(self.insert_queue(name, ordinal, config, dead_letter))
    }

    /// Adds a queue that passed every check (and, on a durable engine, was
    /// recorded) to the registry; call with the registry lock held.
    fn insert_queue(
        &self,
        name: &str,
        ordinal: u32,
        config: QueueConfig,
        dead_letter: Option<Arc<QueueCore>>,
    ) -> Queue {
        let shards = config.shards.unwrap_or(self.inner.default_shards);
        let core =
            Arc::new(QueueCore::new(name.to_string(), ordinal, config, shards, self.inner.shared.clone(), dead_letter));
        self.inner.queues.insert(name.to_string(), core.clone());
        self.inner.refresh_live();
        Queue { core, _engine: self.inner.clone() }
    }

    /// Re-creates a queue the log recorded (ordinal and all), without
    /// recording it again: a durable engine's open. Queues come in the order
    /// of their links (`Replica::queues_in_link_order`), so a dead-letter
    /// queue is there before its users.
    pub(crate) fn restore_queue(&self, ordinal: u32, name: &str, config: QueueConfig) -> Result<Queue, Error> {
        let _serial = lock(&self.inner.registry);
        let dead_letter = match &config.dead_letter_queue {
            None => None,
            Some(dlq) => match self.inner.queues.get(dlq.as_str()) {
                Some(core) => Some(core.value().clone()),
                None => return Err(Error::DeadLetterQueueNotFound { name: dlq.clone() }),
            },
        };
        let next = self.inner.next_ordinal.load(Ordering::Relaxed).max(ordinal.saturating_add(1));
        self.inner.next_ordinal.store(next, Ordering::Relaxed);
        Ok(self.insert_queue(name, ordinal, config, dead_letter))
    }

    /// Makes every queue ordinal below `next` used (a durable engine never
    /// reuses the ordinal of a deleted queue: its records name it).
    pub(crate) fn skip_ordinals(&self, next: u32) {
        let _serial = lock(&self.inner.registry);
        let next = self.inner.next_ordinal.load(Ordering::Relaxed).max(next);
        self.inner.next_ordinal.store(next, Ordering::Relaxed);
    }

    /// The queue named `name`.
    ///
    /// # Errors
    ///
    /// `QueueNotFound` when no queue has that name.
    pub fn queue(&self, name: &str) -> Result<Queue, Error> {
        match self.inner.queues.get(name) {
            Some(core) => Ok(Queue { core: core.value().clone(), _engine: self.inner.clone() }),
            None => Err(Error::QueueNotFound { name: name.to_string() }),
        }
    }

    /// Names of all queues, sorted.
    #[must_use]
    pub fn list_queues(&self) -> Vec<String> {
        let mut names: Vec<String> = self.inner.queues.iter().map(|q| q.key().clone()).collect();
        names.sort();
        names
    }

    /// Deletes a queue and its messages. Refused while another queue uses it
    /// as its dead-letter queue. Existing handles then return `QueueDeleted`.
    ///
    /// # Errors
    ///
    /// `QueueNotFound`, `QueueInUse` (another queue still sends its
    /// failures here), and on a durable engine `Storage`.
    pub fn delete_queue(&self, name: &str) -> Result<(), Error> {
        let _serial = lock(&self.inner.registry);
        let Some(core) = self.inner.queues.get(name).map(|q| q.value().clone()) else {
            return Err(Error::QueueNotFound { name: name.to_string() });
        };
        let mut users: Vec<String> = self
            .inner
            .queues
            .iter()
            .filter(|q| q.value().dead_letter.targets(&core))
            .map(|q| q.key().clone())
            .collect();
        users.sort();
        if let Some(used_by) = users.into_iter().next() {
            return Err(Error::QueueInUse { name: name.to_string(), used_by });
        }
        if let Some(journal) = &self.inner.shared.journal {
            // Durable before anything changes: a failed write deletes nothing.
            journal
                .commit_now(Record::QueueDeleted { queue: core.ordinal })
                .map_err(|failure| Error::storage(failure, None))?;
        }
        self.inner.queues.remove(name);
        self.inner.refresh_live();
        core.deleted.store(true, Ordering::Release);
        core.purge_all();
        core.waiters.notify();
        Ok(())
    }

    /// Moves up to `max` ready messages from `from` (usually a dead-letter
    /// queue) to `to`, keeping ids and payloads and resetting delivery counts
    /// (like a hosted queue's message move task). Returns how many moved;
    /// stops early, losing nothing, when `to` is full. A message above `to`'s
    /// `max_payload` is not moved: it stays ready on `from`, behind the
    /// others, and counts in `from`'s `QueueStats::redrive_too_large`.
    ///
    /// # Errors
    ///
    /// `QueueNotFound` for either name, `InvalidConfig` when `from` and `to` are
    /// the same queue, and on a durable engine `Storage` (the messages moved before
    /// the failure stay moved).
    pub fn redrive(&self, from: &str, to: &str, max: usize) -> Result<usize, Error> {
        let from = self.queue(from)?;
        let to = self.queue(to)?;
        if Arc::ptr_eq(&from.core, &to.core) {
            return Err(Error::InvalidConfig { field: "to", reason: "redrive needs two different queues".into() });
        }
        let moved = from.core.redrive_to(&to.core, max);
        from.core.settle(Ok(moved)).map_err(Error::from_lease_storage)
    }

    /// Waits until every record handed to the log before this call is on
    /// disk, whatever the sync policy (a no-op for an in-memory engine). An
    /// error means some record could not be written.
    ///
    /// # Errors
    ///
    /// `Storage` when a record could not be written.
    pub fn flush(&self) -> Result<(), Error> {
        match &self.inner.shared.journal {
            Some(journal) => journal.flush().map_err(|failure| Error::storage(failure, None)),
            None => Ok(()),
        }
    }

    /// What opening the data dir found: `None` for an in-memory engine.
    #[must_use]
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.inner.recovery.get()
    }

    /// What the log writer of a durable engine has done; `None` for an
    /// in-memory engine.
    #[must_use]
    pub fn log_stats(&self) -> Option<crate::LogStats> {
        self.inner.shared.journal.as_ref().map(|journal| journal.stats())
    }

    /// The sync policy of a durable engine; `None` for an in-memory one.
    #[must_use]
    pub fn sync_policy(&self) -> Option<SyncPolicy> {
        self.inner.shared.journal.as_ref().map(|journal| journal.policy)
    }
}

/// Refuses `dead_letter` as the dead-letter queue of a queue that holds
/// payloads of up to `max_payload` bytes: a dead-letter move must never hold
/// a payload its target forbids.
fn check_takes_payloads(dead_letter: &QueueCore, max_payload: usize) -> Result<(), Error> {
    if dead_letter.config.max_payload < max_payload {
        return Err(Error::InvalidConfig {
            field: "dead_letter_queue",
            reason: format!(
                "'{}' takes payloads of up to {} bytes, below this queue's max_payload of {}: a dead-letter queue \
                 must accept every message its sources can hold",
                dead_letter.name, dead_letter.config.max_payload, max_payload
            ),
        });
    }
    Ok(())
}
