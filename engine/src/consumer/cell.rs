//! The state one attempt's keeper and guard share.
//!
//! Invariant: every queue call on the attempt (extend by the keeper; ack,
//! release, dead-letter by the guard or the keeper) is made while holding the
//! cell's mutex, so the keeper never renews a lease the worker is finishing,
//! and once the status leaves `Renewing`/`Stopped` it never returns: a lost
//! lease stays lost and a finished attempt stays finished. Loss is announced
//! exactly once: the thread that moves the status to `Lost` wakes the waiters
//! and runs the callbacks (after unlocking, so a callback may use the guard).

use std::fmt;
use std::time::Duration;

use crate::clock::Nanos;
use crate::consumer::policy::{LeaseState, LossReason};
use crate::queue::Queue;
use crate::receipt::Receipt;
use crate::sync::{AtomicBool, AtomicU64, Condvar, Mutex, MutexGuard, Ordering, lock};

/// A callback run once when the lease is lost.
pub(crate) type LossCallback = Box<dyn FnOnce(&LossReason) + Send>;

/// Where an attempt stands, as its keeper and guard see it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseStatus {
    /// Held and being renewed; runs to `deadline` unless renewed again.
    Held {
        /// When the current grant runs out.
        deadline: Nanos,
    },
    /// Still held, but the keeper stopped renewing (a policy bound): it is
    /// lost at `deadline` for `reason`. Finish or stop before then.
    Ending {
        /// The bound that stopped renewal.
        reason: LossReason,
        /// When the lease runs out.
        deadline: Nanos,
    },
    /// No longer held: the message may be with another consumer. Do not
    /// perform effects for it.
    Lost(LossReason),
    /// Acked, released or dead-lettered through the guard.
    Finished,
}

#[derive(Debug)]
pub(crate) enum Status {
    Renewing,
    Stopped(LossReason),
    Lost(LossReason),
    Finished,
}

pub(crate) struct CellState {
    pub(crate) lease: LeaseState,
    pub(crate) status: Status,
    callbacks: Vec<LossCallback>,
}

/// One attempt under a keeper.
pub(crate) struct LeaseCell {
    pub(crate) queue: Queue,
    pub(crate) receipt: Receipt,
    /// The worker's last `progress()`, engine-clock nanoseconds. Relaxed: a
    /// heartbeat is a hint the keeper folds in under the cell lock; a late
    /// read costs at most one renewal check.
    pub(crate) last_progress: AtomicU64,
    /// Set once the status left `Renewing`/`Stopped` for good, so the keeper
    /// can drop the cell without taking its lock. Release/Acquire: whoever
    /// sees it also sees the final status.
    pub(crate) done: AtomicBool,
    state: Mutex<CellState>,
    changed: Condvar,
}

