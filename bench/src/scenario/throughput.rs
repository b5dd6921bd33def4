//! Throughput: P producers and C consumers for a fixed time; messages per
//! second end to end (acked) and per operation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leaseq_bench::{Setup, Subject};
use serde_json::{Value, json};

use super::payload;

/// One throughput configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    pub(crate) producers: usize,
    pub(crate) consumers: usize,
    pub(crate) batch: usize,
    pub(crate) payload: usize,
    pub(crate) duration: Duration,
}

/// What a throughput run measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rates {
    pub(crate) acked_per_s: f64,
    pub(crate) sent_per_s: f64,
    pub(crate) received_per_s: f64,
    /// Receive calls that found nothing, per second (consumers outran producers).
    pub(crate) empty_receives_per_s: f64,
}

impl Rates {
    /// Field-wise median of several runs.
    pub(crate) fn median(runs: &[Rates]) -> Rates {
        let m = |f: fn(&Rates) -> f64| super::median(&runs.iter().map(f).collect::<Vec<_>>());
        Rates {
            acked_per_s: m(|r| r.acked_per_s),
            sent_per_s: m(|r| r.sent_per_s),
            received_per_s: m(|r| r.received_per_s),
            empty_receives_per_s: m(|r| r.empty_receives_per_s),
        }
    }

    pub(crate) fn to_json(self) -> Value {
        json!({"acked_per_s": self.acked_per_s, "sent_per_s": self.sent_per_s,
               "received_per_s": self.received_per_s, "empty_receives_per_s": self.empty_receives_per_s})
    }
}

/// Runs `load` on a fresh `S` (one shard per thread for the engine).
pub(crate) fn run<S: Subject>(load: Load) -> Rates {
    let threads = load.producers + load.consumers;
    let setup = Setup { shards: threads.max(1), capacity: 1 << 16, ..Setup::default() };
    let queue = Arc::new(S::build(&setup));
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let barrier = Arc::new(std::sync::Barrier::new(threads + 1));
    let mut handles = Vec::new();
    for _ in 0..load.producers {
        let (queue, stop, counts, barrier) = (queue.clone(), stop.clone(), counts.clone(), barrier.clone());
        handles.push(std::thread::spawn(move || {
            let body = payload(load.payload);
            let mut sent = 0u64;
            barrier.wait();
            while !stop.load(Ordering::Relaxed) {
                let n = if load.batch == 1 {
                    usize::from(queue.send(body.clone()))
                } else {
                    queue.send_batch(vec![body.clone(); load.batch])
                };
                if n == 0 {
                    // Full: the consumers are behind.
                    std::thread::yield_now();
                }
                sent += n as u64;
            }
            counts[0].fetch_add(sent, Ordering::Relaxed);
        }));
    }
    for _ in 0..load.consumers {
        let (queue, stop, counts, barrier) = (queue.clone(), stop.clone(), counts.clone(), barrier.clone());
        handles.push(std::thread::spawn(move || {
            let (mut received, mut acked, mut empty) = (0u64, 0u64, 0u64);
            let mut receipts = Vec::with_capacity(load.batch);
            let mut deliveries = Vec::with_capacity(load.batch);
            barrier.wait();
            while !stop.load(Ordering::Relaxed) {
                deliveries.clear();
                queue.receive_into(load.batch, &mut deliveries);
                if deliveries.is_empty() {
                    empty += 1;
                    std::hint::spin_loop();
                    continue;
                }
                received += deliveries.len() as u64;
                if load.batch == 1 {
                    acked += u64::from(queue.ack(S::receipt(&deliveries[0])));
                } else {
                    receipts.clear();
                    receipts.extend(deliveries.iter().map(|d| S::receipt(d).clone()));
                    acked += queue.ack_batch(&receipts) as u64;
                }
            }
            counts[1].fetch_add(received, Ordering::Relaxed);
            counts[2].fetch_add(acked, Ordering::Relaxed);
            counts[3].fetch_add(empty, Ordering::Relaxed);
        }));
    }
    barrier.wait();
    let started = Instant::now();
    std::thread::sleep(load.duration);
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    for h in handles {
        h.join().expect("a throughput thread panicked");
    }
    let per_s = |i: usize| counts[i].load(Ordering::Relaxed) as f64 / elapsed;
    Rates { sent_per_s: per_s(0), received_per_s: per_s(1), acked_per_s: per_s(2), empty_receives_per_s: per_s(3) }
}
