//! Typed errors. Invariant: an operation that returns an error changed nothing.
//!
//! Each variant carries what a caller needs to act (the limit that was hit, the
//! name that was wrong), and a rejected send hands its payload back.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

/// Why a receipt could not be used on this queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The text is not a receipt this library wrote.
    Malformed {
        /// What was wrong with it.
        reason: &'static str,
    },
    /// The receipt was issued by another engine instance.
    WrongEngine,
    /// The receipt was issued by another queue of this engine.
    WrongQueue {
        /// Name of the queue it was presented to.
        presented_to: String,
    },
    /// The receipt's fields do not match its integrity tag: it was altered or
    /// made up.
    Forged,
}

impl fmt::Display for ReceiptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReceiptError::Malformed { reason } => write!(f, "malformed receipt: {reason}"),
            ReceiptError::WrongEngine => {
                write!(f, "receipt was issued by another engine instance; use it with the engine that delivered it")
            }
            ReceiptError::WrongQueue { presented_to } => write!(
                f,
                "receipt was issued by another queue, not '{presented_to}'; use it with the queue that delivered it"
            ),
            ReceiptError::Forged => write!(f, "receipt fails its integrity check: it was altered or made up"),
        }
    }
}

impl std::error::Error for ReceiptError {}

/// Why an operation on a lease (ack, extend, release, dead-letter) failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseError {
    /// The receipt belongs to an earlier attempt (the message was delivered
    /// again, finished, or purged since). It can never complete a newer delivery.
    Stale,
    /// The lease ran out before this call. For `ack` this is only returned under
    /// `LateAck::Reject`; by default a late ack of a message nobody else
    /// received yet is accepted.
    Expired,
    /// The extension would make this attempt's total lease longer than the
    /// queue's `max_lease`.
    CapExceeded {
        /// The queue's cap on one attempt's total lease.
        max_lease: Duration,
    },
    /// The receipt cannot be used here.
    InvalidReceipt(ReceiptError),
    /// The requested visibility is above the queue's `max_visibility`.
    VisibilityTooLong {
        /// What was asked for.
        requested: Duration,
        /// The queue's limit.
        max: Duration,
    },
    /// The requested delay is above the queue's `max_delay`.
    DelayTooLong {
        /// What was asked for.
        requested: Duration,
        /// The queue's limit.
        max: Duration,
    },
    /// `dead_letter` on a queue that has no dead-letter queue configured.
    NoDeadLetterQueue,
    /// The dead-letter queue is at capacity; the message stays leased here.
    /// (Also returned, message kept, for a payload above the dead-letter
    /// queue's `max_payload`, which only a pair of queues restored from a
    /// log written before `create_queue` checked their limits can meet.)
    DeadLetterQueueFull {
        /// Name of the full dead-letter queue.
        name: String,
    },
    /// An `ack_batch` of more than `MAX_BATCH` receipts: refused whole, every
    /// receipt untouched.
    InvalidBatchSize {
        /// How many receipts the batch had.
        requested: usize,
        /// The largest batch allowed.
        max: usize,
    },
    /// The queue was deleted.
    QueueDeleted,
    /// A durable engine could not write this call's record (disk full or an
    /// I/O error). The call took effect in memory, but not on disk: after a
    /// restart the message may be back (an ack) or its delivery count lower
    /// (a receive); at-least-once still holds.
    Storage {
        /// What the file system said.
        reason: String,
    },
}

impl LeaseError {
    /// The receipt belongs to an older attempt.
    #[must_use]
    pub fn is_stale(&self) -> bool {
        matches!(self, LeaseError::Stale)
    }

    /// The lease ran out.
    #[must_use]
    pub fn is_expired(&self) -> bool {
        matches!(self, LeaseError::Expired)
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::Stale => write!(
                f,
                "stale receipt: the message was delivered again or finished since this attempt; \
                 this attempt no longer holds it"
            ),
            LeaseError::Expired => write!(
                f,
                "the lease expired before this call; receive the message again, \
                 or renew earlier with more slack"
            ),
            LeaseError::CapExceeded { max_lease } => write!(
                f,
                "extension refused: one attempt may hold its lease for at most {max_lease:?} (the queue's max_lease)"
            ),
            LeaseError::InvalidReceipt(e) => write!(f, "{e}"),
            LeaseError::VisibilityTooLong { requested, max } => {
                write!(f, "visibility {requested:?} is above the queue's max_visibility {max:?}")
            }
            LeaseError::DelayTooLong { requested, max } => {
                write!(f, "delay {requested:?} is above the queue's max_delay {max:?}")
            }
            LeaseError::NoDeadLetterQueue => {
                write!(f, "this queue has no dead-letter queue; set QueueConfig::dead_letter_queue")
            }
            LeaseError::DeadLetterQueueFull { name } => {
                write!(f, "dead-letter queue '{name}' is full; the message stays leased on its queue")
            }
            LeaseError::InvalidBatchSize { requested, max } => {
                write!(f, "a batch of {requested} receipts is above the limit of {max}; split it")
            }
            LeaseError::QueueDeleted => write!(f, "the queue was deleted"),
            LeaseError::Storage { reason } => write!(
                f,
                "the log could not record this call ({reason}); it took effect in memory only, \
                 so after a restart the message may be delivered again"
            ),
        }
    }
}

