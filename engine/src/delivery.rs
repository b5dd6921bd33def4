//! What a receive hands out, and the options of send and receive.
//!
//! Invariant: a `Delivery` is a snapshot taken under the slot's claim at
//! receive time; it never changes afterwards and owns nothing of the queue
//! (the payload is a cheap `Bytes` clone).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::clock::Nanos;
use crate::dead_letter::DeadLetterRecord;
use crate::receipt::{MessageId, Receipt};

/// One delivery attempt of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The message's stable id (the same on every attempt).
    pub id: MessageId,
    /// This attempt's receipt (different on every attempt).
    pub receipt: Receipt,
    /// The payload.
    pub payload: Bytes,
    /// Deliveries of this message on this queue, including this one (1-based).
    pub delivery_count: u32,
    /// When this attempt's lease runs out, on the engine clock (nanoseconds
    /// since its origin, not an `Instant`): `Queue::time_until(deadline)`
    /// gives the time left, `Queue::instant_of(deadline)` the `Instant` on a
    /// real clock.
    pub deadline: Nanos,
    /// When this attempt began (engine clock).
    pub received_at: Nanos,
    /// A number that strictly increases with every attempt of this message,
    /// across dead-lettering and redrive. Store it with any write this attempt
    /// makes to an external resource and make the write conditional on it being
    /// newer (`UPDATE ... SET fence = $token WHERE fence < $token`): a queue
    /// lease alone cannot stop a consumer that lost its lease from writing to a
    /// system that does not take part in the lease protocol.
    pub fencing_token: u64,
    /// Set when this message was dead-lettered: where it failed and why.
    pub dead_letter: Option<Arc<DeadLetterRecord>>,
}

impl Delivery {
    /// The lease left at `now` (an engine-clock time such as `Queue::now()`),
    /// zero once it ran out.
    #[must_use]
    pub fn lease_left(&self, now: Nanos) -> Duration {
        self.deadline.saturating_since(now)
    }
}

/// Options of one receive call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// The lease of the messages received; `None` takes the queue's
    /// `visibility_timeout`. Zero is allowed (the message is received with its
    /// lease already over).
    pub visibility: Option<Duration>,
    /// How long to wait for a message if none is ready (long polling), on the
    /// engine's clock. `None` or zero returns at once.
    pub wait: Option<Duration>,
}

impl ReceiveOptions {
    /// The defaults: the queue's visibility timeout, no waiting. Chain
    /// [`wait`](Self::wait) and [`visibility`](Self::visibility) on it:
    ///
    /// ```
    /// use std::time::Duration;
    /// use leaseq::ReceiveOptions;
    ///
    /// let options = ReceiveOptions::new().wait(Duration::from_secs(20)).visibility(Duration::from_secs(60));
    /// assert_eq!(options.wait, Some(Duration::from_secs(20)));
    /// assert_eq!(options.visibility, Some(Duration::from_secs(60)));
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        ReceiveOptions { visibility: None, wait: None }
    }

    /// These options, waiting up to `wait` for a message.
    #[must_use]
    pub const fn wait(self, wait: Duration) -> Self {
        ReceiveOptions { wait: Some(wait), ..self }
    }

    /// These options, leasing received messages for `visibility`.
    #[must_use]
    pub const fn visibility(self, visibility: Duration) -> Self {
        ReceiveOptions { visibility: Some(visibility), ..self }
    }
}

/// Options of one send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendOptions {
    /// The message is not receivable before this much time passed.
    pub delay: Duration,
}

impl From<Duration> for SendOptions {
    fn from(delay: Duration) -> Self {
        SendOptions { delay }
    }
}
