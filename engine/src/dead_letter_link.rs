//! Where a queue's failed messages go and after how many deliveries: its
//! dead-letter queue and `max_receives`, set at creation and changeable
//! while the queue serves (`Queue::set_dead_letter`).
//!
//! Invariants:
//!
//! * A ceiling is set only together with a target (`QueueConfig::validate`'s
//!   rule), so a message at the ceiling always has somewhere to go; a
//!   failure path that reads a ceiling and then finds no target (a change
//!   raced it) keeps the message on its queue, never drops it.
//! * Changes are made under the engine's registry lock (which also orders
//!   them with queue deletes and with each other, so the links stay
//!   acyclic); the target itself is read under this link's own lock, and
//!   only where a message moves or stats are taken, never on the hot path.
//! * A move holds this link's lock until the message is on the target
//!   (`locked_target`), so a change waits for the moves under way: once
//!   `set` has unlinked a queue, nothing is moving into it, and deleting it
//!   (which the registry lock allows only once no link names it) cannot
//!   take a message that was on its way. Links are acyclic, so these locks
//!   are only ever taken along a chain of links, in its direction: no
//!   deadlock.

use std::sync::Arc;

use crate::queue::QueueCore;
use crate::sync::{AtomicBool, AtomicU32, Mutex, MutexGuard, Ordering, lock};

/// A queue's dead-letter queue and delivery ceiling.
#[derive(Debug)]
pub(crate) struct DeadLetterLink {
    target: Mutex<Option<Arc<QueueCore>>>,
    /// `max_receives`, 0 for none: read by every expiry and release.
    /// Relaxed: a setting read on its own; the move that follows a ceiling
    /// reads the target under the lock and copes with finding none.
    max_receives: AtomicU32,
    /// Whether a target is set: whether a failure's attempt is worth
    /// remembering for a dead-letter record. Relaxed, as `max_receives`.
    linked: AtomicBool,
}

impl DeadLetterLink {
    pub(crate) fn new(target: Option<Arc<QueueCore>>, max_receives: Option<u32>) -> Self {
        DeadLetterLink {
            linked: AtomicBool::new(target.is_some()),
            max_receives: AtomicU32::new(max_receives.unwrap_or(0)),
            target: Mutex::new(target),
        }
    }

    /// The dead-letter queue now, if any.
    pub(crate) fn target(&self) -> Option<Arc<QueueCore>> {
        lock(&self.target).clone()
    }

    /// The target, locked: hold the guard while moving a message there.
    pub(crate) fn locked_target(&self) -> MutexGuard<'_, Option<Arc<QueueCore>>> {
        lock(&self.target)
    }

    /// Whether the link points at `queue`.
    pub(crate) fn targets(&self, queue: &Arc<QueueCore>) -> bool {
        lock(&self.target).as_ref().is_some_and(|target| Arc::ptr_eq(target, queue))
    }

    /// The delivery ceiling now, if any.
    pub(crate) fn max_receives(&self) -> Option<u32> {
        match self.max_receives.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// Whether a dead-letter queue is set.
    pub(crate) fn linked(&self) -> bool {
        self.linked.load(Ordering::Relaxed)
    }

    /// Points the link at `target` with ceiling `max_receives` (already
    /// validated; the caller holds the engine's registry lock).
    pub(crate) fn set(&self, target: Option<Arc<QueueCore>>, max_receives: Option<u32>) {
        let mut current = lock(&self.target);
        self.linked.store(target.is_some(), Ordering::Relaxed);
        self.max_receives.store(max_receives.unwrap_or(0), Ordering::Relaxed);
        *current = target;
    }
}
