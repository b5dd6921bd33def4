//! The lease keeper: one place that renews many leases, off the workers'
//! threads.
//!
//! Invariant: the keeper's only decisions are [`LeasePolicy::decide`] applied
//! to each attempt's [`LeaseState`] at a given instant, in
//! [`LeaseKeeper::tick`]. The background thread of [`LeaseKeeper::spawn`] does
//! nothing but call that on the engine's clock and sleep until the next
//! renewal falls due; a manual keeper ([`LeaseKeeper::manual`]) is ticked by
//! its owner (a test or a simulator on a `ManualClock`) and behaves the same.
//! A worker that blocks its thread, spins on the CPU or sleeps therefore
//! cannot delay its own renewal: renewal never runs on the worker's thread.

use std::fmt;
use std::thread::Thread;
use std::time::Duration;

use crate::clock::Nanos;
use crate::consumer::cell::{LeaseCell, Status};
use crate::consumer::guard::LeaseGuard;
use crate::consumer::policy::{Decision, LeasePolicy, LeaseState, LossReason, PolicyError};
use crate::delivery::Delivery;
use crate::error::{LeaseError, ReceiptError};
use crate::queue::Queue;
use crate::sync::{Arc, AtomicBool, Mutex, OnceLock, Ordering, Weak, lock};

/// Longest the background thread sleeps with nothing due, so it notices a
/// dropped keeper promptly.
const IDLE_SLEEP: Duration = Duration::from_millis(50);

pub(crate) struct KeeperInner {
    pub(crate) policy: LeasePolicy,
    leases: Mutex<Vec<Arc<LeaseCell>>>,
    thread: OnceLock<Thread>,
    stop: AtomicBool,
}

impl Drop for KeeperInner {
    fn drop(&mut self) {
        // Release pairs with the Acquire in the thread's loop.
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// Renews the leases of many deliveries, on its own thread or when ticked.
///
/// ```
/// use std::time::Duration;
/// use leaseq::{Engine, ManualClock, QueueConfig};
/// use leaseq::consumer::{LeaseKeeper, LeasePolicy};
///
/// let clock = ManualClock::new();
/// let engine = Engine::builder().clock(clock.clone()).build();
/// let q = engine.create_queue("jobs", QueueConfig::default().visibility_timeout(Duration::from_secs(10)))?;
/// q.send(b"job")?;
/// let keeper = LeaseKeeper::manual(LeasePolicy::default())?;
/// let guard = keeper.keep(&q, q.receive(1)?.remove(0))?;
/// for _ in 0..6 {                       // a minute of work, renewed every 5 s
///     clock.advance(Duration::from_secs(5));
///     keeper.tick(q.now());
/// }
/// assert!(guard.is_held());
/// guard.ack()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
#[must_use = "dropping the last LeaseKeeper handle (and every guard it gave out) stops its renewals"]
pub struct LeaseKeeper {
    inner: Arc<KeeperInner>,
}

impl fmt::Debug for LeaseKeeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseKeeper")
            .field("policy", &self.inner.policy)
            .field("leases", &self.len())
            .field("thread", &self.inner.thread.get().is_some())
            .finish()
    }
}

/// [`LeaseKeeper::keep`] refused a delivery: its receipt was not issued by
/// the queue it was handed in with. The delivery is handed back (its lease on
/// the queue that issued it is untouched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeepRefused {
    /// Why the receipt does not belong to the queue.
    pub reason: ReceiptError,
    /// The delivery, handed back.
    pub delivery: Box<Delivery>,
}

impl KeepRefused {
    /// The delivery that was not kept.
    #[must_use]
    pub fn into_delivery(self) -> Delivery {
        *self.delivery
    }
}

impl fmt::Display for KeepRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the lease keeper refused message {}: {}", self.delivery.id, self.reason)
    }
}

impl std::error::Error for KeepRefused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.reason)
    }
}

