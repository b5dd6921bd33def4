//! Full cycles: each of T threads sends, receives and acks one message at a
//! time (16-byte payloads), for 1, 2, 4... threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leaseq_bench::{Setup, Subject};

use super::payload;

/// Cycles per second of `threads` threads, each a home shard of the engine's
/// queue (the others reachable by stealing).
pub(crate) fn full_cycles<S: Subject>(threads: usize, duration: Duration) -> f64 {
    let setup = Setup { shards: threads, capacity: 1 << 16, ..Setup::default() };
    let queue = Arc::new(S::build(&setup));
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(std::sync::Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (queue, stop, total, barrier) = (queue.clone(), stop.clone(), total.clone(), barrier.clone());
            std::thread::spawn(move || {
                let body = payload(16);
                let mut cycles = 0u64;
                let mut deliveries = Vec::with_capacity(1);
                barrier.wait();
                while !stop.load(Ordering::Relaxed) {
                    // Check the stop flag once per 64 cycles only.
                    for _ in 0..64 {
                        queue.send(body.clone());
                        deliveries.clear();
                        queue.receive_into(1, &mut deliveries);
                        if let Some(d) = deliveries.first() {
                            cycles += u64::from(queue.ack(S::receipt(d)));
                        }
                    }
                }
                total.fetch_add(cycles, Ordering::Relaxed);
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    for h in handles {
        h.join().expect("a cycle thread panicked");
    }
    total.load(Ordering::Relaxed) as f64 / elapsed
}
