//! What a run measured, and how it prints.
//!
//! Invariant: every figure here was counted by the simulator from events it
//! scheduled itself, except the `engine_*` fields, which are read from the
//! engine's own `QueueStats` so the two can be compared.

use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Percentiles of a distribution of seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Median, seconds.
    pub p50: f64,
    /// 90th percentile, seconds.
    pub p90: f64,
    /// 99th percentile, seconds.
    pub p99: f64,
    /// Largest, seconds.
    pub max: f64,
}

impl Summary {
    /// From a histogram of milliseconds.
    pub(crate) fn of_millis(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Summary::default();
        }
        let s = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Summary { count: h.len(), p50: s(0.5), p90: s(0.9), p99: s(0.99), max: h.max() as f64 / 1000.0 }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 0 {
            return write!(f, "none");
        }
        write!(
            f,
            "p50 {:.1}s  p90 {:.1}s  p99 {:.1}s  max {:.1}s  (n={})",
            self.p50, self.p90, self.p99, self.max, self.count
        )
    }
}

/// The outcome of one simulation run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Scenario label.
    pub scenario: String,
    /// Policy description.
    pub policy: String,
    /// `fixed` or `renewing`.
    pub policy_kind: String,
    /// Receive visibility, seconds.
    pub timeout_secs: f64,
    /// Simulated time covered.
    pub simulated: Duration,
    /// Wall time the run took.
    pub wall: Duration,
    /// Messages sent.
    pub sent: u64,
    /// Sends refused (queue full).
    pub refused: u64,
    /// Messages whose effect was committed (healthy, completed).
    pub completed: u64,
    /// Messages still in the queue when the run stopped.
    pub unfinished: u64,
    /// Poison messages dead-lettered (correctly).
    pub dead_lettered_poison: u64,
    /// Healthy messages dead-lettered before any attempt committed their
    /// effect (wrongly: their attempts kept failing for lease reasons, not
    /// their content).
    pub dead_lettered_healthy: u64,
    /// Healthy messages whose effect was committed but whose acks kept
    /// failing until the retry ceiling dead-lettered them anyway (the
    /// signature of a timeout shorter than the job).
    pub dead_lettered_after_commit: u64,
    /// Messages neither committed, dead-lettered nor still queued at the end.
    /// Always zero unless something is broken.
    pub lost: u64,
    /// Attempts started.
    pub attempts: u64,
    /// Attempts that started while another attempt of the same message was
    /// still running.
    pub duplicate_executions: u64,
    /// Worker-seconds spent on work that produced no committed effect
    /// (duplicates, crashed attempts, poison attempts).
    pub wasted_worker_secs: f64,
    /// Worker-seconds spent working at all.
    pub busy_worker_secs: f64,
    /// Effects committed (with idempotent effects: one per completed message).
    pub effects: u64,
    /// Second commits of one message's effect that happened (non-idempotent
    /// runs) or were refused by the idempotency key (idempotent runs).
    pub duplicate_effects: u64,
    /// Worker crashes.
    pub crashes: u64,
    /// Crash to the moment the crashed attempt's lease let the message go:
    /// the deadline-driven stall, which only the lease policy decides.
    pub recovery: Summary,
    /// Crash to the message's next delivery (the stall plus any wait for a
    /// free worker).
    pub redelivery_wait: Summary,
    /// Send to committed effect.
    pub end_to_end: Summary,
    /// Completed messages per simulated second.
    pub throughput: f64,
    /// Successful acks seen by the simulator.
    pub acks: u64,
    /// Acks refused as stale.
    pub stale_acks: u64,
    /// Lease renewals granted.
    pub renewals: u64,
    /// Deliveries of a message that had been delivered before.
    pub redeliveries: u64,
    /// The engine's own counters for the same run.
    pub engine_acked: u64,
    /// Engine: late acks.
    pub engine_late_acks: u64,
    /// Engine: stale acks.
    pub engine_stale_acks: u64,
    /// Engine: expired leases.
    pub engine_expired: u64,
    /// Engine: extensions.
    pub engine_extensions: u64,
    /// Engine: redeliveries.
    pub engine_redelivered: u64,
    /// Engine: dead-lettered.
    pub engine_dead_lettered: u64,
    /// Engine: messages left (ready + delayed + in flight).
    pub engine_depth: u64,
    /// The engine's suggested visibility (p99 processing time with margin).
    pub engine_suggested_visibility: Option<Duration>,
    /// The engine's `diagnose()` summary for the run.
    pub diagnosis: String,
}

