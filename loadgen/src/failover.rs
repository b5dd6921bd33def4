//! Failover time: a light load of full cycles (send one message, receive,
//! delete what came) runs on connections spread over a cluster's nodes;
//! then the leader's process is killed (SIGKILL) and each connection times
//! how long until a cycle that began after the kill completes with its send
//! confirmed and a message received. Requiring the send as well as the
//! receive keeps a client-side buffer (AMQP's prefetched deliveries) from
//! passing for a server that answers again.
//!
//! A request that fails, or takes longer than `--op-timeout`, drops the
//! connection, which reopens on the next node of the list (as a client with
//! a list of nodes would), so recovery is always through a surviving node.
//! The kill's instant is taken just before `kill -9` is spawned, so the
//! figures include that spawn (about a millisecond), never less than the
//! real time.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::TargetArgs;
use crate::error::LoadError;
use crate::session::{Session, Target};
use crate::workload::body;

/// Flags of `leaseq-loadgen failover`.
#[derive(Debug, clap::Args)]
pub(crate) struct FailoverArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// A shell command that prints the process id of the leader to kill; run
    /// once the load is steady, so it may look the leader up then.
    #[arg(long)]
    pub(crate) leader_pid_command: String,
    /// Connections, spread over the nodes of --address.
    #[arg(long, default_value_t = 6)]
    pub(crate) connections: usize,
    /// Milliseconds between the starts of one connection's cycles.
    #[arg(long, default_value_t = 20)]
    pub(crate) interval_ms: u64,
    /// Seconds of load before the kill.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) before: f64,
    /// Seconds one request may take before its connection moves to the next node.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) op_timeout: f64,
    /// Seconds after the kill after which a connection that has not recovered gives up.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) give_up: f64,
    /// Repetition number, for the report.
    #[arg(long, default_value_t = 1)]
    pub(crate) round: u32,
    /// Append the result as one JSON line to this file.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
}

/// One kill's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FailoverResult {
    pub(crate) label: String,
    pub(crate) protocol: String,
    pub(crate) round: u32,
    pub(crate) connections: usize,
    pub(crate) killed_pid: u32,
    /// Milliseconds from the kill to the first cycle completed on any
    /// connection; `None` if none recovered before giving up.
    pub(crate) first_ms: Option<f64>,
    /// Milliseconds until every connection had completed one.
    pub(crate) all_ms: Option<f64>,
    /// Requests after the kill that failed or timed out (each moved its
    /// connection to the next node).
    pub(crate) errors: u64,
    /// Cycles with a message received before the kill (the load was running).
    pub(crate) cycles_before: u64,
}

impl FailoverResult {
    /// One line for the terminal.
    pub(crate) fn summary(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.0} ms"));
        format!(
            "{} failover (killed pid {}): first cycle after {}, every connection after {}; {} failed requests \
             after the kill, {} cycles before it",
            self.label,
            self.killed_pid,
            ms(self.first_ms),
            ms(self.all_ms),
            self.errors,
            self.cycles_before
        )
    }
}

/// What one connection saw.
#[derive(Debug, Default)]
struct ConnectionOutcome {
    recovered_after: Option<Duration>,
    errors_after_kill: u64,
    cycles_before: u64,
}

/// The probe's timing settings, shared by the connections.
#[derive(Debug, Clone, Copy)]
struct Pace {
    interval: Duration,
    op_timeout: Duration,
    give_up: Duration,
}

async fn within<T>(limit: Duration, what: &str, f: impl Future<Output = Result<T, LoadError>>) -> Result<T, LoadError> {
    tokio::time::timeout(limit, f).await.map_err(|_| LoadError::new(format!("{what} took over {limit:?}")))?
}

/// One full cycle; `Ok(true)` when a message came.
async fn cycle<S: Session>(session: &mut S, bodies: &[bytes::Bytes], limit: Duration) -> Result<bool, LoadError> {
    within(limit, "send", session.send(bodies)).await?;
    let handles = within(limit, "receive", session.receive(1)).await?;
    if handles.is_empty() {
        return Ok(false);
    }
    within(limit, "delete", session.delete(handles)).await?;
    Ok(true)
}

