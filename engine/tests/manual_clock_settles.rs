//! Regression tests: with a `ManualClock`, a lease that is over is expired
//! before any later operation can see it, on every queue of the engine, no
//! matter which operation comes next. Found by the model comparison
//! (`model_equivalence.rs`): expiry used to wait until the next receive or
//! stats call on the same queue, so a late ack could still complete a message
//! that had reached its retry ceiling, and its dead-letter queue did not see it.

use std::time::Duration;

use leaseq::{Engine, LeaseError, ManualClock, QueueConfig, ReceiveOptions};

fn engine_with_ceiling_one() -> (ManualClock, Engine, leaseq::Queue, leaseq::Queue) {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).default_shards(1).build();
    let dlq = engine.create_queue("dlq", QueueConfig::default()).unwrap();
    let config =
        QueueConfig::default().max_receives(1).dead_letter_queue("dlq").visibility_timeout(Duration::from_secs(10));
    let jobs = engine.create_queue("jobs", config).unwrap();
    (clock, engine, jobs, dlq)
}

#[test]
fn expiry_at_the_ceiling_happens_when_the_clock_passes_the_deadline() {
    let (clock, _engine, jobs, dlq) = engine_with_ceiling_one();
    let id = jobs.send(&b"poison"[..]).unwrap();
    let attempt = jobs.receive(1).unwrap().remove(0);
    clock.advance(Duration::from_secs(11));
    // The dead-letter queue sees the message without anyone touching `jobs`.
    let moved = dlq.receive(1).unwrap();
    assert_eq!(moved.len(), 1, "the expired message is on the dead-letter queue at once");
    assert_eq!(moved[0].id, id);
    // The attempt no longer holds anything: its late ack is stale, not accepted.
    assert_eq!(jobs.ack(&attempt.receipt), Err(LeaseError::Stale));
    let stats = jobs.stats();
    assert_eq!((stats.expired, stats.dead_lettered, stats.acked), (1, 1, 0));
}

#[test]
fn a_late_ack_finds_the_lease_already_expired() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).default_shards(1).build();
    let jobs = engine.create_queue("jobs", QueueConfig::default()).unwrap();
    jobs.send(&b"slow"[..]).unwrap();
    let attempt = jobs.receive(1).unwrap().remove(0);
    clock.advance(Duration::from_secs(31));
    jobs.ack(&attempt.receipt).unwrap();
    let stats = jobs.stats();
    // The lease ran out (counted once) and the ack came late.
    assert_eq!((stats.expired, stats.late_acks, stats.acked, stats.ready), (1, 1, 1, 0));
}

#[test]
fn a_zero_visibility_lease_expires_as_it_is_granted() {
    let (_clock, _engine, jobs, dlq) = engine_with_ceiling_one();
    jobs.send(&b"poison"[..]).unwrap();
    let attempt = jobs.receive_with(1, ReceiveOptions::new().visibility(Duration::ZERO)).unwrap().remove(0);
    assert_eq!(attempt.deadline, attempt.received_at);
    assert_eq!(dlq.stats().ready, 1, "over at once, so at the ceiling it is dead-lettered at once");
    assert_eq!(jobs.ack(&attempt.receipt), Err(LeaseError::Stale));
}

#[test]
fn extending_to_zero_ends_the_lease_at_once() {
    let (_clock, _engine, jobs, dlq) = engine_with_ceiling_one();
    jobs.send(&b"poison"[..]).unwrap();
    let attempt = jobs.receive(1).unwrap().remove(0);
    jobs.extend(&attempt.receipt, Duration::ZERO).unwrap();
    assert_eq!(dlq.stats().ready, 1);
    assert_eq!(jobs.release(&attempt.receipt, Duration::ZERO), Err(LeaseError::Stale));
}