impl Report {
    /// The fields as one CSV row (see `csv_header`).
    pub fn csv_row(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{},{:.1},{:.1},{},{},{:.2},{:.2},{:.2},{:.2},{:.4},{}",
            self.scenario,
            self.policy_kind,
            self.timeout_secs,
            self.sent,
            self.completed,
            self.attempts,
            self.duplicate_executions,
            self.dead_lettered_poison,
            self.dead_lettered_healthy,
            self.wasted_worker_secs,
            self.busy_worker_secs,
            self.crashes,
            self.recovery.count,
            self.recovery.p50,
            self.recovery.p99,
            self.end_to_end.p50,
            self.end_to_end.p99,
            self.throughput,
            self.unfinished
        )
    }

    /// The CSV header matching `csv_row`.
    pub fn csv_header() -> &'static str {
        "scenario,policy,timeout_s,sent,completed,attempts,duplicate_executions,dlq_poison,dlq_healthy,wasted_worker_s,busy_worker_s,crashes,recoveries,recovery_p50_s,recovery_p99_s,e2e_p50_s,e2e_p99_s,throughput_per_s,unfinished"
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "== {} / {}", self.scenario, self.policy)?;
        writeln!(
            f,
            "simulated {:.1} h in {:.2} s wall; sent {} (refused {}), completed {}, unfinished {}",
            self.simulated.as_secs_f64() / 3600.0,
            self.wall.as_secs_f64(),
            self.sent,
            self.refused,
            self.completed,
            self.unfinished
        )?;
        writeln!(f, "throughput        {:.3} msg/s", self.throughput)?;
        writeln!(
            f,
            "duplicates        {} of {} attempts overlapped another attempt; {:.0} of {:.0} worker-s wasted ({:.1}%)",
            self.duplicate_executions,
            self.attempts,
            self.wasted_worker_secs,
            self.busy_worker_secs,
            100.0 * self.wasted_worker_secs / self.busy_worker_secs.max(1e-9)
        )?;
        writeln!(f, "effects           {} committed, {} duplicate commits", self.effects, self.duplicate_effects)?;
        writeln!(f, "crash recovery    {} crashes; lease stall {}", self.crashes, self.recovery)?;
        writeln!(f, "                  crash to redelivery {}", self.redelivery_wait)?;
        writeln!(f, "end to end        {}", self.end_to_end)?;
        writeln!(
            f,
            "dead-lettered     {} poison (correct), {} healthy (wrongly), {} after their effect committed; lost {}",
            self.dead_lettered_poison, self.dead_lettered_healthy, self.dead_lettered_after_commit, self.lost
        )?;
        writeln!(
            f,
            "engine stats      acked {} (late {}), stale {}, expired {}, extensions {}, redelivered {}, dead-lettered {}, left {}",
            self.engine_acked,
            self.engine_late_acks,
            self.engine_stale_acks,
            self.engine_expired,
            self.engine_extensions,
            self.engine_redelivered,
            self.engine_dead_lettered,
            self.engine_depth
        )?;
        if let Some(v) = self.engine_suggested_visibility {
            writeln!(f, "suggested timeout {:.1}s (engine: p99 processing x 1.5)", v.as_secs_f64())?;
        }
        if !self.diagnosis.is_empty() {
            writeln!(f, "diagnose()        {}", self.diagnosis.replace('\n', "\n                  "))?;
        }
        Ok(())
    }
}
