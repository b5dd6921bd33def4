//! How a queue is named on the wire: its URL and its ARN.
//!
//! Invariant: a URL or ARN this module formats parses back to the same queue
//! name; anything else is refused with `InvalidAddress` (or, for a well-formed
//! address of another account, `QueueDoesNotExist`) rather than guessed at.

use crate::error::{ErrorCode, SqsError};

/// The account id in every URL and ARN (leaseq-server has one account).
pub const ACCOUNT: &str = "000000000000";
/// The region in every ARN.
pub const REGION: &str = "us-east-1";

/// `http://<host>/000000000000/<name>`.
pub(crate) fn queue_url(host: &str, name: &str) -> String {
    format!("http://{host}/{ACCOUNT}/{name}")
}

/// `arn:aws:sqs:us-east-1:000000000000:<name>`.
pub(crate) fn queue_arn(name: &str) -> String {
    format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}")
}

/// The queue name in a queue URL (any scheme and host; the path must be
/// `/<account>/<name>`).
pub(crate) fn name_from_url(url: &str) -> Result<&str, SqsError> {
    let invalid = || SqsError::new(ErrorCode::InvalidAddress, format!("The address {url} is not a valid queue URL."));
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = rest.find('/').map(|i| &rest[i + 1..]).ok_or_else(invalid)?;
    let (account, name) = path.trim_end_matches('/').split_once('/').ok_or_else(invalid)?;
    if name.is_empty() || name.contains('/') {
        return Err(invalid());
    }
    if account != ACCOUNT {
        return Err(SqsError::no_queue());
    }
    Ok(name)
}

/// The queue name in a queue ARN.
pub(crate) fn name_from_arn(arn: &str) -> Result<&str, SqsError> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        ["arn", "aws", "sqs", region, account, name] if !name.is_empty() => {
            let elsewhere = |what: &str| {
                SqsError::new(
                    ErrorCode::InvalidAttributeValue,
                    format!("Value {arn} for deadLetterTargetArn is invalid. Reason: it names another {what}."),
                )
            };
            if *account != ACCOUNT {
                return Err(elsewhere("account"));
            }
            if *region != REGION {
                return Err(elsewhere("region (this server is us-east-1)"));
            }
            Ok(name)
        }
        _ => Err(SqsError::new(
            ErrorCode::InvalidAttributeValue,
            format!("Value {arn} for deadLetterTargetArn is invalid. Reason: not an SQS queue ARN."),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_arns_round_trip() {
        assert_eq!(name_from_url(&queue_url("127.0.0.1:9324", "jobs")), Ok("jobs"));
        assert_eq!(name_from_url("https://sqs.us-east-1.amazonaws.com/000000000000/jobs"), Ok("jobs"));
        assert_eq!(name_from_arn(&queue_arn("dlq")), Ok("dlq"));
    }

    #[test]
    fn bad_addresses_are_refused() {
        for url in ["", "jobs", "http://host", "http://host/000000000000/", "http://host/000000000000/a/b"] {
            assert_eq!(name_from_url(url).unwrap_err().code, ErrorCode::InvalidAddress, "{url}");
        }
        assert_eq!(name_from_url("http://h/123456789012/jobs").unwrap_err().code, ErrorCode::QueueDoesNotExist);
        assert!(name_from_arn("arn:aws:sqs:us-east-1:000000000000").is_err());
        assert!(name_from_arn("arn:aws:sqs:us-east-1:123456789012:q").is_err());
        let other_region = name_from_arn("arn:aws:sqs:eu-west-1:000000000000:q").unwrap_err();
        assert!(other_region.message.contains("another region"), "{}", other_region.message);
        assert!(name_from_arn("arn:aws-cn:sqs:us-east-1:000000000000:q").is_err());
    }
}
