//! The seeds' scenarios and the contract's edge cases, each on a ManualClock so
//! every deadline is exact and nothing depends on scheduling.

use std::time::Duration;

use bytes::Bytes;
use leaseq::{
    AttemptOutcome, Backoff, Clock, DeadLetterReason, Engine, Error, LateAck, LeaseError, MAX_BATCH, ManualClock,
    Nanos, Queue, QueueConfig, Receipt, ReceiptError, ReceiveOptions, SendOptions,
};

const SECOND: Duration = Duration::from_secs(1);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn setup(config: QueueConfig) -> (ManualClock, Engine, Queue) {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let queue = engine.create_queue("jobs", config).unwrap();
    (clock, engine, queue)
}

fn with_dlq(config: QueueConfig) -> (ManualClock, Engine, Queue, Queue) {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    let dlq = engine.create_queue("jobs-dlq", QueueConfig::default()).unwrap();
    let queue = engine.create_queue("jobs", config.dead_letter_queue("jobs-dlq")).unwrap();
    (clock, engine, queue, dlq)
}

fn one(queue: &Queue) -> leaseq::Delivery {
    let mut got = queue.receive(1).unwrap();
    assert_eq!(got.len(), 1, "expected one message");
    got.remove(0)
}

#[test]
fn happy_path_t0_to_t4() {
    let (clock, _engine, q) = setup(QueueConfig::default());
    let id = q.send(&b"job-42"[..]).unwrap(); // t0: ready
    assert_eq!(q.stats().ready, 1);
    clock.advance(SECOND);
    let d = one(&q); // t1: A receives
    assert_eq!((d.id, d.delivery_count, &d.payload[..]), (id, 1, &b"job-42"[..]));
    assert_eq!(d.deadline, Nanos(31_000_000_000), "invisible until t1 + 30 s");
    let s = q.stats(); // t2: invisible
    assert_eq!((s.ready, s.in_flight), (0, 1));
    assert!(q.receive(1).unwrap().is_empty(), "nobody else can receive it");
    clock.advance(secs(5));
    q.ack(&d.receipt).unwrap(); // t3: ack
    let s = q.stats(); // t4: gone
    assert_eq!((s.ready, s.in_flight, s.acked, s.late_acks), (0, 0, 1, 0));
    clock.advance(secs(60));
    assert!(q.receive(1).unwrap().is_empty(), "an acked message never comes back");
    assert_eq!(q.stats().processing_time.len(), 1);
}

/// Time moved past the end of the clock stops there: a lease granted before
/// is long over and its message comes back, and leases and delays granted at
/// the end of time saturate instead of overflowing.
#[test]
fn huge_advances_saturate_and_a_long_passed_lease_is_redelivered() {
    let config = QueueConfig::default().max_delay(secs(365 * 24 * 3600));
    let (clock, _engine, q) = setup(config);
    q.send(&b"job"[..]).unwrap();
    let first = one(&q);
    let centuries = secs(300 * 365 * 24 * 3600);
    clock.advance(centuries);
    clock.advance(centuries);
    assert_eq!(clock.now(), Nanos(u64::MAX), "the clock stops at its end");
    let again = one(&q);
    assert_eq!((again.id, again.delivery_count), (first.id, 2), "the old lease expired");
    assert_eq!(again.deadline, Nanos(u64::MAX), "a lease granted at the end of time saturates");
    assert_eq!(q.ack(&first.receipt), Err(LeaseError::Stale));
    q.send_with(&b"later"[..], secs(3600)).unwrap();
    q.ack(&again.receipt).unwrap();
    let s = q.stats();
    assert_eq!((s.expired, s.acked, s.delayed + s.ready), (1, 1, 1), "{s:?}");
}

#[test]
fn crash_path_redelivers_with_a_new_receipt_and_refuses_the_old_one() {
    let (clock, _engine, q) = setup(QueueConfig::default());
    let id = q.send(&b"job-42"[..]).unwrap();
    let a = one(&q); // A receives, then crashes
    clock.advance(secs(30) - Duration::from_nanos(1));
    assert!(q.receive(1).unwrap().is_empty(), "one nanosecond before the deadline it is still hidden");
    clock.advance(Duration::from_nanos(1));
    let b = one(&q); // exactly at the deadline: eligible again
    assert_eq!(b.id, id, "the message id is stable");
    assert_ne!(b.receipt, a.receipt, "the receipt is attempt-scoped");
    assert_eq!(b.delivery_count, 2);
    assert!(b.fencing_token > a.fencing_token, "the fencing token increases per attempt");
    assert_eq!(q.ack(&a.receipt), Err(LeaseError::Stale), "A cannot complete B's delivery");
    assert_eq!(q.extend(&a.receipt, secs(10)), Err(LeaseError::Stale));
    assert_eq!(q.release(&a.receipt, Duration::ZERO), Err(LeaseError::Stale));
    assert_eq!(q.stats().in_flight, 1, "B still holds it");
    q.ack(&b.receipt).unwrap();
    let s = q.stats();
    assert_eq!((s.expired, s.redelivered, s.stale_acks, s.acked, s.in_flight), (1, 1, 1, 1, 0));
}

