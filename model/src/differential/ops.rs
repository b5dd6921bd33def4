//! The operations a differential run is made of, in a compact form that both
//! `arbitrary` (fuzzing) and proptest (via raw bytes) can produce.
//!
//! Invariant: every value of every type here maps to a concrete call
//! (`Span::duration`, `NameChoice::name`, ...), valid or not, so no input is
//! ever rejected before it reaches the engine.

use std::time::Duration;

use leaseq::{Backoff, LateAck, QueueConfig};

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;

/// A duration drawn from the ranges that matter: zero, sub-millisecond,
/// seconds, hours, and days up to well past the one-year limit.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// Zero.
    Zero,
    /// Nanoseconds.
    Nanos(u16),
    /// Milliseconds.
    Millis(u16),
    /// Seconds.
    Secs(u16),
    /// Hours.
    Hours(u16),
    /// Days (past 365 is above every limit).
    Days(u16),
}

impl Span {
    /// The duration this stands for.
    pub fn duration(self) -> Duration {
        match self {
            Span::Zero => Duration::ZERO,
            Span::Nanos(n) => Duration::from_nanos(n.into()),
            Span::Millis(n) => Duration::from_millis(n.into()),
            Span::Secs(n) => Duration::from_secs(n.into()),
            Span::Hours(n) => Duration::from_secs(u64::from(n) * 3600),
            Span::Days(n) => Duration::from_secs(u64::from(n) * 86_400),
        }
    }
}

/// Queue names: six valid ones (so collisions are common) and four invalid.
pub const NAMES: [&str; 10] = ["a", "b", "c", "dlq", "dlq-2", "x_9", "", "bad name", "\u{fc}", LONG_NAME];
const LONG_NAME: &str = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";

/// A name from `NAMES`, mostly a valid one.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameChoice(pub u8);

impl NameChoice {
    /// The name.
    pub fn name(self) -> &'static str {
        let k = usize::from(self.0);
        // Three in four picks are among the six valid names.
        if k % 4 != 3 { NAMES[k % 6] } else { NAMES[k % NAMES.len()] }
    }
}

/// A retry backoff.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackoffSpec {
    /// `Backoff::None`.
    #[default]
    None,
    /// `Backoff::Fixed`.
    Fixed(Span),
    /// `Backoff::Exponential`.
    Exponential {
        /// First delay.
        base: Span,
        /// Cap.
        max: Span,
        /// Jitter.
        jitter: bool,
    },
}

/// A queue config: `None` fields take the default, so most configs are valid
/// and the rest break one or two rules. `ConfigSpec::default()` is the
/// engine's default config, unrepaired.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigSpec {
    /// `visibility_timeout`.
    pub visibility: Option<Span>,
    /// `max_visibility`.
    pub max_visibility: Option<Span>,
    /// `max_lease`.
    pub max_lease: Option<Span>,
    /// `max_delay`.
    pub max_delay: Option<Span>,
    /// `max_receives` (0 is invalid).
    pub max_receives: Option<u8>,
    /// `dead_letter_queue`.
    pub dead_letter_queue: Option<NameChoice>,
    /// `LateAck::Reject` instead of the default.
    pub reject_late_acks: bool,
    /// `backoff`.
    pub backoff: BackoffSpec,
    /// `max_messages` (0 is invalid; `None` is the default million).
    pub max_messages: Option<u8>,
    /// `max_payload` in bytes (0 is invalid).
    pub max_payload: Option<u16>,
    /// `shards`: `n % 5` (0 is invalid), or 257 (invalid) for 255.
    pub shards: Option<u8>,
    /// `retention` (zero and past a year are invalid).
    pub retention: Option<Span>,
    /// Repair the config into a valid one (clamp each field into its range),
    /// so that about half of all creates succeed and the queues get traffic.
    pub tidy: bool,
}

impl ConfigSpec {
    /// The config this stands for.
    pub fn config(&self) -> QueueConfig {
        let raw = self.raw_config();
        if self.tidy { tidy(raw) } else { raw }
    }

