//! Queue configuration and the validation every queue passes before it exists.
//!
//! Invariant: a queue is created only from a config `validate` accepted, so
//! the engine never meets an out-of-range limit at run time.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::error::Error;

/// What `ack` does with a receipt whose lease ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LateAck {
    /// Accept it if the message has not been delivered again (nobody else
    /// holds it, so accepting avoids a needless duplicate); count it as a late
    /// ack. A newer delivery always makes it `Stale`.
    #[default]
    AcceptIfNotRedelivered,
    /// Refuse it with `LeaseError::Expired`.
    Reject,
}

/// Most messages one call may handle: `receive` asks for 1..=`MAX_BATCH`,
/// `send_batch` takes at most `MAX_BATCH` payloads and `ack_batch` at most
/// `MAX_BATCH` receipts. A larger batch is refused whole, before anything
/// changes, with `InvalidBatchSize` (`Error` or `LeaseError`; for the two
/// batch calls, as every item's result).
pub const MAX_BATCH: usize = 1024;
/// Most shards a queue may have.
pub const MAX_SHARDS: usize = 256;
/// Largest allowed `max_messages`.
pub const MAX_CAPACITY: usize = 1 << 31;
/// Largest allowed `max_payload` (1 GiB).
pub const MAX_PAYLOAD_LIMIT: usize = 1 << 30;
/// Longest allowed duration setting (one year); keeps deadline arithmetic far
/// from overflow.
pub const MAX_DURATION_SETTING: Duration = Duration::from_secs(365 * 24 * 3600);
/// Longest queue name.
pub const MAX_NAME_LEN: usize = 80;
/// Largest metadata a queue keeps (`Queue::set_metadata`).
pub const MAX_QUEUE_METADATA: usize = 64 * 1024;

/// A queue's configuration. `QueueConfig::default()` matches common hosted
/// queues: 30 s visibility, 12 h lease cap, 256 KiB payloads.
///
/// The struct grows with the engine, so it is `#[non_exhaustive]`: build one
/// from the default with the chainable setters, or assign fields on a
/// mutable default.
///
/// ```
/// use std::time::Duration;
/// use leaseq::QueueConfig;
///
/// let config = QueueConfig::default()
///     .visibility_timeout(Duration::from_secs(60))
///     .max_receives(5)
///     .dead_letter_queue("jobs-dlq");
/// assert_eq!(config.max_receives, Some(5));
///
/// let mut same = QueueConfig::default();
/// same.visibility_timeout = Duration::from_secs(60);
/// same.max_receives = Some(5);
/// same.dead_letter_queue = Some("jobs-dlq".into());
/// assert_eq!(config, same);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueConfig {
    /// Visibility of a receive that does not name one. Left at its default
    /// (30 s), it follows a lower `max_lease` down (see `max_lease`).
    pub visibility_timeout: Duration,
    /// Largest visibility a receive or extension may ask for. Left at its
    /// default (12 h), it follows a lower `max_lease` down.
    pub max_visibility: Duration,
    /// Longest total lease of one attempt, from receive through every
    /// extension; an extension past it is `LeaseError::CapExceeded`.
    ///
    /// Lowering only the cap means the cap: a `max_visibility` or
    /// `visibility_timeout` still at its default value is lowered to
    /// `max_lease` when the queue is created (and `Queue::config` shows the
    /// lowered value). One set to another value above `max_lease` is a
    /// disagreement and is refused with `InvalidConfig`.
    pub max_lease: Duration,
    /// Largest send or release delay.
    pub max_delay: Duration,
    /// Deliveries after which a failed attempt dead-letters the message.
    /// Needs `dead_letter_queue`.
    pub max_receives: Option<u32>,
    /// Name of the queue that failed messages move to; must exist already,
    /// with a `max_payload` at least this queue's (a dead-letter queue takes
    /// every message its sources can hold, so a move never fails on size).
    pub dead_letter_queue: Option<String>,
    /// The late-ack rule.
    pub late_ack: LateAck,
    /// Delay before an expired attempt's message is eligible again.
    pub backoff: Backoff,
    /// Most messages the queue holds (ready, delayed and in flight).
    pub max_messages: usize,
    /// Largest payload in bytes.
    pub max_payload: usize,
    /// Shard count; `None` takes the engine's default (one per core).
    pub shards: Option<usize>,
    /// How long a message may stay on the queue, counted from when it
    /// arrived here (its send, or its move here by dead-letter or redrive);
    /// `None` keeps messages until they are acked. A ready or delayed
    /// message past it is dropped and counted
    /// (`QueueStats::retention_dropped`), never delivered again; one in
    /// flight keeps its lease (its ack still works) and is dropped when the
    /// lease ends without one. See `Queue::set_retention` to change it later.
    pub retention: Option<Duration>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            visibility_timeout: Duration::from_secs(30),
            max_visibility: Duration::from_secs(12 * 3600),
            max_lease: Duration::from_secs(12 * 3600),
            max_delay: Duration::from_secs(15 * 60),
            max_receives: None,
            dead_letter_queue: None,
            late_ack: LateAck::default(),
            backoff: Backoff::None,
            max_messages: 1 << 20,
            max_payload: 256 * 1024,
            shards: None,
            retention: None,
        }
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig { field, reason: reason.into() }
}