/// What one [`LeaseKeeper::tick`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tick {
    /// Leases renewed.
    pub renewed: u32,
    /// Leases whose renewal a policy bound stopped (they run out at their
    /// deadline).
    pub stopped: u32,
    /// Leases found lost (refused, or past their deadline).
    pub lost: u32,
    /// Leases still kept after this tick.
    pub kept: u32,
    /// When the next tick has something to do (the earliest renewal due or
    /// deadline of a stopped lease), if any lease is kept.
    pub next_due: Option<Nanos>,
}

impl LeaseKeeper {
    /// A keeper with no thread: call [`tick`](Self::tick) to renew (virtual
    /// time, simulation, or your own scheduler).
    ///
    /// # Errors
    ///
    /// `PolicyError` naming the first field of `policy` out of range.
    pub fn manual(policy: LeasePolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(LeaseKeeper {
            inner: Arc::new(KeeperInner {
                policy,
                leases: Mutex::new(Vec::new()),
                thread: OnceLock::new(),
                stop: AtomicBool::new(false),
            }),
        })
    }

    /// A keeper with its own background thread that ticks on the engine's
    /// clock. The thread stops when the keeper and every guard it gave out
    /// are dropped.
    ///
    /// # Errors
    ///
    /// `PolicyError` naming the first field of `policy` out of range.
    pub fn spawn(policy: LeasePolicy) -> Result<Self, PolicyError> {
        let keeper = Self::manual(policy)?;
        let weak = Arc::downgrade(&keeper.inner);
        // A plain std thread: it exists only with a real clock.
        let thread = std::thread::Builder::new()
            .name("leaseq-keeper".into())
            .spawn(move || run(weak))
            .expect("the OS refused to start the leaseq keeper thread");
        let _ = keeper.inner.thread.set(thread.thread().clone());
        Ok(keeper)
    }

    /// The keeper's policy.
    #[must_use]
    pub fn policy(&self) -> &LeasePolicy {
        &self.inner.policy
    }

    /// Leases currently kept (not yet finished or lost as far as the keeper
    /// has seen).
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner.forget_done();
        lock(&self.inner.leases).len()
    }

    /// Whether no lease is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts keeping the lease of `delivery` (received from `queue`); the
    /// worker holds the returned guard while working and finishes through it.
    ///
    /// # Errors
    ///
    /// [`KeepRefused`] (which hands the delivery back) when `delivery`'s
    /// receipt was not issued by `queue`: another queue's, another engine's,
    /// or altered. Keeping it would renew nothing and report the lease as held
    /// until the first call on it failed.
    pub fn keep(&self, queue: &Queue, delivery: Delivery) -> Result<LeaseGuard, KeepRefused> {
        if let Err(reason) = delivery.receipt.issued_by(&queue.core) {
            return Err(KeepRefused { reason, delivery: Box::new(delivery) });
        }
        let config = queue.config();
        let state = LeaseState::from_delivery(&delivery, config.max_visibility, config.max_lease);
        let cell = Arc::new(LeaseCell::new(queue.clone(), delivery.receipt, state));
        lock(&self.inner.leases).push(cell.clone());
        if let Some(thread) = self.inner.thread.get() {
            // The new lease may fall due before the thread's current sleep ends.
            thread.unpark();
        }
        Ok(LeaseGuard::new(delivery, cell, self.inner.clone()))
    }

    /// Applies the policy to every kept lease at `now` (the engine clock's
    /// time): renews those due, stops those at a bound, reports those lost.
    /// Deterministic for a given sequence of `now` values and queue states.
    pub fn tick(&self, now: Nanos) -> Tick {
        self.inner.tick_with(|_| now).0
    }

    /// Releases every kept lease at once (no delay) so other consumers can
    /// take the messages; their guards report `LossReason::ReleasedByKeeper`.
    /// Returns how many were released.
    pub fn release_all(&self) -> usize {
        let cells: Vec<_> = lock(&self.inner.leases).clone();
        let mut released = 0;
        for cell in cells {
            let mut state = cell.lock();
            if !state.is_live() {
                continue;
            }
            // Only a lease still held can be released; either way this
            // attempt is over for its worker.
            if cell.queue.release(&cell.receipt, Duration::ZERO).is_ok() {
                released += 1;
            }
            let loss = state.lose(LossReason::ReleasedByKeeper);
            drop(state);
            cell.announce(loss);
        }
        self.inner.forget_done();
        released
    }
}

