//! Diagnosis of redeliveries: a timeout set too short, or poison messages?
//!
//! Invariant: the diagnosis is computed only from what the engine already
//! counts (`QueueStats`, the per-message count of calls that arrived after a
//! lease was lost, and the source queue's log of recent dead-letter moves); it
//! changes nothing and costs the hot path nothing.
//!
//! The two causes leave different traces:
//!
//! * **Timeout too short.** Workers are still working when their lease runs
//!   out, so their acks (or extends, or releases) arrive late: accepted late
//!   acks, acks refused as stale or expired, and processing times whose p99
//!   reaches the visibility timeout. Even messages that reached the retry
//!   ceiling this way had calls after their leases were lost.
//! * **Poison messages.** Workers never come back for them: attempts expire
//!   (a crash, a hang) or are released (a failure) with no call at all after
//!   the lease is lost, until the retry ceiling moves them to the dead-letter
//!   queue. Meanwhile the other messages' processing time sits well inside
//!   the timeout. A message a consumer dead-lettered itself (`dead_letter`,
//!   or a pool handler's `HandlerError::Permanent`) is poison by the
//!   consumer's own word, and is named with its reason.

use std::fmt;
use std::time::Duration;

use crate::dead_letter::{AttemptOutcome, DeadLetterReason};
use crate::queue::Queue;
use crate::receipt::MessageId;
use crate::stats::{QueueStats, SUGGESTION_MARGIN};

/// Share of failed attempts (expired or released) that must have come back
/// with a late call before late calls count as evidence of a short timeout:
/// a few stray double acks among many crashes should not.
const LATE_SHARE: f64 = 0.05;
/// p99 processing time at or above this share of the timeout counts as
/// evidence of a short timeout (acked work is already running out of lease),
/// unless consumers renew their leases (then long work is expected, and only
/// late calls count).
const P99_SHARE: f64 = 0.9;

/// The overall answer of [`Queue::diagnose`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// No redeliveries, no late calls, no poison messages.
    Healthy,
    /// Leases run out while work is still under way.
    TimeoutTooShort,
    /// Some messages fail every attempt without the worker coming back.
    PoisonMessages,
    /// Both at once.
    Both,
    /// Redeliveries without evidence for either cause (consumers crashing or
    /// releasing on errors; configure `max_receives` and a dead-letter queue
    /// so repeated failures are named).
    Unexplained,
}

/// Evidence that the visibility timeout is too short.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimeoutEvidence {
    /// Acks accepted after the deadline.
    pub late_acks: u64,
    /// Acks refused as stale (the message had been delivered again or
    /// finished).
    pub stale_acks: u64,
    /// Acks refused as expired (`LateAck::Reject`).
    pub expired_acks: u64,
    /// Whether the p99 processing time reached the timeout while no lease
    /// was ever extended.
    pub p99_at_timeout: bool,
    /// Messages dead-lettered at the retry ceiling although a worker called
    /// back for them after a lease was lost (they were not poison).
    pub dead_lettered_while_working: Vec<MessageId>,
}

/// A poison message: one that reached the retry ceiling with no worker ever
/// calling back after losing its lease, or one a consumer dead-lettered itself
/// (`Queue::dead_letter`, or a pool handler's `HandlerError::Permanent`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoisonMessage {
    /// Its id (stable; find it on the dead-letter queue).
    pub id: MessageId,
    /// The consumer's reason when a consumer dead-lettered it; `None` when
    /// the retry ceiling did.
    pub declared: Option<String>,
    /// Deliveries on the source queue.
    pub deliveries: u32,
    /// Of its remembered attempts, how many expired.
    pub expired_attempts: u32,
    /// Of its remembered attempts, how many were released.
    pub released_attempts: u32,
}

