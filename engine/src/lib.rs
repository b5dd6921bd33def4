//! # leaseq
//!
//! An embeddable, lock-free, in-process queue engine whose visibility timeout
//! is a lease.
//!
//! * `receive` hides a message for a bounded interval (a lease) and returns a
//!   [`Delivery`] with an attempt-scoped [`Receipt`]; the [`MessageId`] is
//!   stable, the receipt is not.
//! * `ack` with the current attempt's receipt removes the message; a receipt
//!   of an older attempt gets [`LeaseError::Stale`] and can never complete a
//!   newer delivery.
//! * If the lease runs out first, the message becomes eligible again at its
//!   deadline. Consumers can `extend` (bounded by `max_lease`), `release` with
//!   a delay, or `dead_letter` it.
//! * Delivery counts and `max_receives` move poison messages to a dead-letter
//!   queue; [`Backoff`] keeps failures from reclaiming capacity at once.
//! * [`QueueStats`] shows lease pressure: in flight, oldest ready age,
//!   processing-time distribution, extensions, redeliveries, stale and late
//!   acks, dead-letter volume.
//!
//! Delivery is at-least-once: make effects idempotent (store the message id
//! with the effect) and fence external writes with
//! [`Delivery::fencing_token`].
//!
//! The [`consumer`] module holds the consumer side: a lease keeper that renews
//! off the workers' threads within policy bounds, a guard that makes loss
//! visible, a worker pool with graceful shutdown, and `Queue::diagnose`
//! (docs/consumer.md).
//!
//! ```
//! use std::time::Duration;
//! use leaseq::{Engine, ManualClock, QueueConfig, LeaseError};
//!
//! let clock = ManualClock::new();
//! let engine = Engine::builder().clock(clock.clone()).build();
//! let q = engine.create_queue("jobs", QueueConfig::default())?;
//! q.send(b"render frame 7")?;
//!
//! let a = q.receive(1)?.remove(0);              // consumer A, 30 s lease
//! clock.advance(Duration::from_secs(31));        // A stalls past its lease
//! let b = q.receive(1)?.remove(0);              // B gets the same message
//! assert_eq!((a.id, b.delivery_count), (b.id, 2));
//! assert_eq!(q.ack(&a.receipt), Err(LeaseError::Stale)); // A cannot complete B's attempt
//! q.ack(&b.receipt)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The architecture (shards, the lease state word, the timing wheel) is in
//! `docs/design.md`.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::missing_errors_doc)]

mod backoff;
mod clock;
mod commit;
mod config;
#[cfg(not(loom))]
pub mod consumer;
mod dead_letter;
mod dead_letter_link;
mod delivery;
mod driver;
mod engine;
mod error;
mod identity;
mod journal;
mod lease;
mod lifecycle;
mod log;
mod payload;
mod queue;
mod ready;
mod receipt;
mod shard;
mod slot;
mod stats;
mod sync;
mod timers;
mod tsc;
mod waiters;
mod wheel;

/// The payload type of a [`Delivery`] (re-exported from the `bytes` crate so
/// callers need not depend on it).
pub use bytes::Bytes;
/// The histogram type of [`QueueStats`]' distributions (re-exported from
/// `hdrhistogram`).
pub use hdrhistogram::Histogram;

pub use backoff::Backoff;
pub use clock::{Clock, MANUAL_UNIX_ORIGIN, ManualClock, Nanos, SystemClock};
pub use commit::{SendBatchFuture, SendFuture, Settle};
pub use config::{
    LateAck, MAX_BATCH, MAX_CAPACITY, MAX_DURATION_SETTING, MAX_NAME_LEN, MAX_PAYLOAD_LIMIT, MAX_QUEUE_METADATA,
    MAX_SHARDS, QueueConfig, validate_name,
};
pub use dead_letter::{AttemptOutcome, AttemptRecord, DeadLetterReason, DeadLetterRecord, MAX_ATTEMPT_RECORDS};
pub use delivery::{Delivery, ReceiveOptions, SendOptions};
pub use engine::{Engine, EngineBuilder};
pub use error::{Error, LeaseError, ReceiptError};
#[cfg(loom)]
#[doc(hidden)]
pub use journal::loom_hooks;
pub use journal::{LogStats, SyncPolicy};
pub use log::replication::{PendingReplication, ReplicaState, ReplicatedBuilder, ReplicationSink};
pub use log::replicator::MAX_GROUPS_IN_FLIGHT;
pub use log::{DEFAULT_SEGMENT_BYTES, DamagedRange, DurableBuilder, MIN_SEGMENT_BYTES, RecoveryReport, Repair};
pub use payload::Payload;
pub use queue::{Queue, ReceiveFuture};
pub use receipt::{MessageId, Receipt};
pub use stats::{QueueStats, SUGGESTION_MARGIN, SUGGESTION_MIN_SAMPLES};

/// The README's embedding example, compiled and run as a doc test so it stays
/// true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