async fn run_connection<T: Target>(
    target: Arc<T>,
    first: T::Session,
    index: usize,
    killed: Arc<OnceLock<Instant>>,
    steady: Arc<AtomicU64>,
    pace: Pace,
) -> ConnectionOutcome {
    let bodies = vec![body(100)];
    let mut session = Some(first);
    let mut node = index;
    let mut outcome = ConnectionOutcome::default();
    let mut ticks = tokio::time::interval(pace.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let began = Instant::now();
        let kill = killed.get().copied();
        if kill.is_some_and(|at| began - at > pace.give_up) {
            return outcome;
        }
        let result = match session.as_mut() {
            Some(open) => cycle(open, &bodies, pace.op_timeout).await,
            None => match within(pace.op_timeout, "connect", target.connect(node)).await {
                Ok(open) => {
                    session = Some(open);
                    continue;
                }
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(true) => match kill {
                Some(at) if began >= at => {
                    outcome.recovered_after = Some(Instant::now() - at);
                    return outcome;
                }
                Some(_) => {}
                None => {
                    outcome.cycles_before += 1;
                    // Only a count for the kill's go-ahead: no ordering needed.
                    steady.fetch_add(1, Ordering::Relaxed);
                }
            },
            Ok(false) => {}
            Err(_) => {
                if killed.get().is_some() {
                    outcome.errors_after_kill += 1;
                }
                // Another node may serve: this one is dead or lost its leader.
                session = None;
                node += 1;
            }
        }
    }
}

fn leader_pid(command: &str) -> Result<u32, LoadError> {
    let output = std::process::Command::new("sh").arg("-c").arg(command).output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(LoadError::new(format!(
            "--leader-pid-command failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    text.trim()
        .parse()
        .map_err(|_| LoadError::new(format!("--leader-pid-command printed '{}', not a process id", text.trim())))
}

/// Runs the probe against `target`: load, kill, time the recovery.
pub(crate) async fn probe<T: Target>(
    target: Arc<T>,
    args: &FailoverArgs,
    protocol: &str,
) -> Result<FailoverResult, LoadError> {
    if args.connections == 0 || args.interval_ms == 0 {
        return Err(LoadError::new("--connections and --interval-ms must be positive"));
    }
    let pace = Pace {
        interval: Duration::from_millis(args.interval_ms),
        op_timeout: Duration::from_secs_f64(args.op_timeout),
        give_up: Duration::from_secs_f64(args.give_up),
    };
    target.prepare().await?;
    let killed = Arc::new(OnceLock::new());
    let steady = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::with_capacity(args.connections);
    for index in 0..args.connections {
        let session = target.connect(index).await?;
        let connection = run_connection(target.clone(), session, index, killed.clone(), steady.clone(), pace);
        workers.push(tokio::spawn(connection));
    }
    tokio::time::sleep(Duration::from_secs_f64(args.before)).await;
    if steady.load(Ordering::Relaxed) == 0 {
        // Nothing to fail over from: killing now would time a cluster that never served.
        return Err(LoadError::new(format!(
            "no cycle completed in the {} s before the kill; the leader was left alone",
            args.before
        )));
    }
    let pid = leader_pid(&args.leader_pid_command)?;
    let at = Instant::now();
    let status = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status()?;
    if !status.success() {
        return Err(LoadError::new(format!("kill -KILL {pid} failed ({status})")));
    }
    let _ = killed.set(at);
    let mut outcomes = Vec::with_capacity(workers.len());
    for worker in workers {
        outcomes.push(worker.await.map_err(|e| LoadError::new(format!("probe connection panicked: {e}")))?);
    }
    // Removing the queue is a courtesy: the cluster is torn down after this.
    let _ = tokio::time::timeout(pace.op_timeout, target.finish()).await;
    Ok(summarize(&args.target.label, protocol, args.round, pid, &outcomes))
}

fn summarize(label: &str, protocol: &str, round: u32, pid: u32, outcomes: &[ConnectionOutcome]) -> FailoverResult {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let recovered: Vec<f64> = outcomes.iter().filter_map(|o| o.recovered_after.map(ms)).collect();
    FailoverResult {
        label: label.to_string(),
        protocol: protocol.to_string(),
        round,
        connections: outcomes.len(),
        killed_pid: pid,
        first_ms: recovered.iter().copied().reduce(f64::min),
        all_ms: (recovered.len() == outcomes.len()).then(|| recovered.iter().copied().fold(0.0, f64::max)),
        errors: outcomes.iter().map(|o| o.errors_after_kill).sum(),
        cycles_before: outcomes.iter().map(|o| o.cycles_before).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ms: Option<u64>) -> ConnectionOutcome {
        ConnectionOutcome { recovered_after: ms.map(Duration::from_millis), errors_after_kill: 1, cycles_before: 10 }
    }

    #[test]
    fn first_is_the_quickest_connection_and_all_needs_every_one() {
        let r = summarize("x", "sqs", 1, 7, &[outcome(Some(300)), outcome(Some(120)), outcome(Some(900))]);
        assert_eq!((r.first_ms, r.all_ms, r.errors, r.cycles_before), (Some(120.0), Some(900.0), 3, 30));
        let r = summarize("x", "sqs", 1, 7, &[outcome(Some(300)), outcome(None)]);
        assert_eq!((r.first_ms, r.all_ms), (Some(300.0), None));
        let r = summarize("x", "sqs", 1, 7, &[outcome(None)]);
        assert_eq!((r.first_ms, r.all_ms), (None, None));
    }

    #[test]
    fn the_leader_command_must_print_a_pid() {
        assert_eq!(leader_pid("echo 42").unwrap(), 42);
        assert!(leader_pid("echo leader").unwrap_err().0.contains("not a process id"));
        assert!(leader_pid("exit 3").unwrap_err().0.contains("failed"));
    }
}
