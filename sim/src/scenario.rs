//! What a simulation run is: the workload, the workers, and the lease policy.
//!
//! Invariant: a `Scenario` is plain data; together with its seed it fully
//! determines a run (`simulate` reads no wall clock and no global state).

use std::fmt;
use std::time::Duration;

use leaseq::Backoff;
use leaseq::consumer::LeasePolicy;

use crate::rng::Durations;

/// How consumers hold their leases.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// Receive with a fixed visibility timeout and never extend.
    Fixed {
        /// The visibility timeout.
        timeout: Duration,
    },
    /// Receive with a short timeout and let a lease keeper renew it while the
    /// worker is alive (the consumer module's `LeasePolicy`, driven in
    /// virtual time).
    Renewing {
        /// The visibility of the receive (the first grant).
        timeout: Duration,
        /// When and how far the keeper renews, and its bounds.
        keeper: LeasePolicy,
    },
}

impl Policy {
    /// The receive visibility.
    pub fn timeout(&self) -> Duration {
        match self {
            Policy::Fixed { timeout } | Policy::Renewing { timeout, .. } => *timeout,
        }
    }

    /// Short name for tables and file names: `fixed` or `renewing`.
    pub fn kind(&self) -> &'static str {
        match self {
            Policy::Fixed { .. } => "fixed",
            Policy::Renewing { .. } => "renewing",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Fixed { timeout } => write!(f, "fixed timeout {}", seconds(*timeout)),
            Policy::Renewing { timeout, keeper } => write!(
                f,
                "timeout {} renewed at {:.0}% (margin {}, cap {})",
                seconds(*timeout),
                keeper.renew_after * 100.0,
                seconds(keeper.min_margin),
                keeper.max_total.map_or("queue max_lease".to_string(), seconds)
            ),
        }
    }
}

/// `12.5s`-style text.
pub(crate) fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// One simulated workload and policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// A label for reports.
    pub name: String,
    /// Seed of every random draw.
    pub seed: u64,
    /// Consumer threads.
    pub workers: usize,
    /// Poisson arrival rate, messages per second.
    pub arrival_rate: f64,
    /// How long messages keep arriving.
    pub arrivals_for: Duration,
    /// How long a job takes (fixed per message: a long job is long on every
    /// attempt).
    pub durations: Durations,
    /// Probability that an attempt's worker crashes partway through.
    pub crash_probability: f64,
    /// How long a crashed worker takes to come back.
    pub restart_delay: Duration,
    /// Fraction of messages that fail on every attempt (poison).
    pub poison_fraction: f64,
    /// The lease policy.
    pub policy: Policy,
    /// Deliveries before a failing message is dead-lettered.
    pub max_receives: u32,
    /// Retry backoff of the queue.
    pub backoff: Backoff,
    /// Whether effects are idempotent (keyed by message id).
    pub idempotent: bool,
    /// How long to keep running after arrivals stop, to drain the queue.
    pub drain_for: Duration,
}

impl Scenario {
    /// The seeds' media-rendering case: jobs from seconds to many minutes
    /// (log-normal, median 60 s, p99 20 min), 50 render workers, a job every
    /// 4 s (about 70% utilisation), 1% of attempts crash, 0.5% of jobs are
    /// poison, five receives before dead-lettering.
    pub fn media_rendering(policy: Policy) -> Self {
        Scenario {
            name: "media-rendering".into(),
            seed: 42,
            workers: 50,
            arrival_rate: 0.25,
            arrivals_for: Duration::from_secs(24 * 3600),
            durations: Durations::LogNormal { median: 60.0, p99: 1200.0 },
            crash_probability: 0.01,
            restart_delay: Duration::from_secs(5),
            poison_fraction: 0.005,
            policy,
            max_receives: 5,
            backoff: Backoff::Exponential {
                base: Duration::from_secs(10),
                max: Duration::from_secs(300),
                jitter: true,
            },
            idempotent: true,
            drain_for: Duration::from_secs(6 * 3600),
        }
    }

    /// The speed case: a simulated day of a 50-worker queue at 100 msg/s with
    /// short jobs (exponential, mean 0.3 s).
    pub fn busy_day(policy: Policy) -> Self {
        Scenario {
            name: "busy-day".into(),
            seed: 7,
            workers: 50,
            arrival_rate: 100.0,
            arrivals_for: Duration::from_secs(24 * 3600),
            durations: Durations::Exponential { mean: 0.3 },
            crash_probability: 0.001,
            restart_delay: Duration::from_secs(1),
            poison_fraction: 0.001,
            policy,
            max_receives: 5,
            backoff: Backoff::Fixed(Duration::from_secs(1)),
            idempotent: true,
            drain_for: Duration::from_secs(3600),
        }
    }

    /// Checks the numbers a run needs to make sense.
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 {
            return Err("workers must be at least 1".into());
        }
        if !(self.arrival_rate.is_finite() && self.arrival_rate > 0.0) {
            return Err("arrival rate must be above zero".into());
        }
        for (name, p) in [("crash probability", self.crash_probability), ("poison fraction", self.poison_fraction)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} must be within 0..=1"));
            }
        }
        if self.max_receives == 0 {
            return Err("max receives must be at least 1".into());
        }
        if self.policy.timeout() > Duration::from_secs(12 * 3600) {
            return Err("timeout must be at most 12 h (the queue's max_visibility)".into());
        }
        if let Policy::Renewing { keeper, .. } = &self.policy {
            keeper.validate().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}
