//! SQS errors as the JSON protocol sends them.
//!
//! Invariant: every failure a request can meet becomes one `SqsError` with an
//! SQS error code, so a client always gets HTTP 4xx/5xx with a JSON body
//! `{"__type": "com.amazonaws.sqs#<Shape>", "message": ...}` and the
//! `x-amzn-query-error: <query code>;<Sender|Receiver>` header the SDKs read
//! for the query-compatible code; nothing panics or leaves a connection
//! hanging.

use std::fmt;

use leaseq::{Error, LeaseError};

/// The SQS error codes this server returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// `QueueDoesNotExist`.
    QueueDoesNotExist,
    /// `QueueNameExists` (query code `QueueAlreadyExists`).
    QueueNameExists,
    /// `InvalidAddress`: a queue URL that cannot be parsed.
    InvalidAddress,
    /// `InvalidAttributeName`.
    InvalidAttributeName,
    /// `InvalidAttributeValue`.
    InvalidAttributeValue,
    /// `InvalidMessageContents`.
    InvalidMessageContents,
    /// `ReceiptHandleIsInvalid`.
    ReceiptHandleIsInvalid,
    /// `MessageNotInflight`.
    MessageNotInflight,
    /// `TooManyEntriesInBatchRequest`.
    TooManyEntriesInBatchRequest,
    /// `EmptyBatchRequest`.
    EmptyBatchRequest,
    /// `BatchEntryIdsNotDistinct`.
    BatchEntryIdsNotDistinct,
    /// `InvalidBatchEntryId`.
    InvalidBatchEntryId,
    /// `BatchRequestTooLong`.
    BatchRequestTooLong,
    /// `OverLimit`: the queue holds its maximum number of messages.
    OverLimit,
    /// `UnsupportedOperation`.
    UnsupportedOperation,
    /// `InvalidParameterValue` (a common SQS error).
    InvalidParameterValue,
    /// `MissingParameter` (a common SQS error).
    MissingParameter,
    /// Unknown `X-Amz-Target`.
    UnknownOperation,
    /// The body is not JSON of the expected shape.
    Serialization,
    /// The request body is above the server's limit.
    RequestTooLarge,
    /// The engine could not do its part (storage failure): the server's fault.
    InternalFailure,
    /// No `Authorization` header where credentials are configured.
    MissingAuthenticationToken,
    /// An `Authorization` header that is not a complete SigV4 one.
    IncompleteSignature,
    /// An unknown access key id.
    InvalidClientTokenId,
    /// A signature that does not verify.
    SignatureDoesNotMatch,
    /// A signature dated too far from the server's clock.
    RequestExpired,
    /// `ResourceNotFoundException` (message move tasks).
    ResourceNotFound,
    /// `ServiceUnavailable` (503): in cluster mode, no serving leader can
    /// be reached now (the SDKs retry it).
    ServiceUnavailable,
}

impl ErrorCode {
    /// The shape name that goes into `__type`.
    pub fn shape(self) -> &'static str {
        use ErrorCode::*;
        match self {
            QueueDoesNotExist => "QueueDoesNotExist",
            QueueNameExists => "QueueNameExists",
            InvalidAddress => "InvalidAddress",
            InvalidAttributeName => "InvalidAttributeName",
            InvalidAttributeValue => "InvalidAttributeValue",
            InvalidMessageContents => "InvalidMessageContents",
            ReceiptHandleIsInvalid => "ReceiptHandleIsInvalid",
            MessageNotInflight => "MessageNotInflight",
            TooManyEntriesInBatchRequest => "TooManyEntriesInBatchRequest",
            EmptyBatchRequest => "EmptyBatchRequest",
            BatchEntryIdsNotDistinct => "BatchEntryIdsNotDistinct",
            InvalidBatchEntryId => "InvalidBatchEntryId",
            BatchRequestTooLong => "BatchRequestTooLong",
            OverLimit => "OverLimit",
            UnsupportedOperation => "UnsupportedOperation",
            InvalidParameterValue => "InvalidParameterValue",
            MissingParameter => "MissingParameter",
            UnknownOperation => "UnknownOperationException",
            Serialization => "SerializationException",
            RequestTooLarge => "RequestEntityTooLarge",
            InternalFailure => "InternalFailure",
            MissingAuthenticationToken => "MissingAuthenticationToken",
            IncompleteSignature => "IncompleteSignature",
            InvalidClientTokenId => "InvalidClientTokenId",
            SignatureDoesNotMatch => "SignatureDoesNotMatch",
            RequestExpired => "RequestExpired",
            ResourceNotFound => "ResourceNotFoundException",
            ServiceUnavailable => "ServiceUnavailable",
        }
    }

    /// The query-protocol code (what `x-amzn-query-error` carries and what
    /// the SDKs match modeled errors on).
    pub fn query_code(self) -> &'static str {
        use ErrorCode::*;
        match self {
            QueueDoesNotExist => "AWS.SimpleQueueService.NonExistentQueue",
            QueueNameExists => "QueueAlreadyExists",
            MessageNotInflight => "AWS.SimpleQueueService.MessageNotInflight",
            TooManyEntriesInBatchRequest => "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            EmptyBatchRequest => "AWS.SimpleQueueService.EmptyBatchRequest",
            BatchEntryIdsNotDistinct => "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            InvalidBatchEntryId => "AWS.SimpleQueueService.InvalidBatchEntryId",
            BatchRequestTooLong => "AWS.SimpleQueueService.BatchRequestTooLong",
            UnsupportedOperation => "AWS.SimpleQueueService.UnsupportedOperation",
            UnknownOperation => "InvalidAction",
            other => other.shape(),
        }
    }

    /// Whether the caller (`Sender`) or the server (`Receiver`) is at fault.
    pub fn is_sender_fault(self) -> bool {
        !matches!(self, ErrorCode::InternalFailure | ErrorCode::ServiceUnavailable)
    }

    /// The HTTP status SQS answers with.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::RequestTooLarge => 413,
            ErrorCode::InternalFailure => 500,
            ErrorCode::ServiceUnavailable => 503,
            ErrorCode::MissingAuthenticationToken
            | ErrorCode::InvalidClientTokenId
            | ErrorCode::SignatureDoesNotMatch => 403,
            _ => 400,
        }
    }
}

