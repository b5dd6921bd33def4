//! What a dead-lettered message carries: why it failed and how its last
//! attempts ended.
//!
//! Invariant: a record is written once, when the message leaves its source
//! queue, and never changes afterwards (it is shared as an `Arc`).

use std::fmt;
use std::time::Duration;

use std::collections::VecDeque;

use crate::clock::Nanos;
use crate::receipt::MessageId;
use crate::sync::{Mutex, lock};

/// Most failed attempts a message remembers.
pub const MAX_ATTEMPT_RECORDS: usize = 8;

/// How one delivery attempt ended without an ack.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The lease ran out.
    Expired,
    /// The consumer released it.
    Released,
    /// The consumer dead-lettered it with this reason.
    DeadLettered(String),
}

/// One failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The delivery count of the attempt (1-based).
    pub delivery: u32,
    /// When it was received.
    pub received_at: Nanos,
    /// When it ended.
    pub ended_at: Nanos,
    /// How it ended.
    pub outcome: AttemptOutcome,
}

impl AttemptRecord {
    /// How long the attempt held the message.
    #[must_use]
    pub fn held_for(&self) -> Duration {
        self.ended_at.saturating_since(self.received_at)
    }
}

/// Why a message was dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// Its lease expired on the delivery that reached `max_receives`.
    Expired,
    /// It was released on the delivery that reached `max_receives`.
    Released,
    /// A consumer declared it poison.
    Explicit(String),
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeadLetterReason::Expired => write!(f, "lease expired at the retry ceiling"),
            DeadLetterReason::Released => write!(f, "released at the retry ceiling"),
            DeadLetterReason::Explicit(text) => write!(f, "dead-lettered by consumer: {text}"),
        }
    }
}

/// The record a dead-lettered message carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterRecord {
    /// The queue it failed on.
    pub source_queue: String,
    /// Why.
    pub reason: DeadLetterReason,
    /// Its delivery count on the source queue.
    pub delivery_count: u32,
    /// Its last failed attempts, oldest first (at most `MAX_ATTEMPT_RECORDS`).
    pub attempts: Vec<AttemptRecord>,
    /// When it was moved.
    pub dead_lettered_at: Nanos,
}

/// How many recent dead-letter moves a queue remembers for `diagnose`.
pub(crate) const DEAD_LETTER_LOG: usize = 64;

/// One message a queue moved to its dead-letter queue.
#[derive(Debug, Clone)]
#[cfg_attr(loom, allow(dead_code))]
pub(crate) struct DeadLetterNote {
    pub(crate) id: MessageId,
    pub(crate) record: std::sync::Arc<DeadLetterRecord>,
    /// Acks, extends, releases or dead-letters refused as stale or expired
    /// for its attempts while it was on the queue: a consumer was still
    /// working on it after its lease ran out.
    pub(crate) late_calls: u32,
}

/// The source queue's memory of its last `DEAD_LETTER_LOG` dead-letter moves.
///
/// Invariant: touched only when a message is dead-lettered (a cold path) and
/// when `diagnose` reads it; nothing on the hot path takes its lock.
#[derive(Debug, Default)]
pub(crate) struct DeadLetterLog {
    recent: Mutex<VecDeque<DeadLetterNote>>,
}

impl DeadLetterLog {
    pub(crate) fn remember(&self, note: DeadLetterNote) {
        let mut recent = lock(&self.recent);
        if recent.len() == DEAD_LETTER_LOG {
            recent.pop_front();
        }
        recent.push_back(note);
    }

    /// The remembered moves, oldest first.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn recent(&self) -> Vec<DeadLetterNote> {
        lock(&self.recent).iter().cloned().collect()
    }
}