impl fmt::Debug for LeaseCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseCell")
            .field("queue", &self.queue.name())
            .field("receipt", &self.receipt)
            .field("done", &self.done.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A loss to announce once the cell is unlocked.
#[must_use = "a loss must be announced (LeaseCell::announce) after unlocking"]
pub(crate) struct Loss {
    reason: LossReason,
    callbacks: Vec<LossCallback>,
}

impl CellState {
    /// Moves a live attempt to `Lost(reason)`; `None` if it already ended.
    pub(crate) fn lose(&mut self, reason: LossReason) -> Option<Loss> {
        if !self.is_live() {
            return None;
        }
        self.status = Status::Lost(reason.clone());
        Some(Loss { reason, callbacks: std::mem::take(&mut self.callbacks) })
    }

    /// Moves the attempt to `Finished` (the guard finished it); a lost one
    /// stays `Lost`.
    pub(crate) fn finish(&mut self) {
        if !matches!(self.status, Status::Lost(_)) {
            self.status = Status::Finished;
        }
        self.callbacks.clear();
    }

    /// The keeper may still renew, and the lease may still be held.
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.status, Status::Renewing | Status::Stopped(_))
    }

    /// Applies the deadline: a live attempt at or past it is lost.
    pub(crate) fn settle(&mut self, now: Nanos) -> Option<Loss> {
        if now < self.lease.deadline {
            return None;
        }
        let reason = match &self.status {
            Status::Renewing => LossReason::Expired,
            Status::Stopped(reason) => reason.clone(),
            _ => return None,
        };
        self.lose(reason)
    }

    pub(crate) fn status(&self) -> LeaseStatus {
        match &self.status {
            Status::Renewing => LeaseStatus::Held { deadline: self.lease.deadline },
            Status::Stopped(reason) => LeaseStatus::Ending { reason: reason.clone(), deadline: self.lease.deadline },
            Status::Lost(reason) => LeaseStatus::Lost(reason.clone()),
            Status::Finished => LeaseStatus::Finished,
        }
    }

    /// Registers a loss callback; hands it back with the reason if the lease
    /// is already lost (run it at once), drops it if the attempt finished.
    pub(crate) fn add_callback(&mut self, callback: LossCallback) -> Option<(LossCallback, LossReason)> {
        match &self.status {
            Status::Lost(reason) => Some((callback, reason.clone())),
            Status::Finished => None,
            _ => {
                self.callbacks.push(callback);
                None
            }
        }
    }
}

impl LeaseCell {
    pub(crate) fn new(queue: Queue, receipt: Receipt, lease: LeaseState) -> Self {
        LeaseCell {
            queue,
            receipt,
            last_progress: AtomicU64::new(lease.last_progress.0),
            done: AtomicBool::new(false),
            state: Mutex::new(CellState { lease, status: Status::Renewing, callbacks: Vec::new() }),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, CellState> {
        lock(&self.state)
    }

    /// Announces a loss: marks the cell done, wakes waiters, runs callbacks.
    /// Call it with the cell unlocked (a callback may use the guard).
    pub(crate) fn announce(&self, loss: Option<Loss>) {
        let Some(loss) = loss else {
            return;
        };
        self.done.store(true, Ordering::Release);
        self.changed.notify_all();
        for callback in loss.callbacks {
            callback(&loss.reason);
        }
    }

    /// Marks a finished attempt done and wakes waiters (cell unlocked).
    pub(crate) fn finished(&self) {
        self.done.store(true, Ordering::Release);
        self.changed.notify_all();
    }

    /// Applies the deadline on the engine clock and announces a loss it finds.
    pub(crate) fn settle_now(&self) {
        let loss = self.lock().settle(self.queue.now());
        self.announce(loss);
    }

    /// Waits (real time) until the attempt is lost or finished, up to
    /// `timeout`; the loss reason if it was lost.
    pub(crate) fn wait_lost(&self, timeout: Duration) -> Option<LossReason> {
        // `None`: a timeout too long for an `Instant` (`Duration::MAX`) waits
        // without a limit.
        let until = std::time::Instant::now().checked_add(timeout);
        let mut state = self.lock();
        loop {
            if let Some(loss) = state.settle(self.queue.now()) {
                // No keeper got here first: announce it ourselves.
                let reason = loss.reason.clone();
                drop(state);
                self.announce(Some(loss));
                return Some(reason);
            }
            match &state.status {
                Status::Lost(reason) => return Some(reason.clone()),
                Status::Finished => return None,
                _ => {}
            }
            let left = match until {
                Some(until) => until.saturating_duration_since(std::time::Instant::now()),
                None => Duration::MAX,
            };
            if left.is_zero() {
                return None;
            }
            // Wake at the deadline at the latest, to settle it if no keeper
            // does (a manual keeper, or one that fell behind).
            let to_deadline = state.lease.deadline.saturating_since(self.queue.now());
            let wait = left.min(to_deadline.max(Duration::from_millis(1)));
            state = self.changed.wait_timeout(state, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}