/// Chainable setters, one per field. A setter of an optional field takes the
/// value itself and sets `Some`; assign the field to clear it.
impl QueueConfig {
    /// Sets [`visibility_timeout`](Self::visibility_timeout).
    #[must_use = "a setter returns the changed config"]
    pub fn visibility_timeout(mut self, visibility: Duration) -> Self {
        self.visibility_timeout = visibility;
        self
    }

    /// Sets [`max_visibility`](Self::max_visibility).
    #[must_use = "a setter returns the changed config"]
    pub fn max_visibility(mut self, max: Duration) -> Self {
        self.max_visibility = max;
        self
    }

    /// Sets [`max_lease`](Self::max_lease).
    #[must_use = "a setter returns the changed config"]
    pub fn max_lease(mut self, max: Duration) -> Self {
        self.max_lease = max;
        self
    }

    /// Sets [`max_delay`](Self::max_delay).
    #[must_use = "a setter returns the changed config"]
    pub fn max_delay(mut self, max: Duration) -> Self {
        self.max_delay = max;
        self
    }

    /// Sets [`max_receives`](Self::max_receives) to `Some(receives)`.
    #[must_use = "a setter returns the changed config"]
    pub fn max_receives(mut self, receives: u32) -> Self {
        self.max_receives = Some(receives);
        self
    }

    /// Sets [`dead_letter_queue`](Self::dead_letter_queue) to `Some(name)`.
    #[must_use = "a setter returns the changed config"]
    pub fn dead_letter_queue(mut self, name: impl Into<String>) -> Self {
        self.dead_letter_queue = Some(name.into());
        self
    }

    /// Sets [`late_ack`](Self::late_ack).
    #[must_use = "a setter returns the changed config"]
    pub fn late_ack(mut self, rule: LateAck) -> Self {
        self.late_ack = rule;
        self
    }

    /// Sets [`backoff`](Self::backoff).
    #[must_use = "a setter returns the changed config"]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets [`max_messages`](Self::max_messages).
    #[must_use = "a setter returns the changed config"]
    pub fn max_messages(mut self, max: usize) -> Self {
        self.max_messages = max;
        self
    }

    /// Sets [`max_payload`](Self::max_payload).
    #[must_use = "a setter returns the changed config"]
    pub fn max_payload(mut self, max: usize) -> Self {
        self.max_payload = max;
        self
    }

    /// Sets [`shards`](Self::shards) to `Some(shards)`.
    #[must_use = "a setter returns the changed config"]
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// Sets [`retention`](Self::retention) to `Some(retention)`.
    #[must_use = "a setter returns the changed config"]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = Some(retention);
        self
    }
}