    fn raw_config(&self) -> QueueConfig {
        let d = QueueConfig::default();
        let span = |s: Option<Span>, default| s.map_or(default, Span::duration);
        let mut c = d.clone();
        c.visibility_timeout = span(self.visibility, d.visibility_timeout);
        c.max_visibility = span(self.max_visibility, d.max_visibility);
        c.max_lease = span(self.max_lease, d.max_lease);
        c.max_delay = span(self.max_delay, d.max_delay);
        c.max_receives = self.max_receives.map(u32::from);
        c.dead_letter_queue = self.dead_letter_queue.map(|n| n.name().to_string());
        c.late_ack = if self.reject_late_acks { LateAck::Reject } else { LateAck::AcceptIfNotRedelivered };
        c.backoff = match self.backoff {
            BackoffSpec::None => Backoff::None,
            BackoffSpec::Fixed(s) => Backoff::Fixed(s.duration()),
            BackoffSpec::Exponential { base, max, jitter } => {
                Backoff::Exponential { base: base.duration(), max: max.duration(), jitter }
            }
        };
        c.max_messages = self.max_messages.map_or(d.max_messages, usize::from);
        c.max_payload = self.max_payload.map_or(d.max_payload, usize::from);
        c.shards = self.shards.map(|n| if n == 255 { 257 } else { usize::from(n % 5) });
        c.retention = self.retention.map(Span::duration);
        c
    }
}

/// Clamps every field of `c` into its valid range, keeping as much of it as
/// it can.
fn tidy(mut c: QueueConfig) -> QueueConfig {
    let year = crate::validate::YEAR;
    c.max_lease = c.max_lease.clamp(Duration::from_nanos(1), year);
    c.max_visibility = c.max_visibility.min(c.max_lease);
    c.visibility_timeout = c.visibility_timeout.min(c.max_visibility);
    c.max_delay = c.max_delay.min(year);
    if c.dead_letter_queue.as_deref().is_some_and(|n| !crate::validate::name_is_valid(n)) {
        c.dead_letter_queue = None;
    }
    if c.dead_letter_queue.is_none() {
        c.max_receives = None;
    }
    c.max_receives = c.max_receives.map(|n| n.max(1));
    c.backoff = match c.backoff {
        Backoff::None => Backoff::None,
        Backoff::Fixed(d) => Backoff::Fixed(d.min(c.max_delay)),
        Backoff::Exponential { base, max, jitter } => {
            let base = base.max(Duration::from_nanos(1));
            if base > c.max_delay {
                Backoff::None
            } else {
                Backoff::Exponential { base, max: max.clamp(base, c.max_delay), jitter }
            }
        }
        other => panic!("the fuzz model does not know backoff {other:?}"),
    };
    c.max_messages = c.max_messages.max(1);
    c.max_payload = c.max_payload.max(1);
    c.shards = c.shards.map(|n| n.clamp(1, crate::validate::SHARD_LIMIT));
    c.retention = c.retention.map(|r| r.clamp(Duration::from_nanos(1), year));
    c
}

/// Which receipt an operation presents.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptPick {
    /// A receipt some receive returned: below 0xc000, one of the last eight
    /// issued (often current); from there on, any of them (often stale).
    Issued(u16),
    /// An issued receipt with its integrity tag altered (forged).
    Tampered(u16),
    /// A receipt from another engine.
    Foreign,
}

