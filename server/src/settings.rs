//! A queue's SQS attributes: what CreateQueue and SetQueueAttributes accept
//! and what GetQueueAttributes reports.
//!
//! Invariant: a `QueueSettings` only ever holds values inside the ranges SQS
//! documents; `apply` checks every attribute of a request before it changes
//! any, so a refused request changes nothing.

use std::collections::{BTreeMap, HashMap};

use leaseq::QueueStats;
use serde::{Deserialize, Serialize};

use crate::address::{name_from_arn, queue_arn};
use crate::error::{ErrorCode, SqsError};

/// Largest message (body plus attributes) a queue may be set to accept.
pub(crate) const MAX_MESSAGE_SIZE: u32 = 262_144;
/// Most messages one ReceiveMessage returns, and most entries in a batch.
pub(crate) const MAX_BATCH_ENTRIES: usize = 10;
/// Longest long poll.
pub(crate) const MAX_WAIT_SECONDS: u32 = 20;
/// Longest visibility timeout (12 hours).
pub(crate) const MAX_VISIBILITY_SECONDS: u32 = 43_200;
/// Longest send delay (15 minutes).
pub(crate) const MAX_DELAY_SECONDS: u32 = 900;

/// Where a queue's failed messages go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Redrive {
    /// The dead-letter queue's name.
    pub(crate) dead_letter_queue: String,
    /// Receives after which a message moves there.
    pub(crate) max_receive_count: u32,
}

/// A queue's attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QueueSettings {
    /// `VisibilityTimeout` (s): the lease of a receive that names none.
    pub(crate) visibility_timeout: u32,
    /// `DelaySeconds`: the delay of a send that names none.
    pub(crate) delay_seconds: u32,
    /// `ReceiveMessageWaitTimeSeconds`: the long poll of a receive that names none.
    pub(crate) receive_wait_seconds: u32,
    /// `MaximumMessageSize` (bytes, body plus attributes).
    pub(crate) maximum_message_size: u32,
    /// `MessageRetentionPeriod` (s): the engine queue's retention
    /// (`QueueConfig::retention`), enforced by the engine.
    pub(crate) message_retention_period: u32,
    /// `RedrivePolicy`.
    pub(crate) redrive: Option<Redrive>,
    /// `CreatedTimestamp` (Unix s).
    pub(crate) created: u64,
    /// `LastModifiedTimestamp` (Unix s).
    pub(crate) last_modified: u64,
    /// Tags (CreateQueue's `tags`, TagQueue): labels SQS gives no meaning,
    /// kept and reported as given.
    #[serde(default)]
    pub(crate) tags: BTreeMap<String, String>,
}

impl QueueSettings {
    /// SQS's defaults, created at `now` (Unix s).
    pub(crate) fn new(now: u64) -> Self {
        QueueSettings {
            visibility_timeout: 30,
            delay_seconds: 0,
            receive_wait_seconds: 0,
            maximum_message_size: MAX_MESSAGE_SIZE,
            message_retention_period: 345_600,
            redrive: None,
            created: now,
            last_modified: now,
            tags: BTreeMap::new(),
        }
    }

    /// These settings with `attributes` applied, or the first invalid one.
    /// `RedrivePolicy` is parsed here; whether it may change is the caller's
    /// call (the engine fixes it at creation).
    pub(crate) fn with(&self, attributes: &HashMap<String, String>) -> Result<QueueSettings, SqsError> {
        let mut next = self.clone();
        // Sorted, so the error for a request with several bad values is stable.
        let mut names: Vec<&String> = attributes.keys().collect();
        names.sort();
        for name in names {
            let value = attributes[name].as_str();
            match name.as_str() {
                "VisibilityTimeout" => next.visibility_timeout = integer(name, value, 0, MAX_VISIBILITY_SECONDS)?,
                "DelaySeconds" => next.delay_seconds = integer(name, value, 0, MAX_DELAY_SECONDS)?,
                "ReceiveMessageWaitTimeSeconds" => {
                    next.receive_wait_seconds = integer(name, value, 0, MAX_WAIT_SECONDS)?
                }
                "MaximumMessageSize" => next.maximum_message_size = integer(name, value, 1024, MAX_MESSAGE_SIZE)?,
                "MessageRetentionPeriod" => next.message_retention_period = integer(name, value, 60, 1_209_600)?,
                "RedrivePolicy" => next.redrive = parse_redrive(value)?,
                "FifoQueue" if value == "false" => {}
                "FifoQueue" => return Err(fifo_unsupported()),
                "ContentBasedDeduplication" | "DeduplicationScope" | "FifoThroughputLimit" => {
                    return Err(SqsError::new(
                        ErrorCode::InvalidAttributeName,
                        format!("{name} applies to FIFO queues, which leaseq-server does not support."),
                    ));
                }
                "Policy"
                | "KmsMasterKeyId"
                | "KmsDataKeyReusePeriodSeconds"
                | "SqsManagedSseEnabled"
                | "RedriveAllowPolicy" => {
                    return Err(SqsError::new(
                        ErrorCode::InvalidAttributeName,
                        format!("The attribute {name} is not supported by leaseq-server (docs/server.md)."),
                    ));
                }
                _ => {
                    return Err(SqsError::new(
                        ErrorCode::InvalidAttributeName,
                        format!("Unknown or read-only attribute {name}."),
                    ));
                }
            }
        }
        Ok(next)
    }