impl QueueConfig {
    /// The config a queue is created with: a `max_visibility` or
    /// `visibility_timeout` left at its default follows a lower `max_lease`
    /// down. Every other field is kept as given.
    pub(crate) fn resolved(mut self) -> Self {
        let defaults = QueueConfig::default();
        if self.max_visibility == defaults.max_visibility && self.max_visibility > self.max_lease {
            self.max_visibility = self.max_lease;
        }
        if self.visibility_timeout == defaults.visibility_timeout && self.visibility_timeout > self.max_visibility {
            self.visibility_timeout = self.max_visibility;
        }
        self
    }

    /// Checks every field; the error names the first one out of range.
    ///
    /// # Errors
    ///
    /// `Error::InvalidConfig` naming the field and why, or
    /// `Error::InvalidQueueName` for a bad `dead_letter_queue` name.
    pub fn validate(&self) -> Result<(), Error> {
        let durations = [
            ("visibility_timeout", self.visibility_timeout),
            ("max_visibility", self.max_visibility),
            ("max_lease", self.max_lease),
            ("max_delay", self.max_delay),
        ];
        for (field, value) in durations {
            if value > MAX_DURATION_SETTING {
                return Err(invalid(field, format!("is {value:?}, above the limit of one year")));
            }
        }
        if self.max_lease.is_zero() {
            return Err(invalid("max_lease", "must be above zero"));
        }
        if self.visibility_timeout > self.max_visibility {
            return Err(invalid(
                "visibility_timeout",
                format!("{:?} is above max_visibility {:?}", self.visibility_timeout, self.max_visibility),
            ));
        }
        if self.max_visibility > self.max_lease {
            return Err(invalid(
                "max_visibility",
                format!("{:?} is above max_lease {:?}", self.max_visibility, self.max_lease),
            ));
        }
        match self.max_receives {
            Some(0) => return Err(invalid("max_receives", "must be at least 1")),
            Some(_) if self.dead_letter_queue.is_none() => {
                return Err(invalid(
                    "max_receives",
                    "needs dead_letter_queue: messages at the ceiling must go somewhere, never be dropped",
                ));
            }
            _ => {}
        }
        if let Some(dlq) = &self.dead_letter_queue {
            validate_name(dlq)?;
        }
        match self.backoff {
            Backoff::None => {}
            Backoff::Fixed(d) => {
                if d > self.max_delay {
                    return Err(invalid(
                        "backoff",
                        format!("fixed delay {d:?} is above max_delay {:?}", self.max_delay),
                    ));
                }
            }
            Backoff::Exponential { base, max, .. } => {
                if base.is_zero() || base > max {
                    return Err(invalid("backoff", "exponential base must be above zero and at most max"));
                }
                if max > self.max_delay {
                    return Err(invalid(
                        "backoff",
                        format!("exponential max {max:?} is above max_delay {:?}", self.max_delay),
                    ));
                }
            }
        }
        if self.max_messages == 0 || self.max_messages > MAX_CAPACITY {
            return Err(invalid("max_messages", format!("must be in 1..={MAX_CAPACITY}")));
        }
        if self.max_payload == 0 || self.max_payload > MAX_PAYLOAD_LIMIT {
            return Err(invalid("max_payload", format!("must be in 1..={MAX_PAYLOAD_LIMIT}")));
        }
        if let Some(shards) = self.shards {
            if shards == 0 || shards > MAX_SHARDS {
                return Err(invalid("shards", format!("must be in 1..={MAX_SHARDS}")));
            }
        }
        if let Some(retention) = self.retention {
            validate_retention(retention)?;
        }
        Ok(())
    }
}

/// Checks a retention period: above zero, at most one year.
///
/// # Errors
///
/// `Error::InvalidConfig` naming `retention`.
pub(crate) fn validate_retention(retention: Duration) -> Result<(), Error> {
    if retention.is_zero() {
        return Err(invalid("retention", "must be above zero (None keeps messages until acked)"));
    }
    if retention > MAX_DURATION_SETTING {
        return Err(invalid("retention", format!("is {retention:?}, above the limit of one year")));
    }
    Ok(())
}

