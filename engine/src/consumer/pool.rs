//! A worker pool: receive with long polling, hand each delivery (inside a
//! kept lease) to a handler on a pool of threads, finish by the handler's
//! answer, shut down gracefully.
//!
//! Invariant: every delivery a worker receives is finished exactly once by
//! the pool — acked on `Ok`, released with the queue's backoff on
//! `HandlerError::Retry` or a panic, dead-lettered on
//! `HandlerError::Permanent` (on a queue without a dead-letter queue:
//! released for no less than a visibility timeout, see
//! [`HandlerError::Permanent`]) — or, at shutdown past the timeout, released
//! at once by the keeper, so no message waits out its timeout because the
//! pool stopped, and no answer makes a worker spin on one message. A worker holds at most one lease at a time (it receives only when
//! idle), so the pool never sits on messages it is not working on.

use std::convert::Infallible;
use std::error::Error as StdError;
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

/// The error a handler answers with: boxed, so any error type fits.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why a handler did not finish its delivery. Keeps the handler's own error
/// as its [`source`](std::error::Error::source).
///
/// `?` works inside a handler for the errors converted here: transient ones
/// (`std::io::Error`, [`LeaseLost`], [`LeaseError`](crate::LeaseError),
/// [`leaseq::Error`](crate::Error)) become `Retry`; a payload that cannot be
/// decoded (`Utf8Error`, `FromUtf8Error`, `ParseIntError`, `ParseFloatError`,
/// `ParseBoolError`) never will be, and becomes `Permanent`. Any other error:
/// `.map_err(HandlerError::retry)?` or `.map_err(HandlerError::permanent)?`.
#[derive(Debug)]
#[non_exhaustive]
pub enum HandlerError {
    /// A transient failure: release the message with the queue's backoff and
    /// let it be retried (up to the queue's `max_receives`).
    Retry(BoxError),
    /// A permanent failure (the message can never succeed): move it to the
    /// dead-letter queue now, with this error's text as the reason.
    ///
    /// On a queue without a dead-letter queue there is nowhere to move it,
    /// and the pool never drops a message: it releases it for the queue's
    /// backoff or the pool's visibility timeout, whichever is longer (capped
    /// by the queue's `max_delay`), and counts it in
    /// [`PoolStats::permanent_released`]. So a permanent failure costs one
    /// handler call per visibility timeout, never a spin. Give the queue a
    /// dead-letter queue to have such messages set aside.
    Permanent(BoxError),
}

impl HandlerError {
    /// A transient failure from any error (or a message: `&str`, `String`).
    pub fn retry(error: impl Into<BoxError>) -> Self {
        HandlerError::Retry(error.into())
    }

    /// A permanent failure from any error (or a message: `&str`, `String`).
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        HandlerError::Permanent(error.into())
    }

    /// Whether this is a permanent failure.
    #[must_use]
    pub fn is_permanent(&self) -> bool {
        matches!(self, HandlerError::Permanent(_))
    }

    /// The handler's own error.
    #[must_use]
    pub fn error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        match self {
            HandlerError::Retry(e) | HandlerError::Permanent(e) => e.as_ref(),
        }
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

impl StdError for HandlerError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            HandlerError::Retry(e) | HandlerError::Permanent(e) => Some(e.as_ref()),
        }
    }
}

/// `From` impls for errors whose kind (transient or permanent) is clear.
macro_rules! handler_error_from {
    ($variant:ident: $($error:ty),+ $(,)?) => {$(
        impl From<$error> for HandlerError {
            fn from(error: $error) -> Self {
                HandlerError::$variant(Box::new(error))
            }
        }
    )+};
}

handler_error_from!(Retry: std::io::Error, crate::error::LeaseError, crate::error::Error);
handler_error_from!(
    Permanent: std::str::Utf8Error,
    std::string::FromUtf8Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::str::ParseBoolError,
);

/// A lost lease ends the handler as a transient failure: `guard.check()?`
/// stops before the next effect; the pool's release is then refused (the
/// message is already back on the queue or with another consumer).
impl From<LeaseLost> for HandlerError {
    fn from(lost: LeaseLost) -> Self {
        HandlerError::Retry(Box::new(lost))
    }
}

/// Why a pool could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The per-worker state factory of [`PoolBuilder::start_with_state`]
    /// failed for this worker; no worker was started.
    WorkerState {
        /// The worker (0-based) whose state could not be built.
        worker: usize,
        /// The factory's error, as text.
        reason: String,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::InvalidPolicy(e) => write!(f, "{e}"),
            PoolError::InvalidWorkers { requested } => {
                write!(f, "a pool needs 1..=1024 workers, not {requested}")
            }
            PoolError::InvalidReceive(e) => write!(f, "invalid receive options: {e}"),
            PoolError::WorkerState { worker, reason } => {
                write!(f, "could not build the state of worker {worker}: {reason}; no worker was started")
            }
        }
    }
}

