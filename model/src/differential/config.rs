//! The `config` check: any config and any name go through `create_queue`
//! without a panic; the engine accepts exactly the configs the model's rules
//! accept and names the same first broken rule; a refused create leaves no
//! trace, an accepted one gives a working queue with that config.

use std::time::Duration;

use leaseq::{Backoff, Engine, LateAck, ManualClock, QueueConfig};

#[cfg(feature = "arbitrary")]
use arbitrary::Arbitrary;

use super::run::error_key;
use crate::Model;
use crate::validate::{
    CAPACITY_LIMIT, PAYLOAD_LIMIT, SHARD_LIMIT, YEAR, as_created, config_rule_broken, name_is_valid,
};

/// A duration, often near a limit.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationInput {
    /// Any duration.
    Raw {
        /// Seconds.
        secs: u64,
        /// Nanoseconds (`% 1e9`).
        nanos: u32,
    },
    /// One year plus or minus a few nanoseconds.
    NearYear(i8),
    /// Milliseconds.
    Millis(u16),
    /// Zero.
    Zero,
}

impl DurationInput {
    fn duration(self) -> Duration {
        match self {
            DurationInput::Raw { secs, nanos } => Duration::new(secs, nanos % 1_000_000_000),
            DurationInput::NearYear(delta) => {
                let nanos = Duration::from_nanos(u64::from(delta.unsigned_abs()));
                if delta < 0 { YEAR - nanos } else { YEAR + nanos }
            }
            DurationInput::Millis(ms) => Duration::from_millis(ms.into()),
            DurationInput::Zero => Duration::ZERO,
        }
    }
}

/// A count, often near a limit.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountInput {
    /// Any value.
    Raw(usize),
    /// The field's limit plus or minus a little.
    NearLimit(i8),
    /// A small value.
    Small(u8),
}

impl CountInput {
    fn count(self, limit: usize) -> usize {
        match self {
            CountInput::Raw(n) => n,
            CountInput::NearLimit(delta) => limit.saturating_add_signed(delta.into()),
            CountInput::Small(n) => n.into(),
        }
    }
}

/// A retry backoff.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackoffInput {
    /// None.
    None,
    /// Fixed.
    Fixed(DurationInput),
    /// Exponential.
    Exponential(DurationInput, DurationInput, bool),
}

/// One input of the `config` target.
#[cfg_attr(feature = "arbitrary", derive(Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigInput {
    /// The queue's name.
    pub name: String,
    /// Fields of `QueueConfig`.
    pub visibility_timeout: DurationInput,
    /// `max_visibility`.
    pub max_visibility: DurationInput,
    /// `max_lease`.
    pub max_lease: DurationInput,
    /// `max_delay`.
    pub max_delay: DurationInput,
    /// `max_receives`.
    pub max_receives: Option<u32>,
    /// `dead_letter_queue` (`"dlq"` exists already).
    pub dead_letter_queue: Option<String>,
    /// `LateAck::Reject`.
    pub reject_late_acks: bool,
    /// `backoff`.
    pub backoff: BackoffInput,
    /// `max_messages`.
    pub max_messages: CountInput,
    /// `max_payload`.
    pub max_payload: CountInput,
    /// `shards`.
    pub shards: Option<CountInput>,
    /// `retention`.
    pub retention: Option<DurationInput>,
}

impl ConfigInput {
    /// The config.
    pub fn config(&self) -> QueueConfig {
        let mut config = QueueConfig::default();
        config.visibility_timeout = self.visibility_timeout.duration();
        config.max_visibility = self.max_visibility.duration();
        config.max_lease = self.max_lease.duration();
        config.max_delay = self.max_delay.duration();
        config.max_receives = self.max_receives;
        config.dead_letter_queue = self.dead_letter_queue.clone();
        config.late_ack = if self.reject_late_acks { LateAck::Reject } else { LateAck::AcceptIfNotRedelivered };
        config.backoff = match self.backoff {
            BackoffInput::None => Backoff::None,
            BackoffInput::Fixed(d) => Backoff::Fixed(d.duration()),
            BackoffInput::Exponential(base, max, jitter) => {
                Backoff::Exponential { base: base.duration(), max: max.duration(), jitter }
            }
        };
        config.max_messages = self.max_messages.count(CAPACITY_LIMIT);
        config.max_payload = self.max_payload.count(PAYLOAD_LIMIT);
        config.shards = self.shards.map(|s| s.count(SHARD_LIMIT));
        config.retention = self.retention.map(DurationInput::duration);
        config
    }
}

/// Runs one input; `Err` describes a finding.
pub fn check(input: &ConfigInput) -> Result<(), String> {
    let config = input.config();
    let name = input.name.as_str();
    let verdict = config_rule_broken(&config);
    let validated = config.validate();
    if verdict.is_none() != validated.is_ok() {
        return Err(format!("validate says {validated:?}, the rules say {verdict:?} for {config:?}"));
    }

    let engine = Engine::builder().clock(ManualClock::new()).default_shards(1).build();
    let mut model = Model::new(1);
    let dlq_config = QueueConfig::default();
    engine.create_queue("dlq", dlq_config.clone()).map_err(|e| e.to_string())?;
    model.create_queue("dlq", dlq_config).map_err(|e| e.to_string())?;
    let before = engine.list_queues();

    let created = engine.create_queue(name, config.clone());
    let expected = model.create_queue(name, config.clone());
    match (created, expected) {
        (Err(e), Err(m)) => {
            if error_key(&e) != error_key(&m) {
                return Err(format!("create_queue({name:?}) gave {e:?}, the model {m:?}"));
            }
            if engine.list_queues() != before {
                return Err(format!("a refused create_queue({name:?}) changed the queue list: {e}"));
            }
            if name != "dlq" && engine.queue(name).is_ok() {
                return Err(format!("a refused create_queue({name:?}) left a queue behind"));
            }
            if e.to_string().is_empty() {
                return Err(format!("{e:?} prints nothing"));
            }
        }
        (Ok(queue), Ok(_)) => {
            if !name_is_valid(name) || queue.config() != as_created(config.clone()) {
                return Err(format!("created {name:?} with {:?}, asked for {config:?}", queue.config()));
            }
            if engine.queue(name).map(|q| q.name().to_string()).ok().as_deref() != Some(name) {
                return Err(format!("created {name:?} but the engine cannot find it"));
            }
            // The queue works: a one-byte message goes round (when the
            // config allows receiving it with its default visibility).
            let id = queue.send(&b"x"[..]).map_err(|e| format!("send on a fresh queue failed: {e}"))?;
            let got = queue.receive(1).map_err(|e| format!("receive on a fresh queue failed: {e}"))?;
            if got.len() != 1 || got[0].id != id {
                return Err(format!("a fresh queue gave back {got:?} for {id}"));
            }
            // A zero visibility lease is over as it is granted: its ack is late,
            // which `LateAck::Reject` refuses.
            let late_refused = config.visibility_timeout.is_zero() && config.late_ack == LateAck::Reject;
            match queue.ack(&got[0].receipt) {
                Ok(()) if !late_refused => {}
                Err(leaseq::LeaseError::Expired) if late_refused => {}
                other => return Err(format!("ack on a fresh queue gave {other:?}")),
            }
            engine.delete_queue(name).map_err(|e| format!("delete of a fresh queue failed: {e}"))?;
        }
        (e, m) => {
            return Err(format!("create_queue({name:?}, {config:?}): engine {:?}, model {:?}", e.map(|_| ()), m));
        }
    }
    Ok(())
}
