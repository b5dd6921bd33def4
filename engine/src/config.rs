//! Queue configuration and the validation every queue passes before it exists.
//!
//! Invariant: a queue is created only from a config `validate` accepted, so
//! the engine never meets an out-of-range limit at run time.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::error::Error;

/// What `ack` does with a receipt whose lease ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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

/// A queue's configuration. `QueueConfig::default()` matches common hosted
/// queues: 30 s visibility, 12 h lease cap, 256 KiB payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// Visibility of a receive that does not name one.
    pub visibility_timeout: Duration,
    /// Largest visibility a receive or extension may ask for.
    pub max_visibility: Duration,
    /// Longest total lease of one attempt, from receive through every
    /// extension; an extension past it is `LeaseError::CapExceeded`.
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
        }
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig { field, reason: reason.into() }
}

impl QueueConfig {
    /// Checks every field; the error names the first one out of range.
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
        Ok(())
    }
}

/// Checks a queue name: 1 to 80 ASCII letters, digits, `-` or `_`.
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
            (QueueConfig { visibility_timeout: Duration::from_secs(13 * 3600), ..base.clone() }, "visibility_timeout"),
            (
                QueueConfig {
                    max_lease: Duration::ZERO,
                    max_visibility: Duration::ZERO,
                    visibility_timeout: Duration::ZERO,
                    ..base.clone()
                },
                "max_lease",
            ),
            (QueueConfig { max_visibility: Duration::from_secs(13 * 3600), ..base.clone() }, "max_visibility"),
            (
                QueueConfig { max_receives: Some(0), dead_letter_queue: Some("d".into()), ..base.clone() },
                "max_receives",
            ),
            (QueueConfig { max_receives: Some(3), ..base.clone() }, "max_receives"),
            (QueueConfig { max_messages: 0, ..base.clone() }, "max_messages"),
            (QueueConfig { max_payload: 0, ..base.clone() }, "max_payload"),
            (QueueConfig { shards: Some(0), ..base.clone() }, "shards"),
            (QueueConfig { shards: Some(MAX_SHARDS + 1), ..base.clone() }, "shards"),
            (QueueConfig { max_delay: Duration::MAX, ..base.clone() }, "max_delay"),
            (QueueConfig { backoff: Backoff::Fixed(Duration::from_secs(3600)), ..base.clone() }, "backoff"),
            (
                QueueConfig {
                    backoff: Backoff::Exponential { base: Duration::ZERO, max: Duration::from_secs(1), jitter: false },
                    ..base.clone()
                },
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
    fn names() {
        for good in ["a", "jobs-dlq", "A_9", &"x".repeat(80)] {
            validate_name(good).unwrap();
        }
        for bad in ["", "has space", "dot.name", "ünï", &"x".repeat(81), "slash/"] {
            assert!(matches!(validate_name(bad), Err(Error::InvalidQueueName { .. })), "{bad:?}");
        }
    }
}
