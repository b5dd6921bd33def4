//! The lease policy: when a keeper renews a lease, for how long, and when it
//! stops so that a stuck worker's message is recovered.
//!
//! Invariant: every renewal decision is a pure function of
//! (`LeasePolicy`, `LeaseState`, now) — [`LeasePolicy::decide`]. Nothing here
//! reads a clock or touches a queue, so a simulator can drive it step by step
//! in virtual time and get the same answers the background keeper gets on the
//! real clock.
//!
//! The rules, for one attempt whose current grant runs from `granted_at` to
//! `deadline` (interval `I`):
//!
//! * renewal is due at `granted_at + min(renew_after * I, I - margin)`, where
//!   `margin = min(min_margin, I / 2)`: with slack, never at the deadline;
//! * when due, the policy's bounds are checked first: `max_renewals`, a
//!   missing `heartbeat` (no `progress()` for that long), and the total lease
//!   cap (`max_total`, and the queue's own `max_lease`). A bound reached means
//!   no more renewals: the lease runs out at its deadline and the message is
//!   redelivered;
//! * a renewal asks for `extend_by` (default: the attempt's first grant),
//!   shortened so the attempt never holds the message past its cap;
//! * at or after the deadline the lease is lost, whatever else holds.

use std::fmt;
use std::time::Duration;

use crate::clock::{Nanos, duration_nanos};
use crate::delivery::Delivery;
use crate::error::LeaseError;

/// What dropping an unfinished [`LeaseGuard`](super::LeaseGuard) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DropAction {
    /// Release the message at once (no delay): another consumer can take it
    /// without waiting out the lease. The default.
    #[default]
    Release,
    /// Stop renewing and let the lease run out: the message comes back at the
    /// deadline (useful when a dropped guard may mean an effect is still
    /// under way elsewhere).
    LetExpire,
}

/// How a [`LeaseKeeper`](super::LeaseKeeper) holds leases.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LeasePolicy {
    /// Fraction of the current grant after which renewal is due, in (0, 1).
    /// Default 0.5.
    pub renew_after: f64,
    /// Renew at least this long before the deadline (capped at half the
    /// grant, so renewals never come more often than twice a grant). It
    /// absorbs scheduling delay of the keeper thread. Default 1 s.
    pub min_margin: Duration,
    /// Visibility each renewal asks for; `None` repeats the attempt's first
    /// grant (the receive's visibility). Clamped to the queue's
    /// `max_visibility`.
    pub extend_by: Option<Duration>,
    /// Longest total lease of one attempt, from its receive; `None` leaves
    /// only the queue's `max_lease`. Default 1 hour.
    pub max_total: Option<Duration>,
    /// Most renewals of one attempt; `None` for no count limit.
    pub max_renewals: Option<u32>,
    /// If set, renew only while the worker called `LeaseGuard::progress`
    /// within this long (a stuck worker stops being renewed).
    pub heartbeat: Option<Duration>,
    /// What dropping an unfinished guard does.
    pub on_drop: DropAction,
}

impl Default for LeasePolicy {
    fn default() -> Self {
        LeasePolicy {
            renew_after: 0.5,
            min_margin: Duration::from_secs(1),
            extend_by: None,
            max_total: Some(Duration::from_secs(3600)),
            max_renewals: None,
            heartbeat: None,
            on_drop: DropAction::Release,
        }
    }
}

/// Chainable setters, one per field (the struct is `#[non_exhaustive]`). A
/// setter of an optional field takes the value and sets `Some`; assign the
/// field to clear it.
impl LeasePolicy {
    /// Sets [`renew_after`](Self::renew_after).
    #[must_use = "a setter returns the changed policy"]
    pub fn renew_after(mut self, fraction: f64) -> Self {
        self.renew_after = fraction;
        self
    }

    /// Sets [`min_margin`](Self::min_margin).
    #[must_use = "a setter returns the changed policy"]
    pub fn min_margin(mut self, margin: Duration) -> Self {
        self.min_margin = margin;
        self
    }

    /// Sets [`extend_by`](Self::extend_by) to `Some(visibility)`.
    #[must_use = "a setter returns the changed policy"]
    pub fn extend_by(mut self, visibility: Duration) -> Self {
        self.extend_by = Some(visibility);
        self
    }

    /// Sets [`max_total`](Self::max_total) to `Some(total)`.
    #[must_use = "a setter returns the changed policy"]
    pub fn max_total(mut self, total: Duration) -> Self {
        self.max_total = Some(total);
        self
    }

    /// Clears [`max_total`](Self::max_total): only the queue's `max_lease`
    /// bounds the lease.
    #[must_use = "a setter returns the changed policy"]
    pub fn no_max_total(mut self) -> Self {
        self.max_total = None;
        self
    }