#[test]
fn a_45s_job_under_a_30s_timeout_duplicates_and_extension_prevents_it() {
    // Without extension: a second consumer starts at 30 s while A still works.
    let (clock, _engine, q) = setup(QueueConfig::default());
    q.send(&b"render"[..]).unwrap();
    let a = one(&q);
    clock.advance(secs(30));
    let b = q.receive(1).unwrap();
    assert_eq!(b.len(), 1, "premature redelivery: two consumers on one job");
    clock.advance(secs(15));
    assert_eq!(q.ack(&a.receipt), Err(LeaseError::Stale), "A's work is a duplicate nobody can ack");

    // With extension every 20 s (slack before the deadline): no duplicate.
    let (clock, _engine, q) = setup(QueueConfig::default());
    q.send(&b"render"[..]).unwrap();
    let a = one(&q);
    for _ in 0..2 {
        clock.advance(secs(20));
        q.extend(&a.receipt, secs(30)).unwrap();
        assert!(q.receive(1).unwrap().is_empty(), "an extended lease hides the message");
    }
    clock.advance(secs(5)); // 45 s of work
    q.ack(&a.receipt).unwrap();
    let s = q.stats();
    assert_eq!((s.extensions, s.redelivered, s.expired, s.acked), (2, 0, 0, 1));
}

#[test]
fn extension_sets_now_plus_visibility_and_fails_after_the_deadline() {
    let (clock, _engine, q) = setup(QueueConfig::default());
    q.send(&b"x"[..]).unwrap();
    let d = one(&q);
    clock.advance(secs(10));
    assert_eq!(q.extend(&d.receipt, secs(5)).unwrap(), Nanos(15_000_000_000), "now + visibility, the SQS meaning");
    clock.advance(secs(5));
    // The deadline passed; no receive ran, so the timer has not fired yet:
    // the lease is judged by the clock all the same.
    assert_eq!(q.extend(&d.receipt, secs(30)), Err(LeaseError::Expired));
    assert_eq!(q.stats().extensions_refused, 1);
    // An extension to zero ends the lease now.
    let (clock, _engine, q) = setup(QueueConfig::default());
    q.send(&b"x"[..]).unwrap();
    let d = one(&q);
    clock.advance(SECOND);
    q.extend(&d.receipt, Duration::ZERO).unwrap();
    assert_eq!(one(&q).delivery_count, 2, "extend to zero makes it eligible at once");
}

#[test]
fn the_lease_cap_bounds_one_attempt() {
    let (clock, _engine, q) =
        setup(QueueConfig::default().visibility_timeout(secs(30)).max_visibility(secs(60)).max_lease(secs(100)));
    q.send(&b"x"[..]).unwrap();
    let d = one(&q);
    clock.advance(secs(25));
    q.extend(&d.receipt, secs(60)).unwrap(); // deadline 85 s
    clock.advance(secs(30));
    let refused = q.extend(&d.receipt, secs(60)); // would be 115 s
    assert_eq!(refused, Err(LeaseError::CapExceeded { max_lease: secs(100) }));
    assert!(refused.unwrap_err().to_string().contains("100s"), "the error names the limit");
    q.extend(&d.receipt, secs(45)).unwrap(); // exactly 100 s is allowed
    assert_eq!(
        q.extend(&d.receipt, secs(61)),
        Err(LeaseError::VisibilityTooLong { requested: secs(61), max: secs(60) })
    );
    clock.advance(secs(45));
    assert_eq!(one(&q).delivery_count, 2, "after the cap the message is recovered");
}

