//! A worker pool: receive with long polling, hand each delivery (inside a
//! kept lease) to a handler on a pool of threads, finish by the handler's
//! answer, shut down gracefully.
//!
//! Invariant: every delivery a worker receives is finished exactly once by
//! the pool — acked on `Ok`, released with the queue's backoff on
//! `HandlerError::Retry` or a panic, dead-lettered on
//! `HandlerError::Permanent` — or, at shutdown past the deadline, released at
//! once by the keeper, so no message waits out its timeout because the pool
//! stopped. A worker holds at most one lease at a time (it receives only when
//! idle), so the pool never sits on messages it is not working on.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::consumer::guard::{LeaseGuard, LeaseLost};
use crate::consumer::keeper::LeaseKeeper;
use crate::consumer::policy::{LeasePolicy, PolicyError};
use crate::delivery::ReceiveOptions;
use crate::error::Error;
use crate::queue::Queue;
use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};

/// Why a handler did not finish its delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerError {
    /// A transient failure: release the message with the queue's backoff and
    /// let it be retried (up to the queue's `max_receives`).
    Retry(String),
    /// A permanent failure (the message can never succeed): move it to the
    /// dead-letter queue now, with this reason.
    Permanent(String),
}

impl HandlerError {
    /// A transient failure from any error.
    pub fn retry(error: impl fmt::Display) -> Self {
        HandlerError::Retry(error.to_string())
    }

    /// A permanent failure from any error.
    pub fn permanent(error: impl fmt::Display) -> Self {
        HandlerError::Permanent(error.to_string())
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandlerError::Retry(why) => write!(f, "transient failure, will retry: {why}"),
            HandlerError::Permanent(why) => write!(f, "permanent failure, dead-lettering: {why}"),
        }
    }
}

impl std::error::Error for HandlerError {}

/// A lost lease ends the handler as a transient failure: `guard.check()?`
/// stops before the next effect; the pool's release is then refused (the
/// message is already back on the queue or with another consumer).
impl From<LeaseLost> for HandlerError {
    fn from(lost: LeaseLost) -> Self {
        HandlerError::Retry(lost.to_string())
    }
}

/// Why a pool could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// The lease policy is invalid.
    InvalidPolicy(PolicyError),
    /// A pool needs at least one worker (and at most 1024).
    InvalidWorkers {
        /// What was asked for.
        requested: usize,
    },
    /// The receive options are invalid for this queue (visibility above its
    /// `max_visibility`).
    InvalidReceive(Error),
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::InvalidPolicy(e) => write!(f, "{e}"),
            PoolError::InvalidWorkers { requested } => {
                write!(f, "a pool needs 1..=1024 workers, not {requested}")
            }
            PoolError::InvalidReceive(e) => write!(f, "invalid receive options: {e}"),
        }
    }
}

impl std::error::Error for PoolError {}

/// Most workers one pool may start.
pub const MAX_WORKERS: usize = 1024;

/// What a pool's workers did, so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Deliveries handed to the handler.
    pub handled: u64,
    /// Acked after `Ok`.
    pub acked: u64,
    /// `Ok`, but the ack was refused (the lease was lost: the message will be
    /// or was delivered again; the handler's effects must be idempotent).
    pub ack_refused: u64,
    /// Released for a retry (`Retry` or a panic).
    pub retried: u64,
    /// Dead-lettered (`Permanent`).
    pub dead_lettered: u64,
    /// Handler panics (counted in `retried` too).
    pub panicked: u64,
    /// Received after shutdown began and released at once, unhandled.
    pub returned_unhandled: u64,
}

#[derive(Debug, Default)]
struct Counters {
    handled: AtomicU64,
    acked: AtomicU64,
    ack_refused: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    panicked: AtomicU64,
    returned_unhandled: AtomicU64,
    /// Workers inside a handler now (a gauge).
    busy: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        // Relaxed: statistics, read after the workers are joined or as a
        // momentary view.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> PoolStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PoolStats {
            handled: get(&self.handled),
            acked: get(&self.acked),
            ack_refused: get(&self.ack_refused),
            retried: get(&self.retried),
            dead_lettered: get(&self.dead_lettered),
            panicked: get(&self.panicked),
            returned_unhandled: get(&self.returned_unhandled),
        }
    }
}

/// Builds and starts a worker pool on one queue.
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    queue: Queue,
    workers: usize,
    policy: LeasePolicy,
    poll_wait: Duration,
    visibility: Option<Duration>,
}