/// The structured result of [`Queue::diagnose`]; `Display` prints the
/// human-readable summary.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Diagnosis {
    /// The queue diagnosed.
    pub queue: String,
    /// The overall answer.
    pub verdict: Verdict,
    /// The queue's visibility timeout.
    pub visibility_timeout: Duration,
    /// Deliveries.
    pub received: u64,
    /// Deliveries of a message delivered before.
    pub redelivered: u64,
    /// `redelivered / received` (0 with no deliveries).
    pub redelivery_rate: f64,
    /// Leases that ran out.
    pub expired: u64,
    /// Releases (nacks).
    pub released: u64,
    /// Messages moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Median processing time (receive to accepted ack), if measured.
    pub processing_p50: Option<Duration>,
    /// p99 processing time, if measured.
    pub processing_p99: Option<Duration>,
    /// Acks the percentiles come from.
    pub processing_samples: u64,
    /// Successful lease extensions (consumers renew: processing beyond the
    /// timeout is then expected).
    pub extensions: u64,
    /// The timeout the measured p99 suggests (p99 × `SUGGESTION_MARGIN`,
    /// whole milliseconds); `None` with no measurement.
    pub suggested_visibility: Option<Duration>,
    /// Set when the evidence points to a short timeout.
    pub timeout: Option<TimeoutEvidence>,
    /// Poison messages among the queue's recent dead-letter moves (the last
    /// 64), oldest first.
    pub poison: Vec<PoisonMessage>,
}

impl Queue {
    /// Tells a timeout set too short from poison messages, from the engine's
    /// own counters. See the `consumer::diagnose` module docs for the rules.
    #[must_use]
    pub fn diagnose(&self) -> Diagnosis {
        diagnose(self.name(), &self.stats(), &self.core.dead_letter_log.recent())
    }
}

fn diagnose(queue: &str, stats: &QueueStats, moves: &[crate::dead_letter::DeadLetterNote]) -> Diagnosis {
    let vis = stats.visibility_timeout;
    let p99 = stats.processing_percentile(99.0);
    let mut poison = Vec::new();
    let mut while_working = Vec::new();
    for note in moves {
        let declared = match &note.record.reason {
            DeadLetterReason::Explicit(reason) => Some(reason.clone()),
            // A reason added later: treat it like the ceiling's.
            _ => None,
        };
        // A consumer that declared the message poison came back for it on
        // purpose: late calls before that say nothing against the verdict.
        if declared.is_none() && note.late_calls > 0 {
            while_working.push(note.id);
            continue;
        }
        let count = |outcome: AttemptOutcome| note.record.attempts.iter().filter(|a| a.outcome == outcome).count();
        poison.push(PoisonMessage {
            id: note.id,
            declared,
            deliveries: note.record.delivery_count,
            expired_attempts: count(AttemptOutcome::Expired) as u32,
            released_attempts: count(AttemptOutcome::Released) as u32,
        });
    }
    let late_calls = stats.late_acks + stats.stale_acks + stats.expired_acks;
    let failed = stats.expired + stats.released;
    let renewing = stats.extensions > 0;
    let p99_at_timeout =
        !renewing && p99.is_some_and(|p| !vis.is_zero() && p.as_secs_f64() >= vis.as_secs_f64() * P99_SHARE);
    let late_material = late_calls > 0 && late_calls as f64 >= failed as f64 * LATE_SHARE;
    let short = p99_at_timeout || late_material || !while_working.is_empty();
    let timeout = short.then_some(TimeoutEvidence {
        late_acks: stats.late_acks,
        stale_acks: stats.stale_acks,
        expired_acks: stats.expired_acks,
        p99_at_timeout,
        dead_lettered_while_working: while_working,
    });
    let verdict = match (timeout.is_some(), !poison.is_empty()) {
        (true, true) => Verdict::Both,
        (true, false) => Verdict::TimeoutTooShort,
        (false, true) => Verdict::PoisonMessages,
        (false, false) if stats.redelivered > 0 || failed > 0 => Verdict::Unexplained,
        (false, false) => Verdict::Healthy,
    };
    let suggested_visibility = p99.map(|p| {
        let nanos = (p.as_nanos() as f64 * SUGGESTION_MARGIN).ceil() as u64;
        Duration::from_millis(nanos.div_ceil(1_000_000).max(1))
    });
    Diagnosis {
        queue: queue.to_string(),
        verdict,
        visibility_timeout: vis,
        received: stats.received,
        redelivered: stats.redelivered,
        redelivery_rate: if stats.received == 0 { 0.0 } else { stats.redelivered as f64 / stats.received as f64 },
        expired: stats.expired,
        released: stats.released,
        dead_lettered: stats.dead_lettered,
        processing_p50: stats.processing_percentile(50.0),
        processing_p99: p99,
        processing_samples: stats.processing_time.len(),
        extensions: stats.extensions,
        suggested_visibility,
        timeout,
        poison,
    }
}