/// `extend_up_to_cap` grants what the cap leaves instead of refusing: the
/// deadline ends exactly at `received_at + max_lease`, and once it is there
/// the call is refused (nothing more to grant) and changes nothing.
#[test]
fn extend_up_to_cap_clamps_to_the_cap_then_refuses() {
    let (clock, _engine, q) =
        setup(QueueConfig::default().visibility_timeout(secs(30)).max_visibility(secs(60)).max_lease(secs(100)));
    q.send(&b"x"[..]).unwrap();
    clock.advance(secs(3));
    let d = one(&q);
    clock.advance(secs(25));
    assert_eq!(q.extend_up_to_cap(&d.receipt, secs(60)).unwrap(), Nanos(88_000_000_000), "below the cap: as extend");
    clock.advance(secs(30));
    assert_eq!(q.extend_up_to_cap(&d.receipt, secs(60)).unwrap(), Nanos(103_000_000_000), "clamped to the cap");
    clock.advance(secs(10));
    assert_eq!(q.extend_up_to_cap(&d.receipt, secs(60)), Err(LeaseError::CapExceeded { max_lease: secs(100) }));
    assert_eq!(
        q.extend_up_to_cap(&d.receipt, secs(61)),
        Err(LeaseError::VisibilityTooLong { requested: secs(61), max: secs(60) })
    );
    let s = q.stats();
    assert_eq!((s.extensions, s.extensions_refused), (2, 1));
    // A shorter ask still shortens the lease, as `extend` does.
    assert_eq!(q.extend_up_to_cap(&d.receipt, secs(1)).unwrap(), Nanos(69_000_000_000));
    clock.advance(secs(1));
    assert_eq!(one(&q).delivery_count, 2);
    assert_eq!(q.extend_up_to_cap(&d.receipt, secs(1)), Err(LeaseError::Stale));
}

#[test]
fn release_with_delay_and_release_now() {
    let (clock, _engine, q) = setup(QueueConfig::default());
    q.send(&b"x"[..]).unwrap();
    let d = one(&q);
    q.release(&d.receipt, secs(10)).unwrap();
    assert_eq!(q.stats().delayed, 1);
    clock.advance(secs(10) - Duration::from_nanos(1));
    assert!(q.receive(1).unwrap().is_empty(), "not before the delay");
    clock.advance(Duration::from_nanos(1));
    let d2 = one(&q);
    assert_eq!(d2.delivery_count, 2);
    assert_eq!(q.ack(&d.receipt), Err(LeaseError::Stale), "a released attempt cannot ack");
    q.release(&d2.receipt, Duration::ZERO).unwrap();
    assert_eq!(one(&q).delivery_count, 3, "release(0) is eligible at once");
    assert_eq!(q.stats().released, 2);
    let d4 = q.receive(1).unwrap();
    assert!(d4.is_empty());
    let refused = q.release(&d2.receipt, secs(16 * 60));
    assert!(matches!(refused, Err(LeaseError::DelayTooLong { .. })), "{refused:?}");
}

/// A dead-letter queue must take every message its sources can hold: one
/// whose `max_payload` is below its source's is refused when the source is
/// created, and nothing is created.
#[test]
fn a_dead_letter_queue_must_accept_every_payload_its_sources_can_hold() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    engine.create_queue("small-dlq", QueueConfig::default().max_payload(10)).unwrap();
    let linked =
        |max_payload| QueueConfig::default().max_payload(max_payload).max_receives(1).dead_letter_queue("small-dlq");
    match engine.create_queue("jobs", linked(1_000)) {
        Err(Error::InvalidConfig { field: "dead_letter_queue", reason }) => {
            assert!(reason.contains("10") && reason.contains("1000"), "the reason names both limits: {reason}")
        }
        other => panic!("a 10-byte dead-letter queue for 1000-byte messages was accepted: {other:?}"),
    }
    assert_eq!(engine.list_queues(), vec!["small-dlq".to_string()], "nothing was created");
    let q = engine.create_queue("jobs", linked(10)).unwrap();
    q.send(&b"0123456789"[..]).unwrap();
    let d = one(&q);
    q.dead_letter(&d.receipt, "poison").unwrap();
    assert_eq!(engine.queue("small-dlq").unwrap().stats().ready, 1);
}

/// Redrive moves only what the target may hold: a ready message above the
/// target's `max_payload` stays on the source (behind the others), is
/// counted there, and the rest still move.
#[test]
fn redrive_leaves_messages_too_large_for_the_target_where_they_are() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).default_shards(1).build();
    let from = engine.create_queue("from", QueueConfig::default()).unwrap();
    let to = engine.create_queue("to", QueueConfig::default().max_payload(10)).unwrap();
    for size in [5, 1_000, 6, 5_000, 7] {
        from.send(vec![b'x'; size]).unwrap();
    }
    assert_eq!(engine.redrive("from", "to", 10).unwrap(), 3);
    let moved: Vec<usize> = to.receive(10).unwrap().iter().map(|d| d.payload.len()).collect();
    assert_eq!(moved, vec![5, 6, 7], "only payloads the target allows");
    let s = from.stats();
    assert_eq!((s.ready, s.redriven_out, s.redrive_too_large), (2, 3, 2), "{s:?}");
    let left: Vec<usize> = from.receive(10).unwrap().iter().map(|d| d.payload.len()).collect();
    assert_eq!(left, vec![1_000, 5_000], "the refused ones stay, in their order");
    assert_eq!(to.stats().sent, 3);
}

