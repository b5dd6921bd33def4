//! The guard a worker holds while working on one delivery.
//!
//! Invariant: a guard finishes its attempt at most once — `ack`, `release`
//! and `dead_letter` consume it, and dropping it unfinished applies the
//! policy's `DropAction` — and it reports a lost lease from the moment the
//! keeper learns of it (or the deadline passes on the engine clock), so a
//! worker that calls [`LeaseGuard::check`] before each irreversible effect
//! never starts one after its lease was known lost. (An effect already under
//! way cannot be stopped by anyone: fence it with the delivery's
//! `fencing_token`.)

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use crate::clock::Nanos;
use crate::consumer::cell::{LeaseCell, LeaseStatus, LossCallback};
use crate::consumer::keeper::KeeperInner;
use crate::consumer::policy::{DropAction, LossReason};
use crate::delivery::Delivery;
use crate::error::LeaseError;
use crate::receipt::MessageId;
use crate::sync::{Arc, Ordering};

/// The worker's handle on one kept lease. See the module docs.
#[must_use = "dropping an unfinished LeaseGuard releases its message at once (or lets its lease run out, per DropAction): hold it while working, then ack, release or dead_letter through it"]
pub struct LeaseGuard {
    delivery: Delivery,
    cell: Arc<LeaseCell>,
    /// Keeps the keeper (and its thread) alive while the guard lives.
    _keeper: Arc<KeeperInner>,
    on_drop: DropAction,
    finished: bool,
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("id", &self.delivery.id)
            .field("delivery_count", &self.delivery.delivery_count)
            .field("status", &self.status())
            .finish()
    }
}

/// The error of [`LeaseGuard::check`]: the lease is not held, so no effect
/// should be performed for this delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLost {
    /// The message whose lease was lost.
    pub id: MessageId,
    /// Why.
    pub reason: LossReason,
}

impl fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lease on {} lost: {}; do not perform its effects", self.id, self.reason)
    }
}

impl std::error::Error for LeaseLost {}

/// A clonable, thread-safe view of one lease's loss, for another thread (a
/// watchdog, a cancellation token) to poll or wait on.
#[derive(Clone)]
pub struct LossSignal {
    cell: Arc<LeaseCell>,
}

impl fmt::Debug for LossSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossSignal").field("lost", &self.lost()).finish()
    }
}

impl LossSignal {
    /// The loss reason, if the lease is lost.
    #[must_use]
    pub fn lost(&self) -> Option<LossReason> {
        lost_of(&self.cell)
    }

    /// Waits up to `timeout` (real time) for the lease to be lost; `None` if
    /// it was not (still held at the timeout, or finished).
    pub fn wait(&self, timeout: Duration) -> Option<LossReason> {
        self.cell.wait_lost(timeout)
    }
}

fn lost_of(cell: &LeaseCell) -> Option<LossReason> {
    cell.settle_now();
    match cell.lock().status() {
        LeaseStatus::Lost(reason) => Some(reason),
        _ => None,
    }
}

impl LeaseGuard {
    pub(crate) fn new(delivery: Delivery, cell: Arc<LeaseCell>, keeper: Arc<KeeperInner>) -> Self {
        let on_drop = keeper.policy.on_drop;
        LeaseGuard { delivery, cell, _keeper: keeper, on_drop, finished: false }
    }

    /// The delivery this guard holds the lease of.
    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// The message id (stable across attempts: the idempotency key).
    pub fn id(&self) -> MessageId {
        self.delivery.id
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.delivery.payload
    }

    /// A number that strictly increases with every attempt of this message.
    /// Make writes to an external resource conditional on it
    /// (`UPDATE ... SET fence = $token WHERE fence < $token`): a queue lease
    /// alone cannot stop a consumer that lost its lease, and does not know it
    /// yet, from writing to a system outside the lease protocol.
    pub fn fencing_token(&self) -> u64 {
        self.delivery.fencing_token
    }

    /// Where the lease stands now (applies the deadline on the engine clock).
    pub fn status(&self) -> LeaseStatus {
        self.cell.settle_now();
        self.cell.lock().status()
    }

    /// The current deadline (moves later with each renewal), on the engine
    /// clock: [`lease_left`](Self::lease_left) and
    /// [`deadline_instant`](Self::deadline_instant) put it in `std::time`
    /// terms.
    pub fn deadline(&self) -> Nanos {
        self.cell.lock().lease.deadline
    }

    /// Time left before the current deadline, zero once it passed.
    pub fn lease_left(&self) -> Duration {
        self.cell.queue.time_until(self.deadline())
    }

    /// The current deadline as an `Instant`; `None` under a `ManualClock`
    /// (see `Queue::instant_of`).
    pub fn deadline_instant(&self) -> Option<std::time::Instant> {
        self.cell.queue.instant_of(self.deadline())
    }

    /// Whether the lease is still held: not refused, not past its deadline on
    /// the engine clock, not finished.
    pub fn is_held(&self) -> bool {
        matches!(self.status(), LeaseStatus::Held { .. } | LeaseStatus::Ending { .. })
    }