/// One failed request (or one failed batch entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsError {
    /// The SQS code.
    pub code: ErrorCode,
    /// A sentence a person can act on.
    pub message: String,
    /// The request provably reached no engine (a cluster node refused or
    /// could not forward it before anything was applied): the answer then
    /// carries [`NOT_APPLIED_HEADER`], and a client may retry it without
    /// risking a second effect.
    pub not_applied: bool,
}

/// The header of an error answer whose request provably changed nothing
/// (`SqsError::not_applied`), value `true`.
pub const NOT_APPLIED_HEADER: &str = "x-leaseq-not-applied";

impl SqsError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        SqsError { code, message: message.into(), not_applied: false }
    }

    /// `ServiceUnavailable` for a request that provably reached no engine.
    pub fn unavailable_not_applied(message: impl Into<String>) -> Self {
        SqsError { not_applied: true, ..Self::new(ErrorCode::ServiceUnavailable, message) }
    }

    /// `InvalidParameterValue`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidParameterValue, message)
    }

    /// `MissingParameter` for `name`.
    pub fn missing(name: &str) -> Self {
        Self::new(ErrorCode::MissingParameter, format!("The request must contain the parameter {name}."))
    }

    /// `QueueDoesNotExist`.
    pub fn no_queue() -> Self {
        Self::new(ErrorCode::QueueDoesNotExist, "The specified queue does not exist.")
    }

    /// The JSON body of the error response.
    pub fn body(&self) -> String {
        serde_json::json!({
            "__type": format!("com.amazonaws.sqs#{}", self.code.shape()),
            "message": self.message,
        })
        .to_string()
    }

    /// The `x-amzn-query-error` header value.
    pub fn query_header(&self) -> String {
        let fault = if self.code.is_sender_fault() { "Sender" } else { "Receiver" };
        format!("{};{fault}", self.code.query_code())
    }
}

impl fmt::Display for SqsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.shape(), self.message)
    }
}

impl std::error::Error for SqsError {}

