//! Two threads doing full cycles (send, receive, ack) on one queue, engine
//! and baseline: `contention/full_cycle_2t/<engine|baseline>`; each iteration
//! is 1000 cycles per thread.
//!
//! Timed: wall time from the barrier until both threads finished, so the
//! engine's driver thread (filing timer entries off the callers' threads)
//! competes for the same cores inside the measurement.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use leaseq_bench::{BaselineQueue, EngineSubject, Setup, Subject};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CYCLES: u64 = 1000;

fn two_threads<S: Subject>(c: &mut Criterion) {
    let mut group = c.benchmark_group("contention");
    group.throughput(Throughput::Elements(2 * CYCLES));
    group.bench_function(BenchmarkId::new("full_cycle_2t", S::NAME), |b| {
        let q = Arc::new(S::build(&Setup { shards: 2, ..Setup::default() }));
        b.iter_custom(|iterations| {
            let barrier = Arc::new(Barrier::new(2));
            let worker = {
                let (q, barrier) = (q.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    cycles(&*q, iterations)
                })
            };
            barrier.wait();
            let started = Instant::now();
            cycles(&*q, iterations);
            worker.join().expect("worker panicked");
            started.elapsed()
        });
    });
    group.finish();
}

fn cycles<S: Subject>(q: &S, iterations: u64) {
    for _ in 0..iterations * CYCLES {
        q.send(Bytes::from_static(b"0123456789abcdef"));
        if let Some(d) = q.receive(1).first() {
            q.ack(S::receipt(d));
        }
    }
}

fn all(c: &mut Criterion) {
    two_threads::<EngineSubject>(c);
    two_threads::<BaselineQueue>(c);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    targets = all
}
criterion_main!(benches);