impl KeeperInner {
    /// One pass over the kept leases; `now_of` gives each lease's clock time.
    /// Also returns how long until the soonest next due time, each measured
    /// on its own lease's clock.
    pub(crate) fn tick_with(&self, now_of: impl Fn(&Queue) -> Nanos) -> (Tick, Option<Duration>) {
        let cells: Vec<_> = lock(&self.leases).clone();
        let mut tick = Tick::default();
        let mut soonest: Option<Duration> = None;
        for cell in &cells {
            let now = now_of(&cell.queue);
            let (outcome, next) = self.step(cell, now);
            match outcome {
                Outcome::Renewed => tick.renewed += 1,
                Outcome::Stopped => tick.stopped += 1,
                Outcome::Lost => tick.lost += 1,
                Outcome::Waiting | Outcome::Done => {}
            }
            if let Some(next) = next {
                tick.kept += 1;
                tick.next_due = Some(tick.next_due.map_or(next, |n| n.min(next)));
                let wait = next.saturating_since(now);
                soonest = Some(soonest.map_or(wait, |s| s.min(wait)));
            }
        }
        self.forget_done();
        (tick, soonest)
    }

    /// Drops finished and lost cells from the list.
    fn forget_done(&self) {
        // Acquire pairs with the Release that set `done` after the final
        // status was written.
        lock(&self.leases).retain(|cell| !cell.done.load(Ordering::Acquire));
    }

    /// Applies the policy to one lease; returns what happened and when it
    /// next needs a look (`None`: never, it is over).
    fn step(&self, cell: &LeaseCell, now: Nanos) -> (Outcome, Option<Nanos>) {
        let mut state = cell.lock();
        let heartbeat = Nanos(cell.last_progress.load(Ordering::Relaxed));
        if heartbeat > state.lease.last_progress {
            state.lease.last_progress = heartbeat;
        }
        let (outcome, next, loss) = match &state.status {
            Status::Lost(_) | Status::Finished => (Outcome::Done, None, None),
            Status::Stopped(_) => match state.settle(now) {
                Some(loss) => (Outcome::Lost, None, Some(loss)),
                None => (Outcome::Waiting, Some(state.lease.deadline), None),
            },
            Status::Renewing => match self.policy.decide(&state.lease, now) {
                Decision::Wait { until } => (Outcome::Waiting, Some(until), None),
                Decision::Stop { reason, deadline } => {
                    state.status = Status::Stopped(reason);
                    (Outcome::Stopped, Some(deadline), None)
                }
                Decision::Lost(reason) => (Outcome::Lost, None, state.lose(reason)),
                // Up to the cap: the policy sized a renewal that ends at the
                // cap from `now`, and the queue reads its clock a little later;
                // plain `extend` would refuse it and lose the last grant.
                Decision::Renew { visibility } => match cell.queue.extend_up_to_cap(&cell.receipt, visibility) {
                    Ok(deadline) => {
                        state.lease.renewed(deadline, visibility);
                        (Outcome::Renewed, Some(self.policy.renewal_due(&state.lease)), None)
                    }
                    Err(LeaseError::CapExceeded { max_lease }) => {
                        // Still held: the lease already ends at the queue's
                        // cap, which left the policy something to gain only by
                        // its earlier clock reading.
                        state.status = Status::Stopped(LossReason::CapReached { max_total: max_lease });
                        (Outcome::Stopped, Some(state.lease.deadline), None)
                    }
                    Err(refused) => (Outcome::Lost, None, state.lose(LossReason::Refused(refused))),
                },
            },
        };
        drop(state);
        cell.announce(loss);
        (outcome, next)
    }
}

enum Outcome {
    Waiting,
    Renewed,
    Stopped,
    Lost,
    Done,
}