/// Checks a queue name: 1 to 80 ASCII letters, digits, `-` or `_`.
///
/// # Errors
///
/// `Error::InvalidQueueName` saying which rule the name breaks.
pub fn validate_name(name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("it is longer than 80 characters")
    } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        Some("it has a character other than letters, digits, '-' and '_'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidQueueName { name: name.chars().take(100).collect(), reason }),
        None => Ok(()),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        QueueConfig::default().validate().unwrap();
    }

    #[test]
    fn each_bad_field_is_named() {
        let base = QueueConfig::default();
        let cases: Vec<(QueueConfig, &str)> = vec![
            (base.clone().visibility_timeout(Duration::from_secs(13 * 3600)), "visibility_timeout"),
            (
                base.clone()
                    .max_lease(Duration::ZERO)
                    .max_visibility(Duration::ZERO)
                    .visibility_timeout(Duration::ZERO),
                "max_lease",
            ),
            (base.clone().max_visibility(Duration::from_secs(13 * 3600)), "max_visibility"),
            (base.clone().max_receives(0).dead_letter_queue("d"), "max_receives"),
            (base.clone().max_receives(3), "max_receives"),
            (base.clone().max_messages(0), "max_messages"),
            (base.clone().max_payload(0), "max_payload"),
            (base.clone().shards(0), "shards"),
            (base.clone().shards(MAX_SHARDS + 1), "shards"),
            (base.clone().max_delay(Duration::MAX), "max_delay"),
            (base.clone().retention(Duration::ZERO), "retention"),
            (base.clone().retention(MAX_DURATION_SETTING + Duration::from_secs(1)), "retention"),
            (base.clone().backoff(Backoff::Fixed(Duration::from_secs(3600))), "backoff"),
            (
                base.clone().backoff(Backoff::Exponential {
                    base: Duration::ZERO,
                    max: Duration::from_secs(1),
                    jitter: false,
                }),
                "backoff",
            ),
        ];
        for (config, field) in cases {
            match config.validate() {
                Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field, "{config:?}"),
                other => panic!("{config:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn a_lower_max_lease_alone_lowers_the_defaulted_visibilities() {
        let config = QueueConfig::default().max_lease(Duration::from_secs(60)).resolved();
        assert_eq!(config.max_lease, Duration::from_secs(60));
        assert_eq!(config.max_visibility, Duration::from_secs(60));
        // 30 s is already within the cap: unchanged.
        assert_eq!(config.visibility_timeout, Duration::from_secs(30));
        config.validate().unwrap();

        let tiny = QueueConfig::default().max_lease(Duration::from_secs(10)).resolved();
        assert_eq!((tiny.max_visibility, tiny.visibility_timeout), (Duration::from_secs(10), Duration::from_secs(10)));
        tiny.validate().unwrap();
    }

    #[test]
    fn explicit_values_that_disagree_with_max_lease_are_still_refused() {
        let both = QueueConfig::default()
            .max_lease(Duration::from_secs(60))
            .max_visibility(Duration::from_secs(120))
            .resolved();
        assert_eq!(both.max_visibility, Duration::from_secs(120), "an explicit value is never rewritten");
        assert!(matches!(both.validate(), Err(Error::InvalidConfig { field: "max_visibility", .. })));

        let visibility = QueueConfig::default()
            .max_lease(Duration::from_secs(60))
            .visibility_timeout(Duration::from_secs(90))
            .resolved();
        assert!(matches!(visibility.validate(), Err(Error::InvalidConfig { field: "visibility_timeout", .. })));
    }

    #[test]
    fn names() {
        for good in ["a", "jobs-dlq", "A_9", &"x".repeat(80)] {
            validate_name(good).unwrap();
        }
        for bad in ["", "has space", "dot.name", "ünï", &"x".repeat(81), "slash/"] {
            assert!(matches!(validate_name(bad), Err(Error::InvalidQueueName { .. })), "{bad:?}");
        }
    }
}