/// Starts a pool of `workers` threads running `handler` on `queue`'s
/// messages, with the default lease policy. See [`PoolBuilder`] for options.
pub fn run<H>(queue: &Queue, workers: usize, handler: H) -> Result<Pool, PoolError>
where
    H: Fn(&LeaseGuard) -> Result<(), HandlerError> + Send + Sync + 'static,
{
    Pool::builder(queue).workers(workers).start(handler)
}

impl PoolBuilder {
    /// Worker threads (default 4).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// The lease policy of the pool's keeper.
    pub fn policy(mut self, policy: LeasePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How long one receive waits for a message (default 100 ms). Shutdown
    /// stops receiving within this long.
    pub fn poll_wait(mut self, wait: Duration) -> Self {
        self.poll_wait = wait;
        self
    }

    /// Lease of each receive (default: the queue's visibility timeout).
    pub fn visibility(mut self, visibility: Duration) -> Self {
        self.visibility = Some(visibility);
        self
    }

    /// Starts the workers and the pool's lease keeper.
    pub fn start<H>(self, handler: H) -> Result<Pool, PoolError>
    where
        H: Fn(&LeaseGuard) -> Result<(), HandlerError> + Send + Sync + 'static,
    {
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return Err(PoolError::InvalidWorkers { requested: self.workers });
        }
        if let Some(v) = self.visibility {
            let max = self.queue.config().max_visibility;
            if v > max {
                return Err(PoolError::InvalidReceive(Error::VisibilityTooLong { requested: v, max }));
            }
        }
        let keeper = LeaseKeeper::spawn(self.policy).map_err(PoolError::InvalidPolicy)?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let handler = Arc::new(handler);
        let options = ReceiveOptions { visibility: self.visibility, wait: Some(self.poll_wait) };
        let threads = (0..self.workers)
            .map(|n| {
                let worker = Worker {
                    queue: self.queue.clone(),
                    keeper: keeper.clone(),
                    stop: stop.clone(),
                    counters: counters.clone(),
                    options,
                };
                let handler = handler.clone();
                // Plain std threads: a pool runs on a real clock.
                std::thread::Builder::new()
                    .name(format!("leaseq-worker-{n}"))
                    .spawn(move || worker.run(&*handler))
                    .expect("the OS refused to start a leaseq worker thread")
            })
            .collect();
        Ok(Pool { queue: self.queue, keeper, stop, counters, threads, poll_wait: self.poll_wait })
    }
}

struct Worker {
    queue: Queue,
    keeper: LeaseKeeper,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    options: ReceiveOptions,
}

impl Worker {
    fn stopping(&self) -> bool {
        // Acquire pairs with the Release in `Pool::shutdown`.
        self.stop.load(Ordering::Acquire)
    }

    fn run<H>(&self, handler: &H)
    where
        H: Fn(&LeaseGuard) -> Result<(), HandlerError>,
    {
        while !self.stopping() {
            let deliveries = match self.queue.receive_with(1, self.options) {
                Ok(deliveries) => deliveries,
                Err(Error::QueueDeleted { .. }) => return,
                // Validated at start; anything else is transient.
                Err(_) => {
                    std::thread::sleep(self.options.wait.unwrap_or(Duration::ZERO).max(Duration::from_millis(1)));
                    continue;
                }
            };
            for delivery in deliveries {
                let guard = self.keeper.keep(&self.queue, delivery);
                if self.stopping() {
                    // Received as shutdown began: hand it straight back.
                    Counters::bump(&self.counters.returned_unhandled);
                    let _ = guard.release(Duration::ZERO);
                    continue;
                }
                self.handle(guard, handler);
            }
        }
    }

    fn handle<H>(&self, guard: LeaseGuard, handler: &H)
    where
        H: Fn(&LeaseGuard) -> Result<(), HandlerError>,
    {
        let c = &self.counters;
        Counters::bump(&c.handled);
        // Relaxed: shutdown reads it as a hint of how many workers are still
        // in a handler; it also waits on the threads themselves.
        c.busy.fetch_add(1, Ordering::Relaxed);
        self.finish_by_answer(guard, handler);
        c.busy.fetch_sub(1, Ordering::Relaxed);
    }

    fn finish_by_answer<H>(&self, guard: LeaseGuard, handler: &H)
    where
        H: Fn(&LeaseGuard) -> Result<(), HandlerError>,
    {
        let c = &self.counters;
        match catch_unwind(AssertUnwindSafe(|| handler(&guard))) {
            Ok(Ok(())) => match guard.ack() {
                Ok(()) => Counters::bump(&c.acked),
                Err(_) => Counters::bump(&c.ack_refused),
            },
            Ok(Err(HandlerError::Retry(_))) => {
                Counters::bump(&c.retried);
                let _ = guard.release_with_backoff();
            }
            Ok(Err(HandlerError::Permanent(reason))) => {
                if self.queue.dead_letter_queue().is_some() {
                    Counters::bump(&c.dead_lettered);
                    // If the dead-letter queue is full the message stays
                    // leased here, unrenewed: it comes back at its deadline.
                    let _ = guard.dead_letter(&reason);
                } else {
                    // Nowhere to put it: retry with backoff rather than drop it.
                    Counters::bump(&c.retried);
                    let _ = guard.release_with_backoff();
                }
            }
            Err(_panic) => {
                Counters::bump(&c.panicked);
                Counters::bump(&c.retried);
                let _ = guard.release_with_backoff();
            }
        }
    }
}