    /// Sets [`max_renewals`](Self::max_renewals) to `Some(renewals)`.
    #[must_use = "a setter returns the changed policy"]
    pub fn max_renewals(mut self, renewals: u32) -> Self {
        self.max_renewals = Some(renewals);
        self
    }

    /// Sets [`heartbeat`](Self::heartbeat) to `Some(within)`.
    #[must_use = "a setter returns the changed policy"]
    pub fn heartbeat(mut self, within: Duration) -> Self {
        self.heartbeat = Some(within);
        self
    }

    /// Sets [`on_drop`](Self::on_drop).
    #[must_use = "a setter returns the changed policy"]
    pub fn on_drop(mut self, action: DropAction) -> Self {
        self.on_drop = action;
        self
    }
}

/// A policy field out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The field.
    pub field: &'static str,
    /// Why it is refused.
    pub reason: &'static str,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid lease policy: {} {}", self.field, self.reason)
    }
}

impl std::error::Error for PolicyError {}

/// Why a lease is no longer held, or why the keeper stopped renewing it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The queue refused a renewal: `Stale` (the message was delivered again,
    /// finished or purged since), `Expired` (the renewal came too late), or
    /// `QueueDeleted`.
    Refused(LeaseError),
    /// The deadline passed with no renewal (the keeper was not running, or
    /// fell behind by more than the margin).
    Expired,
    /// The attempt reached its total lease cap.
    CapReached {
        /// The cap that applied (the policy's `max_total` or the queue's
        /// `max_lease`, whichever is shorter).
        max_total: Duration,
    },
    /// The attempt was renewed the policy's `max_renewals` times.
    RenewalLimit {
        /// The limit.
        renewals: u32,
    },
    /// The worker did not call `progress()` within the policy's heartbeat.
    HeartbeatMissing {
        /// How long the worker had been silent when the keeper checked.
        silent_for: Duration,
    },
    /// The keeper released the message itself (a pool shutting down past its
    /// deadline), so another consumer can take it.
    ReleasedByKeeper,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::Refused(e) => write!(f, "renewal refused: {e}"),
            LossReason::Expired => write!(f, "the deadline passed without a renewal (keeper not running or starved)"),
            LossReason::CapReached { max_total } => {
                write!(f, "the attempt reached its total lease cap of {max_total:?}")
            }
            LossReason::RenewalLimit { renewals } => write!(f, "the attempt was renewed its limit of {renewals} times"),
            LossReason::HeartbeatMissing { silent_for } => {
                write!(
                    f,
                    "no progress() from the worker for {silent_for:?}; renewal stopped so the message is recovered"
                )
            }
            LossReason::ReleasedByKeeper => write!(f, "the keeper released the message (shutdown)"),
        }
    }
}

/// What a keeper knows about one attempt's lease: the input of
/// [`LeasePolicy::decide`]. All times on the engine's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    /// When the attempt was received.
    pub received_at: Nanos,
    /// When the current grant began (the receive or the last renewal).
    pub granted_at: Nanos,
    /// When the current grant runs out.
    pub deadline: Nanos,
    /// The receive's visibility (the first grant).
    pub first_grant: Duration,
    /// Renewals so far.
    pub renewals: u32,
    /// The worker's last `progress()` (the receive time until it calls it).
    pub last_progress: Nanos,
    /// The queue's `max_visibility`.
    pub queue_max_visibility: Duration,
    /// The queue's `max_lease`.
    pub queue_max_lease: Duration,
}

impl LeaseState {
    /// The state right after `delivery` was received from a queue with these
    /// limits.
    pub fn from_delivery(delivery: &Delivery, queue_max_visibility: Duration, queue_max_lease: Duration) -> Self {
        LeaseState {
            received_at: delivery.received_at,
            granted_at: delivery.received_at,
            deadline: delivery.deadline,
            first_grant: delivery.deadline.saturating_since(delivery.received_at),
            renewals: 0,
            last_progress: delivery.received_at,
            queue_max_visibility,
            queue_max_lease,
        }
    }

    /// Records a granted renewal: the lease now runs to `deadline`, granted
    /// for `visibility` (so the grant began at `deadline - visibility`).
    pub fn renewed(&mut self, deadline: Nanos, visibility: Duration) {
        self.granted_at = Nanos(deadline.0.saturating_sub(duration_nanos(visibility)));
        self.deadline = deadline;
        self.renewals = self.renewals.saturating_add(1);
    }
}

