//! A message as the model keeps it: plain fields, no concurrency.
//!
//! Invariant: a message lives in exactly one queue's map, in exactly one
//! `State`; `attempt` counts its deliveries on that queue and names the
//! receipt that currently holds it.

use std::sync::Arc;

use bytes::Bytes;
use leaseq::{AttemptRecord, DeadLetterRecord, MAX_ATTEMPT_RECORDS, MessageId};

/// Where a message is in its life on one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Receivable; listed in the queue's ready order.
    Ready,
    /// Receivable once the clock reaches `until`.
    Delayed { until: u64 },
    /// Leased by the attempt numbered `attempt` until `deadline`.
    InFlight,
}

/// One message on one queue.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub(crate) id: MessageId,
    pub(crate) payload: Bytes,
    /// When it arrived on this queue (send, dead-letter or redrive).
    pub(crate) sent_at: u64,
    pub(crate) state: State,
    /// Deliveries on this queue; the current (or last) attempt's number.
    pub(crate) delivery_count: u32,
    /// Deliveries over the message's whole life (the fencing token).
    pub(crate) lifetime_deliveries: u32,
    /// The last attempt's receive time and deadline.
    pub(crate) received_at: u64,
    pub(crate) deadline: u64,
    /// Set while the message waits because attempt `n`'s lease ran out and
    /// nobody has received it since: that attempt may still ack late.
    pub(crate) expired_attempt: Option<u32>,
    /// Failed attempts on this queue, oldest first, at most `MAX_ATTEMPT_RECORDS`.
    pub(crate) failures: Vec<AttemptRecord>,
    /// Why it was dead-lettered, if it was.
    pub(crate) dead_letter: Option<Arc<DeadLetterRecord>>,
    /// The end of the delay its send asked for (0: none). A durable engine
    /// logs only this delay, so only it survives a restart.
    pub(crate) logged_until: u64,
    /// The operation (ready group number) that placed it on this queue: its
    /// place in a durable engine's log, where one operation's arrivals keep
    /// an order the contract leaves open.
    pub(crate) arrival_group: u64,
}

impl Message {
    pub(crate) fn arrive(id: MessageId, payload: Bytes, now: u64, lifetime_deliveries: u32, delay: u64) -> Self {
        Message {
            id,
            payload,
            sent_at: now,
            state: if delay > 0 { State::Delayed { until: now.saturating_add(delay) } } else { State::Ready },
            delivery_count: 0,
            lifetime_deliveries,
            received_at: 0,
            deadline: 0,
            expired_attempt: None,
            failures: Vec::new(),
            dead_letter: None,
            logged_until: if delay > 0 { now.saturating_add(delay) } else { 0 },
            arrival_group: 0,
        }
    }

    pub(crate) fn remember(&mut self, attempt: AttemptRecord) {
        self.failures.push(attempt);
        if self.failures.len() > MAX_ATTEMPT_RECORDS {
            self.failures.remove(0);
        }
    }
}
