//! Full cycles: each of T threads sends, receives and acks one message at a
//! time (16-byte payloads), for 1, 2, 4... threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leaseq_bench::{CycleQueue, Setup};

use super::payload;

/// What a full-cycle run measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cycles {
    /// Cycles per second of wall time, all threads together.
    pub(crate) per_s: f64,
    /// CPU time the worker threads spent per cycle (nanoseconds): what a cycle
    /// costs, whatever share of the machine the threads got.
    pub(crate) cpu_ns_per_cycle: f64,
}

/// The calling thread's time on a CPU so far, in nanoseconds (Linux
/// schedstat; `None` elsewhere).
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Full cycles of `threads` threads, each a home shard of the engine's queue
/// (the others reachable by stealing). `same_clock` gives the baseline the
/// engine's clock (see `Setup::baseline_on_engine_clock`).
pub(crate) fn full_cycles<S: CycleQueue>(threads: usize, duration: Duration, same_clock: bool) -> Cycles {
    let setup = Setup { shards: threads, capacity: 1 << 16, baseline_on_engine_clock: same_clock, ..Setup::default() };
    cycles_on::<S>(&setup, threads, duration)
}

/// `threads` threads on one queue built from `setup`, each looping send,
/// receive(1), ack of its own 16-byte message for `duration`.
pub(crate) fn cycles_on<S: CycleQueue>(setup: &Setup, threads: usize, duration: Duration) -> Cycles {
    let queue = Arc::new(S::build(setup));
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let cpu = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(std::sync::Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (queue, stop, total, cpu, barrier) =
                (queue.clone(), stop.clone(), total.clone(), cpu.clone(), barrier.clone());
            std::thread::spawn(move || {
                let body = payload(16);
                let mut cycles = 0u64;
                let mut deliveries = Vec::with_capacity(1);
                barrier.wait();
                let cpu_before = thread_cpu_ns();
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
                if let (Some(before), Some(after)) = (cpu_before, thread_cpu_ns()) {
                    cpu.fetch_add(after.saturating_sub(before), Ordering::Relaxed);
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
    let cycles = total.load(Ordering::Relaxed) as f64;
    Cycles { per_s: cycles / elapsed, cpu_ns_per_cycle: cpu.load(Ordering::Relaxed) as f64 / cycles.max(1.0) }
}