    /// The attributes `names` asks for (`All` for every one), with the
    /// message counts from `stats`. Unknown names are `InvalidAttributeName`.
    pub(crate) fn report(
        &self,
        queue: &str,
        names: &[String],
        stats: &QueueStats,
    ) -> Result<BTreeMap<String, String>, SqsError> {
        let all = names.iter().any(|n| n == "All");
        let mut out = BTreeMap::new();
        for name in ALL_ATTRIBUTES {
            if !(all || names.iter().any(|n| n == name)) {
                continue;
            }
            let value = match *name {
                "VisibilityTimeout" => self.visibility_timeout.to_string(),
                "DelaySeconds" => self.delay_seconds.to_string(),
                "ReceiveMessageWaitTimeSeconds" => self.receive_wait_seconds.to_string(),
                "MaximumMessageSize" => self.maximum_message_size.to_string(),
                "MessageRetentionPeriod" => self.message_retention_period.to_string(),
                "RedrivePolicy" => match &self.redrive {
                    Some(redrive) => redrive_json(redrive),
                    None => continue,
                },
                "QueueArn" => queue_arn(queue),
                "CreatedTimestamp" => self.created.to_string(),
                "LastModifiedTimestamp" => self.last_modified.to_string(),
                "ApproximateNumberOfMessages" => stats.ready.to_string(),
                "ApproximateNumberOfMessagesNotVisible" => stats.in_flight.to_string(),
                "ApproximateNumberOfMessagesDelayed" => stats.delayed.to_string(),
                _ => continue,
            };
            out.insert(name.to_string(), value);
        }
        if let Some(unknown) = names.iter().find(|n| *n != "All" && !ALL_ATTRIBUTES.contains(&n.as_str())) {
            return Err(SqsError::new(ErrorCode::InvalidAttributeName, format!("Unknown Attribute {unknown}.")));
        }
        Ok(out)
    }
}

/// Every attribute name GetQueueAttributes knows; the ones leaseq-server does
/// not support (Policy, KMS, FIFO) are accepted and never reported.
const ALL_ATTRIBUTES: &[&str] = &[
    "VisibilityTimeout",
    "DelaySeconds",
    "ReceiveMessageWaitTimeSeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "RedrivePolicy",
    "QueueArn",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "Policy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "RedriveAllowPolicy",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
];

/// The error for any FIFO request.
pub(crate) fn fifo_unsupported() -> SqsError {
    SqsError::invalid("FIFO queues are not supported by leaseq-server; create a standard queue (docs/server.md).")
}

/// Most tags one queue holds (SQS's quota).
pub(crate) const MAX_TAGS: usize = 50;

/// `current` with `adding` merged in (a key given again takes the new
/// value), if every tag keeps SQS's rules: keys of 1 to 128 characters not
/// starting with `aws:`, values of at most 256, letters, digits, white space
/// and `_ . : / = + - @` only, and at most `MAX_TAGS` in all.
pub(crate) fn with_tags(
    current: &BTreeMap<String, String>,
    adding: &HashMap<String, String>,
) -> Result<BTreeMap<String, String>, SqsError> {
    let allowed = |text: &str| text.chars().all(|c| c.is_alphanumeric() || c.is_whitespace() || "_.:/=+-@".contains(c));
    let invalid = |why: String| SqsError::invalid(format!("Invalid tag: {why}."));
    for (key, value) in adding {
        let shown: String = key.chars().take(128).collect();
        if key.is_empty() || key.chars().count() > 128 {
            return Err(invalid(format!("the key '{shown}' must be 1 to 128 characters")));
        }
        if key.to_ascii_lowercase().starts_with("aws:") {
            return Err(invalid(format!("the key '{shown}' starts with the reserved prefix aws:")));
        }
        if value.chars().count() > 256 {
            return Err(invalid(format!("the value of '{shown}' is longer than 256 characters")));
        }
        if !allowed(key) || !allowed(value) {
            return Err(invalid(format!(
                "'{shown}' has a character other than letters, digits, white space and _ . : / = + - @"
            )));
        }
    }
    let mut next = current.clone();
    next.extend(adding.iter().map(|(k, v)| (k.clone(), v.clone())));
    if next.len() > MAX_TAGS {
        return Err(invalid(format!("a queue holds at most {MAX_TAGS} tags; this would make {}", next.len())));
    }
    Ok(next)
}