#[test]
fn poison_message_reaches_the_dead_letter_queue_with_its_record() {
    let (clock, _engine, q, dlq) = with_dlq(QueueConfig::default().max_receives(3));
    let id = q.send(&b"malformed"[..]).unwrap();
    let first = one(&q);
    clock.advance(secs(30)); // attempt 1 expires
    let second = one(&q);
    q.release(&second.receipt, Duration::ZERO).unwrap(); // attempt 2 released
    let third = one(&q);
    assert_eq!(third.delivery_count, 3);
    clock.advance(secs(31)); // attempt 3 expires at the ceiling
    assert!(q.receive(1).unwrap().is_empty(), "at the ceiling it is not retried");
    let s = q.stats();
    assert_eq!((s.dead_lettered, s.in_flight, s.ready, s.dead_letter_depth), (1, 0, 0, 1));

    let dead = one(&dlq);
    assert_eq!((dead.id, &dead.payload[..], dead.delivery_count), (id, &b"malformed"[..], 1));
    let record = dead.dead_letter.as_ref().expect("a dead-lettered message carries its record");
    assert_eq!(record.source_queue, "jobs");
    assert_eq!(record.reason, DeadLetterReason::Expired);
    assert_eq!(record.delivery_count, 3);
    let outcomes: Vec<_> = record.attempts.iter().map(|a| (a.delivery, a.outcome.clone())).collect();
    assert_eq!(
        outcomes,
        vec![(1, AttemptOutcome::Expired), (2, AttemptOutcome::Released), (3, AttemptOutcome::Expired)]
    );
    assert_eq!(record.attempts[0].held_for(), secs(30));
    assert_eq!(record.attempts[0].received_at, first.received_at);
    assert!(dead.fencing_token > third.fencing_token, "fencing continues across dead-lettering");
    assert_eq!(q.ack(&third.receipt), Err(LeaseError::Stale), "the source attempt cannot ack a moved message");
}

#[test]
fn explicit_dead_letter_and_redrive() {
    let (_clock, engine, q, dlq) = with_dlq(QueueConfig::default());
    let ids: Vec<_> = (0..3).map(|i| q.send(Bytes::from(vec![i])).unwrap()).collect();
    for _ in 0..3 {
        let d = one(&q);
        q.dead_letter(&d.receipt, "cannot parse").unwrap();
        assert_eq!(q.dead_letter(&d.receipt, "again"), Err(LeaseError::Stale));
    }
    assert_eq!(dlq.stats().ready, 3);
    let moved = engine.redrive("jobs-dlq", "jobs", 2).unwrap();
    assert_eq!(moved, 2);
    assert_eq!((dlq.stats().ready, q.stats().ready), (1, 2));
    let back = q.receive(10).unwrap();
    assert_eq!(back.len(), 2);
    for d in &back {
        assert!(ids.contains(&d.id), "ids survive the round trip");
        assert_eq!(d.delivery_count, 1, "redrive resets the count");
        assert!(d.dead_letter.is_none(), "a redriven message starts clean");
        assert_eq!(d.fencing_token, 2, "the fencing token goes on from the delivery before the dead-lettering");
    }
    let leftover = one(&dlq);
    let record = leftover.dead_letter.as_ref().unwrap();
    assert_eq!(record.reason, DeadLetterReason::Explicit("cannot parse".into()));
    assert_eq!(record.attempts.last().unwrap().outcome, AttemptOutcome::DeadLettered("cannot parse".into()));
}

#[test]
fn dead_letter_without_a_dead_letter_queue_is_refused_and_changes_nothing() {
    let (_clock, _engine, q) = setup(QueueConfig::default());
    q.send(&b"x"[..]).unwrap();
    let d = one(&q);
    assert_eq!(q.dead_letter(&d.receipt, "poison"), Err(LeaseError::NoDeadLetterQueue));
    q.ack(&d.receipt).unwrap();
}

#[test]
fn a_full_dead_letter_queue_keeps_the_message_on_its_queue() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    engine.create_queue("dlq", QueueConfig::default().max_messages(1)).unwrap();
    let q = engine.create_queue("jobs", QueueConfig::default().max_receives(1).dead_letter_queue("dlq")).unwrap();
    q.send(&b"a"[..]).unwrap();
    q.send(&b"b"[..]).unwrap();
    let a = one(&q);
    let b = one(&q);
    q.dead_letter(&a.receipt, "poison").unwrap();
    assert_eq!(q.dead_letter(&b.receipt, "poison"), Err(LeaseError::DeadLetterQueueFull { name: "dlq".into() }));
    q.extend(&b.receipt, secs(1)).unwrap(); // still held: the refusal changed nothing
    clock.advance(secs(2)); // expires at the ceiling, but the DLQ is full
    let again = one(&q);
    assert_eq!((again.id, again.delivery_count), (b.id, 2), "kept, not dropped");
    assert_eq!(q.stats().dead_letter_overflow, 1);
}