impl StdError for PoolError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            PoolError::InvalidPolicy(e) => Some(e),
            PoolError::InvalidReceive(e) => Some(e),
            PoolError::InvalidWorkers { .. } | PoolError::WorkerState { .. } => None,
        }
    }
}

/// Most workers one pool may start.
pub const MAX_WORKERS: usize = 1024;

/// What a pool's workers did, so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
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
    /// `Permanent` on a queue without a dead-letter queue: released for at
    /// least a visibility timeout instead (see [`HandlerError::Permanent`]).
    pub permanent_released: u64,
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
    permanent_released: AtomicU64,
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
            permanent_released: get(&self.permanent_released),
            panicked: get(&self.panicked),
            returned_unhandled: get(&self.returned_unhandled),
        }
    }
}

/// Builds and starts a worker pool on one queue.
#[derive(Debug, Clone)]
#[must_use = "a PoolBuilder does nothing until `start` is called"]
pub struct PoolBuilder {
    queue: Queue,
    workers: usize,
    policy: LeasePolicy,
    poll_wait: Duration,
    visibility: Option<Duration>,
}

/// Starts a pool of `workers` threads running `handler` on `queue`'s
/// messages, with the default lease policy. See [`PoolBuilder`] for options.
///
/// Keep the returned [`Pool`] for as long as it should run: dropping it stops
/// the workers.
///
/// # Errors
///
/// [`PoolError::InvalidWorkers`] unless `workers` is in `1..=MAX_WORKERS`.
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
    ///
    /// # Errors
    ///
    /// [`PoolError::InvalidWorkers`] unless the worker count is in
    /// `1..=MAX_WORKERS`, [`PoolError::InvalidPolicy`] for a lease policy
    /// `LeasePolicy::validate` refuses, [`PoolError::InvalidReceive`] for a
    /// visibility above the queue's `max_visibility`. Nothing is received
    /// from the queue when it fails.
    pub fn start<H>(self, handler: H) -> Result<Pool, PoolError>
    where
        H: Fn(&LeaseGuard) -> Result<(), HandlerError> + Send + Sync + 'static,
    {
        self.start_with_state(|_| Ok::<(), Infallible>(()), move |(): &mut (), guard| handler(guard))
    }

    /// Like [`start`](Self::start), with per-worker state: `state(n)` builds
    /// worker `n`'s state once, before any worker starts (a database
    /// connection, a buffer, a client), and the handler gets it mutably
    /// with each delivery, so a handler need not open a connection per
    /// message or share one behind a lock.
    ///
    /// ```
    /// use leaseq::{Engine, QueueConfig};
    /// use leaseq::consumer::Pool;
    ///
    /// let engine = Engine::new();
    /// let q = engine.create_queue("jobs", QueueConfig::default())?;
    /// let pool = Pool::builder(&q).workers(2).start_with_state(
    ///     |worker| Ok::<_, std::io::Error>(Vec::<u8>::with_capacity(1024 + worker)),
    ///     |buffer, guard| {
    ///         buffer.clear();
    ///         buffer.extend_from_slice(guard.payload());
    ///         Ok(())
    ///     },
    /// )?;
    /// pool.shutdown(std::time::Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start), and [`PoolError::WorkerState`] if
    /// `state` fails for a worker (then no worker is started).
    pub fn start_with_state<S, E, F, H>(self, state: F, handler: H) -> Result<Pool, PoolError>
    where
        S: Send + 'static,
        E: fmt::Display,
        F: FnMut(usize) -> Result<S, E>,
        H: Fn(&mut S, &LeaseGuard) -> Result<(), HandlerError> + Send + Sync + 'static,
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
        self.policy.validate().map_err(PoolError::InvalidPolicy)?;
        let mut state = state;
        let states = (0..self.workers)
            .map(|worker| state(worker).map_err(|e| PoolError::WorkerState { worker, reason: e.to_string() }))
            .collect::<Result<Vec<S>, PoolError>>()?;
        let keeper = LeaseKeeper::spawn(self.policy).map_err(PoolError::InvalidPolicy)?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let handler = Arc::new(handler);
        let visibility = self.visibility.unwrap_or(self.queue.config().visibility_timeout);
        let options = ReceiveOptions { visibility: self.visibility, wait: Some(self.poll_wait) };
        let threads = states
            .into_iter()
            .enumerate()
            .map(|(n, mut state)| {
                let worker = Worker {
                    queue: self.queue.clone(),
                    keeper: keeper.clone(),
                    stop: stop.clone(),
                    counters: counters.clone(),
                    options,
                    visibility,
                };
                let handler = handler.clone();
                // Plain std threads: a pool runs on a real clock.
                std::thread::Builder::new()
                    .name(format!("leaseq-worker-{n}"))
                    .spawn(move || worker.run(&mut state, &*handler))
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
    /// The lease of each receive (the options' or the queue's default).
    visibility: Duration,
}

impl Worker {
    fn stopping(&self) -> bool {
        // Acquire pairs with the Release in `Pool::shutdown`.
        self.stop.load(Ordering::Acquire)
    }

    fn run<S, H>(&self, state: &mut S, handler: &H)
    where
        H: Fn(&mut S, &LeaseGuard) -> Result<(), HandlerError>,
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
                // Received from this very queue, so the keeper cannot refuse it.
                let Ok(guard) = self.keeper.keep(&self.queue, delivery) else {
                    continue;
                };
                if self.stopping() {
                    // Received as shutdown began: hand it straight back.
                    Counters::bump(&self.counters.returned_unhandled);
                    let _ = guard.release(Duration::ZERO);
                    continue;
                }
                self.handle(guard, state, handler);
            }
        }
    }

    fn handle<S, H>(&self, guard: LeaseGuard, state: &mut S, handler: &H)
    where
        H: Fn(&mut S, &LeaseGuard) -> Result<(), HandlerError>,
    {
        let c = &self.counters;
        Counters::bump(&c.handled);
        // SeqCst: `wait_drained` reads the gauge after the queue's counts and
        // must not see it drop before this worker's outcome counter moved;
        // shutdown reads it as a hint and also waits on the threads.
        c.busy.fetch_add(1, Ordering::SeqCst);
        self.finish_by_answer(guard, state, handler);
        c.busy.fetch_sub(1, Ordering::SeqCst);
    }

    fn finish_by_answer<S, H>(&self, guard: LeaseGuard, state: &mut S, handler: &H)
    where
        H: Fn(&mut S, &LeaseGuard) -> Result<(), HandlerError>,
    {
        let c = &self.counters;
        match catch_unwind(AssertUnwindSafe(|| handler(state, &guard))) {
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
                    let _ = guard.dead_letter(&reason.to_string());
                } else {
                    // Nowhere to put it, and a pool never drops a message.
                    // Releasing with the queue's backoff alone would spin
                    // (`Backoff::None`, the default, is no delay): hold it
                    // back for at least a lease, as a crashed worker would.
                    Counters::bump(&c.permanent_released);
                    let config = self.queue.config();
                    let backoff = config.backoff.delay(guard.id(), guard.delivery().delivery_count);
                    let _ = guard.release(backoff.max(self.visibility).min(config.max_delay));
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
///
/// A pool that is not kept is a warning (`unused_must_use`), not a silent
/// pool that stops at once:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = leaseq::Engine::new();
/// let q = engine.create_queue("jobs", leaseq::QueueConfig::default())?;
/// leaseq::consumer::run(&q, 2, |_| Ok(()))?; // the pool would be dropped here
/// # Ok(())
/// # }
/// ```
///
/// ```
/// #![deny(unused_must_use)]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = leaseq::Engine::new();
/// let q = engine.create_queue("jobs", leaseq::QueueConfig::default())?;
/// let pool = leaseq::consumer::run(&q, 2, |_| Ok(()))?;
/// pool.shutdown(std::time::Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping a Pool stops its workers at once: keep it while it should run, then call `shutdown`"]
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
#[non_exhaustive]
pub struct ShutdownReport {
    /// Every worker finished its in-flight work within the timeout.
    pub clean: bool,
    /// Leases still held at the timeout, released at once for other
    /// consumers.
    pub released: usize,
    /// Worker threads still running after the timeout (and a short grace
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
    #[must_use]
    pub fn stats(&self) -> PoolStats {
        self.counters.snapshot()
    }

    /// The pool's lease keeper (to inspect kept leases).
    pub fn keeper(&self) -> &LeaseKeeper {
        &self.keeper
    }

    /// Waits up to `timeout` (real time) until the queue is drained (nothing
    /// ready, delayed or in flight) and no worker is inside a handler;
    /// whether it was. Use it instead of polling `stats()`, for a batch job
    /// that ends when its queue is empty. A message some other consumer
    /// holds counts as in flight.
    #[must_use]
    pub fn wait_drained(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            let s = self.queue.stats();
            // Read after the queue's counts: a worker finishes its message
            // before it leaves the handler gauge (SeqCst on both sides), so
            // a drained queue and an idle gauge mean the counters are final.
            if s.ready + s.delayed + s.in_flight == 0 && self.counters.busy.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Stops receiving, lets in-flight handlers finish for up to `timeout`,
    /// then (after idle workers end their last poll, up to the poll wait)
    /// releases every lease still held (other consumers get those
    /// messages at once, not after their timeout; the handlers' guards report
    /// `LossReason::ReleasedByKeeper`), waits a short grace (up to 100 ms) for
    /// handlers to notice, and detaches any worker still running.
    pub fn shutdown(mut self, timeout: Duration) -> ShutdownReport {
        // Release pairs with the Acquire in `Worker::stopping`.
        self.stop.store(true, Ordering::Release);
        let clean = self.join_until(after(timeout));
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