/// The `RedrivePolicy` JSON SQS reports.
pub(crate) fn redrive_json(redrive: &Redrive) -> String {
    serde_json::json!({
        "deadLetterTargetArn": queue_arn(&redrive.dead_letter_queue),
        "maxReceiveCount": redrive.max_receive_count,
    })
    .to_string()
}

fn parse_redrive(value: &str) -> Result<Option<Redrive>, SqsError> {
    let invalid = |reason: &str| {
        SqsError::new(
            ErrorCode::InvalidAttributeValue,
            format!("Value {value} for parameter RedrivePolicy is invalid. Reason: {reason}."),
        )
    };
    if value.is_empty() {
        return Ok(None);
    }
    let json: serde_json::Value = serde_json::from_str(value).map_err(|_| invalid("it is not JSON"))?;
    let arn =
        json.get("deadLetterTargetArn").and_then(|v| v.as_str()).ok_or_else(|| invalid("no deadLetterTargetArn"))?;
    let count = match json.get("maxReceiveCount") {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse::<u64>().ok(),
        _ => return Err(invalid("no maxReceiveCount")),
    };
    let max_receive_count = match count {
        Some(n @ 1..=1000) => n as u32,
        _ => return Err(invalid("maxReceiveCount must be an integer from 1 to 1000")),
    };
    Ok(Some(Redrive { dead_letter_queue: name_from_arn(arn)?.to_string(), max_receive_count }))
}

/// An integer attribute in `min..=max`.
fn integer(name: &str, value: &str, min: u32, max: u32) -> Result<u32, SqsError> {
    let parsed = if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        None
    } else {
        value.parse::<u32>().ok().filter(|v| (min..=max).contains(v))
    };
    parsed.ok_or_else(|| {
        SqsError::new(
            ErrorCode::InvalidAttributeValue,
            format!("Invalid value for the parameter {name}: {value} (an integer from {min} to {max})."),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn accepts_values_in_range_and_reports_them() {
        let s = QueueSettings::new(100)
            .with(&attrs(&[
                ("VisibilityTimeout", "5"),
                ("DelaySeconds", "900"),
                (
                    "RedrivePolicy",
                    r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"3"}"#,
                ),
            ]))
            .unwrap();
        assert_eq!(s.visibility_timeout, 5);
        assert_eq!(s.redrive, Some(Redrive { dead_letter_queue: "dlq".into(), max_receive_count: 3 }));
        let stats = leaseq::Engine::new().create_queue("q", leaseq::QueueConfig::default()).unwrap().stats();
        let report = s.report("q", &["All".into()], &stats).unwrap();
        assert_eq!(report["DelaySeconds"], "900");
        assert_eq!(report["QueueArn"], "arn:aws:sqs:us-east-1:000000000000:q");
        assert!(report["RedrivePolicy"].contains("\"maxReceiveCount\":3"));
    }

    #[test]
    fn refuses_out_of_range_unknown_and_fifo_attributes() {
        let base = QueueSettings::new(0);
        for (name, value, code) in [
            ("VisibilityTimeout", "43201", ErrorCode::InvalidAttributeValue),
            ("DelaySeconds", "-1", ErrorCode::InvalidAttributeValue),
            ("MaximumMessageSize", "1023", ErrorCode::InvalidAttributeValue),
            ("ReceiveMessageWaitTimeSeconds", "abc", ErrorCode::InvalidAttributeValue),
            ("RedrivePolicy", "{", ErrorCode::InvalidAttributeValue),
            ("RedrivePolicy", r#"{"deadLetterTargetArn":"x","maxReceiveCount":1}"#, ErrorCode::InvalidAttributeValue),
            ("Color", "red", ErrorCode::InvalidAttributeName),
            ("QueueArn", "x", ErrorCode::InvalidAttributeName),
            ("FifoQueue", "true", ErrorCode::InvalidParameterValue),
        ] {
            assert_eq!(base.with(&attrs(&[(name, value)])).unwrap_err().code, code, "{name}={value}");
        }
        let stats = leaseq::Engine::new().create_queue("q", leaseq::QueueConfig::default()).unwrap().stats();
        let err = base.report("q", &["Nope".into()], &stats).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidAttributeName);
    }
}