/// The background thread: tick on each lease's engine clock, sleep until the
/// earliest next due time.
fn run(keeper: Weak<KeeperInner>) {
    loop {
        let sleep = {
            let Some(keeper) = keeper.upgrade() else {
                return;
            };
            // Acquire pairs with the Release in `KeeperInner::drop`.
            if keeper.stop.load(Ordering::Acquire) {
                return;
            }
            let (_, soonest) = keeper.tick_with(Queue::now);
            soonest.map_or(IDLE_SLEEP, |s| s.min(IDLE_SLEEP))
        };
        std::thread::park_timeout(sleep);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering as StdOrdering};

    use super::*;
    use crate::consumer::{DropAction, LeaseStatus};
    use crate::{Engine, ManualClock, QueueConfig};

    const VIS: Duration = Duration::from_secs(10);

    fn setup() -> (ManualClock, Queue) {
        let clock = ManualClock::new();
        let engine = Engine::builder().clock(clock.clone()).build();
        let q = engine.create_queue("jobs", QueueConfig::default().visibility_timeout(VIS).shards(1)).unwrap();
        q.send(b"job").unwrap();
        (clock, q)
    }

    fn policy() -> LeasePolicy {
        LeasePolicy::default().min_margin(Duration::from_secs(1))
    }

    /// Advances the clock in `step`s for `total`, ticking the keeper after each.
    fn run_for(clock: &ManualClock, keeper: &LeaseKeeper, q: &Queue, total: Duration, step: Duration) {
        let mut passed = Duration::ZERO;
        while passed < total {
            clock.advance(step);
            passed += step;
            keeper.tick(q.now());
        }
    }

    #[test]
    fn renewal_keeps_a_long_job_leased() {
        let (clock, q) = setup();
        let keeper = LeaseKeeper::manual(policy()).unwrap();
        let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
        run_for(&clock, &keeper, &q, VIS * 3, Duration::from_secs(1));
        assert!(guard.is_held(), "{:?}", guard.status());
        assert!(q.receive(1).unwrap().is_empty(), "nobody else may receive a kept message");
        guard.ack().unwrap();
        let stats = q.stats();
        assert_eq!((stats.acked, stats.redelivered, stats.expired), (1, 0, 0));
        assert_eq!(stats.extensions, 6, "renewed every 5 s for 30 s");
        assert!(keeper.is_empty());
    }

    #[test]
    fn event_driven_ticks_at_next_due_renew_exactly_when_due() {
        // How a simulator drives the keeper: jump the clock to `next_due`, tick.
        let (clock, q) = setup();
        let keeper = LeaseKeeper::manual(policy().max_total(Duration::from_secs(32))).unwrap();
        let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
        let first = keeper.tick(q.now());
        assert_eq!(first, Tick { renewed: 0, stopped: 0, lost: 0, kept: 1, next_due: Some(Nanos(5_000_000_000)) });
        let mut renewals_at = Vec::new();
        let mut last = first;
        while let Some(due) = last.next_due {
            clock.advance_to(due);
            last = keeper.tick(q.now());
            if last.renewed == 1 {
                renewals_at.push(q.now().as_nanos() / 1_000_000_000);
            }
            if last.stopped == 1 {
                assert_eq!(guard.deadline(), Nanos(32_000_000_000), "the last renewal ends at the cap");
            }
        }
        // Every 5 s (half of each 10 s grant); the last one shortened to end at the 32 s cap.
        assert_eq!(renewals_at, vec![5, 10, 15, 20, 25]);
        assert_eq!(last.lost, 1);
        assert_eq!(guard.lost(), Some(LossReason::CapReached { max_total: Duration::from_secs(32) }));
        assert_eq!(q.now(), Nanos(32_000_000_000));
    }

    /// A wait with no practical limit (`Duration::MAX`) is a wait without
    /// one, not an `Instant` overflow.
    #[test]
    fn waiting_without_a_limit_returns_the_loss() {
        let (clock, q) = setup();
        let keeper = LeaseKeeper::manual(policy()).unwrap();
        let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).expect("a receipt of this queue");
        clock.advance(VIS);
        assert_eq!(guard.wait_lost(Duration::MAX), Some(LossReason::Expired));
        assert_eq!(guard.loss_signal().wait(Duration::MAX), Some(LossReason::Expired));
    }

    #[test]
    fn without_ticks_the_lease_is_lost_at_the_deadline() {
        let (clock, q) = setup();
        let keeper = LeaseKeeper::manual(policy()).unwrap();
        let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
        clock.advance(VIS);
        assert_eq!(guard.lost(), Some(LossReason::Expired));
        assert!(guard.check().is_err());
        assert_eq!(q.receive(1).unwrap().len(), 1, "redelivered");
    }

    #[test]
    fn a_silent_worker_stops_being_renewed_and_its_message_comes_back() {
        let (clock, q) = setup();
        let heartbeat = Duration::from_secs(8);
        let keeper = LeaseKeeper::manual(policy().heartbeat(heartbeat)).unwrap();
        let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
        // Progress every 2 s for 20 s: renewed throughout.
        for _ in 0..10 {
            clock.advance(Duration::from_secs(2));
            guard.progress();
            keeper.tick(q.now());
        }
        assert!(matches!(guard.status(), LeaseStatus::Held { .. }));
        let silent_from = q.now();
        // Then silence: renewal stops once the heartbeat is overdue at a due time.
        let redelivered = loop {
            run_for(&clock, &keeper, &q, Duration::from_secs(1), Duration::from_secs(1));
            if let Some(d) = q.receive(1).unwrap().pop() {
                break d;
            }
            assert!(q.now().saturating_since(silent_from) < Duration::from_secs(60), "never redelivered");
        };
        let reason = guard.lost().expect("lost");
        assert!(matches!(reason, LossReason::HeartbeatMissing { silent_for } if silent_for > heartbeat), "{reason}");
        // Bound: heartbeat + one grant from the last progress (docs/consumer.md).
        let back_after = redelivered.received_at.saturating_since(silent_from);
        assert!(back_after <= heartbeat + VIS, "{back_after:?}");
        assert_eq!(guard.ack(), Err(LeaseError::Stale));
    }

    #[test]
    fn a_refused_renewal_is_reported_before_the_next_effect() {
        let (clock, q) = setup();
        let keeper = LeaseKeeper::manual(policy()).unwrap();
        let d = q.receive(1).unwrap().remove(0);
        let receipt = d.receipt;
        let guard = keeper.keep(&q, d).unwrap();
        let fired = Arc::new(AtomicU32::new(0));
        let seen = fired.clone();
        guard.on_lost(move |reason| {
            assert_eq!(*reason, LossReason::Refused(LeaseError::Stale));
            seen.fetch_add(1, StdOrdering::SeqCst);
        });
        // Someone else holding the same receipt releases it; another consumer
        // takes the message. The worker does not know yet.
        q.release(&receipt, Duration::ZERO).unwrap();
        let other = q.receive(1).unwrap().remove(0);
        assert!(guard.check().is_ok(), "nothing has told the guard yet");
        clock.advance(Duration::from_secs(5));
        let tick = keeper.tick(q.now());
        assert_eq!(tick.lost, 1);
        assert_eq!(fired.load(StdOrdering::SeqCst), 1);
        let lost = guard.check().unwrap_err();
        assert_eq!(lost.reason, LossReason::Refused(LeaseError::Stale));
        assert!(!guard.is_held());
        keeper.tick(q.now());
        assert_eq!(fired.load(StdOrdering::SeqCst), 1, "announced once");
        drop(guard);
        q.ack(&other.receipt).unwrap();
    }

    #[test]
    fn the_cap_ends_renewal_at_the_cap() {
        let (clock, q) = setup();
        let cap = Duration::from_secs(25);
        let keeper = LeaseKeeper::manual(policy().max_total(cap)).unwrap();
        let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
        run_for(&clock, &keeper, &q, Duration::from_secs(24), Duration::from_secs(1));
        assert_eq!(
            guard.status(),
            LeaseStatus::Ending { reason: LossReason::CapReached { max_total: cap }, deadline: Nanos(25_000_000_000) }
        );
        run_for(&clock, &keeper, &q, Duration::from_secs(1), Duration::from_secs(1));
        assert_eq!(guard.lost(), Some(LossReason::CapReached { max_total: cap }));
        assert_eq!(q.receive(1).unwrap().len(), 1);
    }

    #[test]
    fn renewal_limit() {
        let (clock, q) = setup();
        let keeper = LeaseKeeper::manual(policy().max_renewals(2)).unwrap();
        let guard = keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap();
        run_for(&clock, &keeper, &q, Duration::from_secs(30), Duration::from_secs(1));
        assert_eq!(guard.lost(), Some(LossReason::RenewalLimit { renewals: 2 }));
        assert_eq!(q.stats().extensions, 2);
    }

    #[test]
    fn dropping_a_guard_releases_or_lets_expire() {
        let (clock, q) = setup();
        let keeper = LeaseKeeper::manual(policy()).unwrap();
        drop(keeper.keep(&q, q.receive(1).unwrap().remove(0)).unwrap());
        let again = q.receive(1).unwrap().remove(0);
        assert_eq!(again.delivery_count, 2, "released at once");
        let mut guard = keeper.keep(&q, again).unwrap();
        guard.set_drop_action(DropAction::LetExpire);
        drop(guard);
        keeper.tick(q.now());
        assert!(keeper.is_empty());
        assert!(q.receive(1).unwrap().is_empty(), "still leased until its deadline");
        clock.advance(VIS);
        assert_eq!(q.receive(1).unwrap()[0].delivery_count, 3);
    }

    #[test]
    fn release_all_hands_messages_back_and_tells_the_guards() {
        let (_clock, q) = setup();
        q.send(b"second").unwrap();
        let keeper = LeaseKeeper::manual(policy()).unwrap();
        let guards: Vec<_> = q.receive(2).unwrap().into_iter().map(|d| keeper.keep(&q, d).unwrap()).collect();
        assert_eq!(keeper.release_all(), 2);
        for g in &guards {
            assert_eq!(g.lost(), Some(LossReason::ReleasedByKeeper));
        }
        assert_eq!(q.receive(2).unwrap().len(), 2);
        for g in guards {
            assert_eq!(g.ack(), Err(LeaseError::Stale));
        }
    }

    #[test]
    fn a_delivery_handed_in_with_another_queue_is_refused_and_handed_back() {
        let clock = ManualClock::new();
        let engine = Engine::builder().clock(clock.clone()).build();
        let q = engine.create_queue("jobs", QueueConfig::default().visibility_timeout(VIS)).unwrap();
        let sibling = engine.create_queue("other", QueueConfig::default()).unwrap();
        let foreign =
            Engine::builder().clock(clock.clone()).build().create_queue("jobs", QueueConfig::default()).unwrap();
        q.send(b"job").unwrap();
        let d = q.receive(1).unwrap().remove(0);
        let keeper = LeaseKeeper::manual(policy()).unwrap();

        let refused = keeper.keep(&sibling, d.clone()).unwrap_err();
        assert_eq!(refused.reason, ReceiptError::WrongQueue { presented_to: "other".into() });
        assert!(refused.to_string().contains("another queue"), "{refused}");
        let refused = keeper.keep(&foreign, d.clone()).unwrap_err();
        assert_eq!(refused.reason, ReceiptError::WrongEngine);
        assert!(keeper.is_empty(), "nothing kept");

        // The delivery comes back whole and its lease on `q` is untouched.
        let back = refused.into_delivery();
        assert_eq!(back, d);
        let guard = keeper.keep(&q, back).unwrap();
        clock.advance(VIS / 2);
        assert_eq!(keeper.tick(q.now()).renewed, 1);
        assert!(guard.is_held());
        guard.ack().unwrap();
    }

    #[test]
    fn an_invalid_policy_is_refused() {
        let err = LeaseKeeper::manual(policy().renew_after(2.0)).unwrap_err();
        assert_eq!(err.field, "renew_after");
    }
}