    /// Why the lease was lost, if it was.
    pub fn lost(&self) -> Option<LossReason> {
        lost_of(&self.cell)
    }

    /// `Ok` while the lease is held; call it right before each irreversible
    /// effect.
    ///
    /// # Errors
    ///
    /// `LeaseLost` once the lease is no longer held (it expired, a renewal was
    /// refused, a bound of the policy was reached, or the guard was finished), with
    /// the reason.
    pub fn check(&self) -> Result<(), LeaseLost> {
        match self.status() {
            LeaseStatus::Held { .. } | LeaseStatus::Ending { .. } => Ok(()),
            LeaseStatus::Lost(reason) => Err(LeaseLost { id: self.delivery.id, reason }),
            // A guard is consumed when it finishes; a live one cannot see this.
            LeaseStatus::Finished => Err(LeaseLost { id: self.delivery.id, reason: LossReason::Expired }),
        }
    }

    /// Tells the keeper the worker is making progress (the heartbeat a
    /// policy with `heartbeat` requires). Cheap: one clock read and one
    /// atomic store.
    pub fn progress(&self) {
        // Relaxed: see `LeaseCell::last_progress`. `fetch_max` keeps it
        // monotonic if two threads report progress at once.
        self.cell.last_progress.fetch_max(self.cell.queue.now().0, Ordering::Relaxed);
    }

    /// Waits up to `timeout` (real time) for the lease to be lost; returns
    /// the reason, or `None` if it is still held.
    pub fn wait_lost(&self, timeout: Duration) -> Option<LossReason> {
        self.cell.wait_lost(timeout)
    }

    /// Runs `callback` once if the lease is lost (on the thread that finds
    /// out: the keeper's, usually); at once if it is lost already; never if
    /// the attempt finishes first.
    pub fn on_lost(&self, callback: impl FnOnce(&LossReason) + Send + 'static) {
        let callback: LossCallback = Box::new(callback);
        self.cell.settle_now();
        let now = self.cell.lock().add_callback(callback);
        if let Some((callback, reason)) = now {
            callback(&reason);
        }
    }

    /// A handle another thread can wait on for this lease's loss.
    pub fn loss_signal(&self) -> LossSignal {
        LossSignal { cell: self.cell.clone() }
    }

    /// What dropping this guard unfinished does (default: the policy's).
    pub fn set_drop_action(&mut self, action: DropAction) {
        self.on_drop = action;
    }

    /// Acks the message: done for good. The queue decides (a late ack of an
    /// expired lease nobody else took is accepted unless the queue rejects
    /// late acks; a stale receipt is refused).
    ///
    /// # Errors
    ///
    /// The queue's `LeaseError`: `Stale` if the message was delivered again,
    /// `Expired` for a late ack under `LateAck::Reject`, `QueueDeleted`, and on a
    /// durable engine `Storage`.
    pub fn ack(mut self) -> Result<(), LeaseError> {
        self.finish(|q, r| q.ack(r))
    }

    /// Releases the message, receivable again after `delay`.
    ///
    /// # Errors
    ///
    /// The queue's `LeaseError`: `Stale`, `Expired` (the lease already ran out),
    /// `DelayTooLong`, `DeadLetterQueueFull` at the retry ceiling, `QueueDeleted`,
    /// and on a durable engine `Storage`.
    pub fn release(mut self, delay: Duration) -> Result<(), LeaseError> {
        self.finish(|q, r| q.release(r, delay))
    }

    /// Releases the message with the queue's backoff for its delivery count.
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release), less `DelayTooLong`.
    pub fn release_with_backoff(mut self) -> Result<(), LeaseError> {
        self.finish(|q, r| q.release_with_backoff(r))
    }

    /// Moves the message to the dead-letter queue (a permanent failure).
    ///
    /// # Errors
    ///
    /// The queue's `LeaseError`: `Stale`, `Expired`, `NoDeadLetterQueue`,
    /// `DeadLetterQueueFull` (the message stays leased here), `QueueDeleted`, and
    /// on a durable engine `Storage`.
    pub fn dead_letter(mut self, reason: &str) -> Result<(), LeaseError> {
        self.finish(|q, r| q.dead_letter(r, reason))
    }

    fn finish(
        &mut self,
        operation: impl FnOnce(&crate::Queue, &crate::Receipt) -> Result<(), LeaseError>,
    ) -> Result<(), LeaseError> {
        self.finished = true;
        let mut state = self.cell.lock();
        // Under the cell lock: the keeper cannot renew concurrently.
        let result = operation(&self.cell.queue, &self.cell.receipt);
        state.finish();
        drop(state);
        self.cell.finished();
        result
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut state = self.cell.lock();
        if self.on_drop == DropAction::Release && state.is_live() {
            // Best effort: if the lease is already gone there is nothing to
            // release, and a drop cannot report errors.
            let _ = self.cell.queue.release(&self.cell.receipt, Duration::ZERO);
        }
        state.finish();
        drop(state);
        self.cell.finished();
    }
}
