//! A hot loop to profile one path of the engine under `perf` or callgrind:
//!
//! ```text
//! cargo build --release -p leaseq-bench --example hot_loop
//! perf record -g target/release/examples/hot_loop cycle 5000000
//! perf record -g target/release/examples/hot_loop expiry 1000000
//! ```
//!
//! `cycle N`: one thread, N times send, receive(1), ack (16-byte payload);
//! `baseline-cycle N`: the same on the Mutex baseline.
//! `lean-cycle N`: the same on the lean baseline (`Instant` clock).
//! `expiry N`: N leases in flight expire at one deadline (`ManualClock`); the
//! fill and the firing are repeated 5 times and the firing timed.
//! `expiry-rounds N`: one queue, N leases leased and expired 200 times over.
//! `expiry-shuffled N`: as `expiry`, with the slots expiring in random order.
//! `expiry-wheel N`: as `expiry`, with the leases moved into the timing wheel
//! first (as the driver does every tick on the system clock) and the clock
//! moved a millisecond at a time, so the firing includes the wheel's
//! cascades; `expiry` takes them straight from the inbox.

use std::time::{Duration, Instant};

use bytes::Bytes;
use leaseq::{Engine, ManualClock, QueueConfig, ReceiveOptions, SystemClock};
use leaseq_bench::{BaselineQueue, LeanQueue};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("cycle", String::as_str);
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let body = Bytes::from_static(b"0123456789abcdef");
    match mode {
        "cycle" => {
            let engine = Engine::builder().default_shards(1).build();
            let q = engine.create_queue("hot", QueueConfig::default()).expect("valid config");
            let mut out = Vec::with_capacity(1);
            let started = Instant::now();
            for _ in 0..n {
                q.send(body.clone()).expect("room");
                out.clear();
                q.receive_into(1, ReceiveOptions::default(), &mut out).expect("live queue");
                q.ack(&out[0].receipt).expect("held lease");
            }
            println!("{:.1} ns per cycle", started.elapsed().as_nanos() as f64 / n as f64);
        }
        "baseline-cycle" => {
            // Instant, as in the benchmark's baseline (a hand-written queue's clock).
            let q = BaselineQueue::new(SystemClock::std(), 1 << 20, Duration::from_secs(30));
            let mut out = Vec::with_capacity(1);
            let visibility = q.default_visibility();
            let started = Instant::now();
            for _ in 0..n {
                q.send(body.clone()).expect("room");
                out.clear();
                q.receive_into(1, visibility, &mut out);
                q.ack(&out[0].receipt).expect("held lease");
            }
            println!("{:.1} ns per cycle", started.elapsed().as_nanos() as f64 / n as f64);
        }
        "lean-cycle" => {
            let q = LeanQueue::new(SystemClock::std(), 1 << 20, Duration::from_secs(600));
            let mut out = Vec::with_capacity(1);
            let started = Instant::now();
            for _ in 0..n {
                q.send(body.clone()).expect("room");
                out.clear();
                q.receive_into(1, &mut out);
                assert!(q.ack(&out[0].receipt), "held lease");
            }
            println!("{:.1} ns per cycle", started.elapsed().as_nanos() as f64 / n as f64);
        }
        "expiry" => timed_expiry(n, &body, false),
        "expiry-rounds" => {
            // One queue, N leases expiring at one deadline, 200 times over:
            // the per-firing overhead of a small N.
            let (clock, _engine, q) = filled_queue(n, &body);
            let mut total = Duration::ZERO;
            for _ in 0..200 {
                lease_all(&q, n);
                // The advance applies the expiries (the message taken by a
                // receive would stay in flight and starve the next round).
                let started = Instant::now();
                clock.advance(Duration::from_secs(30));
                total += started.elapsed();
            }
            println!("{:.1} ns per expiry", total.as_nanos() as f64 / (200 * n) as f64);
        }
        "expiry-shuffled" => timed_expiry(n, &body, true),
        "expiry-wheel" => timed_wheel_expiry(n, &body),
        other => eprintln!(
            "unknown mode '{other}': use cycle, baseline-cycle, lean-cycle, expiry, expiry-rounds, expiry-shuffled or expiry-wheel"
        ),
    }
}

/// `expiry` and `expiry-shuffled`: five times, `n` leases in flight on a fresh
/// queue expire at one deadline; prints the firing's cost per expiry. With
/// `shuffled`, the slots expire in a random order (acks in a shuffled order
/// leave the free list shuffled, and a refill takes slots in that order), as
/// in a queue whose consumers finish at different times.
fn timed_expiry(n: usize, body: &Bytes, shuffled: bool) {
    let mut total = Duration::ZERO;
    for _ in 0..5 {
        let (clock, _engine, q) = filled_queue(n, body);
        if shuffled {
            let mut receipts = Vec::with_capacity(n);
            while receipts.len() < n {
                let got = q.receive((n - receipts.len()).min(1024)).expect("live queue");
                receipts.extend(got.into_iter().map(|d| d.receipt));
            }
            shuffle(&mut receipts);
            for receipt in &receipts {
                q.ack(receipt).expect("held lease");
            }
            for _ in 0..n {
                q.send(body.clone()).expect("room");
            }
        }
        lease_all(&q, n);
        // A manual clock applies due expiries as it moves, so the advance is
        // part of what is timed.
        let started = Instant::now();
        clock.advance(Duration::from_secs(30));
        drop(q.receive(1));
        total += started.elapsed();
    }
    println!("{:.1} ns per expiry", total.as_nanos() as f64 / (5 * n) as f64);
}

/// `expiry-wheel`: five times, `n` leases of 30 s go into the wheel (one
/// extra lease of 1 ms falls due first, and applying it drains the timer
/// inbox into the wheel), then expire at one deadline while the clock moves
/// in steps of a millisecond; prints the cost of those 30 s of steps per
/// expiry, cascades included.
fn timed_wheel_expiry(n: usize, body: &Bytes) {
    let mut total = Duration::ZERO;
    for _ in 0..5 {
        let (clock, _engine, q) = filled_queue(n + 1, body);
        let short = ReceiveOptions { visibility: Some(Duration::from_millis(1)), wait: None };
        assert_eq!(q.receive_with(1, short).expect("live queue").len(), 1);
        lease_all(&q, n);
        clock.advance(Duration::from_millis(2));
        // Time moves as under the driver, a millisecond at a time, so the
        // entries cascade down the wheel's levels before they fire.
        let started = Instant::now();
        for _ in 0..30_000 {
            clock.advance(Duration::from_millis(1));
        }
        drop(q.receive(1));
        total += started.elapsed();
    }
    println!("{:.1} ns per expiry", total.as_nanos() as f64 / (5 * n) as f64);
}

/// A one-shard queue on a manual clock holding `n` ready messages (the engine
/// handle is returned so it outlives the queue's use).
fn filled_queue(n: usize, body: &Bytes) -> (ManualClock, Engine, leaseq::Queue) {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).default_shards(1).build();
    let config = QueueConfig::default().max_messages(n + 1024);
    let q = engine.create_queue("hot", config).expect("valid config");
    for _ in 0..n {
        q.send(body.clone()).expect("room");
    }
    (clock, engine, q)
}

/// Receives until `n` leases are in flight.
fn lease_all(q: &leaseq::Queue, n: usize) {
    let mut leased = 0;
    while leased < n {
        leased += q.receive((n - leased).min(1024)).expect("live queue").len();
    }
}

/// Fisher-Yates with a fixed-seed xorshift: the same order every run.
fn shuffle<T>(items: &mut [T]) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}