#[test]
fn delayed_send_is_invisible_until_its_time() {
    let (clock, _engine, q) = setup(QueueConfig::default());
    let id = q.send_with(&b"later"[..], secs(5)).unwrap();
    q.send_with(&b"now"[..], SendOptions::default()).unwrap();
    assert_eq!(one(&q).payload, Bytes::from_static(b"now"));
    assert_eq!(q.stats().delayed, 1);
    clock.advance(secs(4));
    assert!(q.receive(1).unwrap().is_empty());
    clock.advance(SECOND);
    assert_eq!(one(&q).id, id);
    let over = q.send_with(&b"x"[..], secs(16 * 60));
    assert_eq!(over, Err(Error::DelayTooLong { requested: secs(16 * 60), max: secs(15 * 60) }));
}

#[test]
fn backoff_delays_retries_after_expiry() {
    let backoff = Backoff::Exponential { base: secs(2), max: secs(10), jitter: false };
    let (clock, _engine, q) = setup(QueueConfig::default().visibility_timeout(secs(1)).backoff(backoff));
    q.send(&b"flaky"[..]).unwrap();
    let mut expected_waits = vec![];
    for attempt in 1..=4u32 {
        let d = one(&q);
        assert_eq!(d.delivery_count, attempt);
        clock.advance(SECOND); // lease expires
        let wait = backoff.delay(d.id, attempt);
        expected_waits.push(wait);
        clock.advance(wait - Duration::from_nanos(1));
        assert!(q.receive(1).unwrap().is_empty(), "attempt {attempt}: backoff keeps it hidden");
        clock.advance(Duration::from_nanos(1));
    }
    assert_eq!(expected_waits, vec![secs(2), secs(4), secs(8), secs(10)]);
    // release_with_backoff uses the same policy.
    let d = one(&q);
    q.release_with_backoff(&d.receipt).unwrap();
    clock.advance(secs(10) - Duration::from_nanos(1));
    assert!(q.receive(1).unwrap().is_empty());
    clock.advance(Duration::from_nanos(1));
    assert_eq!(one(&q).delivery_count, 6);
}

#[test]
fn purge_removes_ready_delayed_and_in_flight() {
    let (clock, _engine, q) = setup(QueueConfig::default());
    for _ in 0..5 {
        q.send(&b"r"[..]).unwrap();
    }
    q.send_with(&b"d"[..], secs(5)).unwrap();
    let held = one(&q);
    assert_eq!(q.purge().unwrap(), 6);
    let s = q.stats();
    assert_eq!((s.ready, s.delayed, s.in_flight, s.purged), (0, 0, 0, 6));
    assert_eq!(q.ack(&held.receipt), Err(LeaseError::Stale), "purged receipts are stale");
    clock.advance(secs(60));
    assert!(q.receive(10).unwrap().is_empty());
    q.send(&b"after"[..]).unwrap();
    assert_eq!(one(&q).payload, Bytes::from_static(b"after"), "the queue works after a purge");
}

#[test]
fn capacity_and_size_limits_refuse_without_losing_anything() {
    let (_clock, _engine, q) = setup(QueueConfig::default().max_messages(3).max_payload(8));
    for i in 0..3u8 {
        q.send(Bytes::from(vec![i])).unwrap();
    }
    let refused = q.send(&b"four"[..]).unwrap_err();
    assert!(refused.is_queue_full());
    assert_eq!(refused.clone().into_payload(), Some(Bytes::from_static(b"four")), "the payload is handed back");
    assert_eq!(refused, Error::QueueFull { capacity: 3, payload: Bytes::from_static(b"four") });
    let big = q.send(vec![0u8; 9]).unwrap_err();
    assert_eq!(big, Error::MessageTooLarge { size: 9, max: 8 });
    assert_eq!(q.stats().sent, 3);
    let d = one(&q);
    assert!(q.send(&b"x"[..]).is_err(), "in-flight messages count against capacity");
    q.ack(&d.receipt).unwrap();
    q.send(&b"x"[..]).unwrap();
    let batch = q.send_batch(vec![&b"a"[..], &b"b"[..]]);
    assert!(batch.iter().all(|r| r.as_ref().is_err_and(Error::is_queue_full)), "{batch:?}");
}