impl std::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseError::InvalidReceipt(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ReceiptError> for LeaseError {
    fn from(e: ReceiptError) -> Self {
        LeaseError::InvalidReceipt(e)
    }
}

/// Errors from engine and queue operations.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A queue name must be 1 to 80 ASCII letters, digits, `-` or `_`.
    InvalidQueueName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No queue has this name.
    QueueNotFound {
        /// The name looked up.
        name: String,
    },
    /// A queue with this name exists already.
    QueueAlreadyExists {
        /// The name given.
        name: String,
    },
    /// The configured dead-letter queue does not exist.
    DeadLetterQueueNotFound {
        /// The dead-letter queue's name.
        name: String,
    },
    /// The dead-letter configuration would send messages round in a cycle.
    DeadLetterCycle {
        /// The queues on the cycle, in order.
        path: Vec<String>,
    },
    /// The queue is another queue's dead-letter queue and cannot be deleted.
    QueueInUse {
        /// The queue that was to be deleted.
        name: String,
        /// The queue that dead-letters into it.
        used_by: String,
    },
    /// The queue was deleted.
    QueueDeleted {
        /// Its name.
        name: String,
    },
    /// A `QueueConfig` field is out of range.
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// The queue holds its maximum number of messages. The payload is handed
    /// back.
    QueueFull {
        /// The queue's `max_messages`.
        capacity: usize,
        /// The payload that was not sent.
        payload: Bytes,
    },
    /// The payload is above the queue's `max_payload`.
    MessageTooLarge {
        /// The payload's size in bytes.
        size: usize,
        /// The queue's limit in bytes.
        max: usize,
    },
    /// The requested visibility is above the queue's `max_visibility`.
    VisibilityTooLong {
        /// What was asked for.
        requested: Duration,
        /// The queue's limit.
        max: Duration,
    },
    /// The requested delay is above the queue's `max_delay`.
    DelayTooLong {
        /// What was asked for.
        requested: Duration,
        /// The queue's limit.
        max: Duration,
    },
    /// A batch above `max` messages (a receive: asking for a count outside
    /// `1..=max`); refused whole, nothing changed.
    InvalidBatchSize {
        /// What was asked for (a send batch: how many payloads it had).
        requested: usize,
        /// The largest batch allowed.
        max: usize,
    },
    /// A lease operation failed.
    Lease(LeaseError),
    /// A durable engine could not write to its data dir (disk full or an I/O
    /// error): the call changed nothing. A refused send hands its payload
    /// back.
    Storage {
        /// What the file system said.
        reason: String,
        /// The payload of a refused send.
        payload: Option<Bytes>,
    },
    /// Another engine (in this or another process) has the data dir open.
    DataDirLocked {
        /// The data dir.
        path: std::path::PathBuf,
    },
    /// The log has a damaged record before its end: recovery stops rather
    /// than lose what follows silently. Open with `Repair::SkipDamaged` to
    /// skip the damaged bytes (the recovery report says what was lost).
    CorruptLog {
        /// The segment file.
        file: std::path::PathBuf,
        /// Byte offset of the damaged record in it.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A worker pool could not start (`?` on `consumer::run` or
    /// `PoolBuilder::start` in a function returning `leaseq::Error`).
    #[cfg(not(loom))]
    Pool(Box<crate::consumer::PoolError>),
    /// A lease policy is out of range (`?` on `LeaseKeeper::spawn` or
    /// `manual`).
    #[cfg(not(loom))]
    Policy(crate::consumer::PolicyError),
}

impl Error {
    /// The lease error inside, if this is one.
    pub fn as_lease(&self) -> Option<&LeaseError> {
        match self {
            Error::Lease(e) => Some(e),
            _ => None,
        }
    }

    /// The queue was full.
    pub fn is_queue_full(&self) -> bool {
        matches!(self, Error::QueueFull { .. })
    }

    /// The payload of a rejected send, handed back.
    pub fn into_payload(self) -> Option<Bytes> {
        match self {
            Error::QueueFull { payload, .. } => Some(payload),
            Error::Storage { payload, .. } => payload,
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidQueueName { name, reason } => {
                write!(f, "invalid queue name {name:?}: {reason} (use 1 to 80 ASCII letters, digits, '-' or '_')")
            }
            Error::QueueNotFound { name } => write!(f, "no queue named '{name}'"),
            Error::QueueAlreadyExists { name } => {
                write!(f, "a queue named '{name}' exists already")
            }
            Error::DeadLetterQueueNotFound { name } => {
                write!(f, "dead-letter queue '{name}' does not exist; create it first")
            }
            Error::DeadLetterCycle { path } => {
                write!(f, "dead-letter queues would form a cycle: {}", path.join(" -> "))
            }
            Error::QueueInUse { name, used_by } => {
                write!(f, "queue '{name}' is the dead-letter queue of '{used_by}'; delete '{used_by}' first")
            }
            Error::QueueDeleted { name } => write!(f, "queue '{name}' was deleted"),
            Error::InvalidConfig { field, reason } => {
                write!(f, "invalid queue config: {field} {reason}")
            }
            Error::QueueFull { capacity, .. } => {
                write!(f, "queue is full ({capacity} messages); receive and ack some, or raise max_messages")
            }
            Error::MessageTooLarge { size, max } => {
                write!(f, "message of {size} bytes is above the queue's limit of {max} bytes")
            }
            Error::VisibilityTooLong { requested, max } => {
                write!(f, "visibility {requested:?} is above the queue's max_visibility {max:?}")
            }
            Error::DelayTooLong { requested, max } => {
                write!(f, "delay {requested:?} is above the queue's max_delay {max:?}")
            }
            Error::InvalidBatchSize { requested, max } => {
                write!(f, "batch size {requested} is outside 1..={max}")
            }
            Error::Lease(e) => write!(f, "{e}"),
            Error::Storage { reason, .. } => {
                write!(f, "the data dir could not be written ({reason}); the call changed nothing")
            }
            Error::DataDirLocked { path } => write!(
                f,
                "data dir {} is open in another engine (its LOCK file is held); close that engine first",
                path.display()
            ),
            Error::CorruptLog { file, offset, reason } => write!(
                f,
                "log file {} is damaged at byte {offset} ({reason}), before its end; recovery stopped. \
                 Open with Repair::SkipDamaged to skip the damaged part and report what was lost",
                file.display()
            ),
            #[cfg(not(loom))]
            Error::Pool(e) => write!(f, "{e}"),
            #[cfg(not(loom))]
            Error::Policy(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Lease(e) => Some(e),
            #[cfg(not(loom))]
            Error::Pool(e) => Some(e.as_ref()),
            #[cfg(not(loom))]
            Error::Policy(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(not(loom))]
impl From<crate::consumer::PoolError> for Error {
    fn from(e: crate::consumer::PoolError) -> Self {
        Error::Pool(Box::new(e))
    }
}

#[cfg(not(loom))]
impl From<crate::consumer::PolicyError> for Error {
    fn from(e: crate::consumer::PolicyError) -> Self {
        Error::Policy(e)
    }
}

/// A refused `LeaseKeeper::keep` as the receipt error it is. The delivery it
/// handed back is dropped (its lease on the queue that issued it runs out);
/// match on `KeepRefused` instead to keep it.
#[cfg(not(loom))]
impl From<crate::consumer::KeepRefused> for Error {
    fn from(e: crate::consumer::KeepRefused) -> Self {
        Error::Lease(LeaseError::InvalidReceipt(e.reason))
    }
}

impl Error {
    /// A storage failure, handing `payload` back.
    pub(crate) fn storage(failure: crate::journal::StorageFailure, payload: Option<Bytes>) -> Self {
        Error::Storage { reason: failure.0.to_string(), payload }
    }

    /// A `LeaseError::Storage` as an `Error::Storage`; any other lease error
    /// as `Error::Lease`.
    pub(crate) fn from_lease_storage(error: LeaseError) -> Self {
        match error {
            LeaseError::Storage { reason } => Error::Storage { reason, payload: None },
            other => Error::Lease(other),
        }
    }

    /// An I/O error while opening or recovering a data dir.
    pub(crate) fn io(context: &str, error: &std::io::Error) -> Self {
        Error::Storage { reason: format!("{context}: {error}"), payload: None }
    }
}

impl From<crate::journal::StorageFailure> for LeaseError {
    fn from(failure: crate::journal::StorageFailure) -> Self {
        LeaseError::Storage { reason: failure.0.to_string() }
    }
}

impl From<LeaseError> for Error {
    fn from(e: LeaseError) -> Self {
        Error::Lease(e)
    }
}

impl From<ReceiptError> for Error {
    fn from(e: ReceiptError) -> Self {
        Error::Lease(LeaseError::InvalidReceipt(e))
    }
}