/// The policy's answer for one lease at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Nothing to do before `until` (when renewal falls due).
    Wait {
        /// When to ask again.
        until: Nanos,
    },
    /// Extend the lease now by `visibility`.
    Renew {
        /// What to ask the queue for.
        visibility: Duration,
    },
    /// A bound was reached: renew no more. The lease is still held until
    /// `deadline`, then lost for `reason`.
    Stop {
        /// Which bound.
        reason: LossReason,
        /// When the lease runs out.
        deadline: Nanos,
    },
    /// The lease is over (now is at or past its deadline).
    Lost(LossReason),
}

impl LeasePolicy {
    /// Checks every field; the error names the first one out of range.
    ///
    /// # Errors
    ///
    /// `PolicyError` naming the first field out of range and why.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let refuse = |field, reason| Err(PolicyError { field, reason });
        if !(self.renew_after.is_finite() && self.renew_after > 0.0 && self.renew_after < 1.0) {
            return refuse("renew_after", "must be a fraction strictly between 0 and 1");
        }
        if self.extend_by.is_some_and(|d| d.is_zero()) {
            return refuse("extend_by", "must be above zero");
        }
        if self.max_total.is_some_and(|d| d.is_zero()) {
            return refuse("max_total", "must be above zero");
        }
        if self.heartbeat.is_some_and(|d| d.is_zero()) {
            return refuse("heartbeat", "must be above zero");
        }
        Ok(())
    }

    /// When renewal of the current grant falls due.
    #[must_use]
    pub fn renewal_due(&self, lease: &LeaseState) -> Nanos {
        let interval = lease.deadline.0.saturating_sub(lease.granted_at.0);
        let margin = duration_nanos(self.min_margin).min(interval / 2);
        let by_fraction = (interval as f64 * self.renew_after) as u64;
        Nanos(lease.granted_at.0.saturating_add(by_fraction.min(interval - margin)))
    }

    /// The total lease cap of an attempt under this policy and the queue's.
    #[must_use]
    pub fn total_cap(&self, lease: &LeaseState) -> Duration {
        self.max_total.map_or(lease.queue_max_lease, |cap| cap.min(lease.queue_max_lease))
    }

    /// The bound that forbids renewing at `now`, if any (checked when a
    /// renewal falls due).
    fn bound_reached(&self, lease: &LeaseState, now: Nanos) -> Option<LossReason> {
        if let Some(max) = self.max_renewals {
            if lease.renewals >= max {
                return Some(LossReason::RenewalLimit { renewals: max });
            }
        }
        if let Some(heartbeat) = self.heartbeat {
            let silent_for = now.saturating_since(lease.last_progress);
            if silent_for > heartbeat {
                return Some(LossReason::HeartbeatMissing { silent_for });
            }
        }
        None
    }

    /// The decision for `lease` at `now`. Pure: same inputs, same answer.
    #[must_use]
    pub fn decide(&self, lease: &LeaseState, now: Nanos) -> Decision {
        if now >= lease.deadline {
            return Decision::Lost(self.bound_reached(lease, now).unwrap_or(LossReason::Expired));
        }
        let due = self.renewal_due(lease);
        if now < due {
            return Decision::Wait { until: due };
        }
        let stop = |reason| Decision::Stop { reason, deadline: lease.deadline };
        if let Some(reason) = self.bound_reached(lease, now) {
            return stop(reason);
        }
        let cap = self.total_cap(lease);
        let cap_ends = lease.received_at.saturating_add(cap);
        let wanted = self.extend_by.unwrap_or(lease.first_grant).min(lease.queue_max_visibility);
        let visibility = wanted.min(cap_ends.saturating_since(now));
        if now.saturating_add(visibility) <= lease.deadline {
            // The cap leaves nothing to gain: a renewal would not move the
            // deadline later.
            return stop(LossReason::CapReached { max_total: cap });
        }
        Decision::Renew { visibility }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn lease(visibility_ms: u64) -> LeaseState {
        LeaseState {
            received_at: Nanos(0),
            granted_at: Nanos(0),
            deadline: Nanos(visibility_ms * MS),
            first_grant: Duration::from_millis(visibility_ms),
            renewals: 0,
            last_progress: Nanos(0),
            queue_max_visibility: Duration::from_secs(3600),
            queue_max_lease: Duration::from_secs(3600),
        }
    }

    fn policy() -> LeasePolicy {
        LeasePolicy::default().min_margin(Duration::from_millis(10))
    }

    #[test]
    fn renews_at_the_fraction_with_slack_never_at_the_deadline() {
        let p = policy().renew_after(2.0 / 3.0);
        let l = lease(300);
        assert_eq!(p.decide(&l, Nanos(199 * MS)), Decision::Wait { until: Nanos(200 * MS) });
        assert_eq!(p.decide(&l, Nanos(200 * MS)), Decision::Renew { visibility: Duration::from_millis(300) });
        // A large margin pulls the renewal earlier, but never below half the grant.
        let p = p.min_margin(Duration::from_millis(250));
        assert_eq!(p.decide(&l, Nanos(0)), Decision::Wait { until: Nanos(150 * MS) });
        let p = p.min_margin(Duration::from_millis(120));
        assert_eq!(p.decide(&l, Nanos(0)), Decision::Wait { until: Nanos(180 * MS) });
    }

    #[test]
    fn renewed_state_moves_the_next_due_time() {
        let p = policy();
        let mut l = lease(100);
        l.renewed(Nanos(160 * MS), Duration::from_millis(100));
        assert_eq!((l.granted_at, l.renewals), (Nanos(60 * MS), 1));
        assert_eq!(p.decide(&l, Nanos(61 * MS)), Decision::Wait { until: Nanos(110 * MS) });
    }

    #[test]
    fn lost_at_the_deadline_whatever_else_holds() {
        let p = policy();
        let l = lease(100);
        assert_eq!(p.decide(&l, Nanos(100 * MS)), Decision::Lost(LossReason::Expired));
        let p = p.max_renewals(0);
        assert_eq!(p.decide(&l, Nanos(150 * MS)), Decision::Lost(LossReason::RenewalLimit { renewals: 0 }));
    }

    #[test]
    fn renewal_limit_stops_renewing() {
        let p = policy().max_renewals(2);
        let mut l = lease(100);
        l.renewals = 2;
        assert_eq!(
            p.decide(&l, Nanos(50 * MS)),
            Decision::Stop { reason: LossReason::RenewalLimit { renewals: 2 }, deadline: Nanos(100 * MS) }
        );
    }

    #[test]
    fn missing_heartbeat_stops_renewing_and_progress_resumes_it() {
        let p = policy().heartbeat(Duration::from_millis(40));
        let mut l = lease(100);
        assert_eq!(
            p.decide(&l, Nanos(50 * MS)),
            Decision::Stop {
                reason: LossReason::HeartbeatMissing { silent_for: Duration::from_millis(50) },
                deadline: Nanos(100 * MS)
            }
        );
        l.last_progress = Nanos(30 * MS);
        assert_eq!(p.decide(&l, Nanos(50 * MS)), Decision::Renew { visibility: Duration::from_millis(100) });
    }

    #[test]
    fn the_cap_shortens_the_last_renewal_then_stops() {
        let p = policy().max_total(Duration::from_millis(250));
        let mut l = lease(100);
        l.renewed(Nanos(300 * MS), Duration::from_millis(100));
        // Due at 250 ms: exactly the cap, nothing to gain.
        assert_eq!(
            p.decide(&l, Nanos(250 * MS)),
            Decision::Stop {
                reason: LossReason::CapReached { max_total: Duration::from_millis(250) },
                deadline: Nanos(300 * MS)
            }
        );
        let l = lease(100);
        let mut near = l.clone();
        near.renewed(Nanos(220 * MS), Duration::from_millis(100));
        assert_eq!(p.decide(&near, Nanos(170 * MS)), Decision::Renew { visibility: Duration::from_millis(80) });
        // The queue's max_lease caps too, and max_visibility clamps the ask.
        let mut q = lease(100);
        q.queue_max_lease = Duration::from_millis(120);
        q.queue_max_visibility = Duration::from_millis(60);
        assert_eq!(p.decide(&q, Nanos(50 * MS)), Decision::Renew { visibility: Duration::from_millis(60) });
        assert_eq!(p.total_cap(&q), Duration::from_millis(120));
    }

    #[test]
    fn extend_by_overrides_the_first_grant() {
        let p = policy().extend_by(Duration::from_millis(500));
        assert_eq!(p.decide(&lease(100), Nanos(50 * MS)), Decision::Renew { visibility: Duration::from_millis(500) });
    }

    #[test]
    fn validate_names_the_field() {
        let bad = [
            (policy().renew_after(0.0), "renew_after"),
            (policy().renew_after(1.0), "renew_after"),
            (policy().renew_after(f64::NAN), "renew_after"),
            (policy().extend_by(Duration::ZERO), "extend_by"),
            (policy().max_total(Duration::ZERO), "max_total"),
            (policy().heartbeat(Duration::ZERO), "heartbeat"),
        ];
        for (p, field) in bad {
            assert_eq!(p.validate().unwrap_err().field, field);
        }
        policy().validate().unwrap();
    }

    #[test]
    fn zero_grant_is_due_at_once_and_lost() {
        let p = policy();
        assert_eq!(p.decide(&lease(0), Nanos(0)), Decision::Lost(LossReason::Expired));
    }
}
