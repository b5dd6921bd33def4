//! The workload: every connection runs the same cycle (send a batch, receive
//! up to a batch, delete what came), either as fast as the server answers
//! (closed loop) or at a fixed total rate (open loop, for latency at a given
//! load). Only requests that complete in the window after the warm-up count.
//!
//! In the open loop each connection starts its cycles on a fixed schedule;
//! how late a cycle started against its schedule is recorded as
//! `schedule_lag`, so a server that cannot hold the rate shows it instead of
//! hiding the queueing (coordinated omission) behind per-request latencies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::LoadError;
use crate::recorder::Recorder;
use crate::session::{Session, Target};

/// How often a connection runs its `reclaim` step.
const RECLAIM_EVERY: Duration = Duration::from_secs(1);

/// The shape of a run.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    /// Keep-alive connections, one worker each.
    pub(crate) connections: usize,
    /// Messages per send (and the most per receive): 1 uses the single-message
    /// requests, more the batch forms.
    pub(crate) batch: usize,
    /// Bytes per message body.
    pub(crate) body_size: usize,
    /// Run before measuring.
    pub(crate) warmup: Duration,
    /// The measured window.
    pub(crate) duration: Duration,
    /// Messages per second over all connections (open loop); `None` for the
    /// closed loop.
    pub(crate) rate: Option<f64>,
}

/// A body of printable ASCII (valid in every protocol's text framing).
pub(crate) fn body(size: usize) -> Bytes {
    let alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789";
    Bytes::from((0..size).map(|i| alphabet[i % alphabet.len()]).collect::<Vec<u8>>())
}

/// Runs the workload against `target` and returns the merged recorder.
pub(crate) async fn drive<T: Target>(target: Arc<T>, workload: &Workload) -> Result<Recorder, LoadError> {
    target.prepare().await?;
    let mut sessions = Vec::with_capacity(workload.connections);
    for index in 0..workload.connections {
        sessions.push(target.connect(index).await?);
    }
    let start = Instant::now();
    let mut workers = Vec::with_capacity(sessions.len());
    for (index, session) in sessions.into_iter().enumerate() {
        let workload = workload.clone();
        workers.push(tokio::spawn(async move { run_connection(session, index, &workload, start).await }));
    }
    let mut total = Recorder::default();
    let mut failure = None;
    for worker in workers {
        match worker.await {
            Ok(Ok(recorder)) => total.merge(recorder),
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(LoadError::new(format!("worker panicked: {e}")))),
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    target.finish().await?;
    Ok(total)
}

async fn run_connection<S: Session>(
    mut session: S,
    index: usize,
    workload: &Workload,
    start: Instant,
) -> Result<Recorder, LoadError> {
    let bodies: Vec<Bytes> = (0..workload.batch).map(|_| body(workload.body_size)).collect();
    let measure_from = start + workload.warmup;
    let end = measure_from + workload.duration;
    // Each connection's share of the rate, its starts spread evenly so the
    // connections do not fire together.
    let interval =
        workload.rate.map(|rate| Duration::from_secs_f64(workload.connections as f64 * workload.batch as f64 / rate));
    let mut next_start = interval.map(|i| start + i.mul_f64(index as f64 / workload.connections as f64));
    let mut next_reclaim = start + RECLAIM_EVERY;
    let mut recorder = Recorder::default();
    loop {
        if let (Some(scheduled), Some(interval)) = (next_start.as_mut(), interval) {
            if *scheduled >= end {
                break;
            }
            tokio::time::sleep_until((*scheduled).into()).await;
            let lag = Instant::now().saturating_duration_since(*scheduled);
            if *scheduled >= measure_from {
                recorder.record("schedule_lag", lag);
            }
            *scheduled += interval;
        }
        let began = Instant::now();
        if began >= end {
            break;
        }
        // A request counts when it completes inside the window, whenever its
        // cycle began: a server slower than the window still shows its rate.
        let in_window = |at: Instant| at >= measure_from && at <= end;

        session.send(&bodies).await?;
        let sent_at = Instant::now();
        if in_window(sent_at) {
            recorder.record("send", sent_at - began);
            recorder.sent += workload.batch as u64;
        }
        let handles = session.receive(workload.batch).await?;
        let received_at = Instant::now();
        let count = handles.len() as u64;
        if in_window(received_at) {
            recorder.record("receive", received_at - sent_at);
            recorder.empty_receives += u64::from(count == 0);
        }
        if count > 0 {
            let deleted = session.delete(handles).await?;
            let deleted_at = Instant::now();
            if in_window(deleted_at) {
                recorder.record("delete", deleted_at - received_at);
                recorder.acked += deleted;
                recorder.lost_leases += count - deleted.min(count);
            }
        }
        if received_at >= next_reclaim {
            next_reclaim = received_at + RECLAIM_EVERY;
            let began = Instant::now();
            if let Some(reclaimed) = session.reclaim().await? {
                let deleted = if reclaimed.is_empty() { 0 } else { session.delete(reclaimed).await? };
                let done = Instant::now();
                if in_window(done) {
                    recorder.record("reclaim", done - began);
                    recorder.acked += deleted;
                }
            }
        }
    }
    Ok(recorder)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// An in-process queue, to check the driver's bookkeeping.
    #[derive(Default)]
    struct LocalQueue(Arc<Mutex<VecDeque<u32>>>);

    struct LocalSession(Arc<Mutex<VecDeque<u32>>>);

    impl Session for LocalSession {
        type Handle = u32;
        async fn send(&mut self, bodies: &[Bytes]) -> Result<(), LoadError> {
            let mut queue = self.0.lock().unwrap();
            queue.extend((0..bodies.len()).map(|i| i as u32));
            Ok(())
        }
        async fn receive(&mut self, max: usize) -> Result<Vec<u32>, LoadError> {
            let mut queue = self.0.lock().unwrap();
            let n = max.min(queue.len());
            Ok(queue.drain(..n).collect())
        }
        async fn delete(&mut self, handles: Vec<u32>) -> Result<u64, LoadError> {
            Ok(handles.len() as u64)
        }
    }

    impl Target for LocalQueue {
        type Session = LocalSession;
        async fn prepare(&self) -> Result<(), LoadError> {
            Ok(())
        }
        async fn connect(&self, _index: usize) -> Result<LocalSession, LoadError> {
            Ok(LocalSession(self.0.clone()))
        }
        async fn finish(&self) -> Result<(), LoadError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn open_loop_holds_its_rate_and_counts_every_delete() {
        let workload = Workload {
            connections: 4,
            batch: 10,
            body_size: 100,
            warmup: Duration::from_millis(100),
            duration: Duration::from_millis(500),
            rate: Some(8000.0),
        };
        let recorder = drive(Arc::new(LocalQueue::default()), &workload).await.unwrap();
        // 8000 msg/s for 0.5 s is 4000 messages; the timer's granularity
        // allows some slack.
        assert!((3000..=4400).contains(&recorder.sent), "sent {}", recorder.sent);
        assert_eq!(recorder.acked, recorder.sent);
        let p = recorder.percentiles();
        assert!(p.contains_key("schedule_lag") && p.contains_key("delete"));
    }
}