/// One step of a differential run. Queues are named by the order they were
/// created in (`queue % created`), deleted ones included, like held handles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `Engine::create_queue`.
    Create {
        /// Name.
        name: NameChoice,
        /// Config.
        config: ConfigSpec,
    },
    /// `Engine::delete_queue`.
    Delete {
        /// Name.
        name: NameChoice,
    },
    /// `Queue::send_with`.
    Send {
        /// Queue.
        queue: u8,
        /// Payload bytes (`size % 600`).
        size: u16,
        /// Delay (`None`: plain send).
        delay: Option<Span>,
    },
    /// `Queue::send_batch` (at most 8 payloads).
    SendBatch {
        /// Queue.
        queue: u8,
        /// Payload sizes.
        sizes: Vec<u8>,
    },
    /// `Queue::receive_with` without waiting.
    Receive {
        /// Queue.
        queue: u8,
        /// Batch size: `max % 16` (0 is invalid), or `1024 + low byte` from 0xff00 up.
        max: u16,
        /// Visibility (`None`: the queue's default).
        visibility: Option<Span>,
    },
    /// `Queue::ack`.
    Ack {
        /// Queue presented to.
        queue: u8,
        /// Receipt.
        receipt: ReceiptPick,
    },
    /// `Queue::extend`.
    Extend {
        /// Queue presented to.
        queue: u8,
        /// Receipt.
        receipt: ReceiptPick,
        /// New visibility from now.
        visibility: Span,
    },
    /// `Queue::release` (`Some`) or `Queue::release_with_backoff` (`None`).
    Release {
        /// Queue presented to.
        queue: u8,
        /// Receipt.
        receipt: ReceiptPick,
        /// Delay.
        delay: Option<Span>,
    },
    /// `Queue::dead_letter`.
    DeadLetter {
        /// Queue presented to.
        queue: u8,
        /// Receipt.
        receipt: ReceiptPick,
        /// Reason (as a number, written into the text).
        reason: u8,
    },
    /// `ManualClock::advance` (capped at one year a step).
    Advance {
        /// By how much.
        by: Span,
    },
    /// `Queue::purge`.
    Purge {
        /// Queue.
        queue: u8,
    },
    /// `Queue::set_retention`.
    SetRetention {
        /// Queue.
        queue: u8,
        /// The new period (`None`: keep until acked).
        retention: Option<Span>,
    },
    /// `Queue::set_dead_letter`.
    SetDeadLetter {
        /// Queue.
        queue: u8,
        /// The new dead-letter queue (`None`: unlink).
        to: Option<NameChoice>,
        /// The new ceiling (`None`: none).
        max_receives: Option<u8>,
    },
    /// `Engine::redrive`.
    Redrive {
        /// Source.
        from: NameChoice,
        /// Destination.
        to: NameChoice,
        /// Most messages to move.
        max: u8,
    },
    /// `Queue::stats`.
    Stats {
        /// Queue.
        queue: u8,
    },
    /// Closes the engine and opens its data dir again (a run that has one
    /// runs on a durable engine; `docs/durability.md` says what a restart
    /// keeps). Every queue handle and receipt from before belongs to the
    /// closed engine.
    Restart,
}

/// Operations are drawn with weights (out of 118), so that queues live long
/// enough to carry traffic: deletes, purges and restarts are rare, sends and
/// receives common.
#[cfg(feature = "arbitrary")]
impl<'a> Arbitrary<'a> for Op {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u.int_in_range(0u8..=117)? {
            0..=7 => Op::Create { name: u.arbitrary()?, config: u.arbitrary()? },
            8..=9 => Op::Delete { name: u.arbitrary()? },
            10..=29 => Op::Send { queue: u.arbitrary()?, size: u.arbitrary()?, delay: u.arbitrary()? },
            30..=35 => {
                let count = u.int_in_range(0u8..=8)?;
                let sizes = (0..count).map(|_| u.arbitrary()).collect::<arbitrary::Result<_>>()?;
                Op::SendBatch { queue: u.arbitrary()?, sizes }
            }
            36..=55 => Op::Receive { queue: u.arbitrary()?, max: u.arbitrary()?, visibility: u.arbitrary()? },
            56..=67 => Op::Ack { queue: u.arbitrary()?, receipt: u.arbitrary()? },
            68..=75 => Op::Extend { queue: u.arbitrary()?, receipt: u.arbitrary()?, visibility: u.arbitrary()? },
            76..=83 => Op::Release { queue: u.arbitrary()?, receipt: u.arbitrary()?, delay: u.arbitrary()? },
            84..=89 => Op::DeadLetter { queue: u.arbitrary()?, receipt: u.arbitrary()?, reason: u.arbitrary()? },
            90..=103 => Op::Advance { by: u.arbitrary()? },
            104..=105 => Op::Purge { queue: u.arbitrary()? },
            106..=109 => Op::Redrive { from: u.arbitrary()?, to: u.arbitrary()?, max: u.arbitrary()? },
            110..=111 => Op::SetRetention { queue: u.arbitrary()?, retention: u.arbitrary()? },
            112..=113 => Op::SetDeadLetter { queue: u.arbitrary()?, to: u.arbitrary()?, max_receives: u.arbitrary()? },
            116..=117 => Op::Restart,
            _ => Op::Stats { queue: u.arbitrary()? },
        })
    }
}

impl Op {
    /// The batch size a `Receive` asks for.
    pub fn batch_size(max: u16) -> usize {
        if max >= 0xff00 { 1024 + usize::from(max & 0xff) } else { usize::from(max % 16) }
    }
}