/// A running pool. Dropping it without [`shutdown`](Pool::shutdown) stops
/// receiving and detaches the workers (they finish what they hold).
///
/// A pool runs on a real clock: its workers long-poll in real time. Under a
/// `ManualClock`, drive a [`LeaseKeeper::manual`] and the queue directly.
pub struct Pool {
    queue: Queue,
    keeper: LeaseKeeper,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    threads: Vec<JoinHandle<()>>,
    poll_wait: Duration,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("queue", &self.queue.name())
            .field("workers", &self.threads.len())
            .field("stats", &self.stats())
            .finish()
    }
}

/// What [`Pool::shutdown`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every worker finished its in-flight work before the deadline.
    pub clean: bool,
    /// Leases still held at the deadline, released at once for other
    /// consumers.
    pub released: usize,
    /// Worker threads still running after the deadline (and a short grace
    /// for handlers to notice their lost lease); they were detached.
    pub detached: usize,
    /// The pool's counters at the end.
    pub stats: PoolStats,
}

impl Pool {
    /// A builder for a pool on `queue`.
    pub fn builder(queue: &Queue) -> PoolBuilder {
        PoolBuilder {
            queue: queue.clone(),
            workers: 4,
            policy: LeasePolicy::default(),
            poll_wait: Duration::from_millis(100),
            visibility: None,
        }
    }

    /// The workers' counters now.
    pub fn stats(&self) -> PoolStats {
        self.counters.snapshot()
    }

    /// The pool's lease keeper (to inspect kept leases).
    pub fn keeper(&self) -> &LeaseKeeper {
        &self.keeper
    }

    /// Stops receiving, lets in-flight handlers finish for up to `deadline`,
    /// then (after idle workers end their last poll, up to the poll wait)
    /// releases every lease still held (other consumers get those
    /// messages at once, not after their timeout; the handlers' guards report
    /// `LossReason::ReleasedByKeeper`), waits a short grace (up to 100 ms) for
    /// handlers to notice, and detaches any worker still running.
    pub fn shutdown(mut self, deadline: Duration) -> ShutdownReport {
        // Release pairs with the Acquire in `Worker::stopping`.
        self.stop.store(true, Ordering::Release);
        let clean = self.join_until(after(deadline));
        let released = if clean {
            0
        } else {
            // Let idle workers finish their last poll first, so they do not
            // receive the messages released below only to hand them back
            // (each such round trip would count as a delivery).
            self.join_idle_until(after(self.poll_wait.saturating_add(Duration::from_millis(100))));
            self.keeper.release_all()
        };
        if !clean {
            self.join_until(after(Duration::from_millis(100)));
        }
        let detached = self.threads.len();
        self.threads.clear();
        ShutdownReport { clean, released, detached, stats: self.counters.snapshot() }
    }

    /// Joins finished workers until only those inside a handler are left, or
    /// `until` (`None`: no time limit).
    fn join_idle_until(&mut self, until: Option<Instant>) {
        loop {
            self.join_until(Some(Instant::now()));
            let busy = self.counters.busy.load(Ordering::Relaxed) as usize;
            if self.threads.len() <= busy || passed(until) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Joins the workers that finish before `until` (`None`: no time limit);
    /// whether all did.
    fn join_until(&mut self, until: Option<Instant>) -> bool {
        loop {
            let (done, running): (Vec<_>, Vec<_>) = self.threads.drain(..).partition(JoinHandle::is_finished);
            self.threads = running;
            for thread in done {
                // A worker catches handler panics; a panic here would be a pool bug.
                let _ = thread.join();
            }
            if self.threads.is_empty() {
                return true;
            }
            if passed(until) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The instant `wait` from now; `None` when that is past what an `Instant`
/// can hold (a `Duration::MAX` deadline means no deadline, not a panic).
fn after(wait: Duration) -> Option<Instant> {
    Instant::now().checked_add(wait)
}

/// Whether `until` has passed (never, for no limit).
fn passed(until: Option<Instant>) -> bool {
    until.is_some_and(|until| Instant::now() >= until)
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}