impl Diagnosis {
    /// The human-readable summary (what `Display` prints).
    #[must_use]
    pub fn summary(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "queue '{}': {} deliveries, {} redelivered ({:.1}%), {} expired, {} released, {} dead-lettered",
            self.queue,
            self.received,
            self.redelivered,
            self.redelivery_rate * 100.0,
            self.expired,
            self.released,
            self.dead_lettered
        )?;
        match (self.processing_p50, self.processing_p99) {
            (Some(p50), Some(p99)) => writeln!(
                f,
                "processing time p50 {p50:?}, p99 {p99:?} over {} acks; visibility timeout {:?}",
                self.processing_samples, self.visibility_timeout
            )?,
            _ => writeln!(f, "no acked attempt measured yet; visibility timeout {:?}", self.visibility_timeout)?,
        }
        if self.extensions > 0 {
            writeln!(
                f,
                "{} lease extensions: consumers renew, so long processing alone is not a problem",
                self.extensions
            )?;
        }
        let verdict = match self.verdict {
            Verdict::Healthy => "healthy: nothing is being redelivered",
            Verdict::TimeoutTooShort => "the visibility timeout is too short",
            Verdict::PoisonMessages => "poison messages",
            Verdict::Both => "both a short visibility timeout and poison messages",
            Verdict::Unexplained => {
                "redeliveries without late acks or named poison messages: consumers may be crashing or \
                 releasing on errors; set max_receives and a dead-letter queue so repeated failures are named"
            }
        };
        writeln!(f, "verdict: {verdict}")?;
        if let Some(t) = &self.timeout {
            write!(
                f,
                "- short timeout: {} late acks, {} stale acks, {} expired acks",
                t.late_acks, t.stale_acks, t.expired_acks
            )?;
            if t.p99_at_timeout {
                write!(f, "; p99 processing is at or above {:.0}% of the timeout", P99_SHARE * 100.0)?;
            }
            writeln!(f)?;
            if !t.dead_lettered_while_working.is_empty() {
                writeln!(
                    f,
                    "  {} message(s) reached the retry ceiling while a worker was still on them (not poison)",
                    t.dead_lettered_while_working.len()
                )?;
            }
            match self.suggested_visibility {
                Some(s) => writeln!(
                    f,
                    "  the measured p99 suggests a visibility timeout of at least {s:?} \
                     (or renew leases with a LeaseKeeper)"
                )?,
                None => {
                    writeln!(f, "  no ack was measured: renew leases with a LeaseKeeper, or measure processing time")?
                }
            }
        }
        if !self.poison.is_empty() {
            writeln!(
                f,
                "- {} poison message(s): dead-lettered by a consumer, or no worker came back after losing a lease:",
                self.poison.len()
            )?;
            // Name a few; the full list is in `self.poison`.
            const NAMED: usize = 10;
            for p in self.poison.iter().take(NAMED) {
                match &p.declared {
                    Some(reason) => writeln!(
                        f,
                        "  {}: dead-lettered by a consumer after {} deliveries: {reason}",
                        p.id, p.deliveries
                    )?,
                    None => writeln!(
                        f,
                        "  {}: {} deliveries ({} expired, {} released among the last attempts)",
                        p.id, p.deliveries, p.expired_attempts, p.released_attempts
                    )?,
                }
            }
            if self.poison.len() > NAMED {
                writeln!(f, "  ... and {} more (Diagnosis::poison lists them all)", self.poison.len() - NAMED)?;
            }
        }
        Ok(())
    }
}