#[test]
fn late_ack_is_accepted_if_not_redelivered_and_rejected_on_request() {
    let (clock, _engine, q) = setup(QueueConfig::default());
    q.send(&b"x"[..]).unwrap();
    let d = one(&q);
    clock.advance(secs(31));
    assert_eq!(q.stats().expired, 1, "the lease ran out");
    q.ack(&d.receipt).unwrap();
    let s = q.stats();
    assert_eq!((s.acked, s.late_acks, s.ready), (1, 1, 0), "nobody else held it: accepted, counted late");
    assert_eq!(q.ack(&d.receipt), Err(LeaseError::Stale), "a second ack is stale");
    assert_eq!(q.stats().acked, 1);
    clock.advance(secs(60));
    assert!(q.receive(1).unwrap().is_empty(), "late-acked messages do not come back");

    // Late but before the timer fired (no operation ran in between).
    q.send(&b"y"[..]).unwrap();
    let d = one(&q);
    clock.advance(secs(40));
    q.ack(&d.receipt).unwrap();
    assert_eq!(q.stats().late_acks, 2);

    let (clock, _engine, q) = setup(QueueConfig::default().late_ack(LateAck::Reject));
    q.send(&b"x"[..]).unwrap();
    let d = one(&q);
    clock.advance(secs(30));
    assert_eq!(q.ack(&d.receipt), Err(LeaseError::Expired));
    let s = q.stats();
    assert_eq!((s.acked, s.expired_acks, s.ready), (0, 1, 1), "refused and left for redelivery");
    assert_eq!(one(&q).delivery_count, 2);
}

#[test]
fn visibility_zero_and_per_call_override() {
    let (clock, _engine, q) = setup(QueueConfig::default());
    q.send(&b"x"[..]).unwrap();
    let d = q.receive_with(1, ReceiveOptions::new().visibility(Duration::ZERO)).unwrap().remove(0);
    assert_eq!(q.extend(&d.receipt, secs(10)), Err(LeaseError::Expired), "a zero lease is over at once");
    let again = one(&q);
    assert_eq!(again.delivery_count, 2);
    clock.advance(SECOND);
    q.release(&again.receipt, Duration::ZERO).unwrap();
    let short = q.receive_with(1, ReceiveOptions::new().visibility(secs(2))).unwrap().remove(0);
    assert_eq!(short.deadline, Nanos(3_000_000_000));
    let too_long = q.receive_with(1, ReceiveOptions::new().visibility(secs(13 * 3600)));
    assert!(matches!(too_long, Err(Error::VisibilityTooLong { .. })), "{too_long:?}");
}

#[test]
fn batches_receive_and_ack_per_receipt() {
    let (_clock, _engine, q) = setup(QueueConfig::default().shards(2));
    let sent: Vec<_> = q.send_batch((0..25u8).map(|i| Bytes::from(vec![i]))).into_iter().map(Result::unwrap).collect();
    let got = q.receive(10).unwrap();
    assert_eq!(got.len(), 10);
    let mut receipts: Vec<Receipt> = got.iter().map(|d| d.receipt).collect();
    receipts.push(got[0].receipt); // a duplicate in the batch
    let results = q.ack_batch(&receipts);
    assert!(results[..10].iter().all(Result::is_ok));
    assert_eq!(results[10], Err(LeaseError::Stale));
    let rest = q.receive(1024).unwrap();
    assert_eq!(rest.len(), 15);
    let mut all: Vec<_> = got.iter().chain(&rest).map(|d| d.id).collect();
    all.sort();
    let mut expected = sent;
    expected.sort();
    assert_eq!(all, expected, "every message delivered once");
    assert_eq!(q.receive(0), Err(Error::InvalidBatchSize { requested: 0, max: 1024 }));
    assert_eq!(q.receive(1025), Err(Error::InvalidBatchSize { requested: 1025, max: 1024 }));
}