impl From<LeaseError> for SqsError {
    fn from(e: LeaseError) -> Self {
        match e {
            LeaseError::Stale => SqsError::new(
                ErrorCode::ReceiptHandleIsInvalid,
                "The receipt handle belongs to an earlier receive of this message (it was received again since, \
                 or deleted); use the newest receipt handle.",
            ),
            LeaseError::InvalidReceipt(reason) => {
                SqsError::new(ErrorCode::ReceiptHandleIsInvalid, format!("The receipt handle is not valid: {reason}."))
            }
            LeaseError::Expired => SqsError::new(
                ErrorCode::MessageNotInflight,
                "The message's visibility timeout has already run out; it is no longer in flight.",
            ),
            LeaseError::CapExceeded { max_lease } => SqsError::invalid(format!(
                "Value for parameter VisibilityTimeout is invalid. Reason: the total visibility timeout of one \
                 receive cannot exceed {} seconds.",
                max_lease.as_secs()
            )),
            LeaseError::VisibilityTooLong { requested, max } => SqsError::invalid(format!(
                "Value {} for parameter VisibilityTimeout is invalid. Reason: must be at most {} seconds.",
                requested.as_secs(),
                max.as_secs()
            )),
            LeaseError::DelayTooLong { requested, max } => SqsError::invalid(format!(
                "Value {} for parameter DelaySeconds is invalid. Reason: must be at most {} seconds.",
                requested.as_secs(),
                max.as_secs()
            )),
            LeaseError::NoDeadLetterQueue => SqsError::invalid("The queue has no dead-letter queue."),
            LeaseError::DeadLetterQueueFull { name } => {
                SqsError::new(ErrorCode::OverLimit, format!("The dead-letter queue {name} is full."))
            }
            LeaseError::QueueDeleted => SqsError::no_queue(),
            LeaseError::InvalidBatchSize { requested, max } => SqsError::new(
                ErrorCode::TooManyEntriesInBatchRequest,
                format!("The batch request contains {requested} entries; at most {max} are allowed."),
            ),
            LeaseError::Storage { reason } => {
                SqsError::new(ErrorCode::InternalFailure, format!("The server could not write its log: {reason}."))
            }
            // The engine's errors are non-exhaustive: one added after this
            // server was written is reported as the server's own failure.
            other => SqsError::new(ErrorCode::InternalFailure, format!("The engine refused the call: {other}.")),
        }
    }
}

impl From<Error> for SqsError {
    fn from(e: Error) -> Self {
        match e {
            Error::QueueNotFound { .. } | Error::QueueDeleted { .. } => SqsError::no_queue(),
            Error::QueueAlreadyExists { name } => {
                SqsError::new(ErrorCode::QueueNameExists, format!("A queue named {name} already exists."))
            }
            Error::InvalidQueueName { name, reason } => {
                SqsError::invalid(format!("Value '{name}' for parameter QueueName is invalid. Reason: {reason}."))
            }
            Error::DeadLetterQueueNotFound { name } => SqsError::new(
                ErrorCode::InvalidAttributeValue,
                format!(
                    "The value of parameter RedrivePolicy is invalid. Reason: dead-letter target '{name}' does not exist."
                ),
            ),
            Error::DeadLetterCycle { path } => SqsError::new(
                ErrorCode::InvalidAttributeValue,
                format!(
                    "The value of parameter RedrivePolicy is invalid. Reason: it makes a cycle: {}.",
                    path.join(" -> ")
                ),
            ),
            Error::QueueInUse { name, used_by } => SqsError::invalid(format!(
                "Queue {name} is the dead-letter queue of {used_by}; delete {used_by} first (leaseq keeps \
                 dead-letter targets alive while a queue redrives into them)."
            )),
            Error::QueueFull { capacity, .. } => SqsError::new(
                ErrorCode::OverLimit,
                format!("The queue holds its maximum of {capacity} messages; receive and delete some first."),
            ),
            Error::MessageTooLarge { size, max } => {
                SqsError::invalid(format!("Message of {size} bytes is above the limit of {max} bytes."))
            }
            Error::VisibilityTooLong { requested, max } => {
                SqsError::from(LeaseError::VisibilityTooLong { requested, max })
            }
            Error::DelayTooLong { requested, max } => SqsError::from(LeaseError::DelayTooLong { requested, max }),
            Error::InvalidBatchSize { requested, max } => {
                SqsError::invalid(format!("Batch of {requested} is outside 1..={max}."))
            }
            Error::InvalidConfig { field, reason } => {
                SqsError::new(ErrorCode::InvalidAttributeValue, format!("Invalid value for '{field}': {reason}."))
            }
            Error::Lease(lease) => SqsError::from(lease),
            Error::Storage { reason, .. } => {
                SqsError::new(ErrorCode::InternalFailure, format!("The server could not write its log: {reason}."))
            }
            other => SqsError::new(ErrorCode::InternalFailure, other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_queue_has_the_shape_the_sdks_parse() {
        let e = SqsError::no_queue();
        let body: serde_json::Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(body["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
        assert_eq!(body["message"], "The specified queue does not exist.");
        assert_eq!(e.query_header(), "AWS.SimpleQueueService.NonExistentQueue;Sender");
        assert_eq!(e.code.status(), 400);
    }

    #[test]
    fn storage_failures_are_the_servers_fault() {
        let e = SqsError::from(LeaseError::Storage { reason: "disk full".into() });
        assert_eq!(e.code.status(), 500);
        assert!(e.query_header().ends_with(";Receiver"));
    }
}
