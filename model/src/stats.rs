//! The model's view of `QueueStats`: gauges counted from the messages
//! themselves, counters bumped by the operations that the contract says count.
//!
//! Invariant: gauges are never stored, always recomputed from the queue's
//! messages, so they cannot drift from the truth the model holds.

use std::time::Duration;

/// Monotonic counters of one queue, named as in `QueueStats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Messages accepted by send, dead-letter arrival or redrive into the queue.
    pub sent: u64,
    /// Deliveries.
    pub received: u64,
    /// Deliveries with a delivery count above one.
    pub redelivered: u64,
    /// Acks accepted.
    pub acked: u64,
    /// Acks accepted at or after the deadline.
    pub late_acks: u64,
    /// Acks refused as stale.
    pub stale_acks: u64,
    /// Acks refused as expired under `LateAck::Reject`.
    pub expired_acks: u64,
    /// Leases that ran out.
    pub expired: u64,
    /// Successful extensions.
    pub extensions: u64,
    /// Extensions refused for a lease reason (stale, expired, over the cap).
    pub extensions_refused: u64,
    /// Releases.
    pub released: u64,
    /// Messages moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Messages removed by purge or delete.
    pub purged: u64,
    /// Failed attempts kept because the dead-letter queue was full.
    pub dead_letter_overflow: u64,
    /// Messages moved out by redrive.
    pub redriven_out: u64,
    /// Ready messages a redrive left here because they were above the
    /// target's `max_payload`.
    pub redrive_too_large: u64,
    /// Messages dropped because they outlived the queue's retention.
    pub retention_dropped: u64,
}

/// What `Queue::stats` should report, as the model computes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelStats {
    /// Ready messages.
    pub ready: u64,
    /// Delayed messages.
    pub delayed: u64,
    /// Leased messages.
    pub in_flight: u64,
    /// Messages on the dead-letter queue (0 without one).
    pub dead_letter_depth: u64,
    /// Now minus the arrival time of the oldest ready message.
    pub oldest_ready_age: Option<Duration>,
    /// The counters.
    pub counters: Counters,
    /// The queue's configured visibility timeout.
    pub visibility_timeout: Duration,
    /// Processing-time samples (receive to ack), nanoseconds.
    pub processing: Vec<u64>,
    /// Time-in-queue samples (arrival to first receive), nanoseconds.
    pub time_in_queue: Vec<u64>,
    /// Lease left at ack, nanoseconds.
    pub lease_left_at_ack: Vec<u64>,
}