/// One rule for every batch call: at most `MAX_BATCH` messages (a receive
/// asks for 1..=`MAX_BATCH`); a larger batch is refused whole with
/// `InvalidBatchSize`, one error per item, and changes nothing.
#[test]
fn every_batch_call_is_refused_whole_above_max_batch() {
    let (_clock, _engine, q) = setup(QueueConfig::default().shards(2));
    let too_many = q.send_batch((0..MAX_BATCH + 1).map(|_| &b"x"[..]));
    assert_eq!(too_many.len(), MAX_BATCH + 1, "one result per payload");
    let refusal = Error::InvalidBatchSize { requested: MAX_BATCH + 1, max: MAX_BATCH };
    assert!(too_many.iter().all(|r| r.as_ref() == Err(&refusal)), "{:?}", too_many[0]);
    assert_eq!(q.stats().sent, 0, "nothing was sent");
    assert!(q.send_batch((0..MAX_BATCH).map(|_| &b"x"[..])).iter().all(Result::is_ok));
    let got = q.receive(MAX_BATCH).unwrap();
    let mut receipts: Vec<Receipt> = got.iter().map(|d| d.receipt).collect();
    receipts.push(got[0].receipt);
    let refused = q.ack_batch(&receipts);
    assert_eq!(refused.len(), MAX_BATCH + 1);
    let refusal = LeaseError::InvalidBatchSize { requested: MAX_BATCH + 1, max: MAX_BATCH };
    assert!(refused.iter().all(|r| r.as_ref() == Err(&refusal)), "{:?}", refused[0]);
    let s = q.stats();
    assert_eq!((s.acked, s.stale_acks, s.in_flight), (0, 0, MAX_BATCH as u64), "nothing was acked");
    assert!(q.ack_batch(&receipts[..MAX_BATCH]).iter().all(Result::is_ok));
    assert_eq!(q.stats().acked, MAX_BATCH as u64);
}

#[test]
fn bad_input_is_refused_with_typed_errors_and_changes_nothing() {
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock.clone()).build();
    for bad in ["", "with space", "x.y", &"n".repeat(81)] {
        assert!(matches!(engine.create_queue(bad, QueueConfig::default()), Err(Error::InvalidQueueName { .. })));
    }
    let q = engine.create_queue("jobs", QueueConfig::default()).unwrap();
    assert_eq!(
        engine.create_queue("jobs", QueueConfig::default()).unwrap_err(),
        Error::QueueAlreadyExists { name: "jobs".into() }
    );
    assert_eq!(engine.queue("nope").unwrap_err(), Error::QueueNotFound { name: "nope".into() });
    let missing_dlq = QueueConfig::default().dead_letter_queue("ghost");
    assert_eq!(
        engine.create_queue("other", missing_dlq).unwrap_err(),
        Error::DeadLetterQueueNotFound { name: "ghost".into() }
    );
    let self_dlq = QueueConfig::default().dead_letter_queue("loop");
    assert!(matches!(engine.create_queue("loop", self_dlq), Err(Error::DeadLetterCycle { .. })));
    let bad_config = QueueConfig::default().max_messages(0);
    assert!(matches!(
        engine.create_queue("other", bad_config),
        Err(Error::InvalidConfig { field: "max_messages", .. })
    ));
    assert_eq!(engine.list_queues(), vec!["jobs".to_string()], "no half-created queue");

    // Receipts: unparsable, forged, another queue's, another engine's.
    q.send(&b"x"[..]).unwrap();
    let d = one(&q);
    assert!(matches!("lq1.zz".parse::<Receipt>(), Err(ReceiptError::Malformed { .. })));
    let text = d.receipt.to_string();
    let mut fields: Vec<String> = text.split('.').map(String::from).collect();
    fields[5] = format!("{:x}", d.receipt.generation() + 1); // forge a later generation
    let forged: Receipt = fields.join(".").parse().unwrap();
    assert_eq!(q.ack(&forged), Err(LeaseError::InvalidReceipt(ReceiptError::Forged)));
    let other = engine.create_queue("other", QueueConfig::default()).unwrap();
    other.send(&b"y"[..]).unwrap();
    let od = one(&other);
    assert_eq!(
        q.ack(&od.receipt),
        Err(LeaseError::InvalidReceipt(ReceiptError::WrongQueue { presented_to: "jobs".into() }))
    );
    let engine2 = Engine::builder().clock(clock.clone()).build();
    let q2 = engine2.create_queue("jobs", QueueConfig::default()).unwrap();
    assert_eq!(q2.ack(&d.receipt), Err(LeaseError::InvalidReceipt(ReceiptError::WrongEngine)));
    let err = q2.ack(&d.receipt).unwrap_err();
    assert!(err.to_string().contains("another engine"), "{err}");
    // None of that touched the real lease.
    let parsed: Receipt = text.parse().unwrap();
    q.ack(&parsed).unwrap();
    other.ack(&od.receipt).unwrap();
}

