//! What makes a queue name and a queue config acceptable, written as the
//! ordered list of rules the contract states.
//!
//! Invariant: `config_rule_broken` names the first rule a config breaks, in
//! the order the rules are listed here; the engine's `QueueConfig::validate`
//! must agree on the verdict and on that first field. Nothing here calls the
//! engine's own validation.

use std::time::Duration;

use leaseq::{Backoff, QueueConfig};

/// Longest duration setting (one year).
pub const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
/// Most messages a queue may hold.
pub const CAPACITY_LIMIT: usize = 1 << 31;
/// Largest payload limit (1 GiB).
pub const PAYLOAD_LIMIT: usize = 1 << 30;
/// Most shards.
pub const SHARD_LIMIT: usize = 256;
/// Longest queue name.
pub const NAME_LIMIT: usize = 80;

/// Whether `name` is 1 to 80 ASCII letters, digits, `-` or `_`.
pub fn name_is_valid(name: &str) -> bool {
    (1..=NAME_LIMIT).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// How a config breaks the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    /// `QueueConfig` field `0` is out of range.
    Field(&'static str),
    /// The dead-letter queue's name is not a valid name.
    DeadLetterName(String),
}

/// The config a queue is created with. Rule 0, applied before the others: a
/// `max_visibility` still at its default value is lowered to a smaller
/// `max_lease`, then a `visibility_timeout` still at its default to that
/// `max_visibility` (lowering only the cap means the cap).
pub fn as_created(mut config: QueueConfig) -> QueueConfig {
    let default = QueueConfig::default();
    if config.max_visibility == default.max_visibility {
        config.max_visibility = config.max_visibility.min(config.max_lease);
    }
    if config.visibility_timeout == default.visibility_timeout {
        config.visibility_timeout = config.visibility_timeout.min(config.max_visibility);
    }
    config
}

/// The first rule `config` breaks, or `None` if it is valid.
pub fn config_rule_broken(config: &QueueConfig) -> Option<Broken> {
    let field = |name| Some(Broken::Field(name));
    // 1. No duration setting above one year.
    for (name, value) in [
        ("visibility_timeout", config.visibility_timeout),
        ("max_visibility", config.max_visibility),
        ("max_lease", config.max_lease),
        ("max_delay", config.max_delay),
    ] {
        if value > YEAR {
            return field(name);
        }
    }
    // 2. A lease cap of zero would make every lease over before it starts.
    if config.max_lease.is_zero() {
        return field("max_lease");
    }
    // 3. visibility_timeout <= max_visibility <= max_lease.
    if config.visibility_timeout > config.max_visibility {
        return field("visibility_timeout");
    }
    if config.max_visibility > config.max_lease {
        return field("max_visibility");
    }
    // 4. A retry ceiling is at least 1 and needs somewhere to send messages.
    if config.max_receives == Some(0) || (config.max_receives.is_some() && config.dead_letter_queue.is_none()) {
        return field("max_receives");
    }
    // 5. The dead-letter queue's name follows the naming rule.
    if let Some(dlq) = &config.dead_letter_queue {
        if !name_is_valid(dlq) {
            return Some(Broken::DeadLetterName(dlq.clone()));
        }
    }
    // 6. Backoff never waits longer than max_delay; exponential needs 0 < base <= max.
    let backoff_ok = match config.backoff {
        Backoff::None => true,
        Backoff::Fixed(d) => d <= config.max_delay,
        Backoff::Exponential { base, max, .. } => !base.is_zero() && base <= max && max <= config.max_delay,
        other => panic!("the model does not know backoff {other:?}"),
    };
    if !backoff_ok {
        return field("backoff");
    }
    // 7. Capacity, payload limit and shard count within their ranges.
    if !(1..=CAPACITY_LIMIT).contains(&config.max_messages) {
        return field("max_messages");
    }
    if !(1..=PAYLOAD_LIMIT).contains(&config.max_payload) {
        return field("max_payload");
    }
    if config.shards.is_some_and(|s| !(1..=SHARD_LIMIT).contains(&s)) {
        return field("shards");
    }
    // 8. A retention is above zero and at most one year.
    if config.retention.is_some_and(|r| r.is_zero() || r > YEAR) {
        return field("retention");
    }
    None
}
