//! A tour of the lease contract on the real clock: two consumers, a crash,
//! a redelivery, a stale ack refused, a poison message dead-lettered, and the
//! queue's lease-pressure stats at the end.
//!
//! Run: `cargo run --release -p leaseq-demo` (it builds the engine and
//! nothing else).

use std::time::{Duration, Instant};

use leaseq::{Bytes, Engine, LeaseError, QueueConfig, ReceiveOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::new();
    engine.create_queue("jobs-dlq", QueueConfig::default())?;
    let jobs = engine.create_queue(
        "jobs",
        QueueConfig::default()
            .visibility_timeout(Duration::from_millis(50))
            .max_receives(3)
            .dead_letter_queue("jobs-dlq"),
    )?;

    jobs.send(b"job-42")?;
    let a = jobs.receive(1)?.remove(0);
    println!("A received {} (attempt {}, receipt {})", a.id, a.delivery_count, a.receipt);
    println!("A crashes without acking; the lease runs out after 50 ms");
    let waited = Instant::now();
    let b = jobs.receive_with(1, ReceiveOptions::new().wait(Duration::from_secs(1)))?.remove(0);
    println!("B received {} after {:?} (attempt {})", b.id, waited.elapsed(), b.delivery_count);
    match jobs.ack(&a.receipt) {
        Err(LeaseError::Stale) => println!("A's late ack is refused as stale: it cannot complete B's attempt"),
        other => println!("unexpected: {other:?}"),
    }
    jobs.ack(&b.receipt)?;
    println!("B acked; the message is gone");

    jobs.send(b"poison")?;
    for attempt in 1..=3 {
        let d = jobs.receive_with(1, ReceiveOptions::new().wait(Duration::from_secs(1)))?.remove(0);
        println!("poison attempt {attempt}: failing it");
        jobs.release(&d.receipt, Duration::ZERO)?;
    }
    let dlq = engine.queue("jobs-dlq")?;
    let dead = dlq.receive(1)?.remove(0);
    let record = dead.dead_letter.as_ref().expect("dead-lettered messages carry a record");
    println!(
        "dead-letter queue holds {} from '{}': {} after {} deliveries",
        dead.id, record.source_queue, record.reason, record.delivery_count
    );

    let n = 200_000;
    // A `Bytes` body is shared, never copied: the loop times the engine.
    let body = Bytes::from_static(b"0123456789abcdef");
    let started = Instant::now();
    for _ in 0..n {
        jobs.send(&body)?;
        let d = jobs.receive(1)?.remove(0);
        jobs.ack(&d.receipt)?;
    }
    let elapsed = started.elapsed();
    println!("{n} send/receive/ack cycles on one thread: {:.0} ns per cycle", elapsed.as_nanos() as f64 / f64::from(n));
    println!("lease pressure of queue jobs:\n{}", jobs.stats());
    Ok(())
}