#[test]
fn delete_list_and_lookup() {
    let (_clock, engine, q, _dlq) = with_dlq(QueueConfig::default());
    assert_eq!(engine.list_queues(), vec!["jobs".to_string(), "jobs-dlq".to_string()]);
    assert_eq!(engine.queue("jobs").unwrap().name(), "jobs");
    assert_eq!(q.dead_letter_queue().as_deref(), Some("jobs-dlq"));
    assert_eq!(
        engine.delete_queue("jobs-dlq").unwrap_err(),
        Error::QueueInUse { name: "jobs-dlq".into(), used_by: "jobs".into() }
    );
    q.send(&b"x"[..]).unwrap();
    let d = one(&q);
    engine.delete_queue("jobs").unwrap();
    assert_eq!(q.send(&b"x"[..]).unwrap_err(), Error::QueueDeleted { name: "jobs".into() });
    assert_eq!(q.ack(&d.receipt), Err(LeaseError::QueueDeleted));
    assert!(engine.queue("jobs").is_err());
    engine.delete_queue("jobs-dlq").unwrap();
    assert!(engine.list_queues().is_empty());
    // The name is free again.
    engine.create_queue("jobs", QueueConfig::default()).unwrap();
}

/// Freed slots keep their free-list link where a ready message keeps its send
/// time: the oldest-ready age must come from ready messages only, through
/// several rounds of freeing and reuse.
#[test]
fn oldest_ready_age_comes_from_ready_messages_not_freed_slots() {
    let (clock, _engine, q) = setup(QueueConfig::default().shards(1));
    for round in 0..3u64 {
        for _ in 0..4 {
            q.send(&b"done"[..]).unwrap();
        }
        clock.advance(secs(10));
        q.send(&b"waits"[..]).unwrap();
        clock.advance(secs(2));
        // The four older ones are received and acked: their slots go back to
        // the free list; the one sent last is the only ready message.
        for _ in 0..4 {
            let d = one(&q);
            assert_eq!(&d.payload[..], b"done");
            q.ack(&d.receipt).unwrap();
        }
        assert_eq!(q.stats().ready, 1);
        assert_eq!(q.stats().oldest_ready_age, Some(secs(2)), "round {round}");
        let last = one(&q);
        q.ack(&last.receipt).unwrap();
        assert_eq!(q.stats().oldest_ready_age, None, "nothing ready, freed slots only");
    }
}

#[test]
fn stats_show_lease_pressure() {
    let (clock, _engine, q) = setup(QueueConfig::default().visibility_timeout(secs(10)));
    for _ in 0..40 {
        q.send(&b"x"[..]).unwrap();
    }
    clock.advance(secs(3));
    assert_eq!(q.stats().oldest_ready_age, Some(secs(3)));
    for _ in 0..30 {
        let d = one(&q);
        clock.advance(Duration::from_millis(200));
        q.ack(&d.receipt).unwrap();
    }
    let s = q.stats();
    assert_eq!((s.ready, s.acked), (10, 30));
    let p50 = s.processing_percentile(50.0).unwrap();
    assert!(p50 >= Duration::from_millis(190) && p50 <= Duration::from_millis(210), "{p50:?}");
    let suggestion = s.suggested_visibility().unwrap();
    assert!(suggestion >= Duration::from_millis(280) && suggestion <= Duration::from_millis(320), "{suggestion:?}");
    assert!(s.time_in_queue.max() >= 3_000_000_000, "the first message waited at least 3 s");
    let left = s.lease_left_at_ack.value_at_percentile(50.0);
    assert!((9_700_000_000..=9_900_000_000).contains(&left), "{left}");
    let d = one(&q);
    q.extend(&d.receipt, secs(20)).unwrap();
    assert_eq!(q.stats().extensions, 1);
    assert_eq!(q.stats().in_flight, 1);
}

#[test]
fn an_engine_and_queue_are_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Engine>();
    assert_send_sync::<Queue>();
    assert_send_sync::<Receipt>();
}

#[test]
fn lowering_only_max_lease_caps_every_lease_at_it() {
    // Issue 20, defect 7: `max_lease` alone used to be refused because the
    // defaulted `max_visibility` (12 h) was above it.
    let (_clock, _engine, q) = setup(QueueConfig::default().max_lease(secs(60)));
    assert_eq!(q.config().max_lease, secs(60));
    assert_eq!(q.config().max_visibility, secs(60), "the defaulted max_visibility follows the cap");
    assert_eq!(q.config().visibility_timeout, secs(30), "30 s is within the cap");
    q.send(b"job").unwrap();
    let d = q.receive_with(1, ReceiveOptions::new().visibility(secs(60))).unwrap().remove(0);
    assert!(matches!(q.extend(&d.receipt, secs(61)), Err(LeaseError::VisibilityTooLong { .. })));

    // Both set and disagreeing: still a clear refusal, and nothing created.
    let clock = ManualClock::new();
    let engine = Engine::builder().clock(clock).build();
    let both = QueueConfig::default().max_lease(secs(60)).max_visibility(secs(120));
    assert!(matches!(engine.create_queue("both", both), Err(Error::InvalidConfig { field: "max_visibility", .. })));
    assert!(engine.list_queues().is_empty());
}
