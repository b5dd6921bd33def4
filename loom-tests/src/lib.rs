//! Loom models of leaseq's lease state machine.
//!
//! Everything here is compiled only under `RUSTFLAGS="--cfg loom"`; without it
//! this crate is empty and its test files compile to nothing. Under loom the
//! engine's own atomics, cells and mutexes are loom's (see
//! `engine/src/sync.rs`), so each model below drives the real engine through
//! its public API from two or three loom threads and loom enumerates their
//! interleavings up to `LOOM_MAX_PREEMPTIONS`.
//!
//! This module holds what every model shares: a tiny queue on a
//! `ManualClock`, and a wrapper around `loom::model` that reports how many
//! executions a model explored (docs/loom.md records those figures).
#![cfg(loom)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use leaseq::{
    Backoff, DeadLetterReason, Delivery, Engine, Error, LateAck, LeaseError, ManualClock, MessageId, Queue,
    QueueConfig, QueueStats, Receipt, ReceiveOptions,
};

/// The visibility timeout every model uses: ten virtual nanoseconds.
pub const VISIBILITY: Duration = Duration::from_nanos(10);

/// An engine on a manual clock with one work queue (and, when the config
/// names one, its dead-letter queue).
#[derive(Debug, Clone)]
pub struct Fixture {
    /// The engine's clock; models advance it to make leases run out.
    pub clock: ManualClock,
    /// Kept so the queues' engine outlives every model thread.
    pub engine: Engine,
    /// The queue under test ("work").
    pub queue: Queue,
    /// The dead-letter queue ("dlq"), if the config names one.
    pub dead_letters: Option<Queue>,
}

/// The small config the models start from: `capacity` slots over `shards`
/// shards, the model visibility, no backoff, on-time and late acks accepted.
pub fn config(capacity: usize, shards: usize) -> QueueConfig {
    QueueConfig::default()
        .visibility_timeout(VISIBILITY)
        .max_visibility(Duration::from_nanos(100))
        .max_lease(Duration::from_nanos(1_000))
        .max_delay(Duration::from_nanos(1_000))
        .max_messages(capacity)
        .max_payload(16)
        .shards(shards)
}

impl Fixture {
    /// Builds the engine and queues; call inside the model closure (loom
    /// objects must be created in the execution that uses them).
    pub fn new(config: QueueConfig) -> Self {
        let clock = ManualClock::new();
        let engine = Engine::builder().clock(clock.clone()).default_shards(1).build();
        let dead_letters = config.dead_letter_queue.as_ref().map(|name| {
            engine.create_queue(name, self::config(4, 1)).expect("the dead-letter queue's config is valid")
        });
        let queue = engine.create_queue("work", config).expect("the model's config is valid");
        Fixture { clock, engine, queue, dead_letters }
    }

    /// Sends `payload`, which must fit.
    pub fn send(&self, payload: &'static [u8]) -> MessageId {
        self.queue.send(payload).expect("the model's queue has room")
    }

    /// Receives exactly one message, which must be ready.
    pub fn receive_one(&self) -> Delivery {
        let mut got = self.queue.receive(1).expect("receive(1) is a valid request");
        assert_eq!(got.len(), 1, "the model expected a ready message");
        got.pop().expect("one delivery")
    }

    /// The clock's time in nanoseconds.
    pub fn clock_now(&self) -> u64 {
        self.queue.now().as_nanos()
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// The race at the heart of several models: one thread acks `receipt`
    /// while another moves the clock past the lease and tries a receive.
    /// Returns the ack's result and what the receive got.
    pub fn race_ack_with_expiry(&self, receipt: Receipt) -> (Result<(), LeaseError>, Option<Delivery>) {
        let acker = {
            let queue = self.queue.clone();
            loom::thread::spawn(move || queue.ack(&receipt))
        };
        let expirer = {
            let fixture = self.clone();
            loom::thread::spawn(move || {
                fixture.advance(VISIBILITY);
                try_receive(&fixture.queue)
            })
        };
        (acker.join().unwrap(), expirer.join().unwrap())
    }

    /// Everything still on the work queue once all model threads are done:
    /// advances the clock past any lease or delay, then receives until empty.
    pub fn drain(&self) -> Vec<Delivery> {
        self.advance(Duration::from_nanos(10_000));
        let mut all = Vec::new();
        loop {
            let got = self.queue.receive(4).expect("receive(4) is a valid request");
            if got.is_empty() {
                return all;
            }
            all.extend(got);
        }
    }
}

/// Receives at most one message from `queue`, returning it if any.
pub fn try_receive(queue: &Queue) -> Option<Delivery> {
    let mut got = queue.receive(1).expect("receive(1) is a valid request");
    assert!(got.len() <= 1, "receive(1) returned {} messages", got.len());
    got.pop()
}

/// How much of a model's schedule space loom explores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Every interleaving (no preemption bound): the model is exhaustive.
    Exhaustive,
    /// Every interleaving with at most this many preemptions per execution
    /// (for models whose full space takes too long for CI).
    Preemptions(usize),
}

/// Runs `body` under loom with the model's recorded `bound` (docs/loom.md),
/// unless `LOOM_MAX_PREEMPTIONS` is set, which overrides it for every model.
/// Prints how many executions were explored and how long it took.
pub fn model<F>(name: &str, bound: Bound, body: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    let overridden = builder.preemption_bound.is_some();
    if !overridden {
        builder.preemption_bound = match bound {
            Bound::Exhaustive => None,
            Bound::Preemptions(n) => Some(n),
        };
    }
    let executions = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = executions.clone();
    let started = Instant::now();
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        body();
    });
    let bound = match builder.preemption_bound {
        None => "none (exhaustive)".to_string(),
        Some(n) if overridden => format!("{n} (LOOM_MAX_PREEMPTIONS)"),
        Some(n) => n.to_string(),
    };
    println!(
        "loom model {name}: {} executions in {:.2?}, preemption bound {bound}",
        executions.load(Ordering::Relaxed),
        started.elapsed(),
    );
}

/// The outcomes a model's executions reached, kept across executions, so a
/// model can assert that every outcome of its race really occurred: a model
/// whose threads never actually raced would pass its invariants vacuously.
#[derive(Debug)]
pub struct Outcomes(std::sync::Mutex<std::collections::BTreeSet<&'static str>>);

impl Outcomes {
    /// No outcome seen yet (for a `static` in the test).
    pub const fn new() -> Self {
        Outcomes(std::sync::Mutex::new(std::collections::BTreeSet::new()))
    }

    /// Records that an execution ended in `outcome`.
    pub fn saw(&self, outcome: &'static str) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(outcome);
    }

    /// Panics unless exactly `expected` were seen over all executions.
    pub fn assert_exactly(&self, expected: &[&'static str]) {
        let seen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let expected: std::collections::BTreeSet<_> = expected.iter().copied().collect();
        assert_eq!(*seen, expected, "the model's executions did not reach every outcome of the race");
    }
}

impl Default for Outcomes {
    fn default() -> Self {
        Self::new()
    }
}
