//! Single-thread micro-benchmarks of each lifecycle operation, engine and
//! baseline side by side: ids `lifecycle/<operation>/<engine|baseline>`.
//!
//! What is and is not in the timed region: every call is timed on the
//! calling thread, on both sides, and no clock is advanced (30 s leases, so
//! no expiry falls inside a run). One asymmetry is the engine's design, not
//! the harness's: a receive queues its lease's timer entry in a lock-free
//! inbox that the engine's driver thread files into the timing wheel (and
//! sweeps once the lease ended) off the caller's thread, while the baseline
//! pushes onto its heap inside the receive. These figures are therefore the
//! caller's latency, not total CPU per operation; the load generator's
//! throughput rows (`cargo run --release -p leaseq-bench -- run`) include the
//! driver's share, since it competes for the same cores.

use std::time::Duration;

use bytes::Bytes;
use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use leaseq_bench::{BaselineQueue, EngineSubject, Setup, Subject};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn payload() -> Bytes {
    Bytes::from_static(b"0123456789abcdef")
}

fn setup() -> Setup {
    Setup { shards: 1, capacity: 1 << 20, visibility: Duration::from_secs(30), ..Setup::default() }
}

fn each<S: Subject>(c: &mut Criterion) {
    let mut group = c.benchmark_group("lifecycle");
    let who = S::NAME;

    // send: bursts of 1000 sends into an empty queue, drained between bursts
    // outside the measurement.
    group.bench_function(BenchmarkId::new("send", who), |b| {
        let q = S::build(&setup());
        b.iter_batched(
            || drain(&q),
            |()| {
                for _ in 0..1000 {
                    q.send(payload());
                }
            },
            BatchSize::PerIteration,
        );
    });

    group.bench_function(BenchmarkId::new("receive_ack", who), |b| {
        let q = S::build(&setup());
        for _ in 0..1024 {
            q.send(payload());
        }
        b.iter(|| {
            let d = q.receive(1);
            let d = &d[0];
            q.ack(S::receipt(d));
            q.send(payload());
        });
    });

    group.bench_function(BenchmarkId::new("receive_extend_ack", who), |b| {
        let q = S::build(&setup());
        for _ in 0..1024 {
            q.send(payload());
        }
        b.iter(|| {
            let d = q.receive(1);
            let d = &d[0];
            q.extend(S::receipt(d), Duration::from_secs(60));
            q.ack(S::receipt(d));
            q.send(payload());
        });
    });

    group.bench_function(BenchmarkId::new("receive_release", who), |b| {
        let q = S::build(&setup());
        for _ in 0..1024 {
            q.send(payload());
        }
        b.iter(|| {
            let d = q.receive(1);
            q.release(S::receipt(&d[0]));
        });
    });

    group.bench_function(BenchmarkId::new("receive10_ack_batch", who), |b| {
        let q = S::build(&setup());
        for _ in 0..1024 {
            q.send(payload());
        }
        let mut receipts = Vec::with_capacity(10);
        b.iter(|| {
            let ds = q.receive(10);
            receipts.clear();
            receipts.extend(ds.iter().map(|d| S::receipt(d).clone()));
            q.ack_batch(&receipts);
            q.send_batch(vec![payload(); 10]);
        });
    });
    group.finish();
}

fn drain<S: Subject>(q: &S) {
    loop {
        let ds = q.receive(1024);
        if ds.is_empty() {
            return;
        }
        for d in &ds {
            q.ack(S::receipt(d));
        }
    }
}

fn receipts(c: &mut Criterion) {
    let q = EngineSubject::build(&setup());
    q.send(payload());
    let d = q.receive(1).remove(0);
    let text = d.receipt.to_string();
    let mut group = c.benchmark_group("receipt");
    group.bench_function("format", |b| b.iter(|| std::hint::black_box(&d.receipt).to_string()));
    group.bench_function("parse", |b| {
        b.iter(|| std::hint::black_box(&text).parse::<leaseq::Receipt>().expect("a receipt we formatted"))
    });
    group.finish();
}

fn all(c: &mut Criterion) {
    each::<EngineSubject>(c);
    each::<BaselineQueue>(c);
    receipts(c);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    targets = all
}
criterion_main!(benches);
